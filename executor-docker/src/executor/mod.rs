//! The six operations, mapped onto the [`Engine`] seam.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use executor_container::container::compressing::Compressing;
use executor_container::container::{
    expired, is_runners, run_command, the_live_run, Place, StepStart, STATE_DIR,
};
use executor_container::detached::{variables_prelude, Signing};
use executor_core::labels::{label_value, RUNNER_LABEL, RUNNER_RAW_KEY};
use executor_core::tar::{pack_dir, pack_folders, PackedFolder, UnpackLimits, UnpackSummary};
use executor_core::{
    CleanupReport, CleanupScope, CommandOutcome, Executor, ExecutorError, RunHandle, RunLog,
    RunSpec, StepCommand,
};
use futures_util::{StreamExt, TryStreamExt};
use tokio_util::sync::CancellationToken;

use crate::engine::{ContainerSpec, Engine, ExecSpec};
use executor_core::resume::{read_plan, Reattached, RunPlan};
use executor_core::script::ScriptFiles;

mod ahead;
mod bounds;
mod channel;
mod compression;
mod container;
mod execs;
mod listing;
mod outputs;
mod services;
mod step_user;
use crate::{DockerOptions, PullPolicy};
pub use bounds::UNTRUSTED_CAP_DROP;

/// How long an exec may take to report that it stopped after its output ended.
const EXEC_SETTLE: Duration = Duration::from_secs(30);

/// One container per run on a Docker-compatible engine.
pub struct DockerExecutor {
    engine: Arc<dyn Engine>,
    options: DockerOptions,
    /// Containers of runs this executor is running now (cleanup spares
    /// them), with the step scripts each holds as files.
    live: Mutex<HashMap<String, ScriptFiles>>,
    /// What bounds each of those runs' steps besides its container's own
    /// settings: its own network and the user its steps run as.
    bounds: Mutex<HashMap<String, bounds::RunBounds>>,
    /// Whether uploads go gzip-compressed ([`DockerOptions::compression`]).
    compressing: executor_container::container::compressing::Compressing,
    /// The starts of upcoming steps opened ahead ([`ahead`]): where a
    /// step cannot go through the channel.
    ahead: executor_container::container::ahead::AheadStarts,
    /// Each run container's step channel ([`channel`]).
    channels: executor_container::detached::StepChannels,
    /// Whether steps start through the channel; the mocked engine's tests
    /// of a step's own exec turn it off.
    through_channel: bool,
    /// A dry-run: every call is printed once, when it is made.
    pub(crate) dry: bool,
    /// Per run container, its service containers, and the log their
    /// output goes to when the run stops.
    services: Mutex<HashMap<String, Vec<services::Running>>>,
    service_logs: Mutex<HashMap<String, RunLog>>,
}

impl DockerExecutor {
    /// An executor over any engine (the real one, the dry-run, a mock).
    /// Its round trip is not known, so `Compression::Auto` does not
    /// compress; see [`DockerExecutor::measured`].
    pub fn with_engine(engine: Arc<dyn Engine>, options: DockerOptions) -> Self {
        DockerExecutor {
            engine,
            compressing: Compressing::new(options.compression),
            options,
            live: Mutex::new(HashMap::new()),
            bounds: Mutex::new(HashMap::new()),
            ahead: Default::default(),
            channels: Default::default(),
            through_channel: true,
            dry: false,
            services: Mutex::new(HashMap::new()),
            service_logs: Mutex::new(HashMap::new()),
        }
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, ScriptFiles>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bounds(&self) -> std::sync::MutexGuard<'_, HashMap<String, bounds::RunBounds>> {
        self.bounds.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn has_services(&self, id: &str) -> bool {
        self.bounds()
            .get(id)
            .is_some_and(|b| b.services_of.is_some())
    }
}

#[async_trait]
impl Executor for DockerExecutor {
    fn kind(&self) -> &str {
        "docker"
    }

    fn check(&self, run: &RunSpec) -> Result<(), ExecutorError> {
        run.validate()?;
        self.options.host.check(run.trust)?;
        if let (Some(service), Some(network)) = (run.services.first(), &self.options.network) {
            if matches!(network.as_str(), "bridge" | "host") || network.starts_with("container:") {
                return Err(ExecutorError::InvalidInput(format!(
                    "service {}: DockerOptions::network {network} gives containers no names to \
                     reach each other by; leave it unset (a run with services gets a network of \
                     its own), set none (a network of its own with no route out) or name a \
                     user-defined network",
                    service.name
                )));
            }
        }
        run.image_for("docker").map(|_| ())
    }

