//! One attempt of a run: start, caches in, every step, caches out,
//! outputs, stop.

use std::time::Instant;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::caches::{restore_caches, save_caches};
use super::millis;
use super::supervise::{Supervised, Watch, Why};
use crate::cache::CacheResult;
use crate::detached::Offsets;
use crate::events::Event;
use crate::journal::Leftover;
use crate::tar::RefusedEntry;
use crate::{
    Attempt, CommandOutcome, DriverOptions, Executor, ExecutorError, Failure, FailureKind, Phases,
    RunHandle, RunLog, RunSpec, RunStatus, StepCommand, StepResult, StepStatus,
};

/// What one attempt did.
pub(super) struct AttemptRecord {
    /// The first failure: its kind, step and words.
    pub(super) failure: Option<Failure>,
    /// Every failure's words: the first, then what failed after it
    /// (outputs, stop), for the result's `error`.
    pub(super) error: Option<String>,
    pub(super) started_at: OffsetDateTime,
    pub(super) finished_at: OffsetDateTime,
    pub(super) steps: Vec<StepResult>,
    pub(super) phases: Phases,
    pub(super) caches: Vec<CacheResult>,
    pub(super) refused: Vec<RefusedEntry>,
}

impl AttemptRecord {
    pub(super) fn new(spec: &RunSpec) -> Self {
        let now = OffsetDateTime::now_utc();
        AttemptRecord {
            failure: None,
            error: None,
            started_at: now,
            finished_at: now,
            steps: Vec::new(),
            phases: Phases::default(),
            caches: Vec::new(),
            refused: Vec::new(),
        }
        .with_steps_skipped(spec, 0)
    }

    /// Every step from `from` on recorded as skipped.
    pub(super) fn with_steps_skipped(mut self, spec: &RunSpec, from: usize) -> Self {
        self.steps.truncate(from);
        self.steps.extend(
            spec.steps
                .iter()
                .skip(from)
                .map(|s| StepResult::skipped(&s.name)),
        );
        self
    }

    /// Adds a failure: the first one is the attempt's (the same object as
    /// its step's), later ones (outputs, stop) add their words to `error`.
    pub(super) fn note(&mut self, failure: Failure) {
        self.error = Some(match self.error.take() {
            Some(first) => format!("{first}; {}", failure.message),
            None => failure.message.clone(),
        });
        self.failure.get_or_insert(failure);
    }

    pub(super) fn ended(mut self) -> Self {
        self.finished_at = OffsetDateTime::now_utc();
        self
    }

    /// The result's record of this attempt, numbered `number`.
    pub(super) fn attempt(&self, number: u32) -> Attempt {
        Attempt {
            number,
            status: self
                .failure
                .as_ref()
                .map_or(RunStatus::Success, |f| f.kind.run_status()),
            failure: self.failure.clone(),
            started_at: self.started_at,
            finished_at: self.finished_at,
            steps: self.steps.clone(),
            phases: self.phases,
        }
    }

    /// Tells `log` that this attempt, numbered `number`, ended: a runner
    /// process that carries the run on after this one keeps it
    /// ([`Mark::earlier`](crate::resume::Mark::earlier)).
    pub(super) fn tell(&self, log: &RunLog, number: u32) {
        log.emit(Event::AttemptFinished {
            at: self.finished_at,
            record: Box::new(self.attempt(number)),
        });
    }
}

