//! runner-cli end to end on the shell executor: exit codes, result JSON,
//! input errors, signals.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use executor_conformance::fixture::assert_valid_result;
use executor_core::RunResult;

fn bin() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner-cli"));
    cmd.env_remove("RUNNER_DID");
    cmd
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

struct Case {
    dir: tempfile::TempDir,
}

impl Case {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("checkout")).unwrap();
        Case { dir }
    }
    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    fn steps(&self, tsv: &str) -> PathBuf {
        let p = self.path("steps.tsv");
        std::fs::write(&p, tsv).unwrap();
        p
    }
    /// `run` with this case's folders; a flag in `extra` replaces the default.
    fn run(&self, steps: &str, extra: &[&str]) -> Command {
        let steps = self.steps(steps);
        let mut flags: Vec<(String, String)> = [
            ("--executor", "shell".to_string()),
            ("--name", "cli-test".to_string()),
            ("--runner", "did:plc:cli-test".to_string()),
            ("--workdir", self.path("checkout").display().to_string()),
            ("--steps-file", steps.display().to_string()),
            ("--outputs", self.path("outputs").display().to_string()),
            ("--result", self.path("result.json").display().to_string()),
            ("--log", self.path("run.log").display().to_string()),
            ("--shell-root", self.path("roots").display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let mut rest = Vec::new();
        let mut extra = extra.iter();
        while let Some(flag) = extra.next() {
            if let Some(slot) = flags.iter_mut().find(|(k, _)| k == flag) {
                slot.1 = extra.next().map(|v| v.to_string()).unwrap_or_default();
            } else {
                rest.push(flag.to_string());
            }
        }
        let mut cmd = bin();
        cmd.arg("run");
        for (k, v) in flags {
            cmd.arg(k).arg(v);
        }
        cmd.args(rest);
        cmd
    }
    fn result(&self) -> RunResult {
        let text = std::fs::read_to_string(self.path("result.json")).expect("a result JSON");
        let result: RunResult = serde_json::from_str(&text).unwrap();
        assert_valid_result(&result);
        result
    }
    fn log(&self) -> String {
        std::fs::read_to_string(self.path("run.log")).unwrap_or_default()
    }
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_example_runs_as_the_readme_shows() {
    let case = Case::new();
    let out = bin()
        .args([
            "run",
            "--executor",
            "shell",
            "--name",
            "example",
            "--runner",
            "did:plc:example",
        ])
        .arg("--workdir")
        .arg(examples())
        .arg("--steps-file")
        .arg(examples().join("steps.tsv"))
        .arg("--outputs")
        .arg(case.path("outputs"))
        .arg("--result")
        .arg(case.path("result.json"))
        .arg("--shell-root")
        .arg(case.path("roots"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("==> step screenshot: success (exit 0"),
        "{stdout}"
    );
    let result = case.result();
    let png = result
        .outputs
        .iter()
        .find(|o| o.path == "badge.png")
        .expect("badge.png");
    assert_eq!(png.media_type, "image/png");
    assert!(case.path("outputs/badge.png").is_file());
    assert_eq!(
        std::fs::read_dir(case.path("roots"))
            .unwrap()
            .flatten()
            .flat_map(|d| std::fs::read_dir(d.path()).unwrap())
            .count(),
        0
    );
}

#[test]
fn a_failing_step_exits_1() {
    let case = Case::new();
    let out = case
        .run("ok\ttrue\nbad\texit 4\nnever\ttrue\n", &[])
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let result = case.result();
    assert_eq!(result.steps[1].exit_code, Some(4));
    assert!(case.log().contains("==> step bad: failed (exit 4"));
}

#[test]
fn events_and_timestamps_follow_the_run() {
    let case = Case::new();
    let events = case.path("events.jsonl");
    let out = case
        .run(
            "greet\techo hello; echo oops >&2\nbad\texit 4\n",
            &["--events", &events.display().to_string(), "--timestamps"],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&events)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let kinds: Vec<&str> = lines.iter().filter_map(|e| e["event"].as_str()).collect();
    assert_eq!(kinds.first(), Some(&"runStarted"), "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"runFinished"), "{kinds:?}");
    let output = |stream: &str| -> String {
        lines
            .iter()
            .filter(|e| e["event"] == "output" && e["stream"] == stream && e["step"] == "greet")
            .filter_map(|e| e["text"].as_str())
            .collect()
    };
    assert_eq!(output("stdout"), "hello\n", "{lines:?}");
    assert_eq!(output("stderr"), "oops\n", "{lines:?}");
    let bad = lines
        .iter()
        .find(|e| e["event"] == "stepFinished" && e["step"] == "bad")
        .expect("bad's end");
    assert_eq!(bad["status"], "failed");
    assert_eq!(bad["exitCode"], 4);
    assert_eq!(bad["failure"]["kind"], "step");
    let told = &lines[lines.len() - 1]["result"];
    assert_eq!(told["status"], "failed");
    assert_eq!(told["steps"][1]["exitCode"], 4);
    assert!(
        lines
            .iter()
            .all(|e| e["at"].as_str().is_some_and(|t| t.ends_with('Z'))),
        "{lines:?}"
    );

    // Every line of the text log starts with its time.
    let log = case.log();
    for line in log.lines() {
        let (stamp, rest) = line.split_at(line.find(' ').unwrap_or(0));
        assert!(
            time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339)
                .is_ok(),
            "{line:?} does not start with a time:\n{log}"
        );
        assert!(!rest.is_empty(), "{log}");
    }
    assert!(log.contains("Z ==> step bad: failed (exit 4"), "{log}");
    assert!(log.contains("Z hello\n"), "{log}");
}

#[test]
fn an_events_file_that_cannot_be_written_is_an_input_error() {
    let case = Case::new();
    let out = case
        .run("ok\ttrue\n", &["--events", "/nonexistent/dir/events.jsonl"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("events file /nonexistent/dir/events.jsonl"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        case.result().failure.map(|f| f.kind),
        Some(executor_core::FailureKind::Input)
    );
}

#[test]
fn a_timeout_exits_124() {
    let case = Case::new();
    let out = case
        .run("hang\texec sleep 600\n", &["--step-timeout", "1s"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 124, "{}", stderr(&out));
    assert_eq!(
        case.result().steps[0].status,
        executor_core::StepStatus::Timeout
    );
}

#[test]
fn an_infrastructure_error_exits_3() {
    let case = Case::new();
    // The environment's outputs folder cannot be read: a step replaced it.
    let out = case
        .run(
            "break\trm -rf \"$OUTPUTS_DIR\" && echo x > \"$OUTPUTS_DIR\"\n",
            &[],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    let result = case.result();
    assert!(result.error.unwrap_or_default().starts_with("outputs:"));
}

/// Starts a run whose first step waits for a signal; returns once the step
/// is running, with the run's stdout. The caller signals and waits for it.
#[allow(clippy::zombie_processes)]
fn running_step(
    case: &Case,
) -> (
    std::process::Child,
    std::io::BufReader<std::process::ChildStdout>,
) {
    let mut child = case
        .run(
            "wait\techo waiting-for-signal; exec sleep 600\nafter\ttrue\n",
            &["--log", "-"],
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        let n = std::io::BufRead::read_line(&mut stdout, &mut line).unwrap_or(0);
        if n == 0 {
            let status = child.wait();
            panic!("runner-cli ended before the step ran: {status:?}");
        }
        if line.contains("waiting-for-signal") {
            return (child, stdout);
        }
    }
}

#[test]
fn sighup_and_sigint_cancel_like_sigterm_and_leave_nothing() {
    for signal in [
        nix::sys::signal::Signal::SIGHUP,
        nix::sys::signal::Signal::SIGINT,
    ] {
        let case = Case::new();
        let (mut child, _stdout) = running_step(&case);
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, signal).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(130), "{signal}");
        let result = case.result();
        assert_eq!(
            result.status,
            executor_core::RunStatus::Cancelled,
            "{signal}"
        );
        // The run folder and the step's `sleep` are gone.
        let left: Vec<_> = walkdir::WalkDir::new(case.path("roots"))
            .min_depth(2)
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        assert!(left.is_empty(), "{signal}: {left:?}");
    }
}

#[test]
fn a_signal_while_connecting_is_a_cancelled_result() {
    // An engine that accepts and never answers: the runner is still
    // connecting when the signal comes.
    let case = Case::new();
    let socket = case.path("silent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let mut child = case
        .run(
            "a\ttrue\n",
            &["--executor", "docker", "--image", "busybox:local"],
        )
        .env("DOCKER_HOST", format!("unix://{}", socket.display()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The runner is connecting once it has opened the socket: accept it.
    let (_conn, _) = _listener.accept().unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let result = case.result();
    assert_eq!(result.status, executor_core::RunStatus::Cancelled);
    assert!(result.error.unwrap_or_default().contains("connecting"));
}

#[test]
fn a_closed_stdout_and_stderr_do_not_stop_the_run() {
    // `runner-cli run --log - | head -1` with stderr closed too: the run
    // goes on, writes its result, and leaves nothing.
    let case = Case::new();
    let mut child = case
        .run(
            "talk\tfor i in $(seq 1 2000); do echo line $i; echo err $i >&2; done\n",
            &["--log", "-"],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_eq!(case.result().status, executor_core::RunStatus::Success);
}

#[test]
fn control_characters_in_names_and_nul_in_steps_are_exit_2() {
    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--name", "forged\n==> step x: success"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("control character"),
        "{}",
        stderr(&out)
    );

    let case = Case::new();
    let out = case.run("a\ttrue\nb\techo \0x\n", &[]).output().unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("steps.tsv:2: a NUL byte"),
        "{}",
        stderr(&out)
    );

    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--timeout", "99999999999999999999"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--timeout"), "{}", stderr(&out));
    assert!(!case.path("roots").exists());
}

#[test]
fn sigterm_cancels_and_exits_130() {
    let case = Case::new();
    let (mut child, _stdout) = running_step(&case);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let result = case.result();
    assert_eq!(result.status, executor_core::RunStatus::Cancelled);
    assert_eq!(result.steps[1].status, executor_core::StepStatus::Skipped);
}

#[test]
fn untrusted_triggers_are_refused_on_the_shell_executor() {
    for trigger in ["pull", "queue"] {
        let case = Case::new();
        let out = case
            .run("x\ttouch \"$WORK_DIR/ran\"\n", &["--trigger", trigger])
            .output()
            .unwrap();
        assert_eq!(code(&out), 2);
        assert!(stderr(&out).contains("untrusted"), "{}", stderr(&out));
        assert!(!case.path("roots").exists(), "nothing may run");
        assert_eq!(case.result().status, executor_core::RunStatus::Error);
    }
}

#[test]
fn input_errors_exit_2_with_a_clear_message_and_a_result() {
    let case = Case::new();
    let out = case.run("no tab here\n", &[]).output().unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("steps.tsv:1: no tab between the step name and its script"),
        "{}",
        stderr(&out)
    );
    assert_eq!(case.result().status, executor_core::RunStatus::Error);

    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--workdir", "/no/such/checkout"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--workdir /no/such/checkout"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        case.result().steps[0].status,
        executor_core::StepStatus::Skipped
    );

    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--runner", "runner-without-did"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("not a DID"), "{}", stderr(&out));
}

#[test]
fn an_outputs_folder_that_is_not_new_is_exit_2_before_any_step() {
    // Files an earlier run left would be listed as this run's outputs.
    let case = Case::new();
    std::fs::create_dir(case.path("outputs")).unwrap();
    std::fs::write(case.path("outputs/stale.txt"), "old").unwrap();
    let out = case
        .run("mark\ttouch \"$WORK_DIR/../ran\"\n", &[])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--outputs"), "{}", stderr(&out));
    assert!(stderr(&out).contains("is not empty"), "{}", stderr(&out));
    assert_eq!(
        case.result().steps[0].status,
        executor_core::StepStatus::Skipped
    );
    assert!(!case.path("roots").exists(), "a run folder was made");

    // A file where the folder should be: exit 2 at once too.
    let case = Case::new();
    std::fs::write(case.path("outputs"), "in the way").unwrap();
    let out = case.run("a\ttrue\n", &[]).output().unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("is not a folder"), "{}", stderr(&out));
    assert!(!case.path("roots").exists(), "a run folder was made");
}

#[test]
fn usage_errors_exit_2_without_a_result() {
    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--executor", "podman"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("invalid value 'podman'"),
        "{}",
        stderr(&out)
    );
    assert!(!case.path("result.json").exists());
}

#[test]
fn dry_run_prints_the_plan_and_touches_nothing() {
    let case = Case::new();
    let out = case
        .run(
            "build\tmake\n",
            &[
                "--dry-run",
                "--env",
                "SECRET=hunter2",
                "--secret",
                "DEPLOY_TOKEN",
                "--cache",
                "deps=deps",
                "--cache-dir",
                &case.path("caches").display().to_string(),
            ],
        )
        .env("DEPLOY_TOKEN", "dry-run-secret-value")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("dry-run-secret-value"), "{stdout}");
    for leaked in ["dry-run-secret-value", "hunter2"] {
        assert!(!stderr(&out).contains(leaked), "{}", stderr(&out));
    }
    assert!(
        stdout.contains("secrets for every step's environment: DEPLOY_TOKEN"),
        "{stdout}"
    );
    assert!(stdout.contains("environment: run folder"), "{stdout}");
    assert!(stdout.contains("sh -ec \"make\""), "{stdout}");
    assert!(!stdout.contains("hunter2"));
    for never in ["roots", "outputs", "result.json", "run.log", "caches"] {
        assert!(!case.path(never).exists(), "dry-run created {never}");
    }
}

