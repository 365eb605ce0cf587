//! A run's services as containers of its pod: ready before the first step,
//! their failures named with their last lines, their output kept.

use std::time::Duration;

use executor_core::service::{listening_probe, until_ready, Look, SERVICE_TAIL_LINES};
use executor_core::{ExecutorError, FailureKind, Readiness, RunLog, RunSpec, Service};
use tokio_util::sync::CancellationToken;

use super::K8sExecutor;
use crate::cluster::{Ended, ExecIo};
use crate::job::CONTAINER;
use crate::pod_status::service_fate;

/// How many of a service's last lines the run log keeps at the end.
const KEPT_LINES: usize = 200;

impl K8sExecutor {
    /// Waits until every service of `run` in `pod` passes its check,
    /// within the run's `service_timeout`; a service that ends or never
    /// passes fails the run, named with its last lines.
    pub(super) async fn until_services_ready(
        &self,
        pod: &str,
        run: &RunSpec,
        log: &RunLog,
    ) -> Result<(), ExecutorError> {
        let waits = run
            .services
            .iter()
            .map(|service| self.until_ready(pod, service, run.service_timeout, log));
        futures_util::future::try_join_all(waits).await.map(|_| ())
    }

    async fn until_ready(
        &self,
        pod: &str,
        service: &Service,
        limit: Duration,
        log: &RunLog,
    ) -> Result<(), ExecutorError> {
        match until_ready(limit, || self.look(pod, service)).await? {
            None => {
                log.line(&format!("service {}: ready", service.name));
                Ok(())
            }
            Some(why) => Err(self.service_failed(pod, &service.name, &why).await),
        }
    }

    /// One look at a service not ready yet: its container's fate in the
    /// pod, then its check.
    async fn look(&self, pod: &str, service: &Service) -> Result<Look, ExecutorError> {
        if let Some(fate) = self
            .cluster
            .get_pod(pod)
            .await?
            .as_ref()
            .and_then(service_fate)
            .filter(|f| f.service.as_deref() == Some(service.name.as_str()))
        {
            return Ok(Look::Ended(format!("{} before it was ready", fate.message)));
        }
        let Some(check) = &service.ready else {
            return Ok(Look::Ready);
        };
        Ok(match self.check_ready(pod, service, check).await {
            Ok((0, _)) => Look::Ready,
            Ok((code, said)) => Look::NotYet(format!("its check exited {code}: {}", said.trim())),
            // It may have ended between the look and the check: the
            // next look at the pod says so.
            Err(err) if err.kind() != FailureKind::Unreachable => {
                Look::NotYet(format!("its check failed: {err}"))
            }
            Err(err) => return Err(err),
        })
    }

    /// Runs `check`: a port's listener is read in the step container,
    /// which shares the service's network namespace (only `sh` needed);
    /// a script runs in the service's own container.
    async fn check_ready(
        &self,
        pod: &str,
        service: &Service,
        check: &Readiness,
    ) -> Result<(i32, String), ExecutorError> {
        let (container, script) = match check {
            Readiness::Tcp(port) => (CONTAINER, listening_probe(*port)),
            Readiness::Exec(script) => (service.name.as_str(), script.clone()),
        };
        let argv = vec!["sh".to_string(), "-ec".to_string(), script];
        let exec = self.cluster.exec(pod, container, &argv, false).await?;
        let mut said = executor_core::text::HeadBuffer::new(4096);
        let mut errors = executor_core::text::HeadBuffer::new(4096);
        let io = ExecIo {
            stdin: None,
            stdout: &mut said,
            stderr: &mut errors,
        };
        let ended = exec.finish(io, &CancellationToken::new()).await?;
        let text = format!("{}{}", said.text(), errors.text());
        Ok(match ended {
            Ended::Exited(code) => (code, text),
            // A check whose end was not told has not passed.
            Ended::Failed(msg) | Ended::Closed(msg) => (-1, format!("{text}{msg}")),
            Ended::Interrupted => return Err(ExecutorError::Interrupted),
        })
    }

    /// The failure of service `name` in `pod`, with its last lines.
    async fn service_failed(&self, pod: &str, name: &str, why: &str) -> ExecutorError {
        let lines = match self
            .cluster
            .container_log(pod, name, SERVICE_TAIL_LINES)
            .await
        {
            Ok(tail) if tail.trim().is_empty() => "it printed nothing".to_string(),
            Ok(tail) => format!("its last lines:\n{}", tail.trim_end()),
            Err(err) => format!("its output could not be read: {err}"),
        };
        ExecutorError::classified(
            FailureKind::Service,
            format!("service {name}"),
            format!("{why}; {lines}"),
        )
    }

    /// `err` from the pod's start, with the last lines of the service it
    /// names when it is a service's failure.
    pub(super) async fn with_service_lines(
        &self,
        selector: &str,
        err: ExecutorError,
    ) -> ExecutorError {
        let ExecutorError::Backend {
            context,
            message,
            kind: FailureKind::Service,
            ..
        } = &err
        else {
            return err;
        };
        let Some(name) = context.strip_prefix("service ") else {
            return err;
        };
        let pod = match self.cluster.list_pods(selector).await {
            Ok((pods, _)) => pods.into_iter().find_map(|p| p.metadata.name),
            Err(_) => None,
        };
        match pod {
            Some(pod) => self.service_failed(&pod, name, message).await,
            None => err,
        }
    }

    /// A sentence for a step that failed while a service had ended.
    pub(super) async fn stopped_services(&self, pod: &str) -> Option<String> {
        let pod = self.cluster.get_pod(pod).await.ok()??;
        let ended: Vec<String> = crate::pod_status::service_statuses(&pod)
            .into_iter()
            .filter_map(|c| {
                let t = c.state.as_ref()?.terminated.as_ref()?;
                Some(format!(
                    "service {} exited {} during the step",
                    c.name, t.exit_code
                ))
            })
            .collect();
        (!ended.is_empty()).then(|| ended.join("; "))
    }

    /// Writes each service's last lines into `log`.
    pub(super) async fn keep_service_output(&self, pod: &str, services: &[String], log: &RunLog) {
        for name in services {
            match self.cluster.container_log(pod, name, KEPT_LINES).await {
                Ok(text) if !text.trim().is_empty() => {
                    log.line(&format!(
                        "service {name}: its last {KEPT_LINES} lines at most"
                    ));
                    for line in text.lines() {
                        log.line(&format!("{name}| {line}"));
                    }
                }
                Ok(_) => {}
                Err(err) => log.line(&format!(
                    "service {name}: its output could not be read: {err}"
                )),
            }
        }
    }
}
