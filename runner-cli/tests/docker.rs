//! runner-cli on the Docker executor: the README's example, an unreachable
//! engine, a runner killed mid-run.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use executor_conformance::fixture::assert_valid_result;
use executor_core::RunResult;

fn image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE").unwrap_or_else(|_| "knotless-busybox:local".into())
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_runner-cli"))
}

/// `run` on the test image with no pulling and no network, checkout and
/// result in `dir`, the run log on stdout for the test to follow.
fn run_logging_to_stdout(
    name: &str,
    runner: &str,
    dir: &Path,
    steps: &Path,
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = [
        "run",
        "--executor",
        "docker",
        "--image",
        &image(),
        "--pull",
        "never",
        "--network",
        "none",
        "--name",
        name,
        "--runner",
        runner,
        "--log",
        "-",
    ]
    .into_iter()
    .map(Into::into)
    .collect();
    for (flag, value) in [
        ("--workdir", dir.to_path_buf()),
        ("--steps-file", steps.to_path_buf()),
        ("--result", dir.join("result.json")),
    ] {
        args.push(flag.into());
        args.push(value.into());
    }
    args
}

fn result(path: &Path) -> RunResult {
    let r: RunResult = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_valid_result(&r);
    r
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn the_example_runs_on_docker_as_the_readme_shows() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli()
        .args([
            "run",
            "--executor",
            "docker",
            "--image",
            &image(),
            "--pull",
            "never",
        ])
        .args([
            "--network",
            "none",
            "--name",
            "example",
            "--runner",
            "did:plc:example-docker",
        ])
        .arg("--workdir")
        .arg(examples())
        .arg("--steps-file")
        .arg(examples().join("steps.tsv"))
        .arg("--outputs")
        .arg(dir.path().join("out"))
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = result(&dir.path().join("result.json"));
    assert_eq!(r.executor, "docker");
    assert!(r
        .outputs
        .iter()
        .any(|o| o.path == "badge.png" && o.media_type == "image/png"));
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn an_unreachable_engine_is_exit_3_naming_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "a\ttrue\n").unwrap();
    let sock = dir.path().join("no-engine.sock");
    let out = cli()
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .args([
            "run",
            "--executor",
            "docker",
            "--image",
            "x",
            "--name",
            "n",
            "--runner",
            "did:plc:n",
        ])
        .arg("--workdir")
        .arg(dir.path())
        .arg("--steps-file")
        .arg(&steps)
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "no Docker engine answers at unix://{}",
            sock.display()
        )),
        "{stderr}"
    );
    let result = result(&dir.path().join("result.json"));
    assert_eq!(result.status, executor_core::RunStatus::Error);
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, executor_core::FailureKind::Unreachable);
    assert!(failure.retryable);
}

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

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn dry_run_prints_every_call_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli()
        .env("DOCKER_HOST", "unix:///no/such/docker.sock")
        .args(["run", "--executor", "docker", "--image", &image()])
        .args(["--name", "dry", "--runner", "did:plc:dry", "--dry-run"])
        .args(["--env", "TOKEN=hunter2", "--cache", "deps=/deps"])
        .args(["--secret", "DEPLOY_TOKEN"])
        .args(["--cap-drop", "ALL", "--cap-add", "cap_chown", "--read-only"])
        .env("DEPLOY_TOKEN", "dry-run-secret-value")
        .arg("--cache-dir")
        .arg(dir.path().join("caches"))
        .arg("--outputs")
        .arg(dir.path().join("outputs"))
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .arg("--workdir")
        .arg(examples())
        .arg("--steps-file")
        .arg(examples().join("steps.tsv"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(!stdout.contains("hunter2"), "{stdout}");
    assert!(!stdout.contains("dry-run-secret-value"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("dry-run-secret-value") && !stderr.contains("hunter2"),
        "{stderr}"
    );
    assert!(stdout.contains("DEPLOY_TOKEN=[MASKED]"), "{stdout}");
    for expected in [
        "\"PidsLimit\": 4096",
        "\"CapDrop\": [",
        "\"ALL\"",
        "\"CapAdd\": [",
        "\"CHOWN\"",
        "\"ReadonlyRootfs\": true",
        "PUT /containers/dry-run-container/archive?path=/work",
    ] {
        assert!(stdout.contains(expected), "{expected} missing:\n{stdout}");
    }
    for never in ["caches", "outputs", "result.json"] {
        assert!(!dir.path().join(never).exists(), "the dry-run made {never}");
    }
}

/// A TLS front for the test engine that, like `dockerd --tlsverify`,
/// serves only clients with a certificate from its CA; counts them.
async fn tls_engine(
    creds: &kube_testcluster::tls::Credentials,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let socket = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
        .unwrap_or_else(|| "/var/run/docker.sock".into());
    let acceptor = tokio_rustls::TlsAcceptor::from(creds.server_config().unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = std::sync::Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let socket = socket.clone();
            let count = count.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if tls.get_ref().1.peer_certificates().is_none() {
                    return;
                }
                count.fetch_add(1, Ordering::SeqCst);
                if let Ok(mut engine) = tokio::net::UnixStream::connect(&socket).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut engine).await;
                }
            });
        }
    });
    (port, served)
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_engine_is_reached_with_docker_cert_path_as_the_docker_cli_does() {
    use std::sync::atomic::Ordering;
    let creds = kube_testcluster::tls::Credentials::generate().unwrap();
    let (port, served) = tls_engine(&creds).await;
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    std::fs::write(certs.join("ca.pem"), &creds.ca.cert).unwrap();
    std::fs::write(certs.join("cert.pem"), &creds.client.cert).unwrap();
    std::fs::write(certs.join("key.pem"), &creds.client.key).unwrap();
    let run = |out: &str| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_runner-cli"));
        cmd.env("DOCKER_HOST", format!("tcp://127.0.0.1:{port}"))
            .env("DOCKER_TLS_VERIFY", "1")
            .env("DOCKER_CERT_PATH", &certs)
            .args(["run", "--executor", "docker", "--image", &image()])
            .args(["--pull", "never", "--network", "none", "--no-cleanup"])
            .args(["--name", "tls", "--runner", "did:plc:tls"])
            .arg("--workdir")
            .arg(examples())
            .arg("--steps-file")
            .arg(examples().join("steps.tsv"))
            .arg("--outputs")
            .arg(dir.path().join(out))
            .arg("--result")
            .arg(dir.path().join(format!("{out}.json")));
        cmd
    };
    let out = run("ok").output().await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        served.load(Ordering::SeqCst) > 0,
        "no TLS client reached the engine"
    );
    assert_eq!(
        result(&dir.path().join("ok.json")).status,
        executor_core::RunStatus::Success
    );

    std::fs::remove_file(certs.join("key.pem")).unwrap();
    let out = run("nokey").output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("key.pem") && stderr.contains("DOCKER_CERT_PATH"),
        "{stderr}"
    );
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

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn a_runner_killed_with_sigkill_mid_step_is_resumed_and_finishes_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let runner = format!("did:plc:resumed-{}", std::process::id());
    let steps = dir.path().join("steps.tsv");
    std::fs::write(
        &steps,
        "first\techo first > first.txt\n\
         slow\ti=1; while [ $i -le 50 ]; do echo tick-$i; echo \"err-$i $TOKEN\" >&2; sleep 0.1; i=$((i+1)); done; cp first.txt \"$OUTPUTS_DIR/\"\n\
         last\techo last-ran; exit 3\n",
    )
    .unwrap();
    let log = dir.path().join("run.log");
    let outputs = dir.path().join("outputs");
    let token = "tok-resumed-7f3a";
    // A cache the run restores, saved by a shell run before it: the
    // resumed result says what the killed runner's restore found.
    let cache_dir = dir.path().join("caches");
    let seed = dir.path().join("seed.tsv");
    std::fs::write(&seed, "seed\tmkdir -p .c && echo seeded > .c/from\n").unwrap();
    let seeded = cli()
        .args([
            "run",
            "--executor",
            "shell",
            "--name",
            "seed",
            "--runner",
            &runner,
        ])
        .arg("--workdir")
        .arg(dir.path())
        .arg("--steps-file")
        .arg(&seed)
        .arg("--result")
        .arg(dir.path().join("seed.json"))
        .arg("--outputs")
        .arg(dir.path().join("seed-outputs"))
        .args(["--log", "/dev/null", "--cache", "deps=.c", "--cache-dir"])
        .arg(&cache_dir)
        .output()
        .unwrap();
    assert!(
        seeded.status.success(),
        "{}",
        String::from_utf8_lossy(&seeded.stderr)
    );
    let mut args = run_logging_to_stdout("resumed", &runner, dir.path(), &steps);
    // The log goes to a file, the events to stdout for the test to follow.
    let at = args.iter().position(|a| a == "--log").unwrap();
    args.drain(at..at + 2);
    for (flag, value) in [
        ("--log", log.as_os_str()),
        ("--outputs", outputs.as_os_str()),
        ("--events", "-".as_ref()),
        ("--secret", "TOKEN".as_ref()),
        ("--cache", "deps=.c".as_ref()),
        ("--cache-dir", cache_dir.as_os_str()),
    ] {
        args.push(flag.into());
        args.push(value.into());
    }
    let mut child = cli()
        .args(args)
        .env("TOKEN", token)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut events = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("tick-5\\n") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut events, &mut line).unwrap() > 0);
    }
    // Only stopped (SIGSTOP, a paused VM), the runner still owns its run:
    // a resume is refused, naming it, and leaves the log as it is.
    let pid = child.id().to_string();
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap();
    assert!(stopped.success());
    let log_before = std::fs::read(&log).unwrap();
    let refused = cli()
        .args(["resume", "--executor", "docker", "--name", "resumed"])
        .args(["--runner", &runner, "--secret", "TOKEN"])
        .arg("--log")
        .arg(&log)
        .arg("--outputs")
        .arg(&outputs)
        .arg("--result")
        .arg(dir.path().join("refused.json"))
        .env("TOKEN", token)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(
        said.contains(&format!("held by runner process {pid}")),
        "{said}"
    );
    assert_eq!(
        std::fs::read(&log).unwrap(),
        log_before,
        "the log was touched"
    );
    child.kill().unwrap(); // SIGKILL, mid-step (a stopped process dies too)
    child.wait().unwrap();

    // The events file of a runner killed mid-line: resume ends the line.
    let events_file = dir.path().join("events.jsonl");
    std::fs::write(&events_file, "{\"event\":\"output\",\"te").unwrap();
    // Only the four flags, and the two this test sends elsewhere: the
    // outputs folder, the caches and the secret's name come from the run's
    // record beside its log.
    let resume = |token_in_env: bool| {
        let mut cmd = cli();
        cmd.args(["resume", "--executor", "docker", "--name", "resumed"])
            .args(["--runner", &runner])
            .arg("--log")
            .arg(&log)
            .arg("--events")
            .arg(&events_file)
            .arg("--result")
            .arg(dir.path().join("resumed.json"))
            .env_remove("RUNNER_CACHE_DIR");
        if token_in_env {
            cmd.env("TOKEN", token);
        } else {
            cmd.env_remove("TOKEN");
        }
        cmd.output().unwrap()
    };
    // Without the secret's value the log could not mask it: refused, run
    // left as it is.
    let refused = resume(false);
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(2), "{said}");
    assert!(said.contains("TOKEN"), "{said}");
    // Another run's name with this log: refused, naming the log's run.
    let other = cli()
        .args(["resume", "--executor", "docker", "--name", "other"])
        .args(["--runner", &runner])
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&other.stderr).into_owned();
    assert_eq!(other.status.code(), Some(2), "{said}");
    assert!(said.contains("is the log of run \"resumed\""), "{said}");
    assert_eq!(std::fs::read(&log).unwrap().len(), log_before.len());

    let resumed = resume(true);
    let said = String::from_utf8_lossy(&resumed.stderr).into_owned();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(resumed.status.code(), Some(1), "{said}\n{text}");
    let r = result(&dir.path().join("resumed.json"));
    let steps: Vec<_> = r
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.exit_code))
        .collect();
    assert_eq!(
        steps,
        [("first", Some(0)), ("slow", Some(0)), ("last", Some(3))],
        "{text}"
    );
    let deps = &r.caches[0];
    assert!(deps.hit && deps.size_in > 0, "{:?}", r.caches);
    // The run failed (its last step), so the cache is not saved.
    assert!(!deps.saved, "{:?}", r.caches);
    assert_eq!(r.attempts.iter().map(|a| a.number).collect::<Vec<_>>(), [1]);
    for stream in ["tick-", "err-"] {
        let lines: Vec<&str> = text.lines().filter(|l| l.starts_with(stream)).collect();
        let want: Vec<String> = (1..=50)
            .map(|i| match stream {
                "tick-" => format!("tick-{i}"),
                _ => format!("err-{i} [MASKED]"),
            })
            .collect();
        assert_eq!(lines, want, "every {stream} line once, in order:\n{text}");
    }
    assert!(!text.contains(token), "{text}");
    assert!(text.contains("last-ran"), "{text}");
    // The resumed part's events, after the torn line, each a JSON object.
    let events = std::fs::read_to_string(&events_file).unwrap();
    assert_eq!(
        events.lines().next(),
        Some("{\"event\":\"output\",\"te"),
        "{events}"
    );
    let parsed: Vec<serde_json::Value> = events
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(
        parsed
            .iter()
            .any(|e| e["event"] == "stepFinished" && e["step"] == "last" && e["exitCode"] == 3),
        "{events}"
    );
    assert_eq!(
        parsed.last().map(|e| e["event"].clone()),
        Some("runFinished".into()),
        "{events}"
    );
    assert!(!events.contains(token), "{events}");
    assert_eq!(
        std::fs::read_to_string(outputs.join("first.txt")).unwrap(),
        "first\n"
    );
    let left = cli()
        .args([
            "cleanup",
            "--executor",
            "docker",
            "--force",
            "--runner",
            &runner,
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).contains("0 removed"),
        "the resumed run left its container"
    );

    // Finished: a second resume has nothing to carry on.
    let again = resume(true);
    let said = String::from_utf8_lossy(&again.stderr).into_owned();
    assert_eq!(again.status.code(), Some(2), "{said}");
    assert!(said.contains("already finished"), "{said}");
}

