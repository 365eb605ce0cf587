//! The seam: what the shell executor does to the host it runs on.
//!
//! [`Host`] is implemented by [`LocalHost`] (this machine), by the dry-run
//! ([`Plan`](crate::Plan), which prints each call) and by mocks in unit
//! tests, so what a dry-run prints and what a run does are one sequence
//! of calls, and the executor's branches are tested without a process.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use executor_core::script::ScriptFiles;
use executor_core::tar::{pack_dir, unpack_untrusted, UnpackLimits, UnpackSummary};
use executor_core::{ExecutorError, RunLog, RunSpec, StepCommand};
use nix::unistd::Pid;
use tokio_util::sync::CancellationToken;

use crate::process::{self, Finished};
use crate::root::{self, RunRoot};

/// The process groups a run's steps were started in.
pub(crate) type Groups = Arc<Mutex<Vec<Pid>>>;

/// The host calls of the shell executor; each is one thing done to this
/// machine's files or processes.
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub(crate) trait Host: Send + Sync {
    /// Creates a fresh run folder for `run` under `base`, private to this
    /// user and locked while the run lives, holding `work`, `steps` and
    /// `outputs`.
    fn create_run(&self, base: &Path, run: &RunSpec) -> Result<RunRoot, ExecutorError>;

    /// Writes each step script of `run` into the run folder's `dir`, named
    /// by content ([`ScriptFiles`]): a script of any size runs from its
    /// file, where a command line holds at most 128 KiB of one.
    fn write_scripts(&self, run: &RunSpec, dir: &Path) -> Result<ScriptFiles, ExecutorError>;

    /// Streams the folder `from` into `into` (creating it) through the
    /// untrusted unpacker: what a step left in the run folder is as
    /// untrusted as a container's.
    async fn copy(
        &self,
        from: &Path,
        into: &Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError>;

    /// Runs `step` as `sh -ec` in `work_dir` (as `sh -e SCRIPT_FILE` when
    /// its script is in a file), in a process group of its own, with
    /// `step.env` (and a few of the runner's own variables) as its
    /// environment; the group goes into `groups` as soon as it exists, so
    /// a stop that comes while the step runs finds it.
    async fn run_step(
        &self,
        work_dir: &Path,
        step: &StepCommand,
        script_file: Option<PathBuf>,
        log: &RunLog,
        interrupt: CancellationToken,
        groups: Groups,
    ) -> Result<Finished, ExecutorError>;

    /// Kills every process of the groups, then every process that carries
    /// `mark` wherever it moved; says how many of the latter there were.
    async fn kill_run(&self, groups: &[Pid], mark: &str) -> usize;

    /// Removes a run folder, releasing its lock.
    fn remove_run(&self, root: RunRoot) -> Result<(), ExecutorError>;

    /// Removes every run folder of `runner` under `base` whose run is
    /// gone, with the processes it left; names what was removed.
    async fn remove_dead(&self, base: &Path, runner: &str) -> Result<Vec<String>, ExecutorError>;
}

/// This machine.
pub(crate) struct LocalHost;

#[async_trait]
impl Host for LocalHost {
    fn create_run(&self, base: &Path, run: &RunSpec) -> Result<RunRoot, ExecutorError> {
        root::create(base, run)
    }

    async fn copy(
        &self,
        from: &Path,
        into: &Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        Ok(unpack_untrusted(pack_dir(from), into, limits).await?)
    }

    fn write_scripts(&self, run: &RunSpec, dir: &Path) -> Result<ScriptFiles, ExecutorError> {
        ScriptFiles::write(run, dir, &dir.display().to_string())
            .map_err(|e| ExecutorError::io("writing the step scripts", dir, e))
    }

    async fn run_step(
        &self,
        work_dir: &Path,
        step: &StepCommand,
        script_file: Option<PathBuf>,
        log: &RunLog,
        interrupt: CancellationToken,
        groups: Groups,
    ) -> Result<Finished, ExecutorError> {
        process::run_step(
            work_dir,
            step,
            script_file.as_deref(),
            log,
            interrupt,
            |pgid| groups.lock().unwrap_or_else(|p| p.into_inner()).push(pgid),
        )
        .await
    }

    async fn kill_run(&self, groups: &[Pid], mark: &str) -> usize {
        for pgid in groups {
            process::kill_group(*pgid);
        }
        let mark = mark.to_string();
        tokio::task::spawn_blocking(move || crate::marked::kill_marked(&mark))
            .await
            .unwrap_or(0)
    }

    fn remove_run(&self, root: RunRoot) -> Result<(), ExecutorError> {
        root::remove(&root.path)
    }

    async fn remove_dead(&self, base: &Path, runner: &str) -> Result<Vec<String>, ExecutorError> {
        // Finding a crashed run's processes reads /proc, and may look
        // again for a while: off the runtime's threads.
        let (base, runner) = (base.to_path_buf(), runner.to_string());
        tokio::task::spawn_blocking(move || root::remove_dead(&base, &runner))
            .await
            .map_err(|e| ExecutorError::backend("removing crashed runs", e.to_string()))?
    }
}