/// Runs one attempt of `spec` on `executor`; never skips `stop` once
/// `start` succeeded.
pub(super) async fn run_attempt(
    executor: &dyn Executor,
    spec: &RunSpec,
    log: &RunLog,
    watch: &Watch<'_>,
    options: &DriverOptions,
    attempt: u32,
) -> AttemptRecord {
    let mut record = AttemptRecord::new(spec);
    let token = CancellationToken::new();
    let start_began = Instant::now();
    let started = watch
        .supervise(executor.start(spec, log, token.clone()), &token, None)
        .await;
    record.phases.start_ms = millis(start_began);
    let handle = match started {
        Supervised::Done(Ok(handle)) => {
            log.emit(Event::EnvironmentReady {
                at: OffsetDateTime::now_utc(),
                attempt,
                start_ms: record.phases.start_ms,
                environment: handle.id.clone(),
            });
            handle
        }
        Supervised::Done(Err(err)) => {
            log.line(&format!("start failed: {err}"));
            record.note(err.failure(format!("start: {err}")));
            return record.ended();
        }
        Supervised::Interrupted(why, finished) => {
            if let Some(Ok(handle)) = finished {
                // start completed while being interrupted: it still needs stopping.
                stop_once(executor, &handle, spec, log, options, &mut record).await;
            }
            let msg = format!("{} while starting the environment", why.describe());
            log.line(&msg);
            record.note(Failure::new(why.kind(), msg));
            return record.ended();
        }
    };

    record.caches = restore_caches(executor, &handle, spec, log, options, watch.run_deadline).await;

    record.steps.clear();
    let steps = Steps {
        attempt,
        from: 0,
        resumed: None,
    };
    run_steps(executor, &handle, spec, log, watch, steps, &mut record).await;
    wind_up(executor, &handle, spec, log, options, watch, &mut record).await;
    record.ended()
}

/// Where [`run_steps`] begins.
pub(super) struct Steps {
    pub(super) attempt: u32,
    /// The index of the first step to run; those before it are in the record.
    pub(super) from: usize,
    /// Set when that step may have been started by an earlier runner
    /// process.
    pub(super) resumed: Option<Resumed>,
}

/// A step an earlier runner process may have started.
#[derive(Clone, Copy)]
pub(super) struct Resumed {
    /// What its log holds of the step's streams.
    pub(super) from: Offsets,
    pub(super) started_at: OffsetDateTime,
    /// Whether the log told its start: else the runner was stopped
    /// between two steps, and the backend finds whether it started.
    pub(super) announced: bool,
}

/// Runs `spec`'s steps from `steps.from` on, in order. After a step fails
/// (and did not [continue on error](crate::Step::continue_on_error)) only
/// the [`always`](crate::Step::always) steps run; after a failure that
/// leaves no environment or no time (an error of the backend, a cancel,
/// the run's timeout) none do. Every step that did not run is recorded as
/// skipped.
pub(super) async fn run_steps(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    log: &RunLog,
    watch: &Watch<'_>,
    steps: Steps,
    record: &mut AttemptRecord,
) {
    let mut resumed = steps.resumed;
    // A resumed run's earlier failure is in its record already.
    let mut failed = record.failure.is_some();
    for (index, step) in spec.steps.iter().enumerate().skip(steps.from) {
        if let Some(why) = watch.already() {
            // Never start a step the run has no time or wish for.
            let msg = format!("{} before step {}", why.describe(), step.name);
            log.line(&msg);
            record.note(Failure::new(why.kind(), msg));
            break;
        }
        if failed && !step.always {
            log.emit(Event::StepSkipped {
                at: OffsetDateTime::now_utc(),
                attempt: steps.attempt,
                step: step.name.clone(),
                index,
            });
            record.steps.push(StepResult::skipped(&step.name));
            // What a resumed run knows of a step is only the one at `from`'s.
            resumed = None;
            continue;
        }
        let place = Place {
            attempt: steps.attempt,
            index,
            resumed: resumed.take(),
            after_failure: failed,
        };
        let (step_result, ending) = run_step(executor, handle, spec, step, place, log, watch).await;
        record.steps.push(step_result);
        match ending {
            StepEnding::Succeeded => {}
            StepEnding::Failed(failure) if step.continue_on_error => {
                log.line(&format!(
                    "step {}: {}; it continues on error, so the run goes on",
                    step.name, failure.message
                ));
            }
            StepEnding::Failed(failure) => {
                record.note(failure);
                failed = true;
            }
            StepEnding::Ended(failure) => {
                record.note(failure);
                break;
            }
        }
    }
    let ran = record.steps.len();
    let taken = std::mem::replace(record, AttemptRecord::new(spec));
    *record = taken.with_steps_skipped(spec, ran);
}

