//! The generic run driver: one implementation of a run's life for every backend.

mod attempt;
mod caches;
mod outputs;
mod record;
mod resume;
mod steps;
mod supervise;

pub use resume::resume_with;

use std::path::Path;
use std::time::{Duration, Instant};

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use self::attempt::{refused, run_attempt, AttemptRecord};
use self::supervise::Watch;
use crate::cache::CacheStore;
use crate::events::Event;
use crate::journal::Journal;
use crate::result::manifest;
use crate::tar::UnpackLimits;
use crate::{Attempt, Executor, Failure, RetryPolicy, RunLog, RunResult, RunSpec, RunStatus};

/// How long an interrupted operation, and `stop`, may take before the
/// driver gives up on it.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// Options of [`run_with`].
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// How long an interrupted operation may take to wind down.
    pub grace: Duration,
    /// How long `stop` may take, retries of an unreachable engine
    /// included, before the environment is left to the journal (or, with
    /// none, to cleanup at its expiry).
    pub stop_timeout: Duration,
    /// Where environments that `stop` could not remove are written, for
    /// the next run or cleanup to remove ([`Journal::sweep`]).
    pub journal: Option<Journal>,
    /// Where the run's caches live on the host; `None` skips them.
    pub caches: Option<CacheStore>,
    /// When a failed run is run again; by default never.
    pub retry: RetryPolicy,
    /// The limits of the outputs folder coming back (size, entries); the
    /// bytes and entries past them are refused, and the run says so.
    pub output_limits: UnpackLimits,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            grace: DEFAULT_GRACE,
            stop_timeout: DEFAULT_GRACE,
            journal: None,
            caches: None,
            retry: RetryPolicy::default(),
            output_limits: UnpackLimits::default(),
        }
    }
}

/// Runs `spec` on `executor` with default options; see [`run_with`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// # struct Nothing;
/// # #[async_trait::async_trait]
/// # impl executor_core::Executor for Nothing {
/// #   fn kind(&self) -> &str { "nothing" }
/// #   async fn start(&self, _: &executor_core::RunSpec, _: &executor_core::RunLog, _: tokio_util::sync::CancellationToken) -> Result<executor_core::RunHandle, executor_core::ExecutorError> { Ok(executor_core::RunHandle::in_container("x")) }
/// #   async fn command(&self, _: &executor_core::RunHandle, _: &executor_core::StepCommand, _: &executor_core::RunLog, _: tokio_util::sync::CancellationToken) -> Result<executor_core::CommandOutcome, executor_core::ExecutorError> { Ok(executor_core::CommandOutcome::exited(0)) }
/// #   async fn copy_in(&self, _: &executor_core::RunHandle, _: &std::path::Path, _: &str) -> Result<(), executor_core::ExecutorError> { Ok(()) }
/// #   async fn copy_out(&self, _: &executor_core::RunHandle, _: &str, _: &std::path::Path, _: executor_core::tar::UnpackLimits) -> Result<executor_core::tar::UnpackSummary, executor_core::ExecutorError> { Ok(Default::default()) }
/// #   async fn stop(&self, _: &executor_core::RunHandle) -> Result<(), executor_core::ExecutorError> { Ok(()) }
/// #   async fn cleanup(&self, _: &str, _: executor_core::CleanupScope) -> Result<executor_core::CleanupReport, executor_core::ExecutorError> { Ok(Default::default()) }
/// # }
/// use executor_core::{run, RunLog, RunSpec, RunStatus, Step};
/// use tokio_util::sync::CancellationToken;
///
/// let out = tempfile::tempdir().unwrap();
/// let spec = RunSpec::new("demo", "did:plc:runner", ".", out.path())
///     .step(Step::new("hello", "echo hello"));
/// let result = run(&Nothing, &spec, &RunLog::discard(), CancellationToken::new()).await;
/// assert_eq!(result.status, RunStatus::Success);
/// # }
/// ```
pub async fn run(
    executor: &dyn Executor,
    spec: &RunSpec,
    log: &RunLog,
    cancel: CancellationToken,
) -> RunResult {
    run_with(executor, spec, log, cancel, &DriverOptions::default()).await
}

/// Runs `spec` on `executor`: start, every step in order until one does not
/// succeed, outputs, stop. Returns the result; never panics on backend
/// failures and never skips `stop` once `start` succeeded.
///
/// Step timeout, run timeout and `cancel` all work the same way: the
/// driver fires the running operation's interrupt token, gives it
/// `options.grace` to kill its processes and return, and records the step
/// as `timeout` or `cancelled`. Outputs are collected after a failed,
/// timed-out or cancelled step too, since that is when they matter most.
///
/// A run whose failure is retryable (see [`RetryPolicy`]) is run again
/// from the start in a fresh environment, its outputs folder emptied
/// first; the run timeout covers every attempt. Caches are saved only by
/// an attempt whose steps all succeeded.
pub async fn run_with(
    executor: &dyn Executor,
    spec: &RunSpec,
    log: &RunLog,
    cancel: CancellationToken,
    options: &DriverOptions,
) -> RunResult {
    // Every call that waits out an outage says so in this run's log.
    crate::outage::telling(log.clone(), drive(executor, spec, log, cancel, options)).await
}

/// Why a failure ends the run although retries were asked for.
fn why_not_retried(failure: &Failure, none_left: bool) -> String {
    if none_left && failure.retryable {
        return format!("{} failure, and no attempt is left", failure.kind);
    }
    let why = match failure.kind {
        crate::FailureKind::Step => {
            "a step failed, and would only fail again (its side effects twice)"
        }
        crate::FailureKind::Timeout => "a timeout would only come again",
        crate::FailureKind::Cancelled => "the run was cancelled",
        crate::FailureKind::Oom => "the step ran out of memory, and would again",
        crate::FailureKind::Input => "the input would be refused again",
        crate::FailureKind::Internal => {
            "the environment answered for it, and a step can cause that"
        }
        _ => "it is not one a fresh attempt can fix",
    };
    format!("{} failure: {why}", failure.kind)
}

