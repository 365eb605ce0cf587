//! Carrying a run on from its log's mark; see [`crate::resume`].

use std::time::{Duration, Instant};

use time::OffsetDateTime;
use tokio_util::sync::CancellationToken;

use super::attempt::{wind_up, AttemptRecord};
use super::finish;
use super::steps::{run_steps, Resumed, Steps};
use super::supervise::Watch;
use crate::cache::CacheResult;
use crate::resume::{Mark, Reattached};
use crate::Offsets;
use crate::{
    Attempt, DriverOptions, Executor, ExecutorError, Failure, RunLog, RunResult, RunSpec,
    StepStatus,
};

/// Carries on the run `live` (found by [`Executor::reattach`]) whose
/// runner process was killed, from its log's `mark`
/// ([`RunLog::resume`]): the running step is followed on from the bytes
/// the log holds (or started, if it had not been), the steps after it
/// run, then the caches are saved, the outputs brought back and the
/// environment stopped, as [`run_with`](crate::run_with) would have. The
/// result has the earlier steps and the caches' restores as the mark
/// recorded them, and every attempt: those that ended before, as the
/// mark kept them, then the one carried on.
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
        let attempt = (mark.attempt.max(1), vec![record.ended()]);
        return finish(
            executor,
            spec,
            log,
            started_at,
            earlier(mark),
            attempt,
            None,
        )
        .await;
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
    // The failure that ends the run, if a finished step had one: not a
    // step that continues on error, nor one that was skipped.
    let failed = mark
        .finished
        .iter()
        .zip(&spec.steps)
        .find(|(result, step)| {
            !matches!(result.status, StepStatus::Success | StepStatus::Skipped)
                && !step.continue_on_error
        });
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
        announced: mark.running.is_some(),
    };
    log.line(&format!(
        "a new runner process carries run {} on in environment {} ({} of {} steps finished)",
        spec.name,
        handle.id,
        mark.finished.len(),
        spec.steps.len()
    ));
    let mut goes_on = true;
    if let Some((step, _)) = failed {
        let failure = step.failure.clone().unwrap_or_else(|| {
            Failure::new(
                crate::FailureKind::Step,
                format!("step {} failed", step.name),
            )
        });
        // A step's own failure leaves the steps that always run; a lost
        // environment or a cancel leaves none.
        goes_on = matches!(
            failure.kind,
            crate::FailureKind::Step | crate::FailureKind::Oom | crate::FailureKind::Timeout
        );
        record.note(failure);
    }
    if goes_on {
        let steps = Steps {
            attempt: mark.attempt.max(1),
            from,
            resumed: Some(resumed),
        };
        run_steps(executor, handle, spec, log, &watch, steps, &mut record).await;
    } else {
        let ran = record.steps.len();
        record = record.with_steps_skipped(spec, ran);
    }
    record.caches = restored_caches(spec, &handle.work_dir, mark);
    wind_up(executor, handle, spec, log, options, &watch, &mut record).await;
    let number = mark.attempt.max(1);
    let record = record.ended();
    record.tell(log, number);
    finish(
        executor,
        spec,
        log,
        started_at,
        earlier(mark),
        (number, vec![record]),
        None,
    )
    .await
}

/// The attempts that ended before the one `mark` carries on, as the
/// earlier runner process told them.
fn earlier(mark: &Mark) -> Vec<Attempt> {
    mark.earlier
        .iter()
        .filter(|a| a.number < mark.attempt)
        .cloned()
        .collect()
}

/// The caches the runner process before this one restored, as its log's
/// mark recorded them, to be saved as that runner would have. Only what
/// the restore found comes from the mark: the key, the folder and the
/// namespace saved into are the run's own.
fn restored_caches(spec: &RunSpec, work_dir: &str, mark: &Mark) -> Vec<CacheResult> {
    spec.caches
        .iter()
        .map(|cache| {
            let path = cache.resolve(work_dir);
            let own = CacheResult {
                key: cache.key.clone(),
                path: path.clone(),
                namespace: spec.trust,
                ..CacheResult::default()
            };
            match mark
                .caches
                .iter()
                .find(|c| c.key == cache.key && c.path == path)
            {
                Some(was) => CacheResult {
                    hit: was.hit,
                    size_in: was.size_in,
                    ms_in: was.ms_in,
                    restored_from: was.restored_from,
                    note: was.note.clone(),
                    ..own
                },
                None => CacheResult {
                    note: Some("restored by the runner process before this one".into()),
                    ..own
                },
            }
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::{CacheSpec, Trust};

    #[test]
    fn a_resumed_run_reports_the_restores_its_mark_saw_and_saves_as_its_own_run() {
        let mut spec = RunSpec::new("r", "did:plc:r", "/checkout", "/outputs");
        spec.trust = Trust::Untrusted;
        spec.caches = vec![
            CacheSpec {
                key: "cargo".into(),
                path: "target".into(),
            },
            CacheSpec {
                key: "npm".into(),
                path: "/root/.npm".into(),
            },
            CacheSpec {
                key: "pip".into(),
                path: "/root/.pip".into(),
            },
        ];
        let seen = |key: &str, path: &str| CacheResult {
            key: key.into(),
            path: path.into(),
            hit: true,
            size_in: 7,
            ms_in: 3,
            // Nothing but what the restore found is taken from the mark.
            namespace: Trust::Trusted,
            restored_from: Some(Trust::Trusted),
            saved: true,
            ..CacheResult::default()
        };
        let mark = Mark {
            // npm's folder is not the run's: another run's mark.
            caches: vec![seen("cargo", "/work/target"), seen("npm", "/elsewhere")],
            ..Mark::default()
        };
        let caches = restored_caches(&spec, "/work", &mark);
        let cargo = &caches[0];
        assert_eq!(
            (cargo.path.as_str(), cargo.hit, cargo.size_in, cargo.ms_in),
            ("/work/target", true, 7, 3)
        );
        assert_eq!(cargo.restored_from, Some(Trust::Trusted));
        assert_eq!((cargo.namespace, cargo.saved), (Trust::Untrusted, false));
        for other in &caches[1..] {
            assert!(!other.hit, "{other:?}");
            assert_eq!(other.namespace, Trust::Untrusted);
            assert_eq!(
                other.note.as_deref(),
                Some("restored by the runner process before this one")
            );
        }
        assert_eq!(caches[1].path, "/root/.npm");
    }
}
