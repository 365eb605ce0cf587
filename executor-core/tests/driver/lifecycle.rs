//! The environment's life: start, outputs and stop failing or cancelled.

use super::*;

#[tokio::test]
async fn failing_start_never_stops_and_skips_every_step() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = MockExecutor::new();
    mock.expect_start().times(1).returning(|_, _, _| {
        Err(ExecutorError::backend(
            "create container",
            "no such image: nope",
        ))
    });
    mock.expect_command().times(0);
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(0);
    mock.expect_stop().times(0);
    let result = drive(
        mock,
        false,
        &spec(out.path(), &["a"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Error);
    assert_eq!(
        result.error.as_deref(),
        Some("start: create container: no such image: nope")
    );
    assert_eq!(statuses(&result), [StepStatus::Skipped]);
}

#[tokio::test]
async fn failing_command_is_an_error_not_a_failure() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command().times(1).returning(|_, _, _, _| {
        Err(ExecutorError::LostExitStatus {
            what: "exec".into(),
            detail: "stream closed".into(),
        })
    });
    let result = drive(
        mock,
        false,
        &spec(out.path(), &["a", "b"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Error);
    assert_eq!(statuses(&result), [StepStatus::Error, StepStatus::Skipped]);
    assert!(result
        .error
        .as_deref()
        .unwrap_or("")
        .contains("exit status of exec was lost"));
}

#[tokio::test]
async fn failing_outputs_makes_a_successful_run_an_error_and_still_stops() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = MockExecutor::new();
    mock.expect_start()
        .times(1)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(1)
        .returning(|_, _, _, _| {
            Err(ExecutorError::backend(
                "download /outputs",
                "connection reset",
            ))
        });
    mock.expect_stop().times(1).returning(|_| Ok(()));
    let result = drive(
        mock,
        false,
        &spec(out.path(), &["a"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Error);
    assert_eq!(statuses(&result), [StepStatus::Success]);
    assert_eq!(
        result.error.as_deref(),
        Some("outputs: download /outputs: connection reset")
    );
}

#[tokio::test]
async fn outputs_that_never_finish_end_at_the_outputs_timeout_and_still_stop() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = MockExecutor::new();
    mock.expect_start()
        .times(1)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(0);
    mock.expect_stop().times(1).returning(|_| Ok(()));
    let fake = Fake {
        hang_in_outputs: true,
        ..Fake::new(mock)
    };
    let mut spec = spec(out.path(), &["a"]);
    spec.outputs_timeout = Duration::from_millis(100);
    let result = run_with(
        &fake,
        &spec,
        &RunLog::discard(),
        CancellationToken::new(),
        &DriverOptions::default(),
    )
    .await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Timeout);
    assert_eq!(
        result.error.as_deref(),
        Some("outputs: not collected within 100ms")
    );
    // What ended it is the outputs timeout, named in the record.
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, executor_core::FailureKind::Timeout);
    assert!(!failure.retryable);
    assert_eq!(failure.step, None);
}

/// A step can keep its outputs from ever coming back (endless files, a
/// `tar` it replaced): `--retry` runs nothing again for it, since a retry
/// runs every step again.
#[tokio::test]
async fn an_outputs_timeout_is_never_retried() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = MockExecutor::new();
    mock.expect_start()
        .times(1)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    mock.expect_stop().times(1).returning(|_| Ok(()));
    let fake = Fake {
        hang_in_outputs: true,
        ..Fake::new(mock)
    };
    let mut spec = spec(out.path(), &["a"]);
    spec.outputs_timeout = Duration::from_millis(100);
    let result = run_with(
        &fake,
        &spec,
        &RunLog::discard(),
        CancellationToken::new(),
        &retrying(3),
    )
    .await;
    assert_valid_result(&result);
    assert_eq!(result.attempts.len(), 1, "{}", result.to_json());
    assert!(!result.failure.unwrap().retryable);
}

