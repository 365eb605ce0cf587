//! The generic run driver: one implementation of a run's life for every backend.

use std::future::Future;
use std::time::{Duration, Instant};

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use crate::cache::{CacheResult, CacheStore};
use crate::result::manifest;
use crate::tar::{UnpackError, UnpackLimits};
use crate::{
    CommandOutcome, Executor, ExecutorError, RunHandle, RunLog, RunResult, RunSpec, RunStatus,
    StepCommand, StepResult, StepStatus,
};

/// How long an interrupted operation, and `stop`, may take before the
/// driver gives up on it.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// Options of [`run_with`].
#[derive(Debug, Clone)]
pub struct DriverOptions {
    /// How long an interrupted operation may take to wind down, and the
    /// limit of `stop`.
    pub grace: Duration,
    /// Where the run's caches live on the host; `None` skips them.
    pub caches: Option<CacheStore>,
}

impl Default for DriverOptions {
    fn default() -> Self {
        DriverOptions {
            grace: DEFAULT_GRACE,
            caches: None,
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
/// #   async fn outputs(&self, _: &executor_core::RunHandle, _: &std::path::Path) -> Result<executor_core::tar::UnpackSummary, executor_core::ExecutorError> { Ok(Default::default()) }
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
pub async fn run_with(
    executor: &dyn Executor,
    spec: &RunSpec,
    log: &RunLog,
    cancel: CancellationToken,
    options: &DriverOptions,
) -> RunResult {
    let started_at = OffsetDateTime::now_utc();
    let run_deadline = Instant::now() + spec.run_timeout;
    let mut result = RunResult {
        name: spec.name.clone(),
        runner: spec.runner.clone(),
        executor: executor.kind().to_string(),
        status: RunStatus::Success,
        error: None,
        started_at,
        finished_at: started_at,
        steps: Vec::new(),
        outputs: Vec::new(),
        refused: Vec::new(),
        caches: Vec::new(),
        phases: Default::default(),
    };
    // Before anything is printed: every line of the run is masked.
    log.mask(&spec.masker());
    let watch = Watch {
        cancel: &cancel,
        run_deadline,
        grace: options.grace,
    };

    if let Err(err) = spec.validate() {
        return finish(result, RunStatus::Error, Some(err.to_string()), spec, log).await;
    }

    log.line(&format!(
        "run {} on {} executor, runner {}",
        spec.name,
        executor.kind(),
        spec.runner
    ));
    let token = CancellationToken::new();
    let start_began = Instant::now();
    let started = watch
        .supervise(executor.start(spec, log, token.clone()), &token, None)
        .await;
    result.phases.start_ms = millis(start_began);
    let handle = match started {
        Supervised::Done(Ok(handle)) => {
            log.line(&format!(
                "environment ready ({})",
                seconds(result.phases.start_ms)
            ));
            handle
        }
        Supervised::Done(Err(err)) => {
            log.line(&format!("start failed: {err}"));
            return finish(
                result,
                RunStatus::Error,
                Some(format!("start: {err}")),
                spec,
                log,
            )
            .await;
        }
        Supervised::Interrupted(why, finished) => {
            if let Some(Ok(handle)) = finished {
                // start completed while being interrupted: it still needs stopping.
                stop_once(executor, &handle, log, options.grace, &mut result).await;
            }
            let msg = format!("{} while starting the environment", why.describe());
            log.line(&msg);
            return finish(result, why.run_status(), Some(msg), spec, log).await;
        }
    };

    result.caches = restore_caches(executor, &handle, spec, log, options, run_deadline).await;

    let mut status = RunStatus::Success;
    let mut error = None;
    let mut steps = spec.steps.iter();
    for step in steps.by_ref() {
        if let Some(why) = watch.already() {
            // Never start a step the run has no time or wish for.
            status = why.run_status();
            error = Some(format!("{} before step {}", why.describe(), step.name));
            log.line(error.as_deref().unwrap_or_default());
            result.steps.push(StepResult::skipped(&step.name));
            break;
        }
        let (step_result, ended) = run_step(executor, &handle, spec, step, log, &watch).await;
        result.steps.push(step_result);
        if let Some((run_status, message)) = ended {
            status = run_status;
            error = message;
            break;
        }
    }
    result
        .steps
        .extend(steps.map(|s| StepResult::skipped(&s.name)));

    if status == RunStatus::Success {
        save_caches(
            executor,
            &handle,
            spec,
            log,
            options,
            run_deadline,
            &mut result.caches,
        )
        .await;
    } else if !result.caches.is_empty() {
        log.line("caches not saved: the run did not succeed");
        for cache in &mut result.caches {
            cache
                .note
                .get_or_insert_with(|| "not saved: the run did not succeed".into());
        }
    }

    // Outputs, whatever happened to the steps.
    log.line("collecting outputs");
    let outputs_began = Instant::now();
    let collected = tokio::time::timeout(
        spec.outputs_timeout,
        executor.outputs(&handle, &spec.outputs),
    )
    .await;
    result.phases.outputs_ms = millis(outputs_began);
    match collected {
        Ok(Ok(summary)) => {
            log.line(&format!(
                "outputs collected ({})",
                seconds(result.phases.outputs_ms)
            ));
            for refused in &summary.refused {
                log.line(&format!(
                    "warning: output {:?} not brought back: {}",
                    refused.path, refused.reason
                ));
            }
            let unnamed = summary
                .refused_count
                .saturating_sub(summary.refused.len() as u64);
            if unnamed > 0 {
                log.line(&format!("warning: {unnamed} more outputs not brought back"));
            }
            result.refused = summary.refused;
        }
        Ok(Err(err)) => {
            log.line(&format!("collecting outputs failed: {err}"));
            note_error(&mut status, &mut error, format!("outputs: {err}"));
        }
        Err(_) => {
            let msg = format!("outputs: not collected within {:?}", spec.outputs_timeout);
            log.line(&msg);
            note_error(&mut status, &mut error, msg);
        }
    }

    stop_once(executor, &handle, log, options.grace, &mut result).await;
    if let Some(stop_err) = result.error.take() {
        note_error(&mut status, &mut error, stop_err);
    }
    finish(result, status, error, spec, log).await
}

fn folder_size(dir: &std::path::Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

fn millis(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX)
}

fn seconds(ms: u64) -> String {
    format!("{}.{:03}s", ms / 1000, ms % 1000)
}

/// Streams each cache's host copy in; a cold or failed cache is logged,
/// never fatal: a cache only saves time.
async fn restore_caches(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    log: &RunLog,
    options: &DriverOptions,
    deadline: Instant,
) -> Vec<CacheResult> {
    let mut results = Vec::new();
    for cache in &spec.caches {
        let path = cache.resolve(&handle.work_dir);
        let mut r = CacheResult {
            key: cache.key.clone(),
            path: path.clone(),
            ..CacheResult::default()
        };
        let Some(store) = &options.caches else {
            r.note = Some("no cache folder configured".into());
            results.push(r);
            continue;
        };
        let own = store.namespace(spec.trust);
        r.namespace = spec.trust;
        match own.restorable(&cache.key) {
            Ok(None) => {
                log.line(&format!(
                    "cache {}: cold (no host copy yet); the run goes on without it",
                    cache.key
                ));
                r.note = Some("cold: no host copy yet".into());
            }
            Ok(Some((dir, _guard, from))) => {
                r.restored_from = Some(from);
                let clock = Instant::now();
                let size = folder_size(&dir);
                match tokio::time::timeout_at(
                    deadline.into(),
                    executor.copy_in(handle, &dir, &path),
                )
                .await
                {
                    Ok(Ok(())) => {
                        r.hit = true;
                        r.size_in = size;
                        r.ms_in = millis(clock);
                        log.line(&format!(
                            "cache {}: restored {size} bytes into {path} in {} ms",
                            cache.key, r.ms_in
                        ));
                    }
                    Ok(Err(err)) => {
                        log.line(&format!(
                            "cache {}: restore failed, going on without it: {err}",
                            cache.key
                        ));
                        r.note = Some(format!("restore failed: {err}"));
                    }
                    Err(_) => r.note = Some("restore ran out of run time".into()),
                }
            }
            Err(err) => {
                log.line(&format!(
                    "cache {}: unreadable host copy, going on without it: {err}",
                    cache.key
                ));
                r.note = Some(format!("unreadable host copy: {err}"));
            }
        }
        results.push(r);
    }
    results
}

/// Streams each cache back into a fresh host folder and swaps it in only
/// when whole; too large, hostile or broken streams leave the old copy.
async fn save_caches(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    log: &RunLog,
    options: &DriverOptions,
    deadline: Instant,
    results: &mut [CacheResult],
) {
    let Some(store) = &options.caches else { return };
    for (cache, r) in spec.caches.iter().zip(results.iter_mut()) {
        let store = store.namespace(spec.trust);
        let pending = match store.begin_save(&cache.key) {
            Ok(p) => p,
            Err(err) => {
                r.note = Some(format!("not saved: {err}"));
                continue;
            }
        };
        let limits = UnpackLimits {
            max_bytes: store.max_bytes,
            ..UnpackLimits::default()
        };
        let clock = Instant::now();
        let copied = tokio::time::timeout_at(
            deadline.into(),
            executor.copy_out(handle, &r.path, pending.folder(), limits),
        )
        .await;
        // The copy's time, before the commit removes the copy it replaces:
        // that removal is the store's housekeeping, not bringing data back.
        let ms_out = millis(clock);
        let why = match copied {
            Ok(Ok(summary)) if !summary.is_whole() => {
                let first = summary
                    .refused
                    .first()
                    .map_or_else(String::new, |r| format!(": {:?} {}", r.path, r.reason));
                format!(
                    "not saved: {} entries refused{first}",
                    summary.refused_count
                )
            }
            Ok(Ok(summary)) => match store.commit(pending) {
                Ok(()) => {
                    r.saved = true;
                    r.size_out = summary.bytes;
                    r.ms_out = ms_out;
                    log.line(&format!(
                        "cache {}: saved {} bytes from {} in {} ms",
                        cache.key, summary.bytes, r.path, r.ms_out
                    ));
                    continue;
                }
                Err(err) => format!("not saved: {err}"),
            },
            Ok(Err(ExecutorError::Unpack(UnpackError::TooLarge { limit }))) => {
                format!("not saved: larger than the cache limit of {limit} bytes (--cache-max)")
            }
            Ok(Err(err)) => format!("not saved: {err}"),
            Err(_) => "not saved: ran out of run time".to_string(),
        };
        log.line(&format!(
            "warning: cache {}: {why}; the old copy stays",
            cache.key
        ));
        r.note = Some(why);
    }
}

/// Runs one step; the second value is `Some` when the run must end here.
async fn run_step(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    step: &crate::Step,
    log: &RunLog,
    watch: &Watch<'_>,
) -> (StepResult, Option<(RunStatus, Option<String>)>) {
    let command = StepCommand {
        name: step.name.clone(),
        script: step.script.clone(),
        env: handle
            .standard_env()
            .into_iter()
            .chain(spec.env.iter().cloned())
            .chain(step.env.iter().cloned())
            .collect(),
    };
    let started_at = OffsetDateTime::now_utc();
    let clock = Instant::now();
    log.step_started(&step.name);
    let token = CancellationToken::new();
    let step_deadline = Some(clock + spec.step_timeout);
    let outcome = watch
        .supervise(
            executor.command(handle, &command, log, token.clone()),
            &token,
            step_deadline,
        )
        .await;

    let (status, exit_code, error, ended) = match outcome {
        Supervised::Done(Ok(CommandOutcome::Exited { code: 0, .. })) => {
            (StepStatus::Success, Some(0), None, None)
        }
        Supervised::Done(Ok(CommandOutcome::Exited { code, reason })) => {
            let msg = match &reason {
                Some(reason) => format!("step {} exited {code}: {reason}", step.name),
                None => format!("step {} exited {code}", step.name),
            };
            (
                StepStatus::Failed,
                Some(code),
                reason,
                Some((RunStatus::Failed, Some(msg))),
            )
        }
        Supervised::Done(Ok(CommandOutcome::Interrupted)) => {
            // The backend reported an interrupt nobody asked for.
            let msg = format!("step {} was interrupted by the environment", step.name);
            (
                StepStatus::Error,
                None,
                Some(msg.clone()),
                Some((RunStatus::Error, Some(msg))),
            )
        }
        Supervised::Done(Err(err)) => {
            let msg = format!("step {}: {err}", step.name);
            (
                StepStatus::Error,
                None,
                Some(err.to_string()),
                Some((RunStatus::Error, Some(msg))),
            )
        }
        Supervised::Interrupted(why, finished) => {
            let mut msg = format!("step {}: {}", step.name, why.describe_for(spec));
            if finished.is_none() {
                msg.push_str(&format!("; the step did not stop within {:?}", watch.grace));
            }
            (
                why.step_status(),
                None,
                Some(msg.clone()),
                Some((why.run_status(), Some(msg))),
            )
        }
    };
    let took = clock.elapsed();
    log.step_finished(&step.name, status.as_str(), exit_code, took);
    let result = StepResult {
        name: step.name.clone(),
        status,
        exit_code,
        error,
        started_at: Some(started_at),
        finished_at: Some(OffsetDateTime::now_utc()),
        duration_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
    };
    (result, ended)
}

async fn stop_once(
    executor: &dyn Executor,
    handle: &RunHandle,
    log: &RunLog,
    grace: Duration,
    result: &mut RunResult,
) {
    log.line("stopping the environment");
    let began = Instant::now();
    let outcome = tokio::time::timeout(grace, executor.stop(handle)).await;
    result.phases.stop_ms = millis(began);
    let err = match outcome {
        Ok(Ok(())) => return,
        Ok(Err(err)) => format!("stop: {err}"),
        Err(_) => format!("stop: did not finish within {grace:?}"),
    };
    log.line(&err);
    tracing::error!(run = %handle.id, "{err}");
    result.error = Some(err);
}

/// An infrastructure failure after the steps makes a successful run an
/// error; on a run that already failed it is added to the message.
fn note_error(status: &mut RunStatus, error: &mut Option<String>, msg: String) {
    if *status == RunStatus::Success {
        *status = RunStatus::Error;
    }
    *error = Some(match error.take() {
        Some(first) => format!("{first}; {msg}"),
        None => msg,
    });
}

async fn finish(
    mut result: RunResult,
    status: RunStatus,
    error: Option<String>,
    spec: &RunSpec,
    log: &RunLog,
) -> RunResult {
    match manifest(&spec.outputs).await {
        Ok(files) => result.outputs = files,
        Err(err) => log.line(&format!("listing outputs failed: {err}")),
    }
    result.status = status;
    result.error = match (error, result.error.take()) {
        (Some(a), Some(b)) => Some(format!("{a}; {b}")),
        (a, b) => a.or(b),
    };
    if result.steps.is_empty() {
        result.steps = spec
            .steps
            .iter()
            .map(|s| StepResult::skipped(&s.name))
            .collect();
    }
    result.finished_at = OffsetDateTime::now_utc();
    result.mask(&spec.masker());
    log.line(&format!(
        "run {}: {}",
        result.name,
        serde_json::to_value(result.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default()
    ));
    result
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    StepTimeout,
    RunTimeout,
    Cancelled,
}

impl Why {
    fn describe(self) -> &'static str {
        match self {
            Why::StepTimeout => "step timeout",
            Why::RunTimeout => "run timeout",
            Why::Cancelled => "cancelled",
        }
    }
    fn describe_for(self, spec: &RunSpec) -> String {
        match self {
            Why::StepTimeout => format!("timed out after {:?} (step timeout)", spec.step_timeout),
            Why::RunTimeout => format!("timed out after {:?} (run timeout)", spec.run_timeout),
            Why::Cancelled => "cancelled".into(),
        }
    }
    fn step_status(self) -> StepStatus {
        match self {
            Why::StepTimeout | Why::RunTimeout => StepStatus::Timeout,
            Why::Cancelled => StepStatus::Cancelled,
        }
    }
    fn run_status(self) -> RunStatus {
        match self {
            Why::StepTimeout | Why::RunTimeout => RunStatus::Timeout,
            Why::Cancelled => RunStatus::Cancelled,
        }
    }
}

enum Supervised<T> {
    Done(T),
    /// Interrupted; the operation's own result if it wound down within the grace.
    Interrupted(Why, Option<T>),
}

struct Watch<'a> {
    cancel: &'a CancellationToken,
    run_deadline: Instant,
    grace: Duration,
}

impl Watch<'_> {
    /// Whether the run is already over before an operation begins.
    fn already(&self) -> Option<Why> {
        if self.cancel.is_cancelled() {
            Some(Why::Cancelled)
        } else if Instant::now() >= self.run_deadline {
            Some(Why::RunTimeout)
        } else {
            None
        }
    }

    /// Awaits `op`; on a deadline or cancellation fires `token` and gives
    /// `op` the grace period to return.
    async fn supervise<T>(
        &self,
        op: impl Future<Output = T>,
        token: &CancellationToken,
        step_deadline: Option<Instant>,
    ) -> Supervised<T> {
        tokio::pin!(op);
        let far = self.run_deadline;
        let step_deadline = step_deadline.unwrap_or(far);
        let why = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Why::Cancelled,
            out = &mut op => return Supervised::Done(out),
            _ = tokio::time::sleep_until(self.run_deadline.into()) => Why::RunTimeout,
            _ = tokio::time::sleep_until(step_deadline.into()), if step_deadline < far => Why::StepTimeout,
        };
        token.cancel();
        let finished = tokio::time::timeout(self.grace, op).await.ok();
        Supervised::Interrupted(why, finished)
    }
}
