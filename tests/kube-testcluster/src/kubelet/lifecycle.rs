//! A pod's life on the node: waiting to fit, its containers made and
//! started, watched to their end, and its status told as a kubelet does.

use bollard::query_parameters::InspectContainerOptions;
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::*;
use crate::faults::ImagePullFault;
use crate::store::{timestamp, Kind};

impl Kubelet {
    pub(crate) async fn run_pod(&self, ns: &str, name: &str) -> Result<(), String> {
        let pod = self.store.get(Kind::Pod, ns, name).ok_or("pod vanished")?;
        let (pending, unschedulable, pull_fault) = self.faults.scheduling();
        if unschedulable || pending.is_some() {
            let message = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.";
            self.unschedulable(&pod, message);
            if unschedulable {
                return Ok(());
            }
            self.event(
                &pod,
                "Normal",
                "TriggeredScaleUp",
                "pod triggered scale-up: [{knotless-pool 0->1 (max: 3)}]",
                "cluster-autoscaler",
            );
            if let Some(d) = pending {
                // The simulated node rental: the pod waits as it would for a new node.
                tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    _ = self.closing.cancelled() => return Ok(()),
                }
            }
            if self.deleting(ns, name) {
                return Ok(());
            }
        }
        if !self.wait_until_it_fits(ns, name).await {
            return Ok(());
        }
        let spec = pod["spec"].clone();
        self.set_status(ns, name, |s| {
            s["phase"] = json!("Pending");
            s["conditions"] = json!([condition("PodScheduled", true, None, None)]);
            s["hostIP"] = json!("127.0.0.1");
        });
        self.store
            .update(Kind::Pod, ns, name, |p| p["spec"]["nodeName"] = json!(NODE));
        self.event(
            &pod,
            "Normal",
            "Scheduled",
            &format!("Successfully assigned {ns}/{name} to {NODE}"),
            "default-scheduler",
        );

        let container = &spec["containers"][0];
        let cname = container["name"].as_str().unwrap_or("main").to_string();
        let image = container["image"].as_str().unwrap_or_default().to_string();
        let waiting = |reason: &str, message: &str| {
            let (reason, message, cname, image) = (
                reason.to_string(),
                message.to_string(),
                cname.clone(),
                image.clone(),
            );
            move |s: &mut Value| {
                s["containerStatuses"] = json!([{
                    "name": cname, "image": image, "imageID": "", "ready": false, "restartCount": 0, "started": false,
                    "state": {"waiting": {"reason": reason, "message": message}},
                }]);
            }
        };
        let image_ok = !image.is_empty()
            && !image.contains(char::is_whitespace)
            && !image.contains(char::is_uppercase);
        if pull_fault == Some(ImagePullFault::InvalidName) || !image_ok {
            let msg = format!("Failed to apply default image tag {image:?}: couldn't parse image name {image:?}: invalid reference format");
            self.set_status(ns, name, waiting("InvalidImageName", &msg));
            self.event(&pod, "Warning", "InspectFailed", &msg, "kubelet");
            return Ok(());
        }
        let present = self.docker.inspect_image(&image).await.is_ok();
        if pull_fault == Some(ImagePullFault::BackOff) || !present {
            let msg = format!("Failed to pull image {image:?}: rpc error: code = NotFound desc = failed to pull and unpack image {image:?}: not found");
            self.set_status(ns, name, waiting("ErrImagePull", &msg));
            self.event(&pod, "Warning", "Failed", &msg, "kubelet");
            self.set_status(
                ns,
                name,
                waiting(
                    "ImagePullBackOff",
                    &format!("Back-off pulling image {image:?}"),
                ),
            );
            self.event(
                &pod,
                "Normal",
                "BackOff",
                &format!("Back-off pulling image {image:?}"),
                "kubelet",
            );
            return Ok(());
        }
        self.set_status(ns, name, waiting("ContainerCreating", ""));
        if let Some(msg) = Self::unmountable(&spec) {
            // As a real kubelet: the pod waits, ContainerCreating, saying why.
            self.event(&pod, "Warning", "FailedMount", &msg, "kubelet");
            return Ok(());
        }
        self.event(
            &pod,
            "Normal",
            "Pulled",
            &format!("Container image {image:?} already present on machine"),
            "kubelet",
        );

