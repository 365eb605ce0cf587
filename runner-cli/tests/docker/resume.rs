//! Resuming a run whose runner was killed

use super::*;

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
    // The shell is not offered: its runs end with their runner.
    assert!(String::from_utf8_lossy(&out.stderr).contains("[possible values: docker, k8s]"));
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