#[test]
fn cleanup_subcommand_removes_crashed_run_folders() {
    let case = Case::new();
    let runner_dir = case
        .path("roots")
        .join(executor_core::labels::label_value("did:plc:cli-test"));
    std::fs::create_dir_all(runner_dir.join("crashed-run/work")).unwrap();
    let out = bin()
        .args([
            "cleanup",
            "--executor",
            "shell",
            "--runner",
            "did:plc:cli-test",
            "--shell-root",
        ])
        .arg(case.path("roots"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 removed"));
    assert!(!runner_dir.join("crashed-run").exists());
}

/// The journal beside the cache folder: what a run could not remove is
/// removed by the next cleanup of that runner, and forgotten.
#[test]
fn cleanup_sweeps_the_journal_beside_the_cache_folder() {
    let case = Case::new();
    let journal = executor_core::journal::Journal::new(case.path("journal"));
    journal
        .record(&executor_core::journal::Leftover::new(
            "shell",
            "did:plc:cli-test",
            "/gone/run-folder",
            "stop: did not finish",
        ))
        .unwrap();
    let out = bin()
        .args([
            "cleanup",
            "--executor",
            "shell",
            "--runner",
            "did:plc:cli-test",
        ])
        .arg("--shell-root")
        .arg(case.path("roots"))
        .arg("--cache-dir")
        .arg(case.path("caches"))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("removed /gone/run-folder"), "{stdout}");
    assert!(journal
        .entries("shell", "did:plc:cli-test")
        .unwrap()
        .is_empty());
}

/// `run` sweeps the journal before it starts, as `cleanup` does: what an
/// earlier run of the same runner could not remove is removed and
/// forgotten, and another runner's entry is left for that runner.
#[test]
fn run_sweeps_the_journal_of_its_own_runner_first() {
    let case = Case::new();
    let journal = executor_core::journal::Journal::new(case.path("journal"));
    for (runner, id) in [
        ("did:plc:cli-test", "/gone/mine"),
        ("did:plc:someone-else", "/gone/theirs"),
    ] {
        journal
            .record(&executor_core::journal::Leftover::new(
                "shell",
                runner,
                id,
                "stop: did not finish",
            ))
            .unwrap();
    }
    let caches = case.path("caches").display().to_string();
    let out = case
        .run("hello\techo hi\n", &["--cache-dir", &caches])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(journal
        .entries("shell", "did:plc:cli-test")
        .unwrap()
        .is_empty());
    let theirs: Vec<String> = journal
        .entries("shell", "did:plc:someone-else")
        .unwrap()
        .into_iter()
        .map(|l| l.id)
        .collect();
    assert_eq!(theirs, ["/gone/theirs"]);
}

#[test]
fn caches_are_cold_then_warm_across_runs() {
    let case = Case::new();
    let caches = case.path("caches");
    let steps = "use\tif [ -f .c/hit ]; then echo warm-cache; else echo cold-cache; fi; mkdir -p .c && echo 1 > .c/hit\n";
    let cache_dir = caches.display().to_string();
    let out = case
        .run(steps, &["--cache", "deps=.c", "--cache-dir", &cache_dir])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(case.log().contains("cold-cache"));
    assert!(
        case.result().caches[0].saved,
        "{:?}\n{}",
        case.result().caches,
        case.log()
    );
    let out = case
        .run(steps, &["--cache", "deps=.c", "--cache-dir", &cache_dir])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(case.log().contains("warm-cache"), "{}", case.log());
    assert!(case.result().caches[0].hit);

    // Another runner sharing the cache folder neither reads this one's
    // cache nor replaces it.
    let out = case
        .run(
            steps,
            &[
                "--cache",
                "deps=.c",
                "--cache-dir",
                &cache_dir,
                "--runner",
                "did:plc:cli-test-other",
            ],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(case.log().contains("cold-cache"), "{}", case.log());
    let out = case
        .run(steps, &["--cache", "deps=.c", "--cache-dir", &cache_dir])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(case.log().contains("warm-cache"), "{}", case.log());

    for bad in ["../up=.c", "=.c", "deps"] {
        let out = case.run(steps, &["--cache", bad]).output().unwrap();
        assert_eq!(code(&out), 2, "{bad}");
    }
    // A dry-run shows the cache calls and leaves the host copy alone.
    let own = executor_core::CacheStore::new(&caches, u64::MAX)
        .for_runner("did:plc:cli-test")
        .dir()
        .to_path_buf();
    let before = std::fs::read_link(own.join("deps/current")).unwrap();
    let out = case
        .run(
            steps,
            &["--cache", "deps=.c", "--cache-dir", &cache_dir, "--dry-run"],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(plan.matches("/work/.c").count() >= 2, "{plan}");
    assert_eq!(
        std::fs::read_link(own.join("deps/current")).unwrap(),
        before
    );

    let out = case.run(steps, &["--cache", "deps=/etc"]).output().unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("relative to WORK_DIR"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn secrets_come_from_the_environment_or_files_and_never_show() {
    const TOKEN: &str = "s3cr3t-deploy-value";
    const KEY: &str = "-----BEGIN KEY-----\nAAAAB3NzaC1yc2E\n-----END KEY-----";
    let case = Case::new();
    std::fs::write(case.path("key"), format!("{KEY}\n")).unwrap();
    std::fs::write(
        case.path("vars"),
        "# plain ones\nPLAIN=from the file\nHOME\n",
    )
    .unwrap();
    let steps = format!(
        "show\techo \"token=$DEPLOY_TOKEN plain=$PLAIN\"; printf '%s\\n' \"$SSH_KEY\" | sed -n 2p; \
         [ \"$(printf %s \"$SSH_KEY\" | wc -l)\" = 2 ]; [ -n \"$HOME\" ]\n\
         no runner secrets\tif [ -n \"${{KUBECONFIG:-}}\" ] || [ -n \"${{RUNNER_ONLY:-}}\" ]; then echo leaked; exit 7; fi\n\
         no command line has it\tprintf %s \"$DEPLOY_TOKEN\" > .pattern; \
         if cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\\\0' '\\\\n' | grep -qF -f .pattern; then echo on-a-command-line; exit 8; fi\n\
         deploy {TOKEN}\texit 1\n"
    );
    let key = case.path("key");
    let vars = case.path("vars");
    let out = case
        .run(
            &steps,
            &[
                "--secret",
                "DEPLOY_TOKEN",
                "--secret-file",
                &format!("SSH_KEY={}", key.display()),
                "--env-file",
                &vars.display().to_string(),
            ],
        )
        .env("DEPLOY_TOKEN", TOKEN)
        .env("KUBECONFIG", "/runner/only/kubeconfig")
        .env("RUNNER_ONLY", "not for steps")
        .output()
        .unwrap();
    let log = case.log();
    assert_eq!(code(&out), 1, "{}{log}", stderr(&out));
    let result = case.result();
    assert_eq!(result.steps[0].exit_code, Some(0), "{log}");
    assert_eq!(result.steps[1].exit_code, Some(0), "{log}");
    assert_eq!(result.steps[2].exit_code, Some(0), "{log}");
    assert!(log.contains("token=[MASKED] plain=from the file"), "{log}");
    assert!(log.contains("\n[MASKED]\n"), "the key's middle line: {log}");
    let json = std::fs::read_to_string(case.path("result.json")).unwrap();
    for shown in [&log, &json, &stderr(&out)] {
        assert!(
            !shown.contains(TOKEN) && !shown.contains("AAAAB3NzaC1yc2E"),
            "{shown}"
        );
    }
    assert!(stderr(&out).contains("deploy [MASKED]"), "{}", stderr(&out));
}

#[test]
fn secrets_that_cannot_be_taken_are_exit_2_naming_them() {
    let case = Case::new();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--secret", "TOKEN=hunter22"],
            "never taken on the command line",
        ),
        (
            &["--secret", "KNOTLESS_NOT_SET_ANYWHERE"],
            "no variable KNOTLESS_NOT_SET_ANYWHERE",
        ),
        (&["--secret", "SHORT"], "shorter than 4 characters"),
        (
            &["--secret-file", "K=/no/such/file"],
            "--secret-file K=/no/such/file",
        ),
    ];
    for (flags, said) in cases {
        let out = case
            .run("a\ttrue\n", flags)
            .env("SHORT", "abc")
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{flags:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(said), "{flags:?}: {}", stderr(&out));
        let json = std::fs::read_to_string(case.path("result.json")).unwrap();
        for shown in [stderr(&out), json] {
            assert!(!shown.contains("hunter22"), "{shown}");
        }
        assert!(!case.log().contains("true"), "no step ran");
    }
}

/// The runner with `--log -` into a reader that stopped reading: the
/// run's timeout and a signal still end it, with a result. A runner that
/// wrote its log on the runtime's thread would hang here until the
/// watchdog below.
#[tokio::test]
async fn a_stalled_log_reader_holds_back_output_but_not_timeouts_or_signals() {
    const FLOOD: &str = "flood\tyes 0123456789 | head -c 20000000; exec sleep 600\n";
    const WATCHDOG: std::time::Duration = std::time::Duration::from_secs(90);

    let case = Case::new();
    let mut cmd = case.run(FLOOD, &["--log", "-", "--timeout", "3s"]);
    cmd.stdout(Stdio::piped());
    let mut child = tokio::process::Command::from(cmd).spawn().unwrap();
    let _unread = child.stdout.take();
    let status = tokio::time::timeout(WATCHDOG, child.wait())
        .await
        .expect("the run timeout did not end a run whose log reader stalled")
        .unwrap();
    assert_eq!(status.code(), Some(124));
    assert_eq!(case.result().status, executor_core::RunStatus::Timeout);

    let case = Case::new();
    let mut cmd = case.run(FLOOD, &["--log", "-"]);
    cmd.stdout(Stdio::piped());
    let mut child = tokio::process::Command::from(cmd).spawn().unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("0123456789") {
        line.clear();
        let n = tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut line)
            .await
            .unwrap();
        assert!(n > 0, "the run ended before its step printed");
    }
    // From here nobody reads: the pipe and the log's budget fill up.
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = tokio::time::timeout(WATCHDOG, child.wait())
        .await
        .expect("SIGTERM did not end a run whose log reader stalled")
        .unwrap();
    assert_eq!(status.code(), Some(130));
    assert_eq!(case.result().status, executor_core::RunStatus::Cancelled);
    let left: Vec<_> = walkdir::WalkDir::new(case.path("roots"))
        .min_depth(2)
        .into_iter()
        .filter_map(Result::ok)
        .collect();
    assert!(left.is_empty(), "{left:?}");
    drop(stdout);
}

#[test]
fn a_shell_root_other_users_can_change_is_exit_2_before_any_step() {
    use std::os::unix::fs::PermissionsExt;
    let case = Case::new();
    let shared = case.path("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let root = shared.join("roots").display().to_string();
    let out = case
        .run("a\techo the-step-ran\n", &["--shell-root", &root])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("not private"), "{}", stderr(&out));
    assert_eq!(case.result().status, executor_core::RunStatus::Error);
    assert!(!case.log().contains("the-step-ran"));
}

#[test]
fn retry_never_runs_a_failed_step_again_and_the_failure_says_why() {
    let case = Case::new();
    let out = case
        .run(
            "fine\ttrue\nbroken\techo ran-once; exit 5\n",
            &["--retry", "2"],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let log = case.log();
    assert!(log.contains("==> attempt 1 of 3"), "{log}");
    assert!(!log.contains("attempt 2"), "{log}");
    assert_eq!(log.matches("ran-once").count(), 1, "{log}");
    let result = case.result();
    assert_eq!(result.attempts.len(), 1);
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, executor_core::FailureKind::Step);
    assert_eq!(failure.step.as_deref(), Some("broken"));
    assert!(!failure.retryable);
    assert_eq!(
        result.steps[1].failure.as_ref().map(|f| f.kind),
        Some(failure.kind)
    );
}

#[test]
fn input_errors_are_failures_of_kind_input() {
    let case = Case::new();
    let out = case
        .run("a\ttrue\n", &["--workdir", "/no/such/checkout"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let failure = case.result().failure.unwrap();
    assert_eq!(failure.kind, executor_core::FailureKind::Input);
    assert!(
        failure.message.contains("--workdir /no/such/checkout"),
        "{failure:?}"
    );
    // More retries than the flag allows is a usage error.
    let out = case.run("a\ttrue\n", &["--retry", "11"]).output().unwrap();
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--retry"), "{}", stderr(&out));
}

/// On a terminal (`--log -`), a step's control bytes are shown in caret
/// notation: it cannot clear the screen or draw over the runner's lines
/// with `\r`. Piped, the log keeps them as they were.
#[test]
fn on_a_terminal_a_steps_control_bytes_cannot_draw_over_the_log() {
    let case = Case::new();
    let steps =
        "draw\tprintf 'ok\\\\033[2J\\\\r==> step draw: success (exit 0, 0.001s)\\\\n'; exit 1\n";
    let cmd = case.run(steps, &["--log", "-"]);
    let mut line = String::new();
    for arg in std::iter::once(cmd.get_program()).chain(cmd.get_args()) {
        let arg = arg.to_str().unwrap();
        line.push_str(&format!("'{}' ", arg.replace('\'', r"'\''")));
    }
    // script(1) gives the runner a terminal of its own.
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("ok^[[2J^M==> step draw: success"),
        "{shown:?}"
    );
    assert!(!shown.contains('\u{1b}'), "{shown:?}");
    // Piped, the bytes are the step's.
    let piped = case.run(steps, &["--log", "-"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&piped.stdout).contains("ok\u{1b}[2J\r==> step draw"),
        "{}",
        String::from_utf8_lossy(&piped.stdout)
    );
}

/// A step that prints without end fills no disk: past `--log-limit` its
/// output leaves neither the log nor the events file, one line says so,
/// the steps go on, and the result and the events count what was dropped.
#[test]
fn a_loud_step_fills_neither_the_log_nor_the_events_past_the_limit() {
    let case = Case::new();
    let events = case.path("events.jsonl");
    let steps = "loud\tyes 0123456789abcdef | head -c 50000000\nnext\techo next-ran\n";
    let out = case
        .run(
            steps,
            &["--log-limit", "1m", "--events", events.to_str().unwrap()],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let log = case.log();
    assert!(log.len() < (1 << 20) + (16 << 10), "{} bytes", log.len());
    assert_eq!(log.matches("more output is dropped").count(), 1);
    assert!(log.contains("==> step loud: success (exit 0, "), "{log}");
    let events_len = std::fs::metadata(&events).unwrap().len();
    assert!(
        events_len < 4 << 20,
        "the events file holds {events_len} bytes"
    );
    let events = std::fs::read_to_string(&events).unwrap();
    let dropped = 50_000_000 - (1u64 << 20);
    assert!(
        events.contains(&format!("\"outputDroppedBytes\":{dropped}")),
        "{}",
        &events[events.len().saturating_sub(3000)..]
    );
    let result = case.result();
    assert_eq!(result.steps[0].output_dropped_bytes, dropped);
    assert_eq!(result.steps[1].status, executor_core::StepStatus::Success);
}

#[test]
fn a_run_without_executor_is_refused_rather_than_run_on_the_host() {
    let case = Case::new();
    let out = bin()
        .args([
            "run",
            "--name",
            "x",
            "--runner",
            "did:plc:x",
            "--steps-file",
        ])
        .arg(case.steps("touched\ttouch \"$OUTPUTS_DIR/ran\"\n"))
        .arg("--outputs")
        .arg(case.path("outputs"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--executor"), "{stderr}");
    assert!(!case.path("outputs/ran").exists());
}

#[test]
fn another_backends_flags_are_refused_naming_this_ones() {
    let case = Case::new();
    for (extra, says) in [
        (
            &["--executor", "k8s", "--memory", "64m"][..],
            "on the k8s executor use --memory-limit",
        ),
        (
            &["--executor", "k8s", "--user", "1000:1000"][..],
            "use --run-as-user and --run-as-group",
        ),
        (
            &["--executor", "docker", "--run-as-user", "1000"][..],
            "on the docker executor use --user",
        ),
        (
            &["--executor", "shell", "--read-only"][..],
            "--read-only is a flag of the docker executor",
        ),
        (
            &["--executor", "shell", "--image", "x"][..],
            "--image is a flag of the docker and k8s executor",
        ),
    ] {
        let out = case.run("a\ttrue\n", extra).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        let result = case.result();
        assert_eq!(result.status, executor_core::RunStatus::Error, "{extra:?}");
    }
}

#[test]
fn diagnostics_piped_have_no_colour_codes() {
    let case = Case::new();
    let out = case
        // A process left behind holding the step's output: a debug line.
        .run("a\tsleep 3 & echo hi\n", &[])
        .env("RUNNER_LOG", "debug")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DEBUG"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}

#[test]
fn version_names_the_commit() {
    let out = bin().arg("--version").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let said = String::from_utf8_lossy(&out.stdout);
    let head = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "rev-parse",
            "--short=12",
            "HEAD",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(head) => assert!(said.contains(&format!("(commit {head})")), "{said}"),
        // A source tarball has no git: the version says so.
        None => assert!(said.contains("(commit unknown)"), "{said}"),
    }
}

#[test]
fn dash_is_standard_input_or_output_and_two_outputs_there_are_refused() {
    use std::io::Write;
    let case = Case::new();
    // Steps from standard input, the result to standard output.
    let mut child = case
        .run("unused\ttrue\n", &["--steps-file", "-", "--result", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello\techo from-stdin\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: RunResult = serde_json::from_slice(&out.stdout).unwrap();
    assert_valid_result(&result);
    assert_eq!(result.steps[0].name, "hello");
    let log = std::fs::read_to_string(case.path("run.log")).unwrap();
    assert!(log.contains("from-stdin"), "{log}");
    // The log and the result both on standard output: refused.
    let out = case
        .run("a\ttrue\n", &["--log", "-", "--result", "-"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--log and --result are each `-`"),
        "{stderr}"
    );
}

#[test]
fn a_run_logging_to_a_file_shows_its_progress_on_the_terminal() {
    let case = Case::new();
    let out = case
        .run(
            "build\techo built-output\nfail\tprintf 'e\\\\033[2J' >&2; exit 4\nlast\techo never\n",
            &[],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let err = stderr(&out);
    for line in [
        "==> step build: started",
        "==> step build: success (exit 0",
        "==> step fail: failed (exit 4",
        "==> step last: skipped after an earlier step failed",
        "==> summary:",
        "==> run cli-test: failed",
    ] {
        assert!(err.contains(line), "{line:?} missing from stderr: {err}");
    }
    // The runner's lines only: the step's output stays in the log file.
    assert!(!err.contains("built-output"), "{err}");
    assert!(case.log().contains("built-output"));
    assert!(!err.contains('\u{1b}'), "{err:?}");
    // With the log on stdout, the terminal already has it: nothing twice.
    let case = Case::new();
    let out = case
        .run("build\techo built-output\n", &["--log", "-"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0);
    assert!(!stderr(&out).contains("==> step build"), "{}", stderr(&out));
}

/// The README's first example, as written (the binary in place of
/// `cargo run`), twice in a row in a folder where `examples` is the
/// project's: the second run replaces the outputs the first one left.
#[test]
fn the_readme_quick_start_runs_as_written_twice() {
    let block = common::example("--executor shell --name example");
    let command = block.replace(
        "cargo run -p runner-cli --",
        env!("CARGO_BIN_EXE_runner-cli"),
    );
    let dir = common::beside_examples();
    for _ in 0..2 {
        let out = Command::new("sh")
            .arg("-ec")
            .arg(&command)
            .current_dir(dir.path())
            .env_remove("RUNNER_DID")
            .env("RUNNER_SHELL_ROOT", dir.path().join("roots"))
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        assert!(dir.path().join("out/badge.png").is_file());
        let text = std::fs::read_to_string(dir.path().join("result.json")).unwrap();
        let result: RunResult = serde_json::from_str(&text).unwrap();
        assert_valid_result(&result);
    }
}
