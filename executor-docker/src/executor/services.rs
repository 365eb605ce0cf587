//! A run's service containers: one per service on the run's network,
//! reached by its name, labelled as the run's container is, and ready
//! before the first step.

use super::*;
use executor_core::service::{listening_probe, until_ready, Look, SERVICE_TAIL_LINES};
use executor_core::{FailureKind, Readiness, Service};

/// A service container's label: the service's name.
pub(crate) const SERVICE_LABEL: &str = "knotless.service";
/// A service container's label: the name of its run's container.
pub(crate) const SERVICE_OF_LABEL: &str = "knotless.service-of";
/// The run container's label when it has services: its own name, which
/// its services' [`SERVICE_OF_LABEL`] holds.
pub(crate) const SERVICES_LABEL: &str = "knotless.services";

/// How many of a service's last lines the run log keeps at the end.
const KEPT_LINES: usize = 200;

/// A service container of a live run.
#[derive(Debug, Clone)]
pub(super) struct Running {
    pub(super) name: String,
    pub(super) id: String,
}

impl DockerExecutor {
    /// The container of `service`, beside the run container `run_spec`:
    /// on its network under the service's name, with its limits,
    /// dropped capabilities and labels.
    fn service_spec(
        &self,
        run: &RunSpec,
        run_spec: &ContainerSpec,
        service: &Service,
    ) -> ContainerSpec {
        let mut labels: HashMap<String, String> = run_spec
            .labels
            .iter()
            .filter(|(k, _)| k.as_str() != SERVICES_LABEL && k.as_str() != bounds::USER_LABEL)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.insert(SERVICE_LABEL.into(), service.name.clone());
        labels.insert(SERVICE_OF_LABEL.into(), run_spec.name.clone());
        ContainerSpec {
            name: format!("{}-{}", run_spec.name, service.name),
            image: service.image.clone(),
            cmd: Vec::new(),
            entrypoint: service
                .command
                .as_ref()
                .map(|script| vec!["sh".into(), "-ec".into(), script.clone()]),
            env: service.env.clone(),
            network_aliases: vec![service.name.clone()],
            labels,
            user: None,
            working_dir: String::new(),
            memory: run_spec.memory,
            nano_cpus: run_spec.nano_cpus,
            network_mode: run_spec.network_mode.clone(),
            security_opt: run_spec.security_opt.clone(),
            volumes: Vec::new(),
            pids_limit: run_spec.pids_limit,
            cap_drop: self.cap_drop_for(run),
            cap_add: Vec::new(),
            read_only: false,
            secret_env: Vec::new(),
            // A service runs as its image has it: the operator's settings are the run's.
            host: crate::HostSettings::default(),
        }
    }

    /// Creates and starts every service of `run` beside the run container
    /// `run_spec`, and waits until each is ready, within the run's
    /// `service_timeout`. On failure the services made are removed.
    pub(super) async fn start_services(
        &self,
        run: &RunSpec,
        run_spec: &ContainerSpec,
        log: &RunLog,
    ) -> Result<Vec<Running>, ExecutorError> {
        let mut running = Vec::new();
        let started = self.start_each(run, run_spec, log, &mut running).await;
        let ready = match started {
            Ok(()) => {
                let waits = running
                    .iter()
                    .zip(&run.services)
                    .map(|(r, s)| self.until_ready(r, s, run.service_timeout, log));
                futures_util::future::try_join_all(waits).await.map(|_| ())
            }
            Err(err) => Err(err),
        };
        match ready {
            Ok(()) => Ok(running),
            Err(err) => {
                self.remove_services(&running).await;
                Err(err)
            }
        }
    }

    async fn start_each(
        &self,
        run: &RunSpec,
        run_spec: &ContainerSpec,
        log: &RunLog,
        running: &mut Vec<Running>,
    ) -> Result<(), ExecutorError> {
        for service in &run.services {
            let failed = |err: ExecutorError| {
                ExecutorError::classified(
                    FailureKind::Service,
                    format!("service {}", service.name),
                    format!("cannot start from {}: {err}", service.image),
                )
            };
            self.ensure_image(&service.image, log)
                .await
                .map_err(failed)?;
            let spec = self.service_spec(run, run_spec, service);
            let id = self.engine.create(&spec).await.map_err(failed)?;
            running.push(Running {
                name: service.name.clone(),
                id: id.clone(),
            });
            self.engine.start(&id).await.map_err(failed)?;
            log.line(&format!(
                "service {} from {} ({})",
                service.name,
                service.image,
                short(&id)
            ));
        }
        Ok(())
    }

    /// Waits until `service` is ready: it runs and its check passes;
    /// fails when it exits or is not ready within `limit`, naming its
    /// last lines.
    async fn until_ready(
        &self,
        running: &Running,
        service: &Service,
        limit: Duration,
        log: &RunLog,
    ) -> Result<(), ExecutorError> {
        match until_ready(limit, || self.look(running, service)).await? {
            None => {
                log.line(&format!("service {}: ready", running.name));
                Ok(())
            }
            Some(why) => Err(self.service_failed(running, &why).await),
        }
    }