/// How a step ended, for the steps after it.
enum StepEnding {
    Succeeded,
    /// The step's own failure (its exit code, out of memory, its own
    /// timeout): the environment is as the step left it, and the steps
    /// that run after a failure can still run.
    Failed(Failure),
    /// A failure that leaves no environment or no time for another step.
    Ended(Failure),
}

/// After the steps: the caches saved (only after a run whose steps all
/// succeeded), the outputs brought back, the environment stopped.
pub(super) async fn wind_up(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    log: &RunLog,
    options: &DriverOptions,
    watch: &Watch<'_>,
    record: &mut AttemptRecord,
) {
    if record.failure.is_none() {
        save_caches(
            executor,
            handle,
            spec,
            log,
            options,
            watch.run_deadline,
            &mut record.caches,
        )
        .await;
    } else if !record.caches.is_empty() {
        log.line("caches not saved: the run did not succeed");
        for cache in &mut record.caches {
            cache
                .note
                .get_or_insert_with(|| "not saved: the run did not succeed".into());
        }
    }

    collect_outputs(executor, handle, spec, options, log, record).await;
    stop_once(executor, handle, spec, log, options, record).await;
}

/// Outputs, whatever happened to the steps: that is when they matter most.
async fn collect_outputs(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    options: &DriverOptions,
    log: &RunLog,
    record: &mut AttemptRecord,
) {
    log.line("collecting outputs");
    let began = Instant::now();
    let collected = tokio::time::timeout(
        spec.outputs_timeout,
        executor.copy_out(
            handle,
            &handle.outputs_dir,
            &spec.outputs,
            options.output_limits,
        ),
    )
    .await;
    record.phases.outputs_ms = millis(began);
    let ms = record.phases.outputs_ms;
    let collected_event = |refused: u64, failure: Option<Failure>| Event::OutputsCollected {
        at: OffsetDateTime::now_utc(),
        ms,
        refused,
        failure,
    };
    match collected {
        Ok(Ok(summary)) => {
            log.emit(collected_event(summary.refused_count, None));
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
            record.refused = summary.refused;
        }
        Ok(Err(err)) => {
            log.line(&format!("collecting outputs failed: {err}"));
            let failure = err.failure(format!("outputs: {err}"));
            log.emit(collected_event(0, Some(failure.clone())));
            record.note(failure);
        }
        // A step can keep its outputs from ever coming back (endless
        // files, a `tar` it replaced): a timeout, not an engine that did
        // not answer, so it is not retried (a retry runs every step again).
        Err(_) => {
            let msg = format!("outputs: not collected within {:?}", spec.outputs_timeout);
            log.line(&msg);
            let failure = Failure::new(FailureKind::Timeout, msg);
            log.emit(collected_event(0, Some(failure.clone())));
            record.note(failure);
        }
    }
}

/// Which attempt a step runs in, and its place in the run's steps.
#[derive(Clone, Copy)]
struct Place {
    attempt: u32,
    index: usize,
    resumed: Option<Resumed>,
    /// Whether an earlier step failed: only steps that always run are next.
    after_failure: bool,
}

/// How many steps after the running one a backend is told of
/// ([`StepCommand::upcoming`]): enough to have the next start open when a
/// short step ends, over a link where opening one takes a few round trips.
const UPCOMING: usize = 3;

