//! The six operations, mapped onto the [`Engine`] seam.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use executor_core::labels::{
    dns_name, label_value, EXPIRES_KEY, RUNNER_LABEL, RUNNER_RAW_KEY, RUN_LABEL, RUN_RAW_KEY,
};
use executor_core::tar::{
    pack_dir, pack_folders, unpack_untrusted, PackedFolder, UnpackLimits, UnpackSummary,
};
use executor_core::{
    CleanupReport, CleanupScope, CommandOutcome, Executor, ExecutorError, RunHandle, RunLog,
    RunSpec, StepCommand,
};
use futures_util::{StreamExt, TryStreamExt};
use tokio_util::io::StreamReader;
use tokio_util::sync::CancellationToken;

use crate::engine::{ContainerSpec, Engine, ExecSpec};
use crate::{DockerOptions, PullPolicy};

/// Folder in the container for the runner's own bookkeeping (step pid files).
const STATE_DIR: &str = "/.knotless";
/// How long an exec may take to report that it stopped after its output ended.
const EXEC_SETTLE: Duration = Duration::from_secs(30);

/// One container per run on a Docker-compatible engine.
pub struct DockerExecutor {
    engine: Arc<dyn Engine>,
    options: DockerOptions,
    /// Containers of runs this executor is running now: cleanup spares them.
    live: Mutex<HashSet<String>>,
    /// OOM kills counted so far per container, to tell a new one.
    oom_kills: Mutex<HashMap<String, u64>>,
}

impl DockerExecutor {
    /// An executor over any engine (the real one, the dry-run, a mock).
    pub fn with_engine(engine: Arc<dyn Engine>, options: DockerOptions) -> Self {
        DockerExecutor {
            engine,
            options,
            live: Mutex::new(HashSet::new()),
            oom_kills: Mutex::new(HashMap::new()),
        }
    }

    /// Every container of `runner`, live or not, then every volume of its
    /// (as `volume/NAME`), by label: the probe for leftovers.
    pub async fn leftovers(&self, runner: &str) -> Result<Vec<String>, ExecutorError> {
        let mut found = self.containers(runner).await?;
        found.extend(
            self.runner_volumes(runner)
                .await?
                .into_iter()
                .map(|name| format!("volume/{name}")),
        );
        Ok(found)
    }