    async fn start(
        &self,
        run: &RunSpec,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<RunHandle, ExecutorError> {
        self.check(run)?;
        let image = run.image_for("docker")?;
        run.check_folders()?;
        self.ensure_image(image, log).await?;
        // The plan a resume reads back; its digest where no step can change it.
        let plan = RunPlan::of(run).to_json();
        let spec = self.container_spec(run, image, &RunPlan::digest(&plan));
        let own_network = Self::own_network(&spec.labels);
        if let Some(network) = &own_network {
            // `none` asked for no route out; the services still need a network.
            let internal = self.options.network.as_deref() == Some("none");
            self.engine
                .create_network(network, &spec.labels, internal)
                .await?;
            log.line(&format!("network {network}, the run's own"));
        }
        let id = match self.engine.create(&spec).await {
            Ok(id) => id,
            Err(err) => {
                self.remove_half_started(None, own_network.as_deref()).await;
                return Err(err);
            }
        };
        log.line(&format!("container {} ({})", spec.name, short(&id)));
        // The services start while the checkout goes in: the first step
        // waits for the slower of the two.
        let both = async {
            let (prepared, services) = tokio::join!(self.prepare(&id, run, &plan), async {
                let started = self.start_services(run, &spec, log).await;
                if let Ok(running) = &started {
                    self.services
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(id.clone(), running.clone());
                }
                started
            });
            // A service's failure names the run's real problem first.
            services?;
            prepared
        };
        let prepared = tokio::select! {
            r = both => r,
            _ = interrupt.cancelled() => Err(ExecutorError::Interrupted),
        };
        let scripts = match prepared {
            Ok(scripts) => scripts,
            Err(err) => {
                self.remove_half_started(Some(&id), own_network.as_deref())
                    .await;
                return Err(err);
            }
        };
        if !run.services.is_empty() {
            self.service_logs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id.clone(), log.clone());
        }
        let step_user = match self
            .resolve_step_user(&id, self.options.user.as_deref(), true)
            .await
        {
            Ok(user) => user,
            Err(err) => {
                self.remove_half_started(Some(&id), own_network.as_deref())
                    .await;
                return Err(err);
            }
        };
        if let (Some(user), None) = (&self.options.user, &step_user.apart) {
            log.line(&format!(
                "warning: the steps run as {user}, and here the runner's side does too (the user is root, or the step agent does not run on {}): one trust domain, where a process a step leaves can disturb a later step's start",
                step_user.architecture.as_deref().unwrap_or("this architecture")
            ));
        }
        self.live().insert(id.clone(), scripts);
        self.bounds().insert(
            id.clone(),
            bounds::RunBounds {
                resolved: step_user,
                ..bounds::RunBounds::of(&spec.labels)
            },
        );
        Ok(RunHandle::in_container(id))
    }