async fn drive(
    executor: &dyn Executor,
    spec: &RunSpec,
    log: &RunLog,
    cancel: CancellationToken,
    options: &DriverOptions,
) -> RunResult {
    let started_at = OffsetDateTime::now_utc();
    // Before anything is printed: every line of the run is masked.
    log.mask(&spec.masker());
    let watch = Watch {
        cancel: &cancel,
        run_deadline: Instant::now() + spec.run_timeout,
        grace: options.grace,
    };
    if let Err(err) = executor.check(spec) {
        return finish(
            executor,
            spec,
            log,
            started_at,
            Vec::new(),
            (1, vec![refused(spec, &err)]),
            None,
        )
        .await;
    }
    log.emit(Event::RunStarted {
        at: started_at,
        name: spec.name.clone(),
        runner: spec.runner.clone(),
        executor: executor.kind().to_string(),
    });
    let policy = options.retry;
    let mut attempts: Vec<AttemptRecord> = Vec::new();
    let mut after_all = None;
    for number in 1u32.. {
        if policy.max_retries > 0 {
            log.line(&format!(
                "attempt {number} of {}",
                policy.max_retries.saturating_add(1)
            ));
        }
        let record = run_attempt(executor, spec, log, &watch, options, number).await;
        record.tell(log, number);
        let again = record
            .failure
            .as_ref()
            .filter(|f| policy.retries_after(f, number))
            .cloned();
        if let (None, Some(failure), true) = (&again, &record.failure, policy.max_retries > 0) {
            log.line(&format!(
                "not retrying: {}",
                why_not_retried(failure, number > policy.max_retries)
            ));
        }
        attempts.push(record);
        let Some(failure) = again else { break };
        let pause = policy.pause_before(number);
        log.line(&format!(
            "attempt {number} failed ({}: {}); a fresh attempt may not, so retrying in {:.1}s",
            failure.kind,
            failure.message,
            pause.as_secs_f64()
        ));
        if let Some(why) = watch.wait(pause).await {
            let msg = format!("{} while waiting to retry", why.describe());
            log.line(&msg);
            after_all = Some(Failure::new(why.kind(), msg));
            break;
        }
        if let Err(err) = empty_folder(&spec.outputs) {
            let msg = format!("not retrying: the outputs folder could not be emptied: {err}");
            log.line(&msg);
            break;
        }
    }
    finish(
        executor,
        spec,
        log,
        started_at,
        Vec::new(),
        (1, attempts),
        after_all,
    )
    .await
}

/// Removes everything in `dir`, never following a link out of it.
fn empty_folder(dir: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    for entry in entries {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The result: the last attempt described at the top level, every attempt
/// kept: `earlier` as an earlier runner process recorded them, then
/// `attempts` numbered from `first`; `after_all` is a failure that came
/// between attempts.
async fn finish(
    executor: &dyn Executor,
    spec: &RunSpec,
    log: &RunLog,
    started_at: OffsetDateTime,
    earlier: Vec<Attempt>,
    (first, attempts): (u32, Vec<AttemptRecord>),
    after_all: Option<Failure>,
) -> RunResult {
    let outputs = match manifest(&spec.outputs).await {
        Ok(files) => files,
        Err(err) => {
            log.line(&format!("listing outputs failed: {err}"));
            Vec::new()
        }
    };
    let mut result = RunResult {
        name: spec.name.clone(),
        runner: spec.runner.clone(),
        executor: executor.kind().to_string(),
        status: RunStatus::Success,
        error: None,
        failure: None,
        started_at,
        finished_at: OffsetDateTime::now_utc(),
        steps: Vec::new(),
        outputs,
        refused: Vec::new(),
        caches: Vec::new(),
        phases: Default::default(),
        attempts: earlier,
    };
    for (number, record) in (first..).zip(attempts) {
        result.attempts.push(record.attempt(number));
        result.failure = record.failure;
        result.error = record.error;
        result.steps = record.steps;
        result.phases = record.phases;
        result.caches = record.caches;
        result.refused = record.refused;
    }
    if let Some(failure) = after_all {
        result.error = Some(match result.error.take() {
            Some(last) => format!("{}; the last attempt: {last}", failure.message),
            None => failure.message.clone(),
        });
        result.failure = Some(failure);
    }
    if let Some(failure) = &result.failure {
        result.status = failure.kind.run_status();
    }
    result.mask(&spec.masker());
    summarise(log, &result);
    log.emit(Event::RunFinished {
        at: result.finished_at,
        result: Box::new(result.clone()),
    });
    result
}

/// The run's last lines before its end: each step, how it ended and how
/// long it took, skipped ones too, so the end of a long log says what
/// happened without a search.
fn summarise(log: &RunLog, result: &RunResult) {
    if result.steps.is_empty() {
        return;
    }
    let width = result
        .steps
        .iter()
        .map(|s| s.name.chars().count())
        .max()
        .unwrap_or(0)
        .min(40);
    log.line("summary:");
    for step in &result.steps {
        let mut words = step.status.as_str().to_string();
        if step.status != crate::StepStatus::Skipped {
            let secs = step.duration_ms as f64 / 1000.0;
            match step.exit_code {
                Some(code) if code != 0 => words.push_str(&format!(" (exit {code}, {secs:.1}s)")),
                _ => words.push_str(&format!(" ({secs:.1}s)")),
            }
        }
        log.line(&format!("  {:<width$}  {words}", step.name));
    }
}