        // Both are the kubelet's CreateContainerConfigError: the pod waits.
        let config = match self.resolve_env(ns, container) {
            Ok(env) => self
                .check_non_root(ns, name, container, &image)
                .await
                .map(|()| env),
            Err(msg) => Err(msg),
        };
        let env = match config {
            Ok(env) => env,
            Err(msg) => {
                self.set_status(ns, name, waiting("CreateContainerConfigError", &msg));
                self.event(
                    &pod,
                    "Warning",
                    "Failed",
                    &format!("Error: {msg}"),
                    "kubelet",
                );
                return Ok(());
            }
        };
        if !self.run_init_containers(ns, &pod, &spec).await {
            return Ok(());
        }
        let id = self
            .create_container(ns, name, &spec, container, env, None)
            .await
            .map_err(|e| {
                let msg = e.to_string();
                self.set_status(ns, name, waiting("CreateContainerError", &msg));
                msg
            })?;
        self.containers()
            .insert((ns.to_string(), name.to_string()), id.clone());
        if self.deleting(ns, name) {
            self.remove_container(&id).await;
            return Ok(());
        }
        self.event(
            &pod,
            "Normal",
            "Created",
            &format!("Created container {cname}"),
            "kubelet",
        );
        if let Err(e) = self.docker.start_container(&id, None).await {
            self.start_failed(ns, name, &pod, &cname, &image, &id, e);
            return Ok(());
        }
        self.open_empty_dirs(&id, &spec, container).await;
        let sidecars = self.start_sidecars(ns, &pod, &spec, &id).await;
        let (sidecar_statuses, native_statuses, all_running) =
            Self::sidecar_statuses(&spec, &sidecars);
        let started = timestamp();
        let ready = |c: &str| {
            if all_running {
                condition(c, true, None, None)
            } else {
                condition(
                    c,
                    false,
                    Some("ContainersNotReady"),
                    Some("containers with unready status"),
                )
            }
        };
        self.set_status(ns, name, |s| {
            s["phase"] = json!("Running");
            s["startTime"] = json!(started);
            s["podIP"] = json!("10.42.0.7");
            s["qosClass"] = json!("BestEffort");
            s["conditions"] = json!([
                condition("PodReadyToStartContainers", true, None, None),
                condition("Initialized", true, None, None),
                ready("Ready"),
                ready("ContainersReady"),
                condition("PodScheduled", true, None, None),
            ]);
            let mut statuses = vec![json!({
                "name": cname, "image": image, "imageID": format!("docker-pullable://{image}"),
                "containerID": format!("docker://{id}"), "ready": true, "restartCount": 0, "started": true,
                "state": {"running": {"startedAt": started}},
            })];
            statuses.extend(sidecar_statuses);
            s["containerStatuses"] = json!(statuses);
            if !native_statuses.is_empty() {
                s["initContainerStatuses"] = json!(native_statuses);
            }
        });
        self.event(
            &pod,
            "Normal",
            "Started",
            &format!("Started container {cname}"),
            "kubelet",
        );

