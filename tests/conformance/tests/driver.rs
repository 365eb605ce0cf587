//! The run driver through every path, against the mockall fake of the
//! trait: stop runs exactly once whenever start succeeded, and the result
//! says what happened.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use executor_conformance::fakes::MockExecutor;
use executor_conformance::fixture::assert_valid_result;
use executor_core::tar::{UnpackLimits, UnpackSummary};
use executor_core::{
    run, run_with, CleanupReport, CleanupScope, CommandOutcome, DriverOptions, Executor,
    ExecutorError, RunHandle, RunLog, RunResult, RunSpec, RunStatus, Step, StepCommand, StepStatus,
};
use mockall::predicate::always;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The mock records and answers every call; this wrapper adds what a
/// synchronous mock cannot do: a command that runs until interrupted.
struct Fake {
    mock: MockExecutor,
    hang_in_command: bool,
    hang_in_outputs: bool,
    /// A start that finishes only once interrupted, as one that was
    /// creating the environment when the run was cancelled.
    start_until_interrupted: bool,
    entered: Arc<Notify>,
}

#[async_trait]
impl Executor for Fake {
    fn kind(&self) -> &str {
        "fake"
    }
    async fn start(
        &self,
        run: &RunSpec,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<RunHandle, ExecutorError> {
        if self.start_until_interrupted {
            self.entered.notify_one();
            interrupt.cancelled().await;
        }
        self.mock.start(run, log, interrupt).await
    }
    async fn command(
        &self,
        run: &RunHandle,
        step: &StepCommand,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<CommandOutcome, ExecutorError> {
        if self.hang_in_command {
            self.entered.notify_one();
            interrupt.cancelled().await;
        }
        self.mock.command(run, step, log, interrupt).await
    }
    async fn outputs(&self, run: &RunHandle, dest: &Path) -> Result<UnpackSummary, ExecutorError> {
        if self.hang_in_outputs {
            std::future::pending::<()>().await;
        }
        self.mock.outputs(run, dest).await
    }
    async fn copy_in(&self, run: &RunHandle, src: &Path, path: &str) -> Result<(), ExecutorError> {
        self.mock.copy_in(run, src, path).await
    }
    async fn copy_out(
        &self,
        run: &RunHandle,
        path: &str,
        dest: &Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        self.mock.copy_out(run, path, dest, limits).await
    }
    async fn stop(&self, run: &RunHandle) -> Result<(), ExecutorError> {
        self.mock.stop(run).await
    }
    async fn cleanup(
        &self,
        runner: &str,
        scope: CleanupScope,
    ) -> Result<CleanupReport, ExecutorError> {
        self.mock.cleanup(runner, scope).await
    }
}

impl Fake {
    /// The mock alone: every call answered at once.
    fn new(mock: MockExecutor) -> Self {
        Fake {
            mock,
            hang_in_command: false,
            hang_in_outputs: false,
            start_until_interrupted: false,
            entered: Arc::new(Notify::new()),
        }
    }
}

fn handle() -> RunHandle {
    RunHandle::in_container("fake-1")
}

fn spec(outputs: &Path, steps: &[&str]) -> RunSpec {
    let mut spec = RunSpec::new("driver", "did:plc:driver", ".", outputs)
        .timeouts(Duration::from_secs(60), Duration::from_secs(10));
    for name in steps {
        spec = spec.step(Step::new(*name, format!("run {name}")));
    }
    spec
}

/// A mock whose start succeeds and whose outputs and stop each must be called once.
fn started_mock() -> MockExecutor {
    let mut mock = MockExecutor::new();
    mock.expect_start()
        .times(1)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_outputs()
        .times(1)
        .returning(|_, _| Ok(UnpackSummary::default()));
    mock.expect_stop()
        .with(always())
        .times(1)
        .returning(|_| Ok(()));
    mock
}

async fn drive(
    mock: MockExecutor,
    hang: bool,
    spec: &RunSpec,
    cancel: CancellationToken,
) -> RunResult {
    let fake = Fake {
        hang_in_command: hang,
        ..Fake::new(mock)
    };
    let result = run(&fake, spec, &RunLog::discard(), cancel).await;
    assert_valid_result(&result);
    result
    // Dropping `fake` here verifies every `times(..)` expectation.
}

fn statuses(result: &RunResult) -> Vec<StepStatus> {
    result.steps.iter().map(|s| s.status).collect()
}

#[tokio::test]
async fn success() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command()
        .times(2)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    let result = drive(
        mock,
        false,
        &spec(out.path(), &["a", "b"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(result.error, None);
    assert_eq!(
        statuses(&result),
        [StepStatus::Success, StepStatus::Success]
    );
    assert_eq!(result.executor, "fake");
}

#[tokio::test]
async fn steps_see_standard_folders_then_run_then_step_variables() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command()
        .withf(|_, step, _, _| {
            let keys: Vec<&str> = step.env.iter().map(|(k, _)| k.as_str()).collect();
            keys == ["WORK_DIR", "STEPS_DIR", "OUTPUTS_DIR", "R", "S"]
                && step.argv() == ["sh", "-ec", "run a"]
        })
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    let mut spec = spec(out.path(), &["a"]).env("R", "1");
    spec.steps[0] = spec.steps[0].clone().env("S", "2");
    let result = drive(mock, false, &spec, CancellationToken::new()).await;
    assert_eq!(result.status, RunStatus::Success);
}

#[tokio::test]
async fn step_failure_skips_the_rest_and_still_collects_outputs() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    let mut seq = mockall::Sequence::new();
    mock.expect_command()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| Ok(CommandOutcome::exited(0)));
    mock.expect_command()
        .times(1)
        .in_sequence(&mut seq)
        .returning(|_, _, _, _| {
            Ok(CommandOutcome::Exited {
                code: 137,
                reason: Some("OOMKilled".into()),
            })
        });
    let result = drive(
        mock,
        false,
        &spec(out.path(), &["a", "b", "c"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(
        statuses(&result),
        [StepStatus::Success, StepStatus::Failed, StepStatus::Skipped]
    );
    assert_eq!(result.steps[1].exit_code, Some(137));
    assert_eq!(result.steps[1].error.as_deref(), Some("OOMKilled"));
    assert_eq!(
        result.error.as_deref(),
        Some("step b exited 137: OOMKilled")
    );
}

#[tokio::test(start_paused = true)]
async fn step_timeout() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command().times(1).returning(|_, _, _, token| {
        assert!(
            token.is_cancelled(),
            "the interrupt token must fire on a step timeout"
        );
        Ok(CommandOutcome::Interrupted)
    });
    let result = drive(
        mock,
        true,
        &spec(out.path(), &["slow", "next"]),
        CancellationToken::new(),
    )
    .await;
    assert_eq!(result.status, RunStatus::Timeout);
    assert_eq!(
        statuses(&result),
        [StepStatus::Timeout, StepStatus::Skipped]
    );
    assert_eq!(result.steps[0].exit_code, None);
    assert!(
        result
            .error
            .as_deref()
            .unwrap_or("")
            .contains("step timeout"),
        "{:?}",
        result.error
    );
}

#[tokio::test(start_paused = true)]
async fn run_timeout() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command()
        .times(1)
        .returning(|_, _, _, _| Ok(CommandOutcome::Interrupted));
    let mut spec = spec(out.path(), &["slow", "next"]);
    spec.run_timeout = Duration::from_secs(5);
    spec.step_timeout = Duration::from_secs(50);
    let result = drive(mock, true, &spec, CancellationToken::new()).await;
    assert_eq!(result.status, RunStatus::Timeout);
    assert_eq!(
        statuses(&result),
        [StepStatus::Timeout, StepStatus::Skipped]
    );
    assert!(
        result
            .error
            .as_deref()
            .unwrap_or("")
            .contains("run timeout"),
        "{:?}",
        result.error
    );
}

/// A command that never returns, even when interrupted.
struct IgnoresInterrupt(MockExecutor);

#[async_trait]
impl Executor for IgnoresInterrupt {
    fn kind(&self) -> &str {
        "fake"
    }
    async fn start(
        &self,
        r: &RunSpec,
        l: &RunLog,
        t: CancellationToken,
    ) -> Result<RunHandle, ExecutorError> {
        self.0.start(r, l, t).await
    }
    async fn command(
        &self,
        _: &RunHandle,
        _: &StepCommand,
        _: &RunLog,
        _: CancellationToken,
    ) -> Result<CommandOutcome, ExecutorError> {
        std::future::pending().await
    }
    async fn outputs(&self, r: &RunHandle, d: &Path) -> Result<UnpackSummary, ExecutorError> {
        self.0.outputs(r, d).await
    }
    async fn copy_in(&self, r: &RunHandle, s: &Path, p: &str) -> Result<(), ExecutorError> {
        self.0.copy_in(r, s, p).await
    }
    async fn copy_out(
        &self,
        r: &RunHandle,
        p: &str,
        d: &Path,
        l: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        self.0.copy_out(r, p, d, l).await
    }
    async fn stop(&self, r: &RunHandle) -> Result<(), ExecutorError> {
        self.0.stop(r).await
    }
    async fn cleanup(&self, r: &str, s: CleanupScope) -> Result<CleanupReport, ExecutorError> {
        self.0.cleanup(r, s).await
    }
}

#[tokio::test(start_paused = true)]
async fn step_that_ignores_its_interrupt_is_abandoned_after_the_grace() {
    let out = tempfile::tempdir().unwrap();
    let fake = IgnoresInterrupt(started_mock());
    let result = run(
        &fake,
        &spec(out.path(), &["stuck"]),
        &RunLog::discard(),
        CancellationToken::new(),
    )
    .await;
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Timeout);
    assert_eq!(statuses(&result), [StepStatus::Timeout]);
    assert!(
        result
            .error
            .as_deref()
            .unwrap_or("")
            .contains("did not stop within"),
        "{:?}",
        result.error
    );
}

#[tokio::test]
async fn cancel_mid_step() {
    let out = tempfile::tempdir().unwrap();
    let mut mock = started_mock();
    mock.expect_command().times(1).returning(|_, _, _, token| {
        assert!(token.is_cancelled());
        Ok(CommandOutcome::Interrupted)
    });
    let fake = Fake {
        hang_in_command: true,
        ..Fake::new(mock)
    };
    let cancel = CancellationToken::new();
    let spec = spec(out.path(), &["a", "b"]);
    let canceller = async {
        fake.entered.notified().await;
        cancel.cancel();
    };
    let log = RunLog::discard();
    let (result, ()) = tokio::join!(run(&fake, &spec, &log, cancel.clone()), canceller);
    assert_valid_result(&result);
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(
        statuses(&result),
        [StepStatus::Cancelled, StepStatus::Skipped]
    );
}

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
    mock.expect_outputs().times(0);
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
    mock.expect_outputs().times(1).returning(|_, _| {
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
    mock.expect_outputs().times(0);
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
    assert_eq!(result.status, RunStatus::Error);
    assert_eq!(
        result.error.as_deref(),
        Some("outputs: not collected within 100ms")
    );
    // What ended it is the outputs timeout, named in the record.
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, executor_core::FailureKind::Unreachable);
    assert_eq!(failure.step, None);
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
    mock.expect_outputs()
        .times(1)
        .returning(|_, _| Ok(UnpackSummary::default()));
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
    mock.expect_outputs()
        .times(1)
        .returning(|_, _| Ok(UnpackSummary::default()));
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
    mock.expect_outputs().times(0);
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
    mock.expect_outputs()
        .times(1)
        .returning(|_, _| Ok(UnpackSummary::default()));
    mock.expect_stop().times(1).returning(|_| Ok(()));
    let result = drive(mock, false, &spec(out.path(), &["a"]), cancel).await;
    // No step starts once the run is cancelled, but outputs and stop still run.
    assert_eq!(result.status, RunStatus::Cancelled);
    assert_eq!(statuses(&result), [StepStatus::Skipped]);
    assert_eq!(result.error.as_deref(), Some("cancelled before step a"));
}

/// Options that retry up to `n` times with a pause too short to matter.
fn retrying(n: u32) -> DriverOptions {
    DriverOptions {
        retry: executor_core::RetryPolicy {
            max_retries: n,
            backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(1),
        },
        ..DriverOptions::default()
    }
}

async fn drive_with(mock: MockExecutor, spec: &RunSpec, options: &DriverOptions) -> RunResult {
    let fake = Fake::new(mock);
    let result = run_with(
        &fake,
        spec,
        &RunLog::discard(),
        CancellationToken::new(),
        options,
    )
    .await;
    assert_valid_result(&result);
    result
}

/// A mock started `times` times, each attempt collecting outputs and stopping.
fn started_mock_times(times: usize) -> MockExecutor {
    let mut mock = MockExecutor::new();
    mock.expect_start()
        .times(times)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_outputs()
        .times(times)
        .returning(|_, _| Ok(UnpackSummary::default()));
    mock.expect_stop().times(times).returning(|_| Ok(()));
    mock
}

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
            "ready 2",
            "a 2",
            "a 2 success",
            "b 2",
            "b 2 success",
            "finished success",
        ]
    );
}
