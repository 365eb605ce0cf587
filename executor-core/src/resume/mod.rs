//! Carrying a run on after its runner process was killed.
//!
//! A container backend's environment outlives the runner that started it,
//! and each step outlives its exec (`executor_container::detached`). Three records
//! let a new runner process carry the run on, with the result the first
//! would have written:
//!
//! - the **plan** ([`RunPlan`]): the steps with their scripts, variables,
//!   timeouts, caches and trust, written into the environment at start
//!   with the checkout; its SHA-256 in a label the steps cannot change;
//! - the **mark** ([`Mark`]) beside the log file, kept by the log's writer
//!   ([`RunLog::create_resumable`](crate::RunLog::create_resumable)): the
//!   log's length, the steps finished, and the running step with the
//!   bytes of each of its streams the log holds;
//! - the step's own files in the environment: its record, its pid and,
//!   once it ended, its status.
//!
//! [`Executor::reattach`] finds the live
//! environment and its plan; [`RunLog::resume`](crate::RunLog::resume)
//! cuts the log back to its mark; [`resume_with`] follows the running
//! step on from the mark's bytes, runs the steps after it, saves the
//! caches, brings the outputs back and stops the environment, as
//! [`run_with`](crate::run_with) would have. Secret values are in none of
//! the records: the resume is given them again, to mask the log.
//!
//! ```no_run
//! # async fn demo(executor: &dyn executor_core::Executor) -> Result<(), Box<dyn std::error::Error>> {
//! use executor_core::resume::resume_with;
//! use executor_core::{DriverOptions, RunLog};
//! use tokio_util::sync::CancellationToken;
//!
//! let (log, mark) = RunLog::resume("run.log".as_ref())?;
//! let live = executor.reattach("did:plc:runner", "build-1").await?;
//! let spec = live.plan.clone().into_spec("outputs".into(), Vec::new())?;
//! let result = resume_with(executor, &live, &spec, &mark, &log,
//!     CancellationToken::new(), &DriverOptions::default()).await;
//! result.write_to("result.json".as_ref())?;
//! # Ok(()) }
//! ```

pub(crate) mod mark;
pub(crate) mod owner;
mod plan;

pub use crate::driver::resume_with;
pub use mark::{mark_path, Mark, RunningStep};
pub use owner::lock_path;
pub use plan::{PlannedStep, RunPlan, MAX_PLAN_BYTES, PLAN_DIGEST_KEY, PLAN_DIR, PLAN_FILE};

use crate::tar::UnpackLimits;
use crate::{Executor, ExecutorError, RunHandle};

/// A live run found again by [`Executor::reattach`].
#[derive(Debug, Clone)]
pub struct Reattached {
    /// The environment, as `start` returned it.
    pub handle: RunHandle,
    /// The run's plan, its digest checked.
    pub plan: RunPlan,
}

/// How long [`read_plan`] waits for the plan: a few KiB, which outlasts a
/// short outage of the engine but not a tool a step made hang.
pub const PLAN_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// Reads the plan a backend wrote into `state_dir` ([`PLAN_DIR`]) of the
/// environment `handle`, through `executor`'s own `copy_out`, and checks
/// it against `digest` (the backend's [`PLAN_DIGEST_KEY`]).
///
/// # Errors
/// `InvalidInput` when the plan is missing, too large, changed or not a
/// plan, or does not come back within [`PLAN_READ_TIMEOUT`];
/// `copy_out`'s errors as they are.
pub async fn read_plan(
    executor: &dyn Executor,
    handle: &RunHandle,
    state_dir: &str,
    digest: &str,
) -> Result<RunPlan, ExecutorError> {
    let host = tempfile::tempdir()
        .map_err(|e| ExecutorError::io("reading the run's plan", std::env::temp_dir(), e))?;
    let dir = format!("{}/{PLAN_DIR}", state_dir.trim_end_matches('/'));
    let limits = UnpackLimits {
        max_bytes: MAX_PLAN_BYTES,
        ..UnpackLimits::default()
    };
    // The copy runs the environment's own tools, which a step may have
    // replaced with one that never ends: resume must not wait for it.
    match tokio::time::timeout(
        PLAN_READ_TIMEOUT,
        executor.copy_out(handle, &dir, host.path(), limits),
    )
    .await
    {
        Ok(copied) => {
            copied?;
        }
        Err(_) => {
            return Err(ExecutorError::InvalidInput(format!(
                "the run's plan ({dir}/{PLAN_FILE}) did not come back from its environment within \
                 {}s: its tools may have been replaced by a step; the run is not resumed (stop it \
                 with cleanup)",
                PLAN_READ_TIMEOUT.as_secs()
            )))
        }
    }
    let path = host.path().join(PLAN_FILE);
    let json = std::fs::read(&path).map_err(|e| {
        ExecutorError::InvalidInput(format!(
            "the run's plan ({dir}/{PLAN_FILE}) could not be read back from its environment ({e}); \
             it was started by a runner without resume, or a step removed it"
        ))
    })?;
    RunPlan::parse(&json, digest)
}

/// Writes `plan` into the host folder `staged` (under [`PLAN_DIR`]), to
/// be copied to the environment's state folder with the step scripts.
///
/// # Errors
/// `Io` naming the file.
pub fn stage_plan(staged: &std::path::Path, json: &[u8]) -> Result<(), ExecutorError> {
    let dir = staged.join(PLAN_DIR);
    let what = "writing the run's plan";
    std::fs::create_dir_all(&dir).map_err(|e| ExecutorError::io(what, &dir, e))?;
    let path = dir.join(PLAN_FILE);
    std::fs::write(&path, json).map_err(|e| ExecutorError::io(what, &path, e))
}