    /// One look at a service not ready yet: whether it still runs, then
    /// its check.
    async fn look(&self, running: &Running, service: &Service) -> Result<Look, ExecutorError> {
        let ended = |state: crate::engine::ContainerState| {
            let how = state
                .exit_code
                .map_or_else(|| "stopped".to_string(), |c| format!("exited {c}"));
            Look::Ended(format!("{how} before it was ready"))
        };
        let state = self.engine.inspect(&running.id).await?;
        if !state.running {
            return Ok(ended(state));
        }
        let Some(check) = &service.ready else {
            return Ok(Look::Ready);
        };
        Ok(match self.check_ready(&running.id, check).await {
            Ok((0, _)) => Look::Ready,
            Ok((code, said)) => Look::NotYet(format!("its check exited {code}: {}", said.trim())),
            // The engine did not answer the check: looked at again, as a
            // check not passed yet, within the service's limit.
            Err(err) if err.kind() == executor_core::FailureKind::Unreachable => {
                Look::NotYet(format!("its check got no answer: {err}"))
            }
            // It may have ended between the look and the check: the
            // engine refuses an exec in a container that stopped.
            Err(err) => match self.engine.inspect(&running.id).await {
                Ok(state) if !state.running => ended(state),
                _ => return Err(err),
            },
        })
    }

    /// Runs `check` in the service's container: its exit code and its
    /// first 4 KiB of output.
    async fn check_ready(
        &self,
        id: &str,
        check: &Readiness,
    ) -> Result<(i64, String), ExecutorError> {
        let script = match check {
            Readiness::Tcp(port) => listening_probe(*port),
            Readiness::Exec(script) => script.clone(),
        };
        let exec = ExecSpec {
            cmd: vec!["sh".into(), "-ec".into(), script],
            env: Vec::new(),
            working_dir: "/".into(),
            user: None,
            stdin: false,
        };
        let exec_id = self.engine.exec_create(id, &exec).await?;
        let mut output = self.engine.exec_start(&exec_id).await?;
        let mut said = Vec::new();
        while let Some(chunk) = output.next().await {
            let (_, chunk) = chunk?;
            let room = 4096usize.saturating_sub(said.len());
            said.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
        // An exec whose code is lost counts as a check not passed.
        let code = self.settled(&exec_id).await?.exit_code.unwrap_or(-1);
        Ok((code, String::from_utf8_lossy(&said).into_owned()))
    }

    /// The failure of a service, with its last lines.
    async fn service_failed(&self, running: &Running, why: &str) -> ExecutorError {
        let tail = self
            .engine
            .logs(&running.id, SERVICE_TAIL_LINES)
            .await
            .unwrap_or_default();
        let tail = tail.trim_end();
        let lines = if tail.is_empty() {
            "it printed nothing".to_string()
        } else {
            format!("its last lines:\n{tail}")
        };
        ExecutorError::classified(
            FailureKind::Service,
            format!("service {}", running.name),
            format!("{why}; {lines}"),
        )
    }

    /// A sentence for a step that failed while a service had stopped.
    pub(super) async fn stopped_services(&self, run_id: &str) -> Option<String> {
        let running = self.services_of(run_id);
        let mut stopped = Vec::new();
        for service in &running {
            if let Ok(state) = self.engine.inspect(&service.id).await {
                if !state.running {
                    let how = state
                        .exit_code
                        .map_or_else(|| "stopped".to_string(), |c| format!("exited {c}"));
                    stopped.push(format!("service {} {how} during the step", service.name));
                }
            }
        }
        (!stopped.is_empty()).then(|| stopped.join("; "))
    }

    /// Writes each service's last lines into the run log.
    pub(super) async fn keep_service_output(&self, running: &[Running], log: &RunLog) {
        for service in running {
            match self.engine.logs(&service.id, KEPT_LINES).await {
                Ok(text) if !text.trim().is_empty() => {
                    log.line(&format!(
                        "service {}: its last {KEPT_LINES} lines at most",
                        service.name
                    ));
                    for line in text.lines() {
                        log.line(&format!("{}| {line}", service.name));
                    }
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(%err, service = %service.name, "cannot read a service's output")
                }
            }
        }
    }

    /// Where run `id`'s services' output goes at stop: the first log a
    /// step of it wrote to (a resumed run's new log).
    pub(super) fn keep_log_for_services(&self, id: &str, log: &RunLog) {
        self.service_logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_string())
            .or_insert_with(|| log.clone());
    }

    /// Keeps the output of run `id`'s services (of its container `name`)
    /// and removes them.
    pub(super) async fn stop_services(&self, id: &str, name: &str) -> Result<(), ExecutorError> {
        let mut running = self.services_of(id);
        if running.is_empty() {
            running = self.listed_services(name).await?;
        }
        let log = self
            .service_logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        if let Some(log) = log {
            self.keep_service_output(&running, &log).await;
        }
        for service in &running {
            self.engine.remove(&service.id).await?;
        }
        self.services
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        Ok(())
    }

    /// Removes `running`'s containers; what fails is left to cleanup.
    pub(super) async fn remove_services(&self, running: &[Running]) {
        for service in running {
            if let Err(err) = self.engine.remove(&service.id).await {
                tracing::warn!(%err, service = %service.name, "removing a service container failed; cleanup removes it later");
            }
        }
    }

    /// The service containers of the run container named `name`, by label.
    pub(super) async fn listed_services(&self, name: &str) -> Result<Vec<Running>, ExecutorError> {
        Ok(self
            .engine
            .list(SERVICE_OF_LABEL, name)
            .await?
            .into_iter()
            .filter(|c| c.labels.get(SERVICE_OF_LABEL).map(String::as_str) == Some(name))
            .map(|c| Running {
                name: c.labels.get(SERVICE_LABEL).cloned().unwrap_or_default(),
                id: c.id,
            })
            .collect())
    }

    pub(super) fn services_of(&self, run_id: &str) -> Vec<Running> {
        self.services
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
            .cloned()
            .unwrap_or_default()
    }
}
