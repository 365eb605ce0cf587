//! A kubelet whose pods are real containers in the Docker-compatible engine
//! the Docker backend's tests use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bollard::query_parameters::{ListContainersOptions, RemoveContainerOptions};
use bollard::Docker;
use serde_json::{json, Value};

use crate::faults::{Faults, PodFault};
use crate::store::{timestamp, Kind, Store};

mod containers;
mod deletion;
mod init;
mod lifecycle;
mod volumes;

pub use volumes::remove_cluster_volumes;

/// A pod's namespace and name.
type PodKey = (String, String);

/// Label on every container of one test cluster.
pub const CLUSTER_LABEL: &str = "dev.knotless.testcluster";
/// The one node's name.
pub const NODE: &str = "knotless-test-node";

/// Runs pods as containers.
pub struct Kubelet {
    pub(crate) docker: Docker,
    cluster_id: String,
    pub(crate) store: Arc<Store>,
    faults: Arc<Faults>,
    network: Option<String>,
    containers: Mutex<HashMap<(String, String), String>>,
    /// Per pod, its containers after the first: name and engine id.
    sidecars: Mutex<HashMap<PodKey, Vec<(String, String)>>>,
    tasks: tokio_util::task::TaskTracker,
    closing: tokio_util::sync::CancellationToken,
    /// Held while the scheduler places one pod.
    scheduling: std::sync::Mutex<()>,
}

