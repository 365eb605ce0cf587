//! `run --workflow FILE` end to end on the shell executor: GitHub Actions'
//! step keys, and unknown keys refused with their line.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use executor_conformance::fixture::assert_valid_result;
use executor_core::{RunResult, RunStatus, StepStatus};

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
    /// `run --workflow` of `yaml` with this case's folders, then `extra`.
    fn run(&self, yaml: &str, extra: &[&str]) -> Output {
        let workflow = self.path("workflow.yaml");
        std::fs::write(&workflow, yaml).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner-cli"));
        cmd.env_remove("RUNNER_DID")
            .args([
                "run",
                "--executor",
                "shell",
                "--name",
                "wf",
                "--runner",
                "did:plc:wf",
            ])
            .arg("--workflow")
            .arg(&workflow)
            .arg("--workdir")
            .arg(self.path("checkout"))
            .arg("--outputs")
            .arg(self.path("outputs"))
            .arg("--result")
            .arg(self.path("result.json"))
            .arg("--log")
            .arg(self.path("run.log"))
            .arg("--shell-root")
            .arg(self.path("roots"))
            .args(extra);
        cmd.output().unwrap()
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
    fn output(&self, name: &str) -> String {
        std::fs::read_to_string(self.path("outputs").join(name)).unwrap_or_default()
    }
}

