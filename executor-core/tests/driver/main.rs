//! The run driver through every path, against the mockall fake of the
//! trait: stop runs exactly once whenever start succeeded, and the result
//! says what happened.

mod flow;
mod lifecycle;
mod resume;
mod retries;
mod steps;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use executor_core::tar::{UnpackLimits, UnpackSummary};
use executor_core::MockExecutor;
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
    /// Only the first command runs until interrupted.
    hang_in_first_command: bool,
    /// Commands from this many on run until interrupted.
    hang_after_commands: Option<usize>,
    commands: std::sync::atomic::AtomicUsize,
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
        let before = self
            .commands
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.hang_in_command
            || (self.hang_in_first_command && before == 0)
            || self.hang_after_commands.is_some_and(|n| before >= n)
        {
            self.entered.notify_one();
            interrupt.cancelled().await;
        }
        self.mock.command(run, step, log, interrupt).await
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
        if self.hang_in_outputs && path == run.outputs_dir {
            self.entered.notify_one();
            std::future::pending::<()>().await;
        }
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
            hang_in_first_command: false,
            hang_after_commands: None,
            commands: std::sync::atomic::AtomicUsize::new(0),
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

/// Where [`handle`]'s outputs are: `copy_out` of this path is the outputs coming back.
const OUTPUTS: &str = "/outputs";

/// A mock whose start succeeds and whose outputs and stop each must be called once.
fn started_mock() -> MockExecutor {
    let mut mock = MockExecutor::new();
    mock.expect_start()
        .times(1)
        .returning(|_, _, _| Ok(handle()));
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(1)
        .returning(|_, _, _, _| Ok(UnpackSummary::default()));
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

/// Every result the driver writes must hold to the published schema.
fn assert_valid_result(result: &RunResult) {
    let schema: serde_json::Value =
        serde_json::from_str(executor_core::RESULT_SCHEMA).expect("the schema is JSON");
    let validator = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .expect("the schema compiles");
    let value = serde_json::to_value(result).expect("a result serializes");
    let errors: Vec<String> = validator
        .iter_errors(&value)
        .map(|e| e.to_string())
        .collect();
    assert!(
        errors.is_empty(),
        "result breaks the schema: {errors:?}\n{}",
        result.to_json()
    );
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
    mock.expect_copy_out()
        .withf(|_, path, _, _| path == OUTPUTS)
        .times(times)
        .returning(|_, _, _, _| Ok(UnpackSummary::default()));
    mock.expect_stop().times(times).returning(|_| Ok(()));
    mock
}
