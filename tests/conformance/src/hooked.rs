//! The backend's executor with hooks that act at exact points of a run,
//! so a case does not race the run it watches.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;
use executor_core::tar::{UnpackLimits, UnpackSummary};
use executor_core::{
    CleanupReport, CleanupScope, CommandOutcome, Executor, ExecutorError, RunHandle, RunLog,
    RunSpec, StepCommand,
};
use tokio_util::sync::CancellationToken;

use crate::Backend;

/// Delegates every call to the backend's executor, except that it can
/// really lose the environment (through [`Backend::lose_environment`])
/// before a step, and run a probe script in the environment just before
/// `stop`, keeping the probe's output.
pub struct Hooked<'a> {
    backend: &'a dyn Backend,
    runner: String,
    lose_before: Option<String>,
    probe_before_stop: Option<String>,
    lost: AtomicBool,
    probed: Mutex<Option<String>>,
}

impl<'a> Hooked<'a> {
    /// No hooks yet; `runner` is the runner whose environment a hook acts on.
    pub fn new(backend: &'a dyn Backend, runner: &str) -> Self {
        Hooked {
            backend,
            runner: runner.to_string(),
            lose_before: None,
            probe_before_stop: None,
            lost: AtomicBool::new(false),
            probed: Mutex::new(None),
        }
    }

    /// Before the first run of the step `name`, the environment is removed
    /// from outside.
    pub fn losing_environment_before(mut self, name: &str) -> Self {
        self.lose_before = Some(name.to_string());
        self
    }

    /// Just before `stop`, `script` runs in the environment as a step would.
    pub fn probing_before_stop(mut self, script: &str) -> Self {
        self.probe_before_stop = Some(script.to_string());
        self
    }

    /// Whether the environment was lost (false when the backend has
    /// nothing to lose).
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
    }

    /// What the probe printed, if it ran; its exit code on the last line.
    pub fn probe_output(&self) -> Option<String> {
        self.probed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn inner(&self) -> &dyn Executor {
        self.backend.executor()
    }
}

#[async_trait]
impl Executor for Hooked<'_> {
    fn kind(&self) -> &str {
        self.inner().kind()
    }
    fn check(&self, run: &RunSpec) -> Result<(), ExecutorError> {
        self.inner().check(run)
    }
    async fn start(
        &self,
        run: &RunSpec,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<RunHandle, ExecutorError> {
        self.inner().start(run, log, interrupt).await
    }
    async fn command(
        &self,
        run: &RunHandle,
        step: &StepCommand,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<CommandOutcome, ExecutorError> {
        if self.lose_before.as_deref() == Some(step.name.as_str())
            && !self.lost()
            && self.backend.lose_environment(&self.runner).await
        {
            self.lost.store(true, Ordering::SeqCst);
        }
        self.inner().command(run, step, log, interrupt).await
    }
    async fn copy_in(&self, run: &RunHandle, src: &Path, path: &str) -> Result<(), ExecutorError> {
        self.inner().copy_in(run, src, path).await
    }
    async fn copy_out(
        &self,
        run: &RunHandle,
        path: &str,
        dest: &Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        self.inner().copy_out(run, path, dest, limits).await
    }
    async fn stop(&self, run: &RunHandle) -> Result<(), ExecutorError> {
        if let Some(script) = &self.probe_before_stop {
            let (log, text) = RunLog::memory();
            let probe = StepCommand {
                id: executor_core::labels::random_hex(8),
                follow_from: None,
                upcoming: Vec::new(),
                name: "probe".into(),
                script: script.clone(),
                env: run.standard_env(),
            };
            let outcome = self
                .inner()
                .command(run, &probe, &log, CancellationToken::new())
                .await;
            log.end_output();
            let said = format!("{}\n{outcome:?}", text.text());
            *self.probed.lock().unwrap_or_else(|p| p.into_inner()) = Some(said);
        }
        self.inner().stop(run).await
    }
    async fn cleanup(
        &self,
        runner: &str,
        scope: CleanupScope,
    ) -> Result<CleanupReport, ExecutorError> {
        self.inner().cleanup(runner, scope).await
    }
}
