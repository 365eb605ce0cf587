//! The dry-run cluster: prints every API call, makes none.

use std::io::Write;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use executor_core::ExecutorError;
use futures_util::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::WatchEvent;

use crate::cluster::{Cluster, Ended, ExecIo, ExecSession, PodEvents};

/// Prints each call as `METHOD /path` (for an exec, its command), and the
/// Job as YAML. Secret values are never printed, only their keys.
pub struct DryRunCluster {
    namespace: String,
    out: Arc<Mutex<Box<dyn Write + Send>>>,
    /// Whether the Job was deleted: from then on its pod is gone.
    job_deleted: std::sync::atomic::AtomicBool,
}

/// The name the dry-run gives the run's pod.
pub const DRY_POD_SUFFIX: &str = "-xxxxx";

impl DryRunCluster {
    /// A dry-run of namespace `namespace`, printing to `out`.
    pub fn new(namespace: impl Into<String>, out: impl Write + Send + 'static) -> Self {
        DryRunCluster {
            namespace: namespace.into(),
            out: Arc::new(Mutex::new(Box::new(out))),
            job_deleted: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn say(&self, line: impl AsRef<str>) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "{}", line.as_ref());
    }

    fn ns(&self) -> &str {
        &self.namespace
    }
}

/// The calls a dry-run prints for one line, as `(method, path)`; the lines
/// of the printed Job YAML are skipped. Used to compare a dry-run with the
/// requests a real run made.
pub fn calls(printed: &str) -> Vec<(String, String)> {
    printed
        .lines()
        .filter_map(|l| {
            let (method, rest) = l.split_once(' ')?;
            if !["GET", "POST", "PATCH", "DELETE", "PUT"].contains(&method) {
                return None;
            }
            let path = rest.split(['?', ' ']).next()?.to_string();
            Some((method.to_string(), path))
        })
        .collect()
}

fn ready_pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap_or_default()
}

#[async_trait]
impl Cluster for DryRunCluster {
    fn namespace(&self) -> &str {
        &self.namespace
    }
    async fn access_review(
        &self,
        permission: &crate::access::Permission,
    ) -> Result<bool, ExecutorError> {
        self.say(format!(
            "POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews (can {permission} in namespace {}?)",
            self.ns()
        ));
        Ok(true)
    }

