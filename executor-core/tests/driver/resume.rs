//! A run carried on by a new runner process after the first was killed.

use executor_core::resume::{resume_with, Reattached, RunPlan};
use executor_core::FailureKind;

use super::*;

/// A run retried once, whose runner is killed in the second attempt, is
/// carried on with a result that lists both attempts, as the run would
/// have had it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_resumed_after_a_retry_keeps_every_attempt() {
    let out = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    let spec = spec(out.path(), &["a"]);

    // The first runner process: attempt 1 loses its environment, and
    // the process is killed in attempt 2's step.
    let mut mock = MockExecutor::new();
    mock.expect_start()
        .times(2)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Err(ExecutorError::EnvironmentLost("pod p was deleted".into())));
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(1)
        .returning(|_, _, _, _| Ok(UnpackSummary::default()));
    mock.expect_stop().times(1).returning(|_| Ok(()));
    let fake = Fake {
        hang_after_commands: Some(1),
        ..Fake::new(mock)
    };
    let entered = fake.entered.clone();
    let log = RunLog::create_resumable(&path).unwrap();
    let killed = tokio::spawn({
        let (spec, log) = (spec.clone(), log.clone());
        async move {
            run_with(&fake, &spec, &log, CancellationToken::new(), &retrying(1)).await;
        }
    });
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("attempt 2's step never started");
    assert!(log.flush(Duration::from_secs(10)).await);
    killed.abort();
    assert!(killed.await.unwrap_err().is_cancelled());
    drop(log);

    let (log, mark) = RunLog::resume(&path).unwrap();
    assert_eq!(mark.attempt, 2);
    let mut mock = MockExecutor::new();
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(1)
        .returning(|_, _, _, _| Ok(UnpackSummary::default()));
    mock.expect_stop().times(1).returning(|_| Ok(()));
    let live = Reattached {
        handle: handle(),
        plan: RunPlan::of(&spec),
    };
    let result = resume_with(
        &Fake::new(mock),
        &live,
        &spec,
        &mark,
        &log,
        CancellationToken::new(),
        &DriverOptions::default(),
    )
    .await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Success, "{:?}", result.error);
    let attempts: Vec<_> = result
        .attempts
        .iter()
        .map(|a| (a.number, a.status))
        .collect();
    assert_eq!(attempts, [(1, RunStatus::Error), (2, RunStatus::Success)]);
    let first = &result.attempts[0];
    assert_eq!(
        first.failure.as_ref().map(|f| f.kind),
        Some(FailureKind::EnvironmentLost)
    );
    assert_eq!(first.steps[0].status, StepStatus::Error);
    assert_eq!(result.attempts[1].steps, result.steps);
}

/// A run whose step failed, and whose runner is killed while the outputs
/// come back, is carried on to `failed` with that step's own failure:
/// the later step stays skipped and the outputs and stop still happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_after_a_failed_step_resumes_to_failed() {
    let out = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    let spec = spec(out.path(), &["broken", "after"]);

    // The first runner process: the first step exits 3, the second is
    // skipped, and the process is killed while the outputs come back.
    let mut mock = MockExecutor::new();
    mock.expect_start()
        .times(1)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(3)));
    let fake = Fake {
        hang_in_outputs: true,
        ..Fake::new(mock)
    };
    let entered = fake.entered.clone();
    let log = RunLog::create_resumable(&path).unwrap();
    let killed = tokio::spawn({
        let (spec, log) = (spec.clone(), log.clone());
        async move {
            run_with(
                &fake,
                &spec,
                &log,
                CancellationToken::new(),
                &DriverOptions::default(),
            )
            .await;
        }
    });
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("the outputs were never collected");
    assert!(log.flush(Duration::from_secs(10)).await);
    killed.abort();
    assert!(killed.await.unwrap_err().is_cancelled());
    drop(log);

    let (log, mark) = RunLog::resume(&path).unwrap();
    assert_eq!(mark.finished.len(), 2, "{mark:?}");
    assert_eq!(mark.finished[0].status, StepStatus::Failed);
    assert_eq!(mark.finished[1].status, StepStatus::Skipped);
    // The carrying-on runner runs no step: it brings the outputs back
    // and stops the environment.
    let mut mock = MockExecutor::new();
    mock.expect_command().times(0);
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(1)
        .returning(|_, _, _, _| Ok(UnpackSummary::default()));
    mock.expect_stop().times(1).returning(|_| Ok(()));
    let live = Reattached {
        handle: handle(),
        plan: RunPlan::of(&spec),
    };
    let result = resume_with(
        &Fake::new(mock),
        &live,
        &spec,
        &mark,
        &log,
        CancellationToken::new(),
        &DriverOptions::default(),
    )
    .await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Failed, "{}", result.to_json());
    assert_eq!(result.exit_code(), 1);
    assert_eq!(statuses(&result), [StepStatus::Failed, StepStatus::Skipped]);
    assert_eq!(result.steps[0].exit_code, Some(3));
    let failure = result.failure.as_ref().expect("the failed step's failure");
    assert_eq!(failure.kind, FailureKind::Step);
    assert!(failure.message.contains("broken"), "{}", failure.message);
}