#[test]
fn resume_of_an_unknown_log_or_on_the_shell_is_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli()
        .args([
            "resume",
            "--executor",
            "shell",
            "--name",
            "x",
            "--runner",
            "did:plc:x",
        ])
        .arg("--log")
        .arg(dir.path().join("run.log"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot resume"));
    let out = cli()
        .args([
            "resume",
            "--executor",
            "docker",
            "--name",
            "x",
            "--runner",
            "did:plc:x",
        ])
        .arg("--log")
        .arg(dir.path().join("run.log"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("mark"), "{said}");
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

/// An image with no `sh` (here: busybox under another name, and nothing
/// else) fails the run once, as an image failure naming the shell, and
/// `--retry` does not burn attempts on it.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn an_image_without_sh_is_an_image_failure_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("knotless-nosh:{}", std::process::id());
    common::import_image_without_sh(dir.path(), &tag);
    std::fs::create_dir(dir.path().join("checkout")).unwrap();
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "a\ttrue\n").unwrap();
    let out = cli()
        .args([
            "run",
            "--executor",
            "docker",
            "--image",
            &tag,
            "--pull",
            "never",
        ])
        .args(["--name", "nosh", "--runner", "did:plc:nosh", "--retry", "2"])
        .arg("--workdir")
        .arg(dir.path().join("checkout"))
        .arg("--steps-file")
        .arg(&steps)
        .arg("--outputs")
        .arg(dir.path().join("outputs"))
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .arg("--log")
        .arg(dir.path().join("run.log"))
        .output()
        .unwrap();
    let _ = Command::new("docker").args(["rmi", "-f", &tag]).output();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let result: RunResult =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("result.json")).unwrap())
            .unwrap();
    assert_valid_result(&result);
    let failure = result.failure.clone().expect("a failure");
    assert_eq!(failure.kind, executor_core::FailureKind::Image, "{stderr}");
    assert!(!failure.retryable, "{failure:?}");
    assert!(failure.message.contains("has no sh"), "{failure:?}");
    assert!(
        stderr.contains("--image"),
        "the flag, not the field: {stderr}"
    );
    assert_eq!(result.attempts.len(), 1, "{}", result.to_json());
    assert_eq!(
        out.status.code(),
        Some(executor_core::FailureKind::Image.exit_code())
    );
}

