//! The failure record, retries, and the events that tell attempts apart.

use super::*;

#[tokio::test]
async fn an_oom_kill_is_a_step_failure_of_kind_oom_whatever_the_code() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command().times(1).returning(|_, _, _, _| {
        Ok(CommandOutcome::OutOfMemory {
            code: Some(0),
            detail: "OOMKilled: the container's limit of 32 MiB".into(),
        })
    });
    let result = drive(
        mock,
        false,
        &spec(out.path(), &["a", "b"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(statuses(&result), [StepStatus::Failed, StepStatus::Skipped]);
    let failure = result.failure.clone().unwrap();
    assert_eq!(failure.kind, executor_core::FailureKind::Oom);
    assert!(!failure.retryable);
    assert_eq!(failure.step.as_deref(), Some("a"));
    assert_eq!(result.steps[0].failure.as_ref(), Some(&failure));
    assert_eq!(result.exit_code(), 1);
}

#[tokio::test]
async fn errors_keep_their_kind_and_retryability_in_the_record() {
    use executor_core::FailureKind;
    for (err, kind, retryable, code) in [
        (
            ExecutorError::EnvironmentLost("pod p was deleted".into()),
            FailureKind::EnvironmentLost,
            true,
            3,
        ),
        (
            ExecutorError::classified(
                FailureKind::Evicted,
                "environment lost",
                "pod p was evicted",
            ),
            FailureKind::Evicted,
            true,
            3,
        ),
        (
            ExecutorError::LostExitStatus {
                what: "step a".into(),
                detail: "stream closed".into(),
            },
            FailureKind::Unreachable,
            true,
            3,
        ),
        (
            ExecutorError::image("pulling x", "manifest unknown", false),
            FailureKind::Image,
            false,
            3,
        ),
        (
            ExecutorError::image("pulling x", "i/o timeout", true),
            FailureKind::Image,
            true,
            3,
        ),
        (
            ExecutorError::InvalidInput("RunSpec::image is required".into()),
            FailureKind::Input,
            false,
            2,
        ),
    ] {
        let out = tempfile::tempdir().unwrap();
        let mut mock = MockExecutor::new();
        mock.expect_start()
            .times(1)
            .return_once(move |_, _, _| Err(err));
        let result = drive(
            mock,
            false,
            &spec(out.path(), &["a"]),
            CancellationToken::new(),
        )
        .await;
        let failure = result.failure.clone().unwrap();
        assert_eq!(
            (failure.kind, failure.retryable),
            (kind, retryable),
            "{failure:?}"
        );
        assert_eq!(failure.step, None, "start is in no step");
        assert_eq!(result.status, RunStatus::Error);
        assert_eq!(result.exit_code(), code);
    }
}

#[tokio::test]
async fn a_lost_environment_is_retried_in_a_fresh_one_and_caches_are_saved_once() {
    let out = tempfile::tempdir().unwrap();
    let caches = tempfile::tempdir().unwrap();
    let mut mock = started_mock_times(2);
    let mut seq = mockall::Sequence::new();
    mock.expect_command()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    mock.expect_command()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Err(ExecutorError::EnvironmentLost("pod p was deleted".into())));
    mock.expect_command()
        .times(2)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    // Saved by the successful attempt only.
    mock.expect_copy_out()
        .withf(|_, path, _, _| path != OUTPUTS)
        .times(1)
        .returning(|_, _, _, _| Ok(UnpackSummary::default()));
    let mut spec = spec(out.path(), &["a", "b"]);
    spec.caches
        .push(executor_core::CacheSpec::parse("deps=deps").unwrap());
    // Left by the failed attempt: the retry starts from an empty folder.
    std::fs::write(out.path().join("stale.txt"), "attempt 1").unwrap();
    let options = DriverOptions {
        caches: Some(executor_core::CacheStore::new(caches.path(), 1 << 20)),
        ..retrying(2)
    };
    let result = drive_with(mock, &spec, &options).await;
    assert_eq!(result.status, RunStatus::Success, "{:?}", result.error);
    assert_eq!(result.failure, None);
    assert_eq!(result.attempts.len(), 2);
    let first = result.attempts[0].failure.clone().unwrap();
    assert_eq!(first.kind, executor_core::FailureKind::EnvironmentLost);
    assert_eq!(first.step.as_deref(), Some("b"));
    assert_eq!(
        result.attempts[0]
            .steps
            .iter()
            .map(|s| s.status)
            .collect::<Vec<_>>(),
        [StepStatus::Success, StepStatus::Error]
    );
    assert_eq!(result.attempts[1].steps, result.steps);
    assert!(result.caches[0].saved);
    assert!(result.outputs.is_empty(), "{:?}", result.outputs);
}

#[tokio::test]
async fn retries_stop_at_the_limit_and_keep_every_attempt() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = MockExecutor::new();
    mock.expect_start().times(3).returning(|_, _, _| {
        Err(ExecutorError::unreachable(
            "creating the run's Job",
            "connection refused",
        ))
    });
    let result = drive_with(mock, &spec(out.path(), &["a"]), &retrying(2)).await;
    assert_eq!(result.status, RunStatus::Error);
    assert_eq!(result.attempts.len(), 3);
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, executor_core::FailureKind::Unreachable);
    assert!(failure.retryable, "retryable, but out of retries");
}

