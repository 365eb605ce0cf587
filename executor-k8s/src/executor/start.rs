//! A run's start: its permissions checked, its Secret and Job made, its
//! pod waited for and the checkout, steps and plan put in it; a start
//! that fails half-way removes what it made.

use executor_container::container::name_suffix;
use executor_core::resume::RunPlan;
use executor_core::script::ScriptFiles;
use executor_core::tar::pack_contents;
use executor_core::{Executor, ExecutorError, RunHandle, RunLog, RunSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use tokio_util::sync::CancellationToken;

use super::variables::PodVariables;
use super::{K8sExecutor, LiveRun};
use crate::access;
use crate::job::{objects, STATE_DIR};
use crate::wait;

impl K8sExecutor {
    /// [`Executor::start`](executor_core::Executor::start) of this backend.
    pub(super) async fn start_run(
        &self,
        run: &RunSpec,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<RunHandle, ExecutorError> {
        self.check(run)?;
        run.check_folders()?;
        self.check_run_permissions().await?;
        if !run.services.is_empty() {
            self.check_permissions(access::Purpose::Services).await?;
        }
        self.check_claims().await?;
        if self.cluster.tls_unverified() {
            log.line(
                "warning: the API server's certificate is not verified (insecure-skip-tls-verify, \
                 or a plain http server); the checkout and secrets go to whoever answers as the \
                 API server",
            );
        }
        let step_user = super::isolation::planned_step_user(&self.options)?;
        if step_user.is_none() {
            if let Some(uid) = self.options.run_as_user {
                log.line(&format!(
                    "the steps' user {uid} is also the runner's side's in the pod: one trust \
                     domain, where a process a step leaves behind can reach later steps"
                ));
            }
        }
        // The plan a resume reads back; its digest where no step can change it.
        let plan = RunPlan::of(run).to_json();
        let suffix = name_suffix();
        let now = executor_core::labels::unix_now();
        let made = |step_user: Option<&str>| {
            objects(
                run,
                &self.options,
                &suffix,
                now,
                &RunPlan::digest(&plan),
                // Asked only when it matters.
                !run.services.is_empty() && self.cluster.native_sidecars(),
                step_user,
            )
            .map_err(ExecutorError::InvalidInput)
        };
        let mut objects = made(step_user.as_deref())?;
        let admitted = self
            .admitted_step_user(&objects, step_user.clone(), log)
            .await?;
        if admitted != step_user {
            objects = made(admitted.as_deref())?;
        }
        let step_user = admitted;
        let name = objects.name.clone();
        if let Some(secret) = &objects.secret {
            self.cluster.create_secret(secret).await?;
        }
        let job = match self.cluster.create_job(&objects.job).await {
            Ok(job) => job,
            Err(err) => {
                if objects.secret.is_some() {
                    let _ = self.cluster.delete_secret(&name).await;
                }
                return Err(err);
            }
        };
        log.line(&format!(
            "job {name} in namespace {}",
            self.cluster.namespace()
        ));
        let prepared = async {
            if objects.secret.is_some() {
                let owner = OwnerReference {
                    api_version: "batch/v1".into(),
                    kind: "Job".into(),
                    name: name.clone(),
                    uid: job.metadata.uid.clone().unwrap_or_default(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                };
                self.cluster.own_secret(&name, &owner).await?;
            }
            let pod = match wait::ready(
                self.cluster.as_ref(),
                &name,
                &objects.pod_selector,
                self.options.pod_timeout,
                self.options.progress_every,
                log,
                &interrupt,
            )
            .await
            {
                Ok(pod) => pod,
                Err(err) => return Err(self.with_service_lines(&objects.pod_selector, err).await),
            };
            log.line(&format!("pod {pod} is ready"));
            self.live().insert(
                name.clone(),
                LiveRun {
                    pod: pod.clone(),
                    pod_selector: objects.pod_selector.clone(),
                    has_secret: objects.secret.is_some(),
                    variables: PodVariables::of(run, &RunHandle::in_container(name.clone())),
                    scripts: ScriptFiles::planned(run, STATE_DIR),
                    services: run.services.iter().map(|s| s.name.clone()).collect(),
                    log: (!run.services.is_empty()).then(|| log.clone()),
                    step_user: Default::default(),
                },
            );
            let copy = async {
                // The step scripts, as files in the state folder: a script of
                // any size, and none in an exec's URL (or an audit log).
                let (scripts, _) = ScriptFiles::staged(run, STATE_DIR)?;
                executor_core::resume::stage_plan(scripts.path(), &plan)?;
                executor_container::container::stage_helpers(scripts.path())?;
                // One stream fills every folder: each exec is a round trip
                // through the API server and the kubelet. Only the folders'
                // contents travel, so tar changes nothing of the mounts
                // themselves (a user other than root may not).
                let mut folders = vec![("work".to_string(), run.checkout.clone())];
                if let Some(steps) = &run.steps_dir {
                    folders.push(("steps".to_string(), steps.clone()));
                }
                folders.push((STATE_DIR[1..].to_string(), scripts.path().to_path_buf()));
                let what = format!("copying the checkout {} into /work", run.checkout.display());
                self.stream_packed(&pod, || pack_contents(folders.clone()), "/", &what)
                    .await?;
                if let Some(user) = &step_user {
                    let resolved = self.resolve_step_user(&pod, user, true).await?;
                    if let Some(live) = self.live().get_mut(&name) {
                        live.step_user = resolved;
                    }
                }
                let v5 = self
                    .v5
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .unwrap_or(true);
                log.line(if v5 {
                    "exec protocol: v5.channel.k8s.io"
                } else {
                    "exec protocol: v4.channel.k8s.io (the cluster predates v5: streams in are framed, since stdin cannot be closed)"
                });
                Ok::<_, ExecutorError>(())
            };
            // The services' checks run while the checkout goes in.
            let both = async {
                let (copied, ready) = tokio::join!(copy, self.until_services_ready(&pod, run, log));
                ready?;
                copied
            };
            tokio::select! {
                r = both => r,
                _ = interrupt.cancelled() => Err(ExecutorError::Interrupted),
            }
        };
        if let Err(err) = prepared.await {
            self.live().remove(&name);
            if let Err(teardown) = self
                .teardown(&name, &objects.pod_selector, objects.secret.is_some())
                .await
            {
                tracing::error!(%teardown, job = %name, "removing a half-started Job failed");
            }
            return Err(err);
        }
        Ok(RunHandle::in_container(name))
    }

    /// Refuses a run whose pod template mounts a PersistentVolumeClaim the
    /// namespace lacks: a real scheduler would leave its pod Pending
    /// until the pod timeout.
    async fn check_claims(&self) -> Result<(), ExecutorError> {
        let Some(template) = &self.options.pod_template else {
            return Ok(());
        };
        let claims = template.claims();
        if claims.is_empty() {
            return Ok(());
        }
        self.check_permissions(access::Purpose::Claims).await?;
        for claim in claims {
            if !self.cluster.claim_exists(&claim).await? {
                return Err(ExecutorError::InvalidInput(format!(
                    "K8sOptions::pod_template mounts the PersistentVolumeClaim {claim}, which \
                     namespace {} does not have; create it (or name one it has) first",
                    self.cluster.namespace()
                )));
            }
        }
        Ok(())
    }
}
