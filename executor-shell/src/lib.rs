//! The shell backend of [`executor_core`]: each run gets a private run
//! folder on the host (`work/`, `steps/`, `outputs/` under a temp folder),
//! and each step runs there as `sh -ec <script>` in its own process group.
//!
//! It runs steps directly on the host, so it is for trusted code only;
//! `runner-cli` refuses it for pull-request and queue triggers.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use executor_core::{run, RunLog, RunSpec, RunStatus, Step};
//! use executor_shell::ShellExecutor;
//! use tokio_util::sync::CancellationToken;
//!
//! let (checkout, outputs, base) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
//! let executor = ShellExecutor::new(base.path());
//! let spec = RunSpec::new("hello", "did:plc:runner", checkout.path(), outputs.path())
//!     .step(Step::new("greet", "echo hello > \"$OUTPUTS_DIR/greeting.txt\""));
//! let result = run(&executor, &spec, &RunLog::discard(), CancellationToken::new()).await;
//! assert_eq!(result.status, RunStatus::Success);
//! assert_eq!(result.outputs[0].path, "greeting.txt");
//! # }
//! ```
#![warn(missing_docs)]

mod marked;
mod plan;
mod process;
mod root;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use executor_core::tar::{pack_dir, unpack_untrusted, UnpackLimits, UnpackSummary};
use executor_core::{
    CleanupReport, CleanupScope, CommandOutcome, Executor, ExecutorError, RunHandle, RunLog,
    RunSpec, StepCommand,
};
use nix::unistd::Pid;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use plan::Plan;

/// The shell executor; one value serves any number of runs at once.
pub struct ShellExecutor {
    base: PathBuf,
    runs: Mutex<HashMap<String, LiveRun>>,
    plan: Option<Plan>,
}

struct LiveRun {
    root: root::RunRoot,
    /// The run's secret variables: they reach each step's process
    /// environment and nothing else (no argv, no file).
    secrets: Vec<(String, executor_core::Secret)>,
    groups: Vec<Pid>,
    lingering: Vec<JoinHandle<()>>,
}

impl ShellExecutor {
    /// An executor keeping its run folders under `base`.
    pub fn new(base: impl Into<PathBuf>) -> Self {
        ShellExecutor {
            base: base.into(),
            runs: Mutex::new(HashMap::new()),
            plan: None,
        }
    }

    /// The default base folder: `knotless-runner/shell` in
    /// `$XDG_RUNTIME_DIR` (the user's own 0700 runtime folder), else in
    /// `knotless-runner-UID` in the system temp folder. Either way the
    /// executor creates it 0700 and checks, before each run, that no other
    /// user can change anything on its path.
    pub fn default_base() -> PathBuf {
        default_base_from(
            std::env::var_os("XDG_RUNTIME_DIR"),
            &std::env::temp_dir(),
            nix::unistd::geteuid().as_raw(),
        )
    }

    /// Creates the base folder if it is missing and checks that it is
    /// private (see [`ShellExecutor::default_base`]); `start` does the same,
    /// this lets a caller refuse a bad base before anything else.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let executor = executor_shell::ShellExecutor::new(dir.path().join("runs"));
    /// executor.prepare_base().unwrap();
    /// ```
    pub fn prepare_base(&self) -> Result<(), ExecutorError> {
        root::prepare_private(&self.base)
    }

    /// An executor that prints every call it would make to `plan` and does
    /// nothing else: no folder is created and no process started.
    pub fn dry_run(base: impl Into<PathBuf>, plan: Plan) -> Self {
        ShellExecutor {
            plan: Some(plan),
            ..Self::new(base)
        }
    }