#[tokio::test]
async fn a_step_failure_is_never_retried() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock_times(1);
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(1)));
    let result = drive_with(mock, &spec(out.path(), &["a"]), &retrying(5)).await;
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(result.attempts.len(), 1);
}

#[tokio::test]
async fn cancelled_while_waiting_to_retry_is_cancelled_with_no_new_attempt() {
    let out = tempfile::tempdir().unwrap();
    let cancel = CancellationToken::new();
    let mut mock = MockExecutor::new();
    let cancel_in_start = cancel.clone();
    mock.expect_start().times(1).returning(move |_, _, _| {
        // The signal arrives while the first attempt fails.
        cancel_in_start.cancel();
        Err(ExecutorError::unreachable(
            "creating the run's Job",
            "connection refused",
        ))
    });
    let fake = Fake::new(mock);
    let options = DriverOptions {
        retry: executor_core::RetryPolicy::retries(3),
        ..DriverOptions::default()
    };
    let result = run_with(
        &fake,
        &spec(out.path(), &["a"]),
        &RunLog::discard(),
        cancel,
        &options,
    )
    .await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(result.attempts.len(), 1);
    assert_eq!(result.exit_code(), 130);
    assert_eq!(
        result.attempts[0].failure.as_ref().map(|f| f.kind),
        Some(executor_core::FailureKind::Unreachable)
    );
}

/// A retry is told in the events: every attempt's environment and steps
/// carry its number, and the run starts and finishes once.
#[tokio::test]
async fn events_tell_each_attempt_apart() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock_times(2);
    let mut seq = mockall::Sequence::new();
    mock.expect_command()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Err(ExecutorError::EnvironmentLost("pod p was deleted".into())));
    mock.expect_command()
        .times(2)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = events.clone();
    let log = RunLog::discard();
    log.add_sink(Arc::new(move |e: &executor_core::events::Event| {
        use executor_core::events::Event;
        let line = match e {
            Event::RunStarted { .. } => "run".to_string(),
            Event::EnvironmentReady { attempt, .. } => format!("ready {attempt}"),
            Event::StepStarted { attempt, step, .. } => format!("{step} {attempt}"),
            Event::StepFinished {
                attempt,
                step,
                status,
                ..
            } => {
                format!("{step} {attempt} {}", status.as_str())
            }
            Event::AttemptFinished { record, .. } => {
                format!("attempt {} {}", record.number, record.status.as_str())
            }
            Event::RunFinished { result, .. } => format!("finished {}", result.status.as_str()),
            _ => return,
        };
        seen.lock().unwrap().push(line);
    }));
    let fake = Fake::new(mock);
    let result = run_with(
        &fake,
        &spec(out.path(), &["a", "b"]),
        &log,
        CancellationToken::new(),
        &retrying(1),
    )
    .await;
    assert_eq!(result.status, RunStatus::Success, "{:?}", result.error);
    assert_eq!(
        *events.lock().unwrap(),
        [
            "run",
            "ready 1",
            "a 1",
            "a 1 error",
            "attempt 1 error",
            "ready 2",
            "a 2",
            "a 2 success",
            "b 2",
            "b 2 success",
            "attempt 2 success",
            "finished success",
        ]
    );
}