/// The README's resume example, run as written (the binary in place of
/// `runner-cli`): the run is killed with SIGKILL mid-step, and the resume
/// with its four flags finishes it, every line once.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn the_readme_resume_example_runs_as_written() {
    let block = common::example("runner-cli resume");
    let bin = env!("CARGO_BIN_EXE_runner-cli");
    let (run, resume) = block
        .split_once("\n# ... the runner is killed mid-step ...\n")
        .expect("the example's two commands");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("steps.tsv"),
        "tick\ti=0; while [ $i -lt 30 ]; do echo tick-$i; sleep 0.1; i=$((i+1)); done\n",
    )
    .unwrap();
    let mut child = Command::new("sh")
        .arg("-ec")
        .arg(format!("exec {}", run.replacen("runner-cli", bin, 1)))
        .current_dir(dir.path())
        .env_remove("RUNNER_DID")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let log = dir.path().join("run.log");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("tick-3\n")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the step never ticked"
        );
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        // Polling the log the runner writes: nothing else tells of progress.
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let out = Command::new("sh")
        .arg("-ec")
        .arg(resume.replacen("runner-cli", bin, 1))
        .current_dir(dir.path())
        .env_remove("RUNNER_DID")
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ticks: Vec<&str> = text.lines().filter(|l| l.starts_with("tick-")).collect();
    let want: Vec<String> = (0..30).map(|i| format!("tick-{i}")).collect();
    assert_eq!(ticks, want, "{text}");
    let r = result(&dir.path().join("result.json"));
    assert_eq!(r.status, executor_core::RunStatus::Success);
}

