//! One attempt of a run: start, caches in, every step, caches out,
//! outputs, stop.

use std::time::Instant;

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::caches::{restore_caches, save_caches};
use super::millis;
pub(super) use super::record::AttemptRecord;
use super::steps::{run_steps, Steps};
use super::supervise::{Supervised, Watch};
use crate::events::Event;
use crate::journal::Leftover;
use crate::{
    DriverOptions, Executor, ExecutorError, Failure, FailureKind, RunHandle, RunLog, RunSpec,
};

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

    record.environment = executor.environment(handle).await;
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
    super::outputs::remove_from(&spec.outputs);
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