    async fn command(
        &self,
        run: &RunHandle,
        step: &StepCommand,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<CommandOutcome, ExecutorError> {
        let id = run.id.as_str();
        // Every start goes through the channel, whose agent signs the
        // step's status and sets its variables from the start's prelude:
        // a name a shell cannot set would need an exec of its own, whose
        // shell cannot sign. A RunSpec allows no such name either.
        if let Some((name, _)) = step
            .env
            .iter()
            .find(|(name, _)| executor_core::validate_env_key(name).is_err())
        {
            return Err(ExecutorError::InvalidInput(format!(
                "step {}: StepCommand::env has the name {name:?}, which a shell cannot set: use letters, digits and _, not starting with a digit",
                step.name
            )));
        }
        // A script the run was not started with goes in the command line.
        let scripts = self.live().get(id).cloned().unwrap_or_default();
        // The step's variables are set for its shell alone, by its start.
        let (prelude, exec_env) = variables_prelude(&step.env);
        let channel = execs::StepChannel {
            executor: self,
            id,
            env: exec_env,
            working_dir: run.work_dir.clone(),
        };
        let start = StepStart {
            scripts: &scripts,
            prelude: &prelude,
            reconnect: self.options.reconnect_timeout,
        };
        if self.has_services(id) {
            self.keep_log_for_services(id, log);
        }
        let signing = Signing::of(log, &step.id);
        let prepared = self
            .prepared_start(id, &run.work_dir, step, start, signing)
            .await?;
        let outcome = run_command(&channel, step, start, prepared, log, &interrupt).await;
        // A run without services has none that stopped: no engine call.
        executor_core::service::naming_stopped(outcome, self.stopped_services(id)).await
    }

    async fn copy_in(&self, run: &RunHandle, src: &Path, path: &str) -> Result<(), ExecutorError> {
        let q = executor_core::script::quote(path);
        let user = self.user_of(&run.id);
        let mut mkdir = format!("mkdir -p {q}");
        if let Some(user) = &user {
            mkdir.push_str(&format!(
                " && chown {} {q}",
                executor_core::script::quote(user)
            ));
        }
        self.exec_as_root(&run.id, &mkdir, "creating a cache folder")
            .await?;
        self.upload(&run.id, path, &src.display().to_string(), || pack_dir(src))
            .await?;
        if let Some(user) = &user {
            let chown = format!("chown -R {} {q}", executor_core::script::quote(user));
            self.exec_as_root(
                &run.id,
                &chown,
                "giving a cache folder to DockerOptions::user",
            )
            .await?;
        }
        Ok(())
    }

    async fn copy_out(
        &self,
        run: &RunHandle,
        path: &str,
        dest: &Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        self.folder_out(&run.id, path, dest, limits).await
    }

    async fn stop(&self, run: &RunHandle) -> Result<(), ExecutorError> {
        let known = self.bounds().get(&run.id).cloned();
        let bounds = match known {
            Some(known) => known,
            // A run another runner started: its labels say.
            None => bounds::RunBounds::of(&self.engine.inspect(&run.id).await?.labels),
        };
        let network = bounds.network;
        if let Some(name) = &bounds.services_of {
            self.stop_services(&run.id, name).await?;
        }
        self.engine.remove(&run.id).await?;
        if let Some(network) = &network {
            self.remove_network(network).await?;
        }
        self.live().remove(&run.id);
        self.bounds().remove(&run.id);
        self.ahead.let_go(&run.id);
        self.channels.close(&run.id);
        Ok(())
    }

    async fn environment(&self, run: &RunHandle) -> Option<executor_core::EnvironmentFacts> {
        Some(self.environment_of(&run.id))
    }

    async fn reattach(&self, runner: &str, name: &str) -> Result<Reattached, ExecutorError> {
        let place = Place {
            kind: "container",
            place: "on the engine",
        };
        let found: Vec<_> = self
            .runner_containers(runner)
            .await?
            .into_iter()
            .filter(|(_, labels)| !labels.contains_key(services::SERVICE_LABEL))
            .collect();
        let ((id, labels), digest) = the_live_run(found, |(_, l)| Some(l), runner, name, place)?;
        let mut bounds = bounds::RunBounds::of(&labels);
        // The steps run as the run's user, whoever resumes it.
        if self.options.user.is_some() && self.options.user != bounds.user {
            return Err(ExecutorError::InvalidInput(format!(
                "run {name:?} runs its steps as {}, not DockerOptions::user {:?}: resume it with that user, or none",
                bounds
                    .user
                    .as_deref()
                    .map_or_else(|| "the image's user".to_string(), |u| format!("user {u}")),
                self.options.user.as_deref().unwrap_or_default()
            )));
        }
        if let Some(name) = &bounds.services_of {
            let running = self.listed_services(name).await?;
            self.services
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(id.clone(), running);
        }
        bounds.resolved = self
            .resolve_step_user(&id, bounds.user.as_deref(), false)
            .await?;
        self.bounds().insert(id.clone(), bounds);
        let handle = RunHandle::in_container(id.clone());
        let plan = read_plan(self, &handle, STATE_DIR, &digest).await?;
        self.live()
            .insert(id, ScriptFiles::planned(&plan.spec(), STATE_DIR));
        Ok(Reattached { handle, plan })
    }

    async fn cleanup(
        &self,
        runner: &str,
        scope: CleanupScope,
    ) -> Result<CleanupReport, ExecutorError> {
        let now = executor_core::labels::unix_now();
        let mut removed = Vec::new();
        // A live run's services are spared with it.
        let live_names: Vec<String> = self
            .bounds()
            .values()
            .filter_map(|b| b.services_of.clone())
            .collect();
        for (id, labels) in self.runner_containers(runner).await? {
            if self.live().contains_key(&id) {
                continue;
            }
            if labels
                .get(services::SERVICE_OF_LABEL)
                .is_some_and(|of| live_names.contains(of))
            {
                continue;
            }
            if scope == CleanupScope::All || expired(&labels, now) {
                self.engine.remove(&id).await?;
                tracing::info!(container = %id, "removed a leftover container");
                removed.push(id);
            }
        }
        // Volumes a failed removal left: those no container uses any more
        // (the engine refuses to remove the others).
        for name in self.runner_volumes(runner).await? {
            if self.engine.remove_volume(&name).await? {
                tracing::info!(volume = %name, "removed a leftover volume");
                removed.push(format!("volume/{name}"));
            }
        }
        // Networks of runs whose container is gone (the engine refuses to
        // remove one a container is on), expired or, with `All`, every one
        // but this executor's live runs'.
        let live: Vec<String> = self
            .bounds()
            .values()
            .filter_map(|b| b.network.clone())
            .collect();
        for (name, labels) in self.runner_networks(runner).await? {
            let due = scope == CleanupScope::All || expired(&labels, now);
            if due && !live.contains(&name) && self.engine.remove_network(&name).await? {
                tracing::info!(network = %name, "removed a leftover network");
                removed.push(format!("network/{name}"));
            }
        }
        Ok(CleanupReport { removed })
    }
}

/// The short form of a container id, as the docker CLI prints it.
fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests;
