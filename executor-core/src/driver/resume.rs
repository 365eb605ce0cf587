//! Carrying a run on from its log's mark; see [`crate::resume`].

use std::time::{Duration, Instant};

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::attempt::{run_steps, wind_up, AttemptRecord, Resumed, Steps};
use super::finish;
use super::supervise::Watch;
use crate::cache::CacheResult;
use crate::detached::Offsets;
use crate::resume::{Mark, Reattached};
use crate::{
    DriverOptions, Executor, ExecutorError, Failure, RunLog, RunResult, RunSpec, StepStatus,
};

/// Carries on the run `live` (found by [`Executor::reattach`]) whose
/// runner process was killed, from its log's `mark`
/// ([`RunLog::resume`]): the running step is followed on from the bytes
/// the log holds (or started, if it had not been), the steps after it
/// run, then the caches are saved, the outputs brought back and the
/// environment stopped, as [`run_with`](crate::run_with) would have. The
/// result has the earlier steps as the mark recorded them.
///
/// `spec` is the plan's run ([`RunPlan::into_spec`](crate::resume::RunPlan::into_spec)):
/// its outputs folder and secrets are this process's. The run timeout
/// counts from the plan's start, the running step's timeout from its own.
/// A run that is not resumed is not retried: this is its last attempt.
///
/// A mark that does not fit the plan (other step names, a finished run)
/// is refused as an `input` failure, and the environment is left as it
/// is.
pub async fn resume_with(
    executor: &dyn Executor,
    live: &Reattached,
    spec: &RunSpec,
    mark: &Mark,
    log: &RunLog,
    cancel: CancellationToken,
    options: &DriverOptions,
) -> RunResult {
    crate::outage::telling(
        log.clone(),
        carry_on(executor, live, spec, mark, log, cancel, options),
    )
    .await
}

async fn carry_on(
    executor: &dyn Executor,
    live: &Reattached,
    spec: &RunSpec,
    mark: &Mark,
    log: &RunLog,
    cancel: CancellationToken,
    options: &DriverOptions,
) -> RunResult {
    log.mask(&spec.masker());
    let started_at = mark.run_started_at.unwrap_or(live.plan.started_at);
    let mut record = AttemptRecord::new(spec);
    record.started_at = started_at;
    if let Err(err) = fits(mark, spec) {
        log.line(&format!("not resumed: {err}"));
        record.note(err.failure(err.to_string()));
        return finish(executor, spec, log, started_at, vec![record.ended()], None).await;
    }
    let ran_for =
        Duration::try_from(OffsetDateTime::now_utc() - live.plan.started_at).unwrap_or_default();
    let watch = Watch {
        cancel: &cancel,
        run_deadline: Instant::now() + spec.run_timeout.saturating_sub(ran_for),
        grace: options.grace,
    };
    let handle = &live.handle;
    record.steps = mark.finished.clone();
    let failed = mark
        .finished
        .iter()
        .find(|s| s.status != StepStatus::Success);
    let from = mark
        .running
        .as_ref()
        .map_or(mark.finished.len(), |r| r.index);
    let resumed = Resumed {
        from: mark
            .running
            .as_ref()
            .map_or(Offsets::default(), |r| r.offsets()),
        started_at: mark
            .running
            .as_ref()
            .map_or_else(OffsetDateTime::now_utc, |r| r.started_at),
    };
    log.line(&format!(
        "a new runner process carries run {} on in environment {} ({} of {} steps finished)",
        spec.name,
        handle.id,
        mark.finished.len(),
        spec.steps.len()
    ));
    match failed {
        Some(step) => {
            let failure = step.failure.clone().unwrap_or_else(|| {
                Failure::new(
                    crate::FailureKind::Step,
                    format!("step {} failed", step.name),
                )
            });
            record.note(failure);
            let ran = record.steps.len();
            record = record.with_steps_skipped(spec, ran);
        }
        None => {
            let steps = Steps {
                attempt: mark.attempt.max(1),
                from,
                resumed: Some(resumed),
            };
            run_steps(executor, handle, spec, log, &watch, steps, &mut record).await;
        }
    }
    // The caches were restored by the runner before; they are saved as
    // that runner would have.
    record.caches = spec
        .caches
        .iter()
        .map(|cache| CacheResult {
            key: cache.key.clone(),
            path: cache.resolve(&handle.work_dir),
            namespace: spec.trust,
            note: Some("restored by the runner process before this one".into()),
            ..CacheResult::default()
        })
        .collect();
    wind_up(executor, handle, spec, log, options, &watch, &mut record).await;
    finish(executor, spec, log, started_at, vec![record.ended()], None).await
}

/// Whether `mark` is of a run of `spec` that can be carried on.
fn fits(mark: &Mark, spec: &RunSpec) -> Result<(), ExecutorError> {
    let bad = |msg: String| Err(ExecutorError::InvalidInput(msg));
    if mark.run_finished {
        return bad(format!(
            "run {} already finished: its log says so, and its result was written",
            spec.name
        ));
    }
    for (done, step) in mark.finished.iter().zip(&spec.steps) {
        if done.name != step.name {
            return bad(format!(
                "the log's step {:?} is not the run's step {:?} at that place: the log is of another run",
                done.name, step.name
            ));
        }
    }
    if mark.finished.len() > spec.steps.len() {
        return bad("the log has more steps than the run: the log is of another run".into());
    }
    if let Some(running) = &mark.running {
        let expected = spec.steps.get(running.index).map(|s| s.name.as_str());
        if running.index != mark.finished.len() || expected != Some(running.name.as_str()) {
            return bad(format!(
                "the log's running step {:?} is not the run's next step: the log is of another run",
                running.name
            ));
        }
    }
    Ok(())
}