#[tokio::test]
async fn failing_stop_is_reported_and_keeps_a_failure_a_failure() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = MockExecutor::new();
    mock.expect_start()
        .times(1)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(2)));
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(1)
        .returning(|_, _, _, _| Ok(UnpackSummary::default()));
    mock.expect_stop()
        .times(1)
        .returning(|_| Err(ExecutorError::backend("remove container", "engine gone")));
    let result = drive(
        mock,
        false,
        &spec(out.path(), &["a"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(
        result.error.as_deref(),
        Some("step a exited 2; stop: remove container: engine gone")
    );
}

#[tokio::test]
async fn failing_stop_after_success_is_an_error() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = MockExecutor::new();
    mock.expect_start()
        .times(1)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(1)
        .returning(|_, _, _, _| Ok(UnpackSummary::default()));
    mock.expect_stop()
        .times(1)
        .returning(|_| Err(ExecutorError::backend("remove container", "engine gone")));
    let result = drive(
        mock,
        false,
        &spec(out.path(), &["a"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Error);
    assert_eq!(
        result.error.as_deref(),
        Some("stop: remove container: engine gone")
    );
}

#[tokio::test]
async fn invalid_spec_is_an_error_before_anything_starts() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = MockExecutor::new();
    mock.expect_start().times(0);
    mock.expect_stop().times(0);
    let mut spec = spec(out.path(), &["a"]);
    spec.runner = "not-a-did".into();
    let result = drive(mock, false, &spec, CancellationToken::new()).await;
    assert_eq!(result.status, RunStatus::Error);
    assert!(result.error.as_deref().unwrap_or("").contains("not a DID"));
}

#[tokio::test]
async fn cancelled_before_start_finishes_still_stops_what_started() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = MockExecutor::new();
    // start is interrupted mid-way and still finishes with a handle.
    mock.expect_start()
        .times(1)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_command().times(0);
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(0);
    mock.expect_stop()
        .withf(|h| h.id == "fake-1")
        .times(1)
        .returning(|_| Ok(()));
    let fake = Fake {
        start_until_interrupted: true,
        ..Fake::new(mock)
    };
    let cancel = CancellationToken::new();
    let entered = fake.entered.clone();
    let spec = spec(out.path(), &["a"]);
    let log = RunLog::discard();
    let (result, ()) = tokio::join!(run(&fake, &spec, &log, cancel.clone()), async {
        entered.notified().await;
        cancel.cancel();
    });
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(statuses(&result), [StepStatus::Skipped]);
    assert_eq!(
        result.error.as_deref(),
        Some("cancelled while starting the environment")
    );
    drop(fake); // verifies stop ran exactly once
}

#[tokio::test]
async fn cancelled_as_start_finishes_runs_no_step_but_collects_and_stops() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = MockExecutor::new();
    let cancel = CancellationToken::new();
    let c = cancel.clone();
    // start completes on its own just as the run is cancelled.
    mock.expect_start().times(1).returning(move |_, _, _| {
        c.cancel();
        Ok(handle())
    });
    mock.expect_command().times(0);
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(1)
        .returning(|_, _, _, _| Ok(UnpackSummary::default()));
    mock.expect_stop().times(1).returning(|_| Ok(()));
    let result = drive(mock, false, &spec(out.path(), &["a"]), cancel).await;
    // No step starts once the run is cancelled, but outputs and stop still run.
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(statuses(&result), [StepStatus::Skipped]);
    assert_eq!(result.error.as_deref(), Some("cancelled before step a"));
}

#[tokio::test]
async fn a_stop_that_fails_puts_the_environment_in_the_journal_and_a_sweep_removes_it() {
    let (out, journal_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let journal = executor_core::journal::Journal::new(journal_dir.path());
    let mut mock = MockExecutor::new();
    mock.expect_kind().return_const("fake".to_string());
    mock.expect_start()
        .times(1)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(1)
        .returning(|_, _, _, _| Ok(UnpackSummary::default()));
    mock.expect_stop().times(1).returning(|_| {
        Err(ExecutorError::unreachable(
            "deleting the Job",
            "connection refused",
        ))
    });
    let options = DriverOptions {
        journal: Some(journal.clone()),
        ..DriverOptions::default()
    };
    let result = drive_with(mock, &spec(out.path(), &["a"]), &options).await;
    assert_eq!(result.status, RunStatus::Error);
    let kept = journal.entries("fake", "did:plc:driver").unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].id, "fake-1");
    assert!(kept[0].why.contains("connection refused"), "{:?}", kept[0]);

    // The next sweep: the first stop still fails and the entry stays; the
    // second removes the environment and forgets it.
    let mut mock = MockExecutor::new();
    mock.expect_kind().return_const("fake".to_string());
    let mut seq = mockall::Sequence::new();
    mock.expect_stop()
        .withf(|h| h.id == "fake-1")
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Err(ExecutorError::unreachable("deleting the Job", "still down")));
    mock.expect_stop()
        .withf(|h| h.id == "fake-1")
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_| Ok(()));
    let swept = journal.sweep(&mock, "did:plc:driver").await.unwrap();
    assert!(swept.is_empty());
    assert_eq!(journal.entries("fake", "did:plc:driver").unwrap().len(), 1);

    // Another runner's sweep, while the entry is there, stops nothing
    // (its mock has no stop to give) and leaves the entry.
    let mut other = MockExecutor::new();
    other.expect_kind().return_const("fake".to_string());
    other.expect_stop().times(0);
    let swept = journal.sweep(&other, "did:plc:other").await.unwrap();
    assert!(swept.is_empty(), "{swept:?}");
    assert_eq!(journal.entries("fake", "did:plc:driver").unwrap().len(), 1);
    drop(other);

    let swept = journal.sweep(&mock, "did:plc:driver").await.unwrap();
    assert_eq!(swept, ["fake-1"]);
    assert!(journal
        .entries("fake", "did:plc:driver")
        .unwrap()
        .is_empty());
}