/// The command of the step at `index` of `attempt`.
fn command_of(
    handle: &RunHandle,
    spec: &RunSpec,
    step: &crate::Step,
    attempt: u32,
    index: usize,
    log: &RunLog,
) -> StepCommand {
    StepCommand {
        // The same in a resumed run: the log's mark keeps its key.
        id: log.step_id(attempt, index),
        follow_from: None,
        upcoming: Vec::new(),
        name: step.name.clone(),
        script: step.script.clone(),
        env: handle
            .standard_env()
            .into_iter()
            .chain(spec.env.iter().cloned())
            .chain(step.env.iter().cloned())
            .collect(),
    }
}

/// Runs one step.
async fn run_step(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    step: &crate::Step,
    place: Place,
    log: &RunLog,
    watch: &Watch<'_>,
) -> (StepResult, StepEnding) {
    let mut command = command_of(handle, spec, step, place.attempt, place.index, log);
    command.follow_from = place.resumed.map(|r| r.from);
    command.upcoming = spec
        .steps
        .iter()
        .enumerate()
        .skip(place.index.saturating_add(1))
        .filter(|(_, next)| next.always || !place.after_failure)
        .take(UPCOMING)
        .map(|(index, next)| command_of(handle, spec, next, place.attempt, index, log))
        .collect();
    let started_at = place
        .resumed
        .map_or_else(OffsetDateTime::now_utc, |r| r.started_at);
    let clock = Instant::now();
    let dropped_before = log.output_dropped();
    // A measure a backend told after its step was cut off is not this one's.
    let _ = log.take_usage();
    match place.resumed {
        // Its start is in the log already, from the runner that made it.
        Some(resumed) if resumed.announced => {
            log.emit(Event::StepResumed {
                at: OffsetDateTime::now_utc(),
                attempt: place.attempt,
                step: step.name.clone(),
                index: place.index,
                stdout: resumed.from.stdout,
                stderr: resumed.from.stderr,
            });
            log.step_goes_on_from(resumed.from);
        }
        _ => log.emit(Event::StepStarted {
            at: started_at,
            attempt: place.attempt,
            step: step.name.clone(),
            index: place.index,
        }),
    }
    let token = CancellationToken::new();
    // A resumed step's time ran under the runner before this one too.
    let already = place.resumed.map_or(std::time::Duration::ZERO, |r| {
        std::time::Duration::try_from(OffsetDateTime::now_utc() - r.started_at).unwrap_or_default()
    });
    let limit = step.limit_in(spec);
    let step_deadline = Some(clock + limit.saturating_sub(already));
    let outcome = watch
        .supervise(
            executor.command(handle, &command, log, token.clone()),
            &token,
            step_deadline,
        )
        .await;

    let name = &step.name;
    // The step's `error` is what the backend said; the failure's message
    // is the run's sentence about it.
    // Whether the steps after this one can still run if it failed.
    let mut recoverable = true;
    let (status, exit_code, error, failure) = match outcome {
        Supervised::Done(Ok(CommandOutcome::Exited { code: 0, .. })) => {
            (StepStatus::Success, Some(0), None, None)
        }
        Supervised::Done(Ok(CommandOutcome::Exited { code, reason })) => {
            let msg = match &reason {
                Some(reason) => format!("step {name} exited {code}: {reason}"),
                None => format!("step {name} exited {code}"),
            };
            let failure = Failure::new(FailureKind::Step, msg);
            (StepStatus::Failed, Some(code), reason, Some(failure))
        }
        Supervised::Done(Ok(CommandOutcome::OutOfMemory { code, detail })) => {
            let msg = match code {
                Some(code) => format!("step {name} exited {code}: {detail}"),
                None => format!("step {name}: {detail}"),
            };
            let failure = Failure::new(FailureKind::Oom, msg);
            (StepStatus::Failed, code, Some(detail), Some(failure))
        }
        Supervised::Done(Ok(CommandOutcome::Interrupted)) => {
            // The backend reported an interrupt nobody asked for.
            recoverable = false;
            let msg = format!("step {name} was interrupted by the environment");
            let failure = Failure::new(FailureKind::EnvironmentLost, msg.clone());
            (StepStatus::Error, None, Some(msg), Some(failure))
        }
        Supervised::Done(Err(err)) => {
            recoverable = false;
            let failure = err.failure(format!("step {name}: {err}"));
            (
                StepStatus::Error,
                None,
                Some(err.to_string()),
                Some(failure),
            )
        }
        Supervised::Interrupted(why, finished) => {
            let mut msg = format!("step {name}: {}", why.describe_for(spec, limit));
            // Only a step that ran out of its own time and stopped leaves
            // the environment to the next step.
            recoverable = why == Why::StepTimeout && finished.is_some();
            if finished.is_none() {
                msg.push_str(&format!("; the step did not stop within {:?}", watch.grace));
            }
            let failure = Failure::new(why.kind(), msg.clone());
            (why.step_status(), None, Some(msg), Some(failure))
        }
    };
    let failure = failure.map(|f| f.in_step(name));
    let finished_at = OffsetDateTime::now_utc();
    let duration_ms = match place.resumed {
        // The step ran under the runner before this one too.
        Some(_) => u64::try_from((finished_at - started_at).whole_milliseconds()).unwrap_or(0),
        None => u64::try_from(clock.elapsed().as_millis()).unwrap_or(u64::MAX),
    };
    let output_dropped_bytes = log.output_dropped().saturating_sub(dropped_before);
    let usage = log.take_usage();
    if let Some((peak, limit)) = usage.as_ref().and_then(crate::usage::StepUsage::near_limit) {
        log.line(&format!(
            "step {name}: its peak memory ({}) came within 10 % of the environment's memory limit ({}): a little more and the kernel kills it",
            crate::log::size(peak),
            crate::log::size(limit)
        ));
    }
    log.emit(Event::StepFinished {
        at: finished_at,
        attempt: place.attempt,
        step: name.clone(),
        status,
        exit_code,
        duration_ms,
        failure: failure.clone(),
        output_dropped_bytes,
        usage,
    });
    let result = StepResult {
        name: name.clone(),
        status,
        exit_code,
        error,
        started_at: Some(started_at),
        finished_at: Some(finished_at),
        duration_ms,
        failure: failure.clone(),
        output_dropped_bytes,
        usage,
    };
    let ending = match failure {
        None => StepEnding::Succeeded,
        Some(failure) if recoverable => StepEnding::Failed(failure),
        Some(failure) => StepEnding::Ended(failure),
    };
    (result, ending)
}