/// Reading the plan back runs the environment's own tools, which a step
/// may have made hang: resume gives up after its deadline, naming why,
/// instead of waiting for the environment's own end.
#[tokio::test(start_paused = true)]
async fn a_plan_that_never_comes_back_refuses_the_resume_at_its_deadline() {
    let mut mock = MockExecutor::new();
    mock.expect_copy_out().times(0);
    let fake = Fake {
        hang_in_outputs: true,
        ..Fake::new(mock)
    };
    // The fake hangs in a copy of the handle's outputs folder: here, the
    // plan's folder.
    let mut handle = handle();
    handle.outputs_dir = format!("/.knotless/{}", executor_core::resume::PLAN_DIR);
    let began = tokio::time::Instant::now();
    let read = executor_core::resume::read_plan(&fake, &handle, "/.knotless", "digest");
    let err = tokio::time::timeout(executor_core::resume::PLAN_READ_TIMEOUT * 2, read)
        .await
        .expect("resume waited on past the plan's deadline")
        .unwrap_err();
    assert!(err.to_string().contains("did not come back"), "{err}");
    assert_eq!(began.elapsed(), executor_core::resume::PLAN_READ_TIMEOUT);
}

#[tokio::test]
async fn a_run_killed_in_an_always_step_after_a_failure_carries_that_step_on() {
    let out = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    let mut spec = spec(out.path(), &["broken", "test", "upload"]);
    spec.steps[2] = spec.steps[2].clone().always(true);

    // The first runner process: `broken` exits 3, `test` is skipped, and
    // the process is killed while `upload` runs.
    let mut mock = MockExecutor::new();
    mock.expect_start()
        .times(1)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(3)));
    let fake = Fake {
        hang_after_commands: Some(1),
        ..Fake::new(mock)
    };
    let entered = fake.entered.clone();
    let log = RunLog::create_resumable(&path).unwrap();
    let killed = tokio::spawn({
        let (spec, log) = (spec.clone(), log.clone());
        async move {
            run_with(
                &fake,
                &spec,
                &log,
                CancellationToken::new(),
                &DriverOptions::default(),
            )
            .await;
        }
    });
    tokio::time::timeout(Duration::from_secs(10), entered.notified())
        .await
        .expect("the always step never started");
    assert!(log.flush(Duration::from_secs(10)).await);
    killed.abort();
    assert!(killed.await.unwrap_err().is_cancelled());
    drop(log);

    let (log, mark) = RunLog::resume(&path).unwrap();
    assert_eq!(mark.finished.len(), 2, "{mark:?}");
    assert_eq!(mark.running.as_ref().map(|r| r.index), Some(2), "{mark:?}");
    let mut mock = MockExecutor::new();
    mock.expect_command()
        .withf(|_, step, _, _| step.name == "upload" && step.follow_from.is_some())
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(1)
        .returning(|_, _, _, _| Ok(UnpackSummary::default()));
    mock.expect_stop().times(1).returning(|_| Ok(()));
    let live = Reattached {
        handle: handle(),
        plan: RunPlan::of(&spec),
    };
    let result = resume_with(
        &Fake::new(mock),
        &live,
        &spec,
        &mark,
        &log,
        CancellationToken::new(),
        &DriverOptions::default(),
    )
    .await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Failed, "{}", result.to_json());
    assert_eq!(
        statuses(&result),
        [StepStatus::Failed, StepStatus::Skipped, StepStatus::Success]
    );
    assert_eq!(
        result.failure.as_ref().and_then(|f| f.step.as_deref()),
        Some("broken")
    );
}
