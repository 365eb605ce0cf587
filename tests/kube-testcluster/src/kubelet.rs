//! A kubelet whose pods are real containers in the Docker-compatible engine
//! the Docker backend's tests use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, ListContainersOptions, RemoveContainerOptions,
};
use bollard::Docker;
use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::faults::{Faults, ImagePullFault, PodFault};
use crate::store::{timestamp, Kind, Store};

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

    async fn run_pod(&self, ns: &str, name: &str) -> Result<(), String> {
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
                    let code = match docker.wait_container(&cid, None).next().await {
                        Some(Ok(r)) => r.status_code,
                        Some(Err(bollard::errors::Error::DockerContainerWaitError {
                            code,
                            ..
                        })) => code,
                        _ => 137,
                    };
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
        let code = match waited {
            Some(Ok(r)) => r.status_code,
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
            _ => 137,
        };
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
    fn start_failed(
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
    fn terminated(
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

    pub(crate) fn resolve_env(&self, ns: &str, container: &Value) -> Result<Vec<String>, String> {
        let secret = |name: &str| -> Result<Value, String> {
            self.store
                .get(Kind::Secret, ns, name)
                .ok_or_else(|| format!("secret \"{name}\" not found"))
        };
        let decode = |v: &Value| -> String {
            v.as_str()
                .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default()
        };
        let mut env = Vec::new();
        for from in container["envFrom"].as_array().into_iter().flatten() {
            if let Some(name) = from["secretRef"]["name"].as_str() {
                let prefix = from["prefix"].as_str().unwrap_or_default();
                match secret(name) {
                    Ok(s) => {
                        for (k, v) in s["data"].as_object().into_iter().flatten() {
                            env.push(format!("{prefix}{k}={}", decode(v)));
                        }
                        for (k, v) in s["stringData"].as_object().into_iter().flatten() {
                            env.push(format!("{prefix}{k}={}", v.as_str().unwrap_or_default()));
                        }
                    }
                    Err(e) if from["secretRef"]["optional"] == true => drop(e),
                    Err(e) => return Err(e),
                }
            }
        }
        for var in container["env"].as_array().into_iter().flatten() {
            let name = var["name"].as_str().unwrap_or_default();
            if let Some(v) = var["value"].as_str() {
                env.push(format!("{name}={v}"));
            } else if let Some(r) = var["valueFrom"]["secretKeyRef"].as_object() {
                let sname = r.get("name").and_then(Value::as_str).unwrap_or_default();
                let key = r.get("key").and_then(Value::as_str).unwrap_or_default();
                match secret(sname) {
                    Ok(s) => match s["data"].get(key) {
                        Some(v) => env.push(format!("{name}={}", decode(v))),
                        None if r.get("optional") == Some(&json!(true)) => {}
                        None => {
                            return Err(format!("couldn't find key {key} in Secret {ns}/{sname}"))
                        }
                    },
                    Err(_) if r.get("optional") == Some(&json!(true)) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(env)
    }

    /// As the kubelet: `runAsNonRoot` refuses a container that would run
    /// as root, or whose image names its user so it cannot tell.
    async fn check_non_root(
        &self,
        ns: &str,
        name: &str,
        container: &Value,
        image: &str,
    ) -> Result<(), String> {
        let context = &container["securityContext"];
        if context["runAsNonRoot"] != true {
            return Ok(());
        }
        let cname = container["name"].as_str().unwrap_or("main");
        let pod = format!("pod: \"{name}_{ns}\", container: {cname}");
        let uid = match context["runAsUser"].as_i64() {
            Some(uid) => uid.to_string(),
            None => {
                let inspected = self.docker.inspect_image(image).await;
                let user = inspected
                    .ok()
                    .and_then(|i| i.config)
                    .and_then(|c| c.user)
                    .unwrap_or_default();
                let user = user.split(':').next().unwrap_or_default().to_string();
                if !user.is_empty() && user.parse::<i64>().is_err() {
                    return Err(format!(
                        "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify user is non-root ({pod})"
                    ));
                }
                user
            }
        };
        if uid.is_empty() || uid == "0" {
            return Err(format!(
                "container has runAsNonRoot and image will run as root ({pod})"
            ));
        }
        Ok(())
    }

    /// An emptyDir is world-writable (0777), so a container running as any
    /// user can write it; a fresh Docker volume is root's, 0755.
    async fn open_empty_dirs(&self, id: &str, spec: &Value, container: &Value) {
        let paths = empty_dir_mounts(spec, container);
        if paths.is_empty() {
            return;
        }
        let mut cmd = vec!["chmod".to_string(), "0777".to_string()];
        cmd.extend(paths);
        let options = bollard::models::ExecConfig {
            cmd: Some(cmd),
            user: Some("0".into()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let Ok(exec) = self.docker.create_exec(id, options).await else {
            return;
        };
        if let Ok(bollard::exec::StartExecResults::Attached { mut output, .. }) =
            self.docker.start_exec(&exec.id, None).await
        {
            while output.next().await.is_some() {}
        }
    }

    /// Creates one of the pod's containers; `joined`, the first one's id,
    /// for the others, which share its network namespace.
    pub(crate) async fn create_container(
        &self,
        ns: &str,
        name: &str,
        spec: &Value,
        container: &Value,
        env: Vec<String>,
        joined: Option<&str>,
    ) -> Result<String, bollard::errors::Error> {
        let strings = |v: &Value| -> Option<Vec<String>> {
            v.as_array().map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
        };
        let mounts: Vec<Mount> = empty_dir_mounts(spec, container)
            .into_iter()
            .map(|path| Mount {
                target: Some(path),
                typ: Some(MountType::VOLUME),
                ..Default::default()
            })
            .collect();
        let memory = container["resources"]["limits"]["memory"]
            .as_str()
            .and_then(parse_quantity);
        let context = &container["securityContext"];
        let no_escalation = context["allowPrivilegeEscalation"] == false;
        let mut security_opt = Vec::new();
        if no_escalation {
            security_opt.push("no-new-privileges".to_string());
        }
        if context["seccompProfile"]["type"] == "Unconfined" {
            security_opt.push("seccomp=unconfined".to_string());
        }
        let user = match (
            context["runAsUser"].as_i64(),
            context["runAsGroup"].as_i64(),
        ) {
            (Some(uid), Some(gid)) => Some(format!("{uid}:{gid}")),
            (Some(uid), None) => Some(uid.to_string()),
            (None, Some(gid)) => Some(format!("0:{gid}")),
            (None, None) => None,
        };
        let labels = HashMap::from([
            (CLUSTER_LABEL.to_string(), self.cluster_id.clone()),
            (
                "dev.knotless.testcluster.pod".to_string(),
                format!("{ns}/{name}"),
            ),
        ]);
        let body = ContainerCreateBody {
            image: container["image"].as_str().map(str::to_string),
            entrypoint: strings(&container["command"]),
            cmd: strings(&container["args"]),
            env: Some(env),
            working_dir: container["workingDir"].as_str().map(str::to_string),
            user,
            labels: Some(labels),
            host_config: Some(HostConfig {
                mounts: Some(mounts),
                memory,
                memory_swap: memory,
                network_mode: match joined {
                    Some(first) => Some(format!("container:{first}")),
                    None => self.network.clone(),
                },
                // The pod's hostAliases, in the hosts file its containers share.
                extra_hosts: joined.is_none().then(|| host_aliases(spec)).flatten(),
                security_opt: (!security_opt.is_empty()).then_some(security_opt),
                cap_drop: strings(&context["capabilities"]["drop"]),
                cap_add: strings(&context["capabilities"]["add"]),
                // As containerd runs it: the image's command is PID 1, with
                // no init to forward (or reap) for it.
                init: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptions {
            name: Some(format!(
                "k8s_{}_{}_{}",
                container["name"].as_str().unwrap_or("main"),
                name,
                ns
            )),
            ..Default::default()
        };
        Ok(self.docker.create_container(Some(options), body).await?.id)
    }

    pub(crate) async fn remove_container(&self, id: &str) {
        let options = RemoveContainerOptions {
            force: true,
            v: true,
            ..Default::default()
        };
        if let Err(err) = self.docker.remove_container(id, Some(options)).await {
            tracing::debug!(%err, "test kubelet: removing a container");
        }
    }

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

    /// Stops every pod task, then removes every container of this cluster.
    pub async fn shutdown(&self) {
        self.closing.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        remove_cluster_containers(&self.docker, &self.cluster_id).await;
    }

    pub(crate) fn cluster_id(&self) -> &str {
        &self.cluster_id
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

/// The pod's `hostAliases` as the engine's extra hosts (`name:ip`).
fn host_aliases(spec: &Value) -> Option<Vec<String>> {
    let hosts: Vec<String> = spec["hostAliases"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|alias| {
            let ip = alias["ip"].as_str().unwrap_or_default().to_string();
            alias["hostnames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(move |host| format!("{host}:{ip}"))
                .collect::<Vec<_>>()
        })
        .collect();
    (!hosts.is_empty()).then_some(hosts)
}

/// Where `container` mounts the pod's emptyDir volumes.
fn empty_dir_mounts(spec: &Value, container: &Value) -> Vec<String> {
    let empty_dirs: Vec<&str> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v.get("emptyDir").is_some())
        .filter_map(|v| v["name"].as_str())
        .collect();
    container["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["name"].as_str().is_some_and(|n| empty_dirs.contains(&n)))
        .filter_map(|m| m["mountPath"].as_str().map(str::to_string))
        .collect()
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
    let event = json!({
        "metadata": {"name": format!("{name}.{:016x}", crate::tls::random_u64())},
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
