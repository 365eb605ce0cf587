//! The steps of an attempt, in order: each started (or carried on), its
//! end read, and what it means for the steps after it.

use std::collections::BTreeMap;
use std::time::Instant;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::record::AttemptRecord;
use super::supervise::{Supervised, Watch, Why};
use crate::events::Event;
use crate::expr::{RunState, Scope};
use crate::Offsets;
use crate::{
    CommandOutcome, Executor, Failure, FailureKind, RunHandle, RunLog, RunSpec, StepCommand,
    StepResult, StepStatus,
};

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
    let mut outputs = Outputs::new();
    // A resumed run's earlier steps left their outputs in the environment.
    for (index, step) in spec.steps.iter().enumerate().take(steps.from) {
        let ran = record
            .steps
            .get(index)
            .is_some_and(|r| r.status != StepStatus::Skipped);
        if let (Some(id), true) = (&step.id, ran) {
            let read = super::outputs::read(executor, handle, spec, step, log).await;
            outputs.insert(id.clone(), read);
        }
    }
    for (index, step) in spec.steps.iter().enumerate().skip(steps.from) {
        if let Some(why) = watch.already() {
            // Never start a step the run has no time or wish for.
            let msg = format!("{} before step {}", why.describe(), step.name);
            log.line(&msg);
            record.note(Failure::new(why.kind(), msg));
            break;
        }
        let state = if failed {
            RunState::Failed
        } else {
            RunState::Succeeded
        };
        if !runs(spec, step, &outputs, state) {
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
            state,
        };
        let (step_result, ending, written) =
            run_step(executor, handle, spec, step, place, &outputs, log, watch).await;
        record.steps.push(step_result);
        if let (Some(id), Some(written)) = (&step.id, written) {
            outputs.insert(id.clone(), written);
        }
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

/// Which attempt a step runs in, and its place in the run's steps.
#[derive(Clone, Copy)]
struct Place {
    attempt: u32,
    index: usize,
    resumed: Option<Resumed>,
    /// How the run stands when the step's turn comes.
    state: RunState,
}

/// Earlier steps' outputs, by step id then name.
pub(super) type Outputs = BTreeMap<String, BTreeMap<String, String>>;

/// The run's variables, then the step's: what `env.NAME` reads.
fn plain_variables(spec: &RunSpec, step: &crate::Step) -> Vec<(String, String)> {
    spec.env.iter().chain(&step.env).cloned().collect()
}

/// What a step's condition and inputs are read against: `vars` (its
/// [`plain_variables`]), the run's secrets, earlier outputs, how the run
/// stands.
fn scope_of<'a>(
    spec: &'a RunSpec,
    vars: &'a [(String, String)],
    outputs: &'a Outputs,
    state: RunState,
) -> Scope<'a> {
    Scope {
        env: vars,
        secrets: &spec.secrets,
        outputs: Some(outputs),
        state,
    }
}

/// Whether `step` runs with the run standing at `state`.
fn runs(spec: &RunSpec, step: &crate::Step, outputs: &Outputs, state: RunState) -> bool {
    let vars = plain_variables(spec, step);
    step.runs_in(&scope_of(spec, &vars, outputs, state))
}

/// How many steps after the running one a backend is told of
/// ([`StepCommand::upcoming`]): enough to have the next start open when a
/// short step ends, over a link where opening one takes a few round trips.
const UPCOMING: usize = 3;

/// The command of the step at `index` of `attempt`, the run standing at
/// `state` with `outputs` written so far.
fn command_of(
    handle: &RunHandle,
    spec: &RunSpec,
    step: &crate::Step,
    place: Place,
    outputs: &Outputs,
    log: &RunLog,
) -> StepCommand {
    let vars = plain_variables(spec, step);
    let scope = scope_of(spec, &vars, outputs, place.state);
    let computed: Vec<(String, String)> = step
        .inputs
        .iter()
        .map(|(key, template)| (key.clone(), template.render(&scope)))
        .collect();
    let output_file = super::outputs::file_of(handle, step);
    StepCommand {
        // The same in a resumed run: the log's mark keeps its key.
        id: log.step_id(place.attempt, place.index),
        follow_from: None,
        upcoming: Vec::new(),
        name: step.name.clone(),
        script: step.script_to_run().into_owned(),
        env: handle
            .standard_env()
            .into_iter()
            .chain(spec.runner_variables(place.index))
            .chain([
                ("KNOTLESS_ATTEMPT".to_string(), place.attempt.to_string()),
                (
                    "KNOTLESS_JOB_STATUS".to_string(),
                    place.state.job_status().to_string(),
                ),
            ])
            .chain(vars)
            .chain(computed)
            .chain([
                ("STEP_OUTPUT".to_string(), output_file.clone()),
                ("GITHUB_OUTPUT".to_string(), output_file),
            ])
            .collect(),
    }
}

/// Runs one step.
#[allow(clippy::too_many_arguments)]
async fn run_step(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    step: &crate::Step,
    place: Place,
    outputs: &Outputs,
    log: &RunLog,
    watch: &Watch<'_>,
) -> (StepResult, StepEnding, Option<BTreeMap<String, String>>) {
    let mut command = command_of(handle, spec, step, place, outputs, log);
    command.follow_from = place.resumed.map(|r| r.from);
    // The steps that run next if this one succeeds, as they would start
    // then (a step whose inputs read this one's outputs is told with what
    // is known now; a backend starts nothing told that way unchanged).
    command.upcoming = spec
        .steps
        .iter()
        .enumerate()
        .skip(place.index.saturating_add(1))
        .filter(|(_, next)| runs(spec, next, outputs, place.state))
        .take(UPCOMING)
        .map(|(index, next)| {
            let at = Place {
                index,
                resumed: None,
                ..place
            };
            command_of(handle, spec, next, at, outputs, log)
        })
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
    // What the step wrote for later steps, unless its environment is gone.
    let written = match (&step.id, recoverable || failure.is_none()) {
        (Some(_), true) => Some(super::outputs::read(executor, handle, spec, step, log).await),
        _ => None,
    };
    let masker = spec.masker();
    let shown: BTreeMap<String, String> = written
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), masker.mask_str(v).into_owned()))
        .collect();
    if let Some((peak, limit)) = usage.as_ref().and_then(crate::usage::StepUsage::near_limit) {
        log.line(&format!(
            "step {name}: its peak memory ({}) came within 10 % of the environment's memory limit ({}): a little more and the kernel kills it",
            crate::text::size(peak),
            crate::text::size(limit)
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
        outputs: shown.clone(),
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
        outputs: shown,
    };
    let ending = match failure {
        None => StepEnding::Succeeded,
        Some(failure) if recoverable => StepEnding::Failed(failure),
        Some(failure) => StepEnding::Ended(failure),
    };
    (result, ending, written)
}
