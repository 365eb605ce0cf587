//! A run's Job found again: by a new runner process that carries it on,
//! by cleanup that removes a crashed one, and by the probe for leftovers.

use super::*;

impl K8sExecutor {
    /// Every Job, pod and Secret of `runner` that exists now: the probe for
    /// leftovers. A Job already deleted in the foreground is not one: once
    /// its pods are gone only the garbage collector's removal of the object
    /// is left, and any pod it still has is listed on its own.
    ///
    /// # Errors
    /// `Backend` when the cluster could not be listed.
    pub async fn leftovers(&self, runner: &str) -> Result<Vec<String>, ExecutorError> {
        let selector = runner_selector(runner);
        let mut found = Vec::new();
        for job in self.cluster.list_jobs(&selector).await? {
            if job.metadata.deletion_timestamp.is_none() {
                found.push(format!("job/{}", job.metadata.name.unwrap_or_default()));
            }
        }
        for secret in self.cluster.list_secrets(&selector).await? {
            found.push(format!(
                "secret/{}",
                secret.metadata.name.unwrap_or_default()
            ));
        }
        for pod in self.cluster.list_pods(&selector).await?.0 {
            found.push(format!("pod/{}", pod.metadata.name.unwrap_or_default()));
        }
        Ok(found)
    }

    /// Deletes the Job (its pod goes with it) and the Secret, and waits for the pod.
    pub(super) async fn teardown(
        &self,
        name: &str,
        pod_selector: &str,
        has_secret: bool,
    ) -> Result<(), ExecutorError> {
        let job = self.cluster.delete_job(name).await;
        let secret = if has_secret {
            self.cluster.delete_secret(name).await
        } else {
            Ok(())
        };
        job?;
        secret?;
        wait::gone(
            self.cluster.as_ref(),
            pod_selector,
            self.options.stop_timeout,
        )
        .await
    }

    /// [`Executor::reattach`]: the live Job of run `name`, its pod ready,
    /// its plan read back.
    pub(super) async fn reattach_run(
        &self,
        runner: &str,
        name: &str,
    ) -> Result<Reattached, ExecutorError> {
        self.check_run_permissions().await?;
        let jobs: Vec<_> = self
            .cluster
            .list_jobs(&runner_selector(runner))
            .await?
            .into_iter()
            .filter(|job| job.metadata.deletion_timestamp.is_none())
            .collect();
        let place = format!("in namespace {}", self.cluster.namespace());
        let place = Place {
            kind: "Job",
            place: &place,
        };
        let (job, digest) = the_live_run(
            jobs,
            |j| j.metadata.annotations.as_ref(),
            runner,
            name,
            place,
        )?;
        let job_name = job.metadata.name.clone().unwrap_or_default();
        let status = job.status.as_ref();
        if status.and_then(|s| s.succeeded).unwrap_or(0) > 0
            || status.and_then(|s| s.failed).unwrap_or(0) > 0
        {
            return Err(ExecutorError::InvalidInput(format!(
                "job {job_name} of run {name:?} has finished: its pod is gone, so there is nothing to carry on"
            )));
        }
        let pod_selector = format!("job-name={job_name}");
        let services: Vec<String> = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
                    .map(|c| c.name.clone())
                    .filter(|n| n != crate::job::CONTAINER)
                    .collect()
            })
            .unwrap_or_default();
        let pod = wait::ready(
            self.cluster.as_ref(),
            &job_name,
            &pod_selector,
            self.options.pod_timeout,
            self.options.progress_every,
            &RunLog::discard(),
            &CancellationToken::new(),
        )
        .await?;
        let handle = RunHandle::in_container(job_name.clone());
        self.live().insert(
            job_name.clone(),
            LiveRun {
                pod: pod.clone(),
                pod_selector,
                // Deleting a Secret that is not there is fine.
                has_secret: true,
                variables: PodVariables::default(),
                scripts: ScriptFiles::default(),
                services,
                log: None,
                step_user: Default::default(),
            },
        );
        // The steps' user the first runner kept apart: the pod is root's,
        // so no step may start but through the agent's drop to it.
        let step_user = job
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(super::STEP_USER_KEY))
            .cloned();
        if let Some(user) = step_user {
            match self.resolve_step_user(&pod, &user, false).await {
                Ok(resolved) => {
                    if let Some(live) = self.live().get_mut(&job_name) {
                        live.step_user = resolved;
                    }
                }
                Err(err) => {
                    self.live().remove(&job_name);
                    return Err(err);
                }
            }
        }
        let plan = match read_plan(self, &handle, STATE_DIR, &digest).await {
            Ok(plan) => plan,
            Err(err) => {
                self.live().remove(&job_name);
                return Err(err);
            }
        };
        let spec = plan.spec();
        if let Some(live) = self.live().get_mut(&job_name) {
            live.variables = PodVariables::of(&spec, &handle);
            live.scripts = ScriptFiles::planned(&spec, STATE_DIR);
        }
        Ok(Reattached { handle, plan })
    }

    /// [`Executor::cleanup`]: `runner`'s Jobs and Secrets that are not live
    /// here and are expired (or all of them, with `CleanupScope::All`).
    pub(super) async fn cleanup_runs(
        &self,
        runner: &str,
        scope: CleanupScope,
    ) -> Result<CleanupReport, ExecutorError> {
        self.check_cleanup_permissions().await?;
        let selector = runner_selector(runner);
        let now = executor_core::labels::unix_now();
        let live: Vec<String> = self.live().keys().cloned().collect();
        let owned = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            let annotations = meta.annotations.clone().unwrap_or_default();
            let mine = is_runners(&annotations, runner);
            let expired = expired(&annotations, now);
            let name = meta.name.clone().unwrap_or_default();
            (mine && !live.contains(&name) && (scope == CleanupScope::All || expired))
                .then_some(name)
        };
        let mut removed = Vec::new();
        let jobs = self.cluster.list_jobs(&selector).await?;
        let job_names: Vec<String> = jobs
            .iter()
            .filter_map(|j| j.metadata.name.clone())
            .collect();
        for job in &jobs {
            if let Some(name) = owned(&job.metadata) {
                self.teardown(&name, &format!("job-name={name}"), true)
                    .await?;
                removed.push(format!("job/{name}"));
            }
        }
        for secret in self.cluster.list_secrets(&selector).await? {
            if let Some(name) = owned(&secret.metadata) {
                if !job_names.contains(&name) {
                    self.cluster.delete_secret(&name).await?;
                    removed.push(format!("secret/{name}"));
                }
            }
        }
        Ok(CleanupReport { removed })
    }
}
