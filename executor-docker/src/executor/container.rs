//! The run's container: its spec, its image, its folders and checkout.

use super::*;
use executor_container::container::{environment_name, name_suffix, Marks, KEEP_ALIVE};

impl DockerExecutor {
    pub(super) fn container_spec(
        &self,
        run: &RunSpec,
        image: &str,
        plan_digest: &str,
    ) -> ContainerSpec {
        let marks = Marks::of(
            run,
            executor_core::labels::unix_now(),
            self.options.expiry_grace,
            plan_digest,
        );
        // A label holds any value on Docker: the notes go with the labels.
        let mut labels: HashMap<String, String> =
            marks.labels.into_iter().chain(marks.notes).collect();
        let name = environment_name(run, &name_suffix());
        let (network_mode, own) = self.network_for(run, &name);
        if let (Some(network), true) = (&network_mode, own) {
            labels.insert(bounds::NETWORK_LABEL.into(), network.clone());
        }
        if let Some(user) = &self.options.user {
            labels.insert(bounds::USER_LABEL.into(), user.clone());
        }
        if !run.services.is_empty() {
            labels.insert(super::services::SERVICES_LABEL.into(), name.clone());
        }
        ContainerSpec {
            name,
            image: image.to_string(),
            cmd: KEEP_ALIVE.map(String::from).to_vec(),
            entrypoint: None,
            env: Vec::new(),
            network_aliases: Vec::new(),
            labels,
            // The keep-alive runs as the image's user; only steps run as
            // --user, so the runner's own root execs keep their capabilities.
            user: None,
            working_dir: "/".into(),
            memory: self.options.memory,
            nano_cpus: self.options.cpus.map(|c| (c * 1e9) as i64),
            network_mode,
            security_opt: vec!["no-new-privileges".into()],
            volumes: run_volumes(run),
            pids_limit: self.options.pids_limit,
            cap_drop: self.cap_drop_for(run),
            cap_add: self.options.cap_add.clone(),
            read_only: self.options.read_only,
            secret_env: run.secrets.clone(),
            host: self.options.host.clone(),
        }
    }

    pub(super) async fn ensure_image(
        &self,
        image: &str,
        log: &RunLog,
    ) -> Result<(), ExecutorError> {
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

    /// Removes what a start that failed had made.
    pub(super) async fn remove_half_started(&self, id: Option<&str>, network: Option<&str>) {
        if let Some(id) = id {
            let made = self
                .services
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(id);
            self.remove_services(&made.unwrap_or_default()).await;
        }
        if let Some(id) = id {
            if let Err(remove_err) = self.engine.remove(id).await {
                tracing::error!(%remove_err, container = %id, "removing a half-started container failed");
            }
        }
        if let Some(network) = network {
            if let Err(remove_err) = self.remove_network(network).await {
                tracing::error!(%remove_err, %network, "removing a half-started run's network failed");
            }
        }
    }

    /// Creates the run's folders and fills them; the container exists already.
    pub(super) async fn prepare(
        &self,
        id: &str,
        run: &RunSpec,
        plan: &[u8],
    ) -> Result<ScriptFiles, ExecutorError> {
        self.engine.start(id).await?;
        // The step scripts go in with the checkout, as files in the state
        // folder: a script of any size, and none in an exec's command line.
        let (scripts_dir, scripts) = ScriptFiles::staged(run, STATE_DIR)?;
        executor_core::resume::stage_plan(scripts_dir.path(), plan)?;
        executor_container::container::stage_helpers(scripts_dir.path())?;
        // One upload to `/` creates the folders and fills them: Docker
        // refuses uploads to a missing path, and every request and exec is
        // a round trip through the engine.
        let mut what = format!("the checkout {} as /work", run.checkout.display());
        if let Some(steps) = &run.steps_dir {
            what.push_str(&format!(", the steps {} as /steps", steps.display()));
        }
        what.push_str(", empty /outputs and the step scripts in ");
        what.push_str(STATE_DIR);
        if self.options.read_only {
            // The engine takes no upload to a read-only `/`, only into the
            // volumes: one upload per filled folder, and the state folder
            // opened to every user as the single upload would have.
            let checkout = format!("the checkout {} as /work", run.checkout.display());
            self.upload(id, "/work", &checkout, || pack_dir(&run.checkout))
                .await?;
            if let Some(steps) = &run.steps_dir {
                let what = format!("the steps {} as /steps", steps.display());
                self.upload(id, "/steps", &what, || pack_dir(steps)).await?;
            }
            self.upload(id, STATE_DIR, "the step scripts", || {
                pack_dir(scripts_dir.path())
            })
            .await?;
            let chmod = format!("chmod 1777 {STATE_DIR}");
            self.exec_as_root(id, &chmod, "opening the state folder")
                .await?;
        } else {
            let folders = || {
                vec![
                    PackedFolder::new("work", 0o755, Some(&run.checkout)),
                    PackedFolder::new("steps", 0o755, run.steps_dir.as_deref()),
                    PackedFolder::new("outputs", 0o755, None),
                    PackedFolder::new(&STATE_DIR[1..], 0o1777, Some(scripts_dir.path())),
                ]
            };
            self.upload(id, "/", &what, || pack_folders(folders()))
                .await?;
        }
        // Uploaded files belong to root; the steps' user gets the run's
        // folders after this (`resolve_step_user`).
        Ok(scripts)
    }
}

/// The container's anonymous volumes: the run's folders, as Kubernetes
/// emptyDirs are, and each absolute cache folder outside them. Files are
/// written straight to the engine's disk instead of through the image's
/// overlay, which costs most with many small files; a new volume starts
/// as a copy of what the image holds at its path, so a cache over a
/// folder the image fills (a toolchain's home) keeps that content; stop
/// removes them with the container.
pub(super) fn run_volumes(run: &RunSpec) -> Vec<String> {
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