fn statuses(result: &RunResult) -> Vec<StepStatus> {
    result.steps.iter().map(|s| s.status).collect()
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn variables_multi_line_scripts_and_a_step_that_continues_on_error() {
    let case = Case::new();
    let out = case.run(
        r#"
env:
  GREETING: hello
  LEVEL: 1
steps:
  - name: greet
    env:
      WHO: world
    run: |
      echo "$GREETING $WHO $LEVEL" > "$OUTPUTS_DIR/greeting"
      echo second line >> "$OUTPUTS_DIR/greeting"
  - name: lint
    continue-on-error: true
    run: exit 3
  - run: echo after > "$OUTPUTS_DIR/after"
"#,
        &["--env", "LEVEL=2"],
    );
    assert_eq!(code(&out), 0, "{}\n{}", stderr(&out), case.log());
    let result = case.result();
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(
        statuses(&result),
        [StepStatus::Success, StepStatus::Failed, StepStatus::Success]
    );
    assert_eq!(result.steps[1].exit_code, Some(3));
    assert_eq!(
        result.steps[2].name,
        "#3 run echo after > \"$OUTPUTS_DIR/after\""
    );
    // --env comes after the file's variables and wins.
    assert_eq!(case.output("greeting"), "hello world 2\nsecond line\n");
    assert_eq!(case.output("after"), "after\n");
    assert!(
        case.log()
            .contains("it continues on error, so the run goes on"),
        "{}",
        case.log()
    );
}

#[test]
fn after_a_failure_only_steps_with_if_always_run() {
    let case = Case::new();
    let out = case.run(
        r#"
steps:
  - name: build
    run: exit 4
  - name: test
    run: echo ran > "$OUTPUTS_DIR/test"
  - name: upload
    if: always()
    run: echo uploaded > "$OUTPUTS_DIR/upload"
"#,
        &[],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let result = case.result();
    assert_eq!(
        statuses(&result),
        [StepStatus::Failed, StepStatus::Skipped, StepStatus::Success]
    );
    assert_eq!(result.steps[0].exit_code, Some(4));
    assert_eq!(case.output("test"), "");
    assert_eq!(case.output("upload"), "uploaded\n");
    let log = case.log();
    assert!(
        log.contains("==> step test: skipped after an earlier step failed"),
        "{log}"
    );
}

#[test]
fn a_steps_timeout_minutes_ends_it_and_the_always_step_still_runs() {
    let case = Case::new();
    let out = case.run(
        r#"
steps:
  - name: slow
    timeout-minutes: 0.01
    run: sleep 60
  - name: report
    if: ${{ always() }}
    run: echo reported > "$OUTPUTS_DIR/report"
"#,
        &[],
    );
    assert_eq!(code(&out), 124, "{}", stderr(&out));
    let result = case.result();
    assert_eq!(
        statuses(&result),
        [StepStatus::Timeout, StepStatus::Success]
    );
    assert!(
        result.steps[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("timed out after 600ms (step timeout)")),
        "{:?}",
        result.steps[0].error
    );
    assert_eq!(case.output("report"), "reported\n");
}

#[test]
fn an_unknown_key_is_exit_2_naming_its_line_with_a_result() {
    let case = Case::new();
    let out = case.run(
        "steps:\n  - name: checkout\n    uses: actions/checkout@v4\n    run: true\n",
        &[],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("--workflow")
            && err.contains("uses: at line 3 column 5")
            && err.contains("runs `run:` steps only"),
        "{err}"
    );
    let result = case.result();
    assert_eq!(
        result.failure.map(|f| f.kind),
        Some(executor_core::FailureKind::Input)
    );
}

#[test]
fn workflow_and_steps_file_are_one_or_the_other() {
    let case = Case::new();
    let tsv = case.path("steps.tsv");
    std::fs::write(&tsv, "a\ttrue\n").unwrap();
    let out = case.run(
        "steps:\n  - run: true\n",
        &["--steps-file", tsv.to_str().unwrap()],
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("--steps-file"), "{}", stderr(&out));
}

/// The README's workflow command, run as written (the binary in place of
/// `cargo run`), in a folder where `examples` is the project's.
#[test]
fn the_readme_workflow_example_runs_as_written() {
    let command = common::example_command("--workflow examples/workflow.yaml");
    let dir = common::beside_examples();
    for _ in 0..2 {
        // Twice in a row, as a user who tries it again does: the second
        // run replaces the outputs the first one left.
        let out = common::run_as_written(&command, dir.path());
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(code(&out), 0, "{}\n{stdout}", stderr(&out));
        assert!(
            stdout.contains("it continues on error, so the run goes on"),
            "{stdout}"
        );
        let text = std::fs::read_to_string(dir.path().join("result-wf.json")).unwrap();
        let result: RunResult = serde_json::from_str(&text).unwrap();
        assert_eq!(
            statuses(&result),
            [
                StepStatus::Success,
                StepStatus::Failed,
                StepStatus::Success,
                StepStatus::Success
            ]
        );
        assert!(dir.path().join("out-wf/badge.png").is_file());
        assert!(dir.path().join("out-wf/reports/greeting.txt").is_file());
    }
}

/// docs/running.md's Actions example, run as written: a job picked from
/// two, an output read by a later step, the runner's variables.
#[test]
fn the_docs_actions_example_runs_as_written() {
    let command = common::example_command("--workflow examples/actions.yaml");
    let dir = common::beside_examples();
    let out = common::run_as_written(&command, dir.path());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(code(&out), 0, "{}\n{stdout}", stderr(&out));
    assert!(
        stderr(&out).contains("jobs: checks: runs-on: ubuntu-latest is read and ignored"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout.contains("hello from v1.2 (step 1, CI=true)") && stdout.contains("job success"),
        "{stdout}"
    );
    assert!(!stdout.contains("deploying"), "{stdout}");
    let text = std::fs::read_to_string(dir.path().join("result-actions.json")).unwrap();
    let result: RunResult = serde_json::from_str(&text).unwrap();
    assert_valid_result(&result);
    use StepStatus::{Failed, Skipped, Success};
    assert_eq!(
        statuses(&result),
        [Success, Success, Failed, Skipped, Success]
    );
    assert_eq!(
        result.steps[0].outputs.get("number").map(String::as_str),
        Some("1.2")
    );
    assert!(dir.path().join("out-actions/greeting.txt").is_file());
    assert!(!dir
        .path()
        .join("out-actions")
        .join(executor_core::STEP_OUTPUTS_FOLDER)
        .exists());
}
