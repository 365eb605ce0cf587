//! Which steps run after a failure: `continue_on_error`, `always`, and a
//! step's own timeout.

use super::*;

/// A mock whose steps exit with the code `codes` gives their name
/// (0 when it names none), and that fails the test when a step in
/// `never` is run.
fn steps_exiting(codes: &'static [(&'static str, i32)]) -> MockExecutor {
    let mut mock = started_mock();
    mock.expect_command().returning(move |_, step, _, _| {
        let code = codes
            .iter()
            .find(|(name, _)| *name == step.name)
            .map_or(0, |(_, code)| *code);
        Ok(CommandOutcome::exited(code))
    });
    mock
}

fn names_run(result: &RunResult) -> Vec<&str> {
    result
        .steps
        .iter()
        .filter(|s| s.status != StepStatus::Skipped)
        .map(|s| s.name.as_str())
        .collect()
}

#[tokio::test]
async fn a_step_that_continues_on_error_records_its_code_and_the_run_goes_on() {
    let out = tempfile::tempdir().unwrap();
    let mut spec = spec(out.path(), &["lint", "build"]);
    spec.steps[0] = spec.steps[0].clone().continue_on_error(true);
    let (log, captured) = RunLog::memory();
    let fake = Fake::new(steps_exiting(&[("lint", 3)]));
    let result = run(&fake, &spec, &log, CancellationToken::new()).await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Success, "{:?}", result.error);
    assert_eq!(statuses(&result), [StepStatus::Failed, StepStatus::Success]);
    assert_eq!(result.steps[0].exit_code, Some(3));
    assert!(result.steps[0].failure.is_some());
    assert_eq!(result.error, None);
    assert!(
        captured
            .text()
            .contains("step lint: step lint exited 3; it continues on error, so the run goes on"),
        "{}",
        captured.text()
    );
}

#[tokio::test]
async fn after_a_failure_only_the_steps_that_always_run_run() {
    let out = tempfile::tempdir().unwrap();
    let mut spec = spec(
        out.path(),
        &["build", "test", "upload", "deploy", "teardown"],
    );
    spec.steps[2] = spec.steps[2].clone().always(true);
    spec.steps[4] = spec.steps[4].clone().always(true);
    let (log, captured) = RunLog::memory();
    let fake = Fake::new(steps_exiting(&[("build", 2), ("upload", 1)]));
    let result = run(&fake, &spec, &log, CancellationToken::new()).await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(names_run(&result), ["build", "upload", "teardown"]);
    assert_eq!(
        statuses(&result),
        [
            StepStatus::Failed,
            StepStatus::Skipped,
            StepStatus::Failed,
            StepStatus::Skipped,
            StepStatus::Success
        ]
    );
    // The run's failure is the first; the always step's is added to it.
    let failure = result.failure.as_ref().expect("a failure");
    assert_eq!(failure.step.as_deref(), Some("build"));
    assert_eq!(
        result.error.as_deref(),
        Some("step build exited 2; step upload exited 1")
    );
    let text = captured.text();
    for skipped in ["test", "deploy"] {
        assert!(
            text.contains(&format!(
                "==> step {skipped}: skipped after an earlier step failed"
            )),
            "{text}"
        );
    }
}

#[tokio::test]
async fn no_step_runs_after_the_environment_is_lost_not_even_one_that_always_runs() {
    let out = tempfile::tempdir().unwrap();
    let mut spec = spec(out.path(), &["build", "upload"]);
    spec.steps[1] = spec.steps[1].clone().always(true);
    let mut mock = started_mock();
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Err(ExecutorError::EnvironmentLost("the pod is gone".into())));
    let result = drive(mock, false, &spec, CancellationToken::new()).await;
    assert_eq!(statuses(&result), [StepStatus::Error, StepStatus::Skipped]);
}

#[tokio::test(start_paused = true)]
async fn a_steps_own_timeout_ends_it_and_an_always_step_still_runs() {
    let out = tempfile::tempdir().unwrap();
    let mut spec = spec(out.path(), &["slow", "next", "report"]);
    spec.step_timeout = Duration::from_secs(50);
    spec.steps[0] = spec.steps[0].clone().timeout(Duration::from_secs(5));
    spec.steps[2] = spec.steps[2].clone().always(true);
    let mut mock = started_mock();
    let mut seq = mockall::Sequence::new();
    mock.expect_command()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Ok(CommandOutcome::Interrupted));
    mock.expect_command()
        .withf(|_, step, _, _| step.name == "report")
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    let fake = Fake {
        hang_in_first_command: true,
        ..Fake::new(mock)
    };
    let began = tokio::time::Instant::now();
    let result = run(&fake, &spec, &RunLog::discard(), CancellationToken::new()).await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Timeout);
    assert_eq!(
        statuses(&result),
        [
            StepStatus::Timeout,
            StepStatus::Skipped,
            StepStatus::Success
        ]
    );
    assert_eq!(
        result.steps[0].error.as_deref(),
        Some("step slow: timed out after 5s (step timeout)")
    );
    assert!(began.elapsed() < Duration::from_secs(50));
}

#[tokio::test]
async fn a_zero_or_overlong_step_timeout_is_refused_naming_the_step() {
    let out = tempfile::tempdir().unwrap();
    let mut spec = spec(out.path(), &["a"]);
    spec.steps[0] = spec.steps[0].clone().timeout(Duration::ZERO);
    let err = spec.validate().unwrap_err().to_string();
    assert!(err.contains("the timeout of step \"a\""), "{err}");
}