    /// The ids of every container of `runner`, live or not.
    pub async fn containers(&self, runner: &str) -> Result<Vec<String>, ExecutorError> {
        Ok(self
            .runner_containers(runner)
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    async fn runner_volumes(&self, runner: &str) -> Result<Vec<String>, ExecutorError> {
        let found = self
            .engine
            .list_volumes(RUNNER_LABEL, &label_value(runner))
            .await?;
        Ok(found
            .into_iter()
            .filter(|v| v.labels.get(RUNNER_RAW_KEY).map(String::as_str) == Some(runner))
            .map(|v| v.id)
            .collect())
    }

    async fn runner_containers(
        &self,
        runner: &str,
    ) -> Result<Vec<(String, HashMap<String, String>)>, ExecutorError> {
        let found = self.engine.list(RUNNER_LABEL, &label_value(runner)).await?;
        // The sanitised label could in principle be shared; the raw DID decides.
        Ok(found
            .into_iter()
            .filter(|c| c.labels.get(RUNNER_RAW_KEY).map(String::as_str) == Some(runner))
            .map(|c| (c.id, c.labels))
            .collect())
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn container_spec(&self, run: &RunSpec, image: &str) -> ContainerSpec {
        // The container outlives every phase the driver may still use it for.
        let expires = executor_core::labels::unix_now().saturating_add(
            run.lifetime()
                .saturating_add(self.options.expiry_grace)
                .as_secs(),
        );
        let labels = HashMap::from([
            (RUNNER_LABEL.to_string(), label_value(&run.runner)),
            (RUN_LABEL.to_string(), label_value(&run.name)),
            (RUNNER_RAW_KEY.to_string(), run.runner.clone()),
            (RUN_RAW_KEY.to_string(), run.name.clone()),
            (EXPIRES_KEY.to_string(), expires.to_string()),
        ]);
        ContainerSpec {
            name: format!(
                "knotless-{}-{}",
                dns_name(&[&run.name], 40),
                random_suffix()
            ),
            image: image.to_string(),
            cmd: vec![
                "sh".into(),
                "-c".into(),
                "while :; do sleep 3600; done".into(),
            ],
            labels,
            // The keep-alive runs as the image's user; only steps run as
            // --user, so the runner's own root execs keep their capabilities.
            user: None,
            working_dir: "/".into(),
            memory: self.options.memory,
            nano_cpus: self.options.cpus.map(|c| (c * 1e9) as i64),
            network_mode: self.options.network.clone(),
            security_opt: vec!["no-new-privileges".into()],
            volumes: run_volumes(run),
            pids_limit: self.options.pids_limit,
            cap_drop: self.options.cap_drop.clone(),
            cap_add: self.options.cap_add.clone(),
            read_only: self.options.read_only,
            secret_env: run.secrets.clone(),
        }
    }

    async fn ensure_image(&self, image: &str, log: &RunLog) -> Result<(), ExecutorError> {
        match self.options.pull {
            PullPolicy::Always => {
                log.line(&format!("pulling {image}"));
                self.engine.pull(image).await
            }
            PullPolicy::Missing => {
                if !self.engine.image_present(image).await? {
                    log.line(&format!("{image} is not on the engine; pulling it"));
                    self.engine.pull(image).await?;
                }
                Ok(())
            }
            PullPolicy::Never => {
                if self.engine.image_present(image).await? {
                    Ok(())
                } else {
                    Err(ExecutorError::image(
                        format!("starting a run from {image}"),
                        format!(
                            "image {image} is not on the engine and DockerOptions::pull PullPolicy::Never forbids pulling it; \
                             load it first (docker pull, docker load or docker import) or use PullPolicy::Missing"
                        ),
                        false,
                    ))
                }
            }
        }
    }

    /// Creates the run's folders and fills them; the container exists already.
    async fn prepare(&self, id: &str, run: &RunSpec) -> Result<(), ExecutorError> {
        self.engine.start(id).await?;
        // One upload to `/` creates the folders and fills them: Docker
        // refuses uploads to a missing path, and every request and exec is
        // a round trip through the engine.
        let mut what = format!("the checkout {} as /work", run.checkout.display());
        if let Some(steps) = &run.steps_dir {
            what.push_str(&format!(", the steps {} as /steps", steps.display()));
        }
        what.push_str(", empty /outputs and ");
        what.push_str(STATE_DIR);
        if self.options.read_only {
            // The engine takes no upload to a read-only `/`, only into the
            // volumes: one upload per filled folder, and the state folder
            // opened to every user as the single upload would have.
            let checkout = format!("the checkout {} as /work", run.checkout.display());
            self.engine
                .upload(id, "/work", &checkout, pack_dir(&run.checkout))
                .await?;
            if let Some(steps) = &run.steps_dir {
                let what = format!("the steps {} as /steps", steps.display());
                self.engine
                    .upload(id, "/steps", &what, pack_dir(steps))
                    .await?;
            }
            let chmod = format!("chmod 1777 {STATE_DIR}");
            self.exec_as_root(id, &chmod, "opening the state folder")
                .await?;
        } else {
            let folders = vec![
                PackedFolder::new("work", 0o755, Some(&run.checkout)),
                PackedFolder::new("steps", 0o755, run.steps_dir.as_deref()),
                PackedFolder::new("outputs", 0o755, None),
                PackedFolder::new(&STATE_DIR[1..], 0o1777, None),
            ];
            self.engine
                .upload(id, "/", &what, pack_folders(folders))
                .await?;
        }
        if let Some(user) = &self.options.user {
            // Uploaded files belong to root; the steps run as the user.
            let chown = format!(
                "chown -R {} /work /steps /outputs",
                executor_core::script::quote(user)
            );
            self.exec_as_root(id, &chown, "giving /work to DockerOptions::user")
                .await?;
        }
        Ok(())
    }

    /// Runs a runner-internal command as root, failing with its output;
    /// returns the first 4 KiB of its output.
    async fn exec_as_root(
        &self,
        id: &str,
        script: &str,
        what: &str,
    ) -> Result<String, ExecutorError> {
        let exec = ExecSpec {
            cmd: vec!["sh".into(), "-c".into(), script.into()],
            env: Vec::new(),
            working_dir: "/".into(),
            user: Some("0".into()),
        };
        let exec_id = self.engine.exec_create(id, &exec).await?;
        let mut output = self.engine.exec_start(&exec_id).await?;
        let mut said = Vec::new();
        while let Some(chunk) = output.next().await {
            let (_, chunk) = chunk?;
            if said.len() < 4096 {
                said.extend_from_slice(&chunk[..chunk.len().min(4096 - said.len())]);
            }
        }
        match self.settled(&exec_id).await?.exit_code {
            Some(0) => Ok(String::from_utf8_lossy(&said).into_owned()),
            Some(code) => Err(ExecutorError::backend(
                what,
                format!("exit {code}: {}", String::from_utf8_lossy(&said).trim()),
            )),
            None => Err(ExecutorError::LostExitStatus {
                what: what.to_string(),
                detail: "the engine reported no exit code".into(),
            }),
        }
    }

    /// Inspects an exec until it is no longer running, within [`EXEC_SETTLE`].
    async fn settled(&self, exec_id: &str) -> Result<crate::engine::ExecState, ExecutorError> {
        let deadline = tokio::time::Instant::now() + EXEC_SETTLE;
        let mut pause = Duration::from_millis(5);
        loop {
            let state = self.engine.exec_inspect(exec_id).await?;
            if !state.running {
                return Ok(state);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(ExecutorError::LostExitStatus {
                    what: format!("exec {exec_id}"),
                    detail: format!("its output ended but it still ran after {EXEC_SETTLE:?}"),
                });
            }
            // The engine has no call that waits for an exec to end: poll, backing off.
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Kills a step's process tree inside the container.
    async fn kill_step(&self, id: &str, pid_file: &str, exec_id: &str) {
        let script = executor_core::script::kill_tree(pid_file);
        if let Err(err) = self.exec_as_root(id, &script, "killing the step").await {
            tracing::warn!(%err, container = id, "could not kill an interrupted step");
        }
        if let Err(err) = self.settled(exec_id).await {
            tracing::warn!(%err, container = id, "an interrupted step did not stop");
        }
    }

    /// Whether the container still runs commands. A container being killed
    /// from outside may still be inspected as running for a moment after its
    /// processes died; an exec tells for sure.
    async fn answers(&self, id: &str) -> bool {
        self.exec_as_root(id, "true", "probing the container")
            .await
            .is_ok()
    }

    /// Whether the container's memory cgroup counted an OOM kill since the
    /// last look. Docker sets `OOMKilled` only when the container's main
    /// process dies of it, not an exec's, so the kernel's counter decides.
    async fn new_oom_kill(&self, id: &str) -> bool {
        let script = "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null; true";
        let Ok(text) = self.exec_as_root(id, script, "reading OOM counters").await else {
            return false;
        };
        let count = text
            .lines()
            .filter_map(|l| l.strip_prefix("oom_kill "))
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        let mut seen = self.oom_kills.lock().unwrap_or_else(|p| p.into_inner());
        let before = seen.insert(id.to_string(), count).unwrap_or(0);
        count > before
    }

    /// What a missing or failing exit code means, from the container's
    /// state: an error when the container is gone, the OOM kill's words
    /// when the kernel killed in it.
    async fn explain(&self, id: &str, code: Option<i64>) -> Result<Option<String>, ExecutorError> {
        let state = self.engine.inspect(id).await?;
        if !state.exists || !state.running {
            return Err(ExecutorError::EnvironmentLost(format!(
                "container {id} was {} while the step ran",
                if state.exists { "stopped" } else { "removed" }
            )));
        }
        // Inspect may still say running just after the container's main
        // process died; a lost code or a kill asks the container itself.
        if (code.is_none() || code == Some(137)) && !state.oom_killed && !self.answers(id).await {
            return Err(ExecutorError::EnvironmentLost(format!(
                "container {id} was killed while the step ran"
            )));
        }
        if code.is_some_and(|c| c != 0) && (state.oom_killed || self.new_oom_kill(id).await) {
            let limit = self
                .options
                .memory
                .map(|m| format!(" of {} MiB", m >> 20))
                .unwrap_or_default();
            return Ok(Some(format!(
                "OOMKilled: the step ran out of memory (the container's limit{limit})"
            )));
        }
        Ok(None)
    }
}

/// The container's anonymous volumes: the run's folders, as Kubernetes
/// emptyDirs are, and each absolute cache folder outside them. Files are
/// written straight to the engine's disk instead of through the image's
/// overlay, which costs most with many small files; a new volume starts
/// as a copy of what the image holds at its path, so a cache over a
/// folder the image fills (a toolchain's home) keeps that content; stop
/// removes them with the container.
fn run_volumes(run: &RunSpec) -> Vec<String> {
    let folders = RunHandle::in_container("");
    let mut volumes = vec![
        folders.work_dir,
        folders.steps_dir,
        folders.outputs_dir,
        STATE_DIR.to_string(),
    ];
    let nested = |path: &str, other: &str| {
        path == other
            || path.starts_with(&format!("{other}/"))
            || other.starts_with(&format!("{path}/"))
    };
    for cache in &run.caches {
        let path = cache.path.trim_end_matches('/');
        // Relative caches live under /work, already a volume; a cache
        // over or under another volume would shadow or split it.
        let clean = path
            .split('/')
            .skip(1)
            .all(|part| !matches!(part, "" | "." | ".."));
        if path.starts_with('/') && clean && !volumes.iter().any(|v| nested(path, v)) {
            volumes.push(path.to_string());
        }
    }
    volumes
}

#[async_trait]
impl Executor for DockerExecutor {
    fn kind(&self) -> &str {
        "docker"
    }

    fn check(&self, run: &RunSpec) -> Result<(), ExecutorError> {
        run.validate()?;
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
        let spec = self.container_spec(run, image);
        let id = self.engine.create(&spec).await?;
        log.line(&format!("container {} ({})", spec.name, short(&id)));
        let prepared = tokio::select! {
            r = self.prepare(&id, run) => r,
            _ = interrupt.cancelled() => Err(ExecutorError::Interrupted),
        };
        if let Err(err) = prepared {
            if let Err(remove_err) = self.engine.remove(&id).await {
                tracing::error!(%remove_err, container = %id, "removing a half-started container failed");
            }
            return Err(err);
        }
        self.live().insert(id.clone());
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
        let pid_file = format!("{STATE_DIR}/{}.pid", random_suffix());
        // Record the shell's pid so an interrupt can kill the step's
        // processes: the engine has no call to kill an exec.
        let cmd = executor_core::script::step_argv(&pid_file, "", &step.script);
        let exec = ExecSpec {
            cmd,
            env: step.env.clone(),
            working_dir: run.work_dir.clone(),
            user: self.options.user.clone(),
        };
        let started = async {
            let exec_id = self.engine.exec_create(id, &exec).await?;
            let output = self.engine.exec_start(&exec_id).await?;
            Ok::<_, ExecutorError>((exec_id, output))
        };
        let (exec_id, mut output) = match started.await {
            Ok(started) => started,
            Err(err) => {
                // A container removed before the step began is lost, not
                // an engine error.
                self.explain(id, None).await?;
                return Err(err);
            }
        };
        let mut stream_error = None;
        // A slow log holds the output back (back-pressure on the step); an
        // interrupt still ends it at once.
        let pump = async {
            while let Some(chunk) = output.next().await {
                match chunk {
                    Ok((stream, bytes)) => log.output_from(stream, &bytes).await,
                    Err(err) => {
                        stream_error = Some(err);
                        break;
                    }
                }
            }
        };
        let interrupted = tokio::select! {
            () = pump => false,
            _ = interrupt.cancelled() => true,
        };
        if interrupted {
            drop(output);
            self.kill_step(id, &pid_file, &exec_id).await;
            return Ok(CommandOutcome::Interrupted);
        }
        let state = match self.settled(&exec_id).await {
            Ok(state) => state,
            Err(err) => {
                self.explain(id, None).await?;
                return Err(err);
            }
        };
        match state.exit_code {
            Some(code) => {
                // Any failure may be an OOM kill the shell passed on as
                // its own code: the container's counters say, not the code.
                let oom = if code != 0 || stream_error.is_some() {
                    self.explain(id, Some(code)).await?
                } else {
                    None
                };
                if let (Some(err), None) = (&stream_error, &oom) {
                    tracing::warn!(%err, "exec output broke off; the exit code still arrived");
                }
                let code = i32::try_from(code).unwrap_or(i32::MAX);
                Ok(match oom {
                    Some(detail) => CommandOutcome::OutOfMemory {
                        code: Some(code),
                        detail,
                    },
                    None => CommandOutcome::exited(code),
                })
            }
            None => {
                self.explain(id, None).await?;
                Err(ExecutorError::LostExitStatus {
                    what: format!("step {}", step.name),
                    detail: match stream_error {
                        Some(err) => {
                            format!("output broke off ({err}) and the engine has no exit code")
                        }
                        None => "the engine reported no exit code".into(),
                    },
                })
            }
        }
    }

    async fn copy_in(&self, run: &RunHandle, src: &Path, path: &str) -> Result<(), ExecutorError> {
        let q = executor_core::script::quote(path);
        let mut mkdir = format!("mkdir -p {q}");
        if let Some(user) = &self.options.user {
            mkdir.push_str(&format!(
                " && chown {} {q}",
                executor_core::script::quote(user)
            ));
        }
        self.exec_as_root(&run.id, &mkdir, "creating a cache folder")
            .await?;
        self.engine
            .upload(&run.id, path, &src.display().to_string(), pack_dir(src))
            .await?;
        if let Some(user) = &self.options.user {
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
        let stream = self
            .engine
            .download(&run.id, path)
            .map_err(std::io::Error::other);
        let limits = UnpackLimits {
            // The engine names every entry after the folder: `outputs/...`.
            strip_components: 1,
            ..limits
        };
        Ok(unpack_untrusted(StreamReader::new(stream), dest, limits).await?)
    }

    async fn stop(&self, run: &RunHandle) -> Result<(), ExecutorError> {
        self.engine.remove(&run.id).await?;
        self.live().remove(&run.id);
        self.oom_kills
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&run.id);
        Ok(())
    }

    async fn cleanup(
        &self,
        runner: &str,
        scope: CleanupScope,
    ) -> Result<CleanupReport, ExecutorError> {
        let now = executor_core::labels::unix_now();
        let mut removed = Vec::new();
        for (id, labels) in self.runner_containers(runner).await? {
            if self.live().contains(&id) {
                continue;
            }
            let expired = labels
                .get(EXPIRES_KEY)
                .and_then(|e| e.parse::<u64>().ok())
                .is_none_or(|e| e <= now);
            if scope == CleanupScope::All || expired {
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
        Ok(CleanupReport { removed })
    }
}

/// The short form of a container id, as the docker CLI prints it.
fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

fn random_suffix() -> String {
    executor_core::labels::random_hex(8)
}

#[cfg(test)]
#[path = "executor_tests.rs"]
mod tests;