    async fn create_secret(&self, secret: &Secret) -> Result<(), ExecutorError> {
        let keys: Vec<&String> = secret.string_data.iter().flat_map(|d| d.keys()).collect();
        self.say(format!(
            "POST /api/v1/namespaces/{}/secrets (Secret {} with keys {}; values not shown)",
            self.ns(),
            secret.metadata.name.clone().unwrap_or_default(),
            keys.iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(",")
        ));
        Ok(())
    }
    async fn create_job(&self, job: &Job) -> Result<Job, ExecutorError> {
        self.say(format!("POST /apis/batch/v1/namespaces/{}/jobs", self.ns()));
        self.job_deleted
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let value = serde_json::to_value(job).unwrap_or_default();
        self.say("---");
        self.say(crate::yaml::to_yaml(&value).trim_end());
        self.say("---");
        let mut created = job.clone();
        created.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
        Ok(created)
    }
    async fn own_secret(&self, name: &str, _owner: &OwnerReference) -> Result<(), ExecutorError> {
        self.say(format!(
            "PATCH /api/v1/namespaces/{}/secrets/{name} (ownerReferences: the Job)",
            self.ns()
        ));
        Ok(())
    }
    async fn list_pods(&self, selector: &str) -> Result<(Vec<Pod>, String), ExecutorError> {
        self.say(format!(
            "GET /api/v1/namespaces/{}/pods?labelSelector={selector}",
            self.ns()
        ));
        // The pod is Ready while the run lives and gone once its Job is deleted.
        if self.job_deleted.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok((Vec::new(), "2".into()));
        }
        let job = selector.strip_prefix("job-name=").unwrap_or(selector);
        Ok((
            vec![ready_pod(&format!("{job}{DRY_POD_SUFFIX}"))],
            "1".into(),
        ))
    }
    async fn watch_pods(&self, selector: &str, rv: &str) -> Result<PodEvents, ExecutorError> {
        self.say(format!("GET /api/v1/namespaces/{}/pods?labelSelector={selector}&watch=true&resourceVersion={rv}", self.ns()));
        let job = selector
            .strip_prefix("job-name=")
            .unwrap_or(selector)
            .to_string();
        Ok(
            futures_util::stream::iter([Ok(WatchEvent::Deleted(ready_pod(&format!(
                "{job}{DRY_POD_SUFFIX}"
            ))))])
            .boxed(),
        )
    }
    async fn get_pod(&self, name: &str) -> Result<Option<Pod>, ExecutorError> {
        self.say(format!("GET /api/v1/namespaces/{}/pods/{name}", self.ns()));
        Ok(Some(ready_pod(name)))
    }
    async fn admits_pod(&self, pod: &Pod) -> Result<Result<(), String>, ExecutorError> {
        let _ = pod;
        self.say(format!(
            "POST /api/v1/namespaces/{}/pods?dryRun=All (would admission take the run's pod? nothing is made)",
            self.ns()
        ));
        Ok(Ok(()))
    }
    async fn claim_exists(&self, name: &str) -> Result<bool, ExecutorError> {
        self.say(format!(
            "GET /api/v1/namespaces/{}/persistentvolumeclaims/{name}",
            self.ns()
        ));
        Ok(true)
    }
    async fn container_log(
        &self,
        pod: &str,
        container: &str,
        lines: usize,
    ) -> Result<String, ExecutorError> {
        self.say(format!(
            "GET /api/v1/namespaces/{}/pods/{pod}/log?container={container}&tailLines={lines}",
            self.ns()
        ));
        Ok(String::new())
    }
    async fn pod_events(&self, pod: &str) -> Result<Vec<Event>, ExecutorError> {
        self.say(format!(
            "GET /api/v1/namespaces/{}/events?fieldSelector=involvedObject.name={pod}",
            self.ns()
        ));
        Ok(Vec::new())
    }
    async fn exec(
        &self,
        pod: &str,
        container: &str,
        argv: &[String],
        stdin: bool,
    ) -> Result<Box<dyn ExecSession>, ExecutorError> {
        self.say(format!(
            "GET /api/v1/namespaces/{}/pods/{pod}/exec?container={container}&stdin={stdin} (WebSocket) {}",
            self.ns(),
            executor_container::detached::shown_argv(argv)
        ));
        Ok(Box::new(DryExec {
            marked: executor_container::detached::end_key(argv).map(str::to_string),
            channel: argv == executor_container::detached::channel_argv().as_slice(),
        }))
    }
    async fn delete_job(&self, name: &str) -> Result<(), ExecutorError> {
        self.say(format!(
            "DELETE /apis/batch/v1/namespaces/{}/jobs/{name} (propagationPolicy: Foreground)",
            self.ns()
        ));
        self.job_deleted
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
    async fn delete_secret(&self, name: &str) -> Result<(), ExecutorError> {
        self.say(format!(
            "DELETE /api/v1/namespaces/{}/secrets/{name}",
            self.ns()
        ));
        Ok(())
    }
    async fn list_jobs(&self, selector: &str) -> Result<Vec<Job>, ExecutorError> {
        self.say(format!(
            "GET /apis/batch/v1/namespaces/{}/jobs?labelSelector={selector}",
            self.ns()
        ));
        Ok(Vec::new())
    }
    async fn list_secrets(&self, selector: &str) -> Result<Vec<Secret>, ExecutorError> {
        self.say(format!(
            "GET /api/v1/namespaces/{}/secrets?labelSelector={selector}",
            self.ns()
        ));
        Ok(Vec::new())
    }
}

/// The dry-run's exec: it has started nothing, so it reads no stdin and
/// ends at once with success (what a run that goes on would see).
struct DryExec {
    /// A step's start or follow, with its end marks' key: both streams
    /// begin with the begin mark and end with the end mark, as they would.
    marked: Option<String>,
    /// The step channel: every start it is sent ends at once.
    channel: bool,
}

#[async_trait]
impl ExecSession for DryExec {
    fn closes_stdin(&self) -> bool {
        true
    }
    async fn finish(
        self: Box<Self>,
        io: ExecIo<'_>,
        _interrupt: &tokio_util::sync::CancellationToken,
    ) -> Result<Ended, ExecutorError> {
        if let (true, Some(stdin)) = (self.channel, io.stdin) {
            executor_container::detached::answer_as_dry_channel(stdin, io.stdout, io.stderr)
                .await
                .map_err(|e| ExecutorError::backend("dry-run output", e.to_string()))?;
            return Ok(Ended::Exited(0));
        }
        if let Some(key) = &self.marked {
            use tokio::io::AsyncWriteExt;
            let mark = [
                executor_container::detached::BEGIN_MARK,
                &executor_container::detached::end_mark(key, 0),
            ]
            .concat();
            io.stdout
                .write_all(&mark)
                .await
                .map_err(|e| ExecutorError::backend("dry-run output", e.to_string()))?;
            io.stderr
                .write_all(&mark)
                .await
                .map_err(|e| ExecutorError::backend("dry-run output", e.to_string()))?;
        }
        Ok(Ended::Exited(0))
    }
}