fn condition(kind: &str, status: bool, reason: Option<&str>, message: Option<&str>) -> Value {
    let mut c = json!({
        "type": kind,
        "status": if status { "True" } else { "False" },
        "lastProbeTime": null,
        "lastTransitionTime": timestamp(),
    });
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

/// Bytes of a Kubernetes quantity such as `64Mi`, `1G`, `500000`.
pub fn parse_quantity(q: &str) -> Option<i64> {
    let units = [
        ("Ki", 1i64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ];
    for (suffix, scale) in units {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<f64>().ok().map(|n| (n * scale as f64) as i64);
        }
    }
    q.parse::<f64>().ok().map(|n| n as i64)
}

impl Kubelet {
    pub(crate) fn new(
        docker: Docker,
        cluster_id: String,
        store: Arc<Store>,
        faults: Arc<Faults>,
        network: Option<String>,
    ) -> Self {
        Kubelet {
            docker,
            cluster_id,
            store,
            faults,
            network,
            containers: Mutex::new(HashMap::new()),
            sidecars: Mutex::new(HashMap::new()),
            tasks: tokio_util::task::TaskTracker::new(),
            closing: tokio_util::sync::CancellationToken::new(),
            scheduling: std::sync::Mutex::new(()),
        }
    }

    fn containers(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), String>> {
        self.containers.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn sidecars(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<PodKey, Vec<(String, String)>>> {
        self.sidecars.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The container id of a running pod.
    pub fn container_of(&self, ns: &str, name: &str) -> Option<String> {
        self.containers()
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Records an event about a pod.
    pub fn event(&self, pod: &Value, kind: &str, reason: &str, message: &str, component: &str) {
        record_event(
            &self.store,
            pod,
            "Pod",
            "v1",
            kind,
            reason,
            message,
            component,
        );
    }

    fn set_status(&self, ns: &str, name: &str, f: impl FnOnce(&mut Value)) -> Option<Value> {
        self.store
            .update(Kind::Pod, ns, name, |pod| f(&mut pod["status"]))
    }

    fn deleting(&self, ns: &str, name: &str) -> bool {
        self.store
            .get(Kind::Pod, ns, name)
            .is_none_or(|p| p["metadata"].get("deletionTimestamp").is_some())
    }

    /// Holds the pod Pending (Unschedulable, with the scheduler's words
    /// and a FailedScheduling event) while it does not fit the node, and
    /// looks again whenever a pod changes, as the scheduler does. `false`
    /// when the pod was deleted or the cluster closes first.
    async fn wait_until_it_fits(&self, ns: &str, name: &str) -> bool {
        let mut said = String::new();
        loop {
            // Subscribed before the look: a change right after it is seen.
            let (_, mut changes) = self.store.subscribe(u64::MAX);
            let Some(pod) = self.store.get(Kind::Pod, ns, name) else {
                return false;
            };
            if self.deleting(ns, name) {
                return false;
            }
            // One decision at a time, so two pods cannot both take the
            // node an anti-affinity gives to one.
            let placed = {
                let _one = self.scheduling.lock().unwrap_or_else(|p| p.into_inner());
                match crate::scheduler::fits(&self.store, &pod, &self.faults.taints()) {
                    Ok(()) => {
                        self.store
                            .update(Kind::Pod, ns, name, |p| p["spec"]["nodeName"] = json!(NODE));
                        None
                    }
                    Err(why) => Some(why),
                }
            };
            let Some(why) = placed else { return true };
            if why != said {
                self.unschedulable(&pod, &why);
                said = why;
            }
            loop {
                tokio::select! {
                    change = changes.recv() => match change {
                        Ok(c) if c.kind == Kind::Pod => break,
                        Ok(_) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                        Err(_) => return false,
                    },
                    _ = self.closing.cancelled() => return false,
                }
            }
        }
    }

    /// The pod stays Pending, not scheduled, for the scheduler's `why`,
    /// with the FailedScheduling event a real scheduler writes.
    fn unschedulable(&self, pod: &Value, why: &str) {
        let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        self.set_status(ns, name, |s| {
            s["phase"] = json!("Pending");
            s["conditions"] = json!([condition(
                "PodScheduled",
                false,
                Some("Unschedulable"),
                Some(why)
            )]);
        });
        self.event(pod, "Warning", "FailedScheduling", why, "default-scheduler");
    }

    /// Starts the pod's life in the background.
    pub fn spawn_pod(self: &Arc<Self>, ns: String, name: String) {
        let me = self.clone();
        // Not cancelled from outside: an engine call dropped midway would
        // still create its container. The pod's own waits watch `closing`.
        self.tasks.spawn(async move {
            if let Err(err) = me.run_pod(&ns, &name).await {
                tracing::warn!(%err, pod = %name, "test kubelet: pod failed to start");
            }
        });
    }

    /// Stops every pod task, then removes every container of this cluster.
    pub async fn shutdown(&self) {
        self.closing.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        remove_cluster_containers(&self.docker, &self.cluster_id).await;
        remove_cluster_volumes(&self.docker, &self.cluster_id).await;
    }

    pub(crate) fn cluster_id(&self) -> &str {
        &self.cluster_id
    }
}

/// A container's exit code from the engine's wait: its status code, the
/// code a wait error carries, or 137 (killed) when the wait said nothing.
pub(crate) fn exit_code_of(
    waited: Option<Result<bollard::models::ContainerWaitResponse, bollard::errors::Error>>,
) -> i64 {
    match waited {
        Some(Ok(r)) => r.status_code,
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
        _ => 137,
    }
}

/// Removes every container labelled with `cluster_id`.
pub async fn remove_cluster_containers(docker: &Docker, cluster_id: &str) {
    let filters = HashMap::from([(
        "label".to_string(),
        vec![format!("{CLUSTER_LABEL}={cluster_id}")],
    )]);
    let options = ListContainersOptions {
        all: true,
        filters: Some(filters),
        ..Default::default()
    };
    if let Ok(found) = docker.list_containers(Some(options)).await {
        for c in found {
            if let Some(id) = c.id {
                let options = RemoveContainerOptions {
                    force: true,
                    v: true,
                    ..Default::default()
                };
                let _ = docker.remove_container(&id, Some(options)).await;
            }
        }
    }
}

/// Records an event about `object` (of `kind`/`api_version`), as the
/// component that acted writes it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_event(
    store: &Store,
    object: &Value,
    object_kind: &str,
    api_version: &str,
    kind: &str,
    reason: &str,
    message: &str,
    component: &str,
) {
    let ns = object["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default");
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    // As client-go's recorder names one: the object's name and the time in
    // nanoseconds, in hex.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let event = json!({
        "metadata": {"name": format!("{name}.{nanos:x}")},
        "involvedObject": {
            "kind": object_kind, "namespace": ns, "name": name, "apiVersion": api_version,
            "uid": object["metadata"]["uid"],
        },
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": component, "host": NODE},
        "firstTimestamp": timestamp(),
        "lastTimestamp": timestamp(),
        "count": 1,
        "reportingComponent": component,
    });
    let _ = store.create(Kind::Event, ns, event);
}
