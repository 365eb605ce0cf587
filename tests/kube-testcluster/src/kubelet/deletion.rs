//! Deleting a pod as the API server and kubelet do together.

use serde_json::json;

use super::*;
use crate::store::{timestamp, Kind};

impl Kubelet {
    /// Deletes a pod as the API server and kubelet do together: mark it
    /// (Terminating, with its grace period), send its container SIGTERM and
    /// SIGKILL once `terminationGracePeriodSeconds` (default 30) has passed,
    /// then remove the object. A container whose PID 1 ignores SIGTERM (a
    /// shell without a trap) holds the pod for the whole grace, as on a
    /// real node.
    pub async fn delete_pod(&self, ns: &str, name: &str) {
        self.delete_pod_within(ns, name, None).await;
    }

    /// As [`Kubelet::delete_pod`], with the grace a delete request named
    /// (`gracePeriodSeconds`), which wins over the pod's own.
    pub async fn delete_pod_within(&self, ns: &str, name: &str, grace: Option<u64>) {
        let grace = grace
            .or_else(|| {
                self.store
                    .get(Kind::Pod, ns, name)
                    .and_then(|p| p["spec"]["terminationGracePeriodSeconds"].as_u64())
            })
            .unwrap_or(30);
        self.store.update(Kind::Pod, ns, name, |p| {
            p["metadata"]["deletionTimestamp"] = json!(timestamp());
            p["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
        });
        let id = self
            .containers()
            .get(&(ns.to_string(), name.to_string()))
            .cloned();
        if let Some(id) = &id {
            let stop = bollard::query_parameters::StopContainerOptions {
                signal: Some("SIGTERM".into()),
                t: Some(i32::try_from(grace).unwrap_or(i32::MAX)),
            };
            if let Err(err) = self.docker.stop_container(id, Some(stop)).await {
                tracing::debug!(%err, "test kubelet: stopping a container");
            }
        }
        self.containers()
            .remove(&(ns.to_string(), name.to_string()));
        self.remove_sidecars(ns, name).await;
        if let Some(id) = id {
            self.remove_container(&id).await;
        }
        self.store.remove(Kind::Pod, ns, name);
    }

    /// Makes something happen to a running pod.
    pub async fn fault(&self, ns: &str, name: &str, fault: PodFault) {
        match fault {
            PodFault::Delete => self.delete_pod(ns, name).await,
            PodFault::OomKill | PodFault::Evict => {
                let id = self
                    .containers()
                    .get(&(ns.to_string(), name.to_string()))
                    .cloned();
                // Mark first, so the container's exit is not reported as a plain error.
                let (reason, pod_reason) = match fault {
                    PodFault::OomKill => ("OOMKilled", None),
                    _ => ("Error", Some(("Evicted", "The node was low on resource: memory. Threshold quantity: 100Mi, available: 12Mi."))),
                };
                self.store.update(Kind::Pod, ns, name, |p| {
                    p["metadata"]["annotations"]["knotless.test/fault"] = json!(reason);
                });
                // Subscribed before the kill: the client's watch may start
                // before this task runs again.
                let mut watches = self.faults.pod_watches();
                if let Some(id) = &id {
                    let _ = self
                        .docker
                        .kill_container(id, None::<bollard::query_parameters::KillContainerOptions>)
                        .await;
                }
                if self.faults.lags_status() {
                    tokio::select! {
                        _ = watches.changed() => {}
                        _ = self.closing.cancelled() => return,
                    }
                }
                self.terminated(ns, name, 137, reason, pod_reason);
                if fault == PodFault::Evict {
                    if let Some(pod) = self.store.get(Kind::Pod, ns, name) {
                        self.event(
                            &pod,
                            "Warning",
                            "Evicted",
                            "The node was low on resource: memory.",
                            "kubelet",
                        );
                    }
                }
            }
        }
    }
}