async fn stop_once(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    log: &RunLog,
    options: &DriverOptions,
    record: &mut AttemptRecord,
) {
    log.line("stopping the environment");
    let began = Instant::now();
    let limit = options.stop_timeout;
    let outcome = tokio::time::timeout(limit, executor.stop(handle)).await;
    record.phases.stop_ms = millis(began);
    let failure = match outcome {
        Ok(Ok(())) => return,
        Ok(Err(err)) => err.failure(format!("stop: {err}")),
        Err(_) => Failure::new(
            FailureKind::Unreachable,
            format!("stop: did not finish within {limit:?}"),
        ),
    };
    log.line(&failure.message);
    tracing::error!(run = %handle.id, "{}", failure.message);
    if let Some(journal) = &options.journal {
        let leftover = Leftover::new(executor.kind(), &spec.runner, &handle.id, &failure.message);
        match journal.record(&leftover) {
            Ok(()) => log.line(&format!(
                "environment {} is in the journal {}: the next run or cleanup of this runner removes it",
                handle.id,
                journal.dir().display()
            )),
            Err(err) => log.line(&format!("could not write the journal: {err}")),
        }
    }
    record.note(failure);
}

/// The failure of an attempt that could not begin: bad input.
pub(super) fn refused(spec: &RunSpec, err: &ExecutorError) -> AttemptRecord {
    let mut record = AttemptRecord::new(spec);
    record.note(err.failure(err.to_string()));
    record.ended()
}
