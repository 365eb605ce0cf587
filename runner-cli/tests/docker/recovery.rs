//! What a killed runner leaves, retry, and the user a resumed run keeps

use super::*;

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn a_runner_killed_mid_run_leaves_a_container_the_next_cleanup_removes() {
    let dir = tempfile::tempdir().unwrap();
    let runner = format!("did:plc:killed-{}", std::process::id());
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "wait\techo runner-is-busy; exec sleep 600\n").unwrap();
    let mut child = cli()
        .args(run_logging_to_stdout("killed", &runner, dir.path(), &steps))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("runner-is-busy") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0);
    }
    child.kill().unwrap(); // SIGKILL: no chance to stop its container
    child.wait().unwrap();

    let cleanup = |force: bool| {
        let mut cmd = cli();
        cmd.args(["cleanup", "--executor", "docker", "--runner", &runner]);
        if force {
            cmd.arg("--force");
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        cleanup(false).contains("0 removed"),
        "the run has not expired yet"
    );
    assert!(cleanup(true).contains("1 removed"));
    assert!(cleanup(true).contains("0 removed"));
}

/// `--retry 1`: the container removed from outside mid-step is a lost
/// environment, and the run succeeds in a fresh one; the log marks both
/// attempts and the result keeps both.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_recovers_from_a_container_removed_mid_step() {
    use executor_docker::engine::{Engine, ExecSpec};
    use futures_util::StreamExt;
    use tokio::io::AsyncBufReadExt;

    let dir = tempfile::tempdir().unwrap();
    let runner = format!("did:plc:retry-{}", std::process::id());
    let steps = dir.path().join("steps.tsv");
    // Each attempt waits for the test to let it go, so the test decides
    // which attempt loses its container.
    std::fs::write(
        &steps,
        "wait\techo waiting-for-the-test; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo let-go\n",
    )
    .unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_runner-cli"))
        .args(run_logging_to_stdout("retry", &runner, dir.path(), &steps))
        .args(["--retry", "1"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let engine = executor_docker::BollardEngine::connect().await.unwrap();
    let probe = executor_docker::DockerExecutor::connect(Default::default())
        .await
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut log = String::new();
    let mut waits = 0;
    while let Some(line) = lines.next_line().await.unwrap() {
        log.push_str(&line);
        log.push('\n');
        if line != "waiting-for-the-test" {
            continue;
        }
        waits += 1;
        let ids = probe.containers(&runner).await.unwrap();
        assert_eq!(ids.len(), 1, "{log}");
        if waits == 1 {
            engine.remove(&ids[0]).await.unwrap();
        } else {
            let exec = ExecSpec {
                cmd: vec!["touch".into(), "/tmp/go".into()],
                env: Vec::new(),
                working_dir: "/".into(),
                user: None,
                stdin: false,
            };
            let exec_id = engine.exec_create(&ids[0], &exec).await.unwrap();
            let mut out = engine.exec_start(&exec_id).await.unwrap();
            while out.next().await.is_some() {}
        }
    }
    let status = child.wait().await.unwrap();
    assert_eq!(status.code(), Some(0), "{log}");
    assert_eq!(waits, 2, "{log}");
    assert!(log.contains("==> attempt 2 of 2"), "{log}");
    assert!(log.contains("attempt 1 failed (environmentLost"), "{log}");
    let result = result(&dir.path().join("result.json"));
    assert_eq!(result.attempts.len(), 2);
    assert_eq!(
        result.attempts[0].failure.as_ref().map(|f| f.kind),
        Some(executor_core::FailureKind::EnvironmentLost)
    );
    assert_eq!(result.failure, None);
    assert!(probe.leftovers(&runner).await.unwrap().is_empty());
}

/// What bounds a step is the run's, not the resuming runner's: a run
/// started with `--user 1000:1000` and resumed after `kill -9` without
/// `--user` runs its remaining steps as 1000 (they ran as root), and
/// resume has no `--user` to name another with.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn a_resumed_run_keeps_the_user_its_steps_ran_as() {
    let dir = tempfile::tempdir().unwrap();
    let runner = format!("did:plc:resumeuser-{}", std::process::id());
    let steps = dir.path().join("steps.tsv");
    std::fs::write(
        &steps,
        "first\techo begun-as-$(id -u); sleep 2\nsecond\techo second-as-$(id -u)\n",
    )
    .unwrap();
    let log = dir.path().join("run.log");
    let outputs = dir.path().join("outputs");
    let mut args = run_logging_to_stdout("resumeuser", &runner, dir.path(), &steps);
    let at = args.iter().position(|a| a == "--log").unwrap();
    args.drain(at..at + 2);
    for (flag, value) in [
        ("--log", log.as_os_str()),
        ("--outputs", outputs.as_os_str()),
        ("--events", "-".as_ref()),
        ("--user", "1000:1000".as_ref()),
    ] {
        args.push(flag.into());
        args.push(value.into());
    }
    let mut child = cli().args(args).stdout(Stdio::piped()).spawn().unwrap();
    let mut events = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("begun-as-1000") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut events, &mut line).unwrap() > 0);
    }
    child.kill().unwrap(); // SIGKILL, mid-step
    child.wait().unwrap();
    let resume = |extra: &[&str]| {
        cli()
            .args(["resume", "--executor", "docker", "--name", "resumeuser"])
            .args(["--runner", &runner])
            .arg("--log")
            .arg(&log)
            .arg("--outputs")
            .arg(&outputs)
            .arg("--result")
            .arg(dir.path().join("resumed.json"))
            .args(extra)
            .output()
            .unwrap()
    };
    let log_before = std::fs::read(&log).unwrap();
    // Resume takes no bounds at all: they are the environment's.
    let refused = resume(&["--user", "0"]);
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("--user"), "{said}");
    assert_eq!(
        std::fs::read(&log).unwrap(),
        log_before,
        "the log was touched"
    );
    let resumed = resume(&[]);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}\n{text}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(text.contains("second-as-1000\n"), "{text}");
    let probe = tokio::runtime::Runtime::new().unwrap().block_on(async {
        executor_docker::DockerExecutor::connect(executor_docker::DockerOptions::default())
            .await
            .unwrap()
            .leftovers(&runner)
            .await
            .unwrap()
    });
    assert!(probe.is_empty(), "{probe:?}");
}