    /// Every run folder of `runner` that exists now, live or not: the
    /// conformance suite's probe for leftovers.
    pub fn leftovers(&self, runner: &str) -> Vec<PathBuf> {
        root::list(&self.base, runner)
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, LiveRun>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn fill(
        &self,
        from: &Path,
        into: &Path,
        what: &'static str,
    ) -> Result<(), ExecutorError> {
        let summary = unpack_untrusted(pack_dir(from), into, UnpackLimits::default())
            .await
            .map_err(|e| ExecutorError::backend(what, e))?;
        whole(summary, what)
    }
}

fn default_base_from(
    xdg_runtime_dir: Option<std::ffi::OsString>,
    temp: &Path,
    uid: u32,
) -> PathBuf {
    match xdg_runtime_dir.map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("knotless-runner").join("shell"),
        _ => temp.join(format!("knotless-runner-{uid}")).join("shell"),
    }
}

/// A copy into the run is whole or an error: an entry refused on the way
/// in would be a silent hole in the checkout or a cache.
fn whole(summary: UnpackSummary, what: &'static str) -> Result<(), ExecutorError> {
    match summary.refused.first() {
        None if summary.is_whole() => Ok(()),
        first => Err(ExecutorError::backend(
            what,
            format!(
                "{} entries refused{}",
                summary.refused_count,
                first.map_or_else(String::new, |r| format!(
                    ", first {:?}: {}",
                    r.path, r.reason
                ))
            ),
        )),
    }
}

/// A cache path of the shell executor must stay inside the run's folder:
/// the environment is the host, and anything outside belongs to it.
fn inside_run(run: &RunHandle, path: &str) -> Result<PathBuf, ExecutorError> {
    let p = Path::new(path);
    let escapes = p
        .components()
        .any(|c| matches!(c, std::path::Component::ParentDir));
    if escapes || !p.starts_with(&run.id) {
        return Err(ExecutorError::InvalidInput(format!(
            "cache path {path} is outside the run folder; the shell executor runs on the host, so give cache paths relative to WORK_DIR"
        )));
    }
    Ok(p.to_path_buf())
}

#[async_trait]
impl Executor for ShellExecutor {
    fn kind(&self) -> &str {
        "shell"
    }

    /// Beyond [`RunSpec::validate`]: the shell runs steps on this host, so
    /// it refuses cache paths outside the run folder (a cache at `/root`
    /// would be the host's). Whether untrusted code may run here at all is
    /// the embedder's policy (runner-cli refuses it; a runner that is
    /// itself a throwaway VM may not).
    fn check(&self, run: &RunSpec) -> Result<(), ExecutorError> {
        run.validate()?;
        if let Some(c) = run.caches.iter().find(|c| c.path.starts_with('/')) {
            return Err(ExecutorError::InvalidInput(format!(
                "cache {}={}: the shell executor runs on this host, so RunSpec::caches paths must be relative to WORK_DIR",
                c.key, c.path
            )));
        }
        Ok(())
    }