        // Watch the container until it ends, and the others meanwhile.
        let mut wait = self.docker.wait_container(&id, None);
        let mut others: futures_util::stream::FuturesUnordered<_> = sidecars
            .iter()
            .filter_map(|s| match s {
                crate::sidecars::Sidecar::Running { name, id } => Some((name.clone(), id.clone())),
                crate::sidecars::Sidecar::Waiting { .. } => None,
            })
            .map(|(cname, cid)| {
                let docker = self.docker.clone();
                async move {
                    let code = super::exit_code_of(docker.wait_container(&cid, None).next().await);
                    (cname, code)
                }
            })
            .collect();
        let waited = loop {
            tokio::select! {
                w = wait.next() => break w,
                Some((cname, code)) = others.next() => {
                    if !self.deleting(ns, name) {
                        self.sidecar_ended(ns, name, &cname, code);
                    }
                }
                _ = self.closing.cancelled() => return Ok(()),
            }
        };
        let code = super::exit_code_of(waited);
        let faulted = self.store.get(Kind::Pod, ns, name).is_some_and(|p| {
            p["metadata"]["annotations"]
                .get("knotless.test/fault")
                .is_some()
        });
        if self.deleting(ns, name) || faulted {
            return Ok(());
        }
        let oom = self
            .docker
            .inspect_container(&id, None::<InspectContainerOptions>)
            .await
            .ok()
            .and_then(|i| i.state)
            .and_then(|s| s.oom_killed)
            .unwrap_or(false);
        self.terminated(
            ns,
            name,
            code,
            if oom {
                "OOMKilled"
            } else if code == 0 {
                "Completed"
            } else {
                "Error"
            },
            None,
        );
        Ok(())
    }

    /// A container whose process could not start (its command is not in
    /// the image), as a containerd node records it: the container ended at
    /// once, `StartError` with exit code 128 and the runtime's words, and a
    /// pod that restarts nothing (a Job's) has failed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_failed(
        &self,
        ns: &str,
        name: &str,
        pod: &Value,
        cname: &str,
        image: &str,
        id: &str,
        err: bollard::errors::Error,
    ) {
        let words = match &err {
            bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
            other => other.to_string(),
        };
        let message = format!("failed to create containerd task: {words}");
        let Some(failed) = self.set_status(ns, name, |s| {
            s["phase"] = json!("Failed");
            s["containerStatuses"] = json!([{
                "name": cname, "image": image, "imageID": format!("docker-pullable://{image}"),
                "containerID": format!("docker://{id}"), "ready": false, "restartCount": 0, "started": false,
                "state": {"terminated": {
                    "exitCode": 128, "reason": "StartError", "message": message,
                    "startedAt": "1970-01-01T00:00:00Z", "finishedAt": timestamp(),
                    "containerID": format!("docker://{id}"),
                }},
            }]);
        }) else {
            return;
        };
        self.event(
            pod,
            "Warning",
            "Failed",
            &format!("Error: {message}"),
            "kubelet",
        );
        crate::jobs::pod_finished(&self.store, &failed, false);
    }

    /// Records the pod's container as terminated and the pod as finished.
    pub(crate) fn terminated(
        &self,
        ns: &str,
        name: &str,
        code: i64,
        reason: &str,
        pod_reason: Option<(&str, &str)>,
    ) {
        let Some(pod) = self.set_status(ns, name, |s| {
            s["phase"] = json!(if code == 0 { "Succeeded" } else { "Failed" });
            if let Some((r, m)) = pod_reason {
                s["reason"] = json!(r);
                s["message"] = json!(m);
            }
            if let Some(conds) = s["conditions"].as_array_mut() {
                for c in conds.iter_mut().filter(|c| c["type"] == "Ready" || c["type"] == "ContainersReady") {
                    c["status"] = json!("False");
                    c["reason"] = json!("PodCompleted");
                }
            }
            if let Some(cs) = s["containerStatuses"].get_mut(0) {
                let started = cs["state"]["running"]["startedAt"].clone();
                cs["ready"] = json!(false);
                cs["started"] = json!(false);
                cs["state"] = json!({"terminated": {
                    "exitCode": code, "reason": reason, "startedAt": started, "finishedAt": timestamp(),
                    "containerID": cs["containerID"].clone(),
                }});
            }
        }) else {
            return;
        };
        crate::jobs::pod_finished(&self.store, &pod, code == 0);
    }
}
