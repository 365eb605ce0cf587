//! The six operations, mapped onto the [`Host`](crate::host::Host) seam.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use executor_core::tar::{UnpackLimits, UnpackSummary};
use executor_core::{
    CleanupReport, CleanupScope, CommandOutcome, Executor, ExecutorError, RunHandle, RunLog,
    RunSpec, StepCommand,
};
use tokio_util::sync::CancellationToken;

use crate::{marked, LiveRun, ShellExecutor};

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

/// A path the shell executor copies to or from must stay inside the run's
/// folder: the environment is the host, and anything outside belongs to it.
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

impl ShellExecutor {
    /// Copies a host folder into the run, whole.
    async fn fill(
        &self,
        from: &Path,
        into: &Path,
        what: &'static str,
    ) -> Result<(), ExecutorError> {
        let summary = self
            .host
            .copy(from, into, UnpackLimits::default())
            .await
            .map_err(|e| ExecutorError::backend(what, e))?;
        whole(summary, what)
    }
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
        if let Some(service) = run.services.first() {
            return Err(ExecutorError::InvalidInput(format!(
                "service {}: the shell executor runs steps on this host and has no service                  containers (RunSpec::services); the docker and k8s executors have them",
                service.name
            )));
        }
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
        let root = self.host.create_run(&self.base, run)?;
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
            let scripts = self.host.write_scripts(run, &root.path.join("scripts"))?;
            if let Some(steps) = &run.steps_dir {
                self.fill(steps, &root.steps(), "copying the steps folder")
                    .await?;
            }
            Ok::<_, ExecutorError>(scripts)
        };
        let copied = tokio::select! {
            r = copy => r,
            _ = interrupt.cancelled() => Err(ExecutorError::Interrupted),
        };
        let scripts = match copied {
            Ok(scripts) => scripts,
            Err(err) => {
                if let Err(removing) = self.host.remove_run(root) {
                    tracing::error!(%removing, run = %handle.id, "removing a half-made run folder failed");
                }
                return Err(err);
            }
        };
        self.runs().insert(
            handle.id.clone(),
            LiveRun {
                root,
                secrets: run.secrets.clone(),
                groups: Default::default(),
                scripts,
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
        let (secrets, mark, groups, script_file) = match self.runs().get(&run.id) {
            Some(live) => (
                live.secrets.clone(),
                live.root.mark.clone(),
                live.groups.clone(),
                live.scripts.path_of(&step.script).map(PathBuf::from),
            ),
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
        let finished = self
            .host
            .run_step(
                Path::new(&run.work_dir),
                &step,
                script_file,
                log,
                interrupt,
                groups,
            )
            .await?;
        if let Some(usage) = finished.usage {
            log.record_usage(usage);
        }
        if let Some(live) = self.runs().get_mut(&run.id) {
            live.lingering.extend(finished.lingering);
        }
        Ok(finished.outcome)
    }

    async fn copy_in(&self, run: &RunHandle, src: &Path, path: &str) -> Result<(), ExecutorError> {
        let target = inside_run(run, path)?;
        let summary = self
            .host
            .copy(src, &target, UnpackLimits::default())
            .await?;
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
        self.host.copy(&source, dest, limits).await
    }

    async fn stop(&self, run: &RunHandle) -> Result<(), ExecutorError> {
        let Some(live) = self.runs().remove(&run.id) else {
            return Ok(());
        };
        let groups = live
            .groups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let killed = self.host.kill_run(&groups, &live.root.mark).await;
        if killed > 0 {
            tracing::debug!(killed, run = %run.id, "ended processes that left the step's group");
        }
        for reader in &live.lingering {
            reader.abort();
        }
        self.host.remove_run(live.root)
    }

    async fn cleanup(
        &self,
        runner: &str,
        _scope: CleanupScope,
    ) -> Result<CleanupReport, ExecutorError> {
        // Liveness is exact here (the run's lock), so both scopes remove the
        // same thing: every folder whose run is gone.
        Ok(CleanupReport {
            removed: self.host.remove_dead(&self.base, runner).await?,
        })
    }
}

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