    async fn start(
        &self,
        run: &RunSpec,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<RunHandle, ExecutorError> {
        self.check(run)?;
        run.check_folders()?;
        if let Some(plan) = &self.plan {
            return Ok(plan.start(&self.base, run));
        }
        let root = root::create(&self.base, run)?;
        let handle = RunHandle {
            id: root.path.display().to_string(),
            work_dir: root.work().display().to_string(),
            steps_dir: root.steps().display().to_string(),
            outputs_dir: root.outputs().display().to_string(),
        };
        log.line(&format!("run folder {}", handle.id));
        let copy = async {
            self.fill(&run.checkout, &root.work(), "copying the checkout")
                .await?;
            if let Some(steps) = &run.steps_dir {
                self.fill(steps, &root.steps(), "copying the steps folder")
                    .await?;
            }
            Ok::<_, ExecutorError>(())
        };
        let copied = tokio::select! {
            r = copy => r,
            _ = interrupt.cancelled() => Err(ExecutorError::Interrupted),
        };
        if let Err(err) = copied {
            root::remove(&root.path)?;
            return Err(err);
        }
        self.runs().insert(
            handle.id.clone(),
            LiveRun {
                root,
                secrets: run.secrets.clone(),
                groups: Vec::new(),
                lingering: Vec::new(),
            },
        );
        Ok(handle)
    }

    async fn command(
        &self,
        run: &RunHandle,
        step: &StepCommand,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<CommandOutcome, ExecutorError> {
        if let Some(plan) = &self.plan {
            return Ok(plan.command(run, step));
        }
        let (secrets, mark) = match self.runs().get(&run.id) {
            Some(live) => (live.secrets.clone(), live.root.mark.clone()),
            None => {
                return Err(ExecutorError::EnvironmentLost(format!(
                    "run folder {} is not a live run of this executor",
                    run.id
                )))
            }
        };
        let mut step = step.clone();
        // Inherited by everything the step starts, whatever group or
        // session it moves to: how stop finds them all.
        step.env.push((marked::MARK_VAR.to_string(), mark));
        step.env.extend(
            secrets
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().to_string())),
        );
        let finished = process::run_step(Path::new(&run.work_dir), &step, log, interrupt, |pgid| {
            if let Some(live) = self.runs().get_mut(&run.id) {
                live.groups.push(pgid);
            }
        })
        .await?;
        if let Some(live) = self.runs().get_mut(&run.id) {
            live.lingering.extend(finished.lingering);
        }
        Ok(finished.outcome)
    }

    async fn copy_in(&self, run: &RunHandle, src: &Path, path: &str) -> Result<(), ExecutorError> {
        let target = inside_run(run, path)?;
        if let Some(plan) = &self.plan {
            plan.copy(&src.display().to_string(), path);
            return Ok(());
        }
        let summary = unpack_untrusted(pack_dir(src), &target, UnpackLimits::default()).await?;
        whole(summary, "restoring a cache")
    }

    async fn copy_out(
        &self,
        run: &RunHandle,
        path: &str,
        dest: &Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        let source = inside_run(run, path)?;
        if let Some(plan) = &self.plan {
            plan.copy(path, &dest.display().to_string());
            return Ok(UnpackSummary::default());
        }
        Ok(unpack_untrusted(pack_dir(&source), dest, limits).await?)
    }

    async fn stop(&self, run: &RunHandle) -> Result<(), ExecutorError> {
        if let Some(plan) = &self.plan {
            plan.stop(run);
            return Ok(());
        }
        let Some(live) = self.runs().remove(&run.id) else {
            return Ok(());
        };
        for pgid in &live.groups {
            process::kill_group(*pgid);
        }
        let mark = live.root.mark.clone();
        let killed = tokio::task::spawn_blocking(move || marked::kill_marked(&mark))
            .await
            .unwrap_or(0);
        if killed > 0 {
            tracing::debug!(killed, run = %run.id, "ended processes that left the step's group");
        }
        for reader in &live.lingering {
            reader.abort();
        }
        root::remove(&live.root.path)
    }

    async fn cleanup(
        &self,
        runner: &str,
        _scope: CleanupScope,
    ) -> Result<CleanupReport, ExecutorError> {
        if let Some(plan) = &self.plan {
            plan.cleanup(&self.base, runner);
            return Ok(CleanupReport::default());
        }
        // Liveness is exact here (the run's lock), so both scopes remove the
        // same thing: every folder whose run is gone.
        Ok(CleanupReport {
            removed: root::remove_dead(&self.base, runner)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_base_is_private_to_the_user() {
        let tmp = Path::new("/tmp");
        assert_eq!(
            default_base_from(Some("/run/user/1000".into()), tmp, 1000),
            Path::new("/run/user/1000/knotless-runner/shell")
        );
        for unset in [None, Some("".into()), Some("relative".into())] {
            assert_eq!(
                default_base_from(unset, tmp, 1000),
                Path::new("/tmp/knotless-runner-1000/shell")
            );
        }
    }
}
