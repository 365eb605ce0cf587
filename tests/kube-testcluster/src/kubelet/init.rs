//! A pod's init containers (those that are not native sidecars): each
//! runs to its end, in order, before the pod's containers start; one that
//! fails fails a pod that restarts nothing, as a Job's.

use futures_util::StreamExt;
use serde_json::{json, Value};

use super::Kubelet;
use crate::store::timestamp;

impl Kubelet {
    /// Runs the init containers of `pod`; `false` when the pod is not to
    /// go on (one failed, could not start, or the pod is being deleted).
    pub(crate) async fn run_init_containers(&self, ns: &str, pod: &Value, spec: &Value) -> bool {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let plain = spec["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["restartPolicy"] != "Always");
        for container in plain {
            let cname = container["name"].as_str().unwrap_or_default();
            let image = container["image"].as_str().unwrap_or_default();
            if self.docker.inspect_image(image).await.is_err() {
                let message = format!("Back-off pulling image {image:?}");
                self.event(
                    pod,
                    "Warning",
                    "Failed",
                    &format!("Failed to pull image {image:?}: not found"),
                    "kubelet",
                );
                self.set_status(ns, name, |s| {
                    s["initContainerStatuses"] = json!([{"name": cname, "image": image, "ready": false, "restartCount": 0,
                        "state": {"waiting": {"reason": "ImagePullBackOff", "message": message}}}]);
                });
                return false;
            }
            let code = match self.resolve_env(ns, container) {
                Ok(env) => match self
                    .create_container(ns, name, spec, container, env, None)
                    .await
                {
                    Ok(id) => {
                        let code = if self.docker.start_container(&id, None).await.is_ok() {
                            self.event(
                                pod,
                                "Normal",
                                "Started",
                                &format!("Started container {cname}"),
                                "kubelet",
                            );
                            super::exit_code_of(self.docker.wait_container(&id, None).next().await)
                        } else {
                            128
                        };
                        self.remove_container(&id).await;
                        code
                    }
                    Err(_) => 128,
                },
                Err(message) => {
                    self.event(
                        pod,
                        "Warning",
                        "Failed",
                        &format!("Error: {message}"),
                        "kubelet",
                    );
                    return false;
                }
            };
            if self.deleting(ns, name) {
                return false;
            }
            if code != 0 {
                let Some(failed) = self.set_status(ns, name, |s| {
                    s["phase"] = json!("Failed");
                    s["initContainerStatuses"] = json!([{"name": cname, "image": image, "ready": false, "restartCount": 0,
                        "state": {"terminated": {"exitCode": code, "reason": "Error", "finishedAt": timestamp()}}}]);
                }) else {
                    return false;
                };
                crate::jobs::pod_finished(&self.store, &failed, false);
                return false;
            }
        }
        true
    }
}
