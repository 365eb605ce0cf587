//! Exit codes, the result JSON and the events of whole runs

use super::*;

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
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
        stderr(&out).contains(
            "--events /nonexistent/dir/events.jsonl: the folder /nonexistent/dir does not exist"
        ),
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