/// An engine that accepts the connection and never answers gets progress
/// lines while the runner waits, and a signal still ends the run with a
/// result.
#[test]
fn an_engine_that_never_answers_gets_progress_lines_while_the_runner_waits() {
    use std::io::BufRead;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts, and holds each connection open without a word.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "a\ttrue\n").unwrap();
    let mut child = cli()
        .env("DOCKER_HOST", format!("tcp://{addr}"))
        .env_remove("DOCKER_TLS_VERIFY")
        .args(["run", "--executor", "docker", "--image", "x"])
        .args(["--name", "silent", "--runner", "did:plc:silent"])
        .arg("--workdir")
        .arg(dir.path())
        .arg("--steps-file")
        .arg(&steps)
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .arg("--outputs")
        .arg(dir.path().join("outputs"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let waiting = format!("still waiting for the Docker engine at tcp://{addr} to answer");
    while !said.contains(&waiting) {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "{said}");
        said.push_str(&line);
    }
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{said}");
    let r = result(&dir.path().join("result.json"));
    assert_eq!(r.status, executor_core::RunStatus::Cancelled);
}

/// The README's Docker example, as written (the binary in place of `cargo
/// run`; the engine and image are the test run's, so its
/// `prepare-engine.sh` line is left out), in a folder where `examples` is
/// the project's.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn the_readme_docker_example_runs_as_written() {
    let block = common::example("scripts/prepare-engine.sh");
    let command: String = block
        .lines()
        .filter(|l| !l.contains("prepare-engine.sh"))
        .collect::<Vec<_>>()
        .join("\n")
        .replace(
            "cargo run -p runner-cli --",
            env!("CARGO_BIN_EXE_runner-cli"),
        );
    let dir = common::beside_examples();
    let out = Command::new("sh")
        .arg("-ec")
        .arg(&command)
        .current_dir(dir.path())
        .env_remove("RUNNER_DID")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.path().join("out/badge.png").is_file());
    let r = result(&dir.path().join("result.json"));
    assert_eq!(r.executor, "docker");
}
