//! A pod's further containers, as a kubelet runs them: each from its own
//! image, in the first container's network namespace (what a pod's pause
//! container gives every container), with a status of its own that ends
//! when it exits while the pod goes on running. Native sidecars (init
//! containers with `restartPolicy: Always`, v1.29 and later) run the same
//! way and report under `initContainerStatuses`; the model starts them
//! after the first container, whose namespace they join, where a kubelet
//! starts them before it.

use bollard::query_parameters::LogsOptions;
use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::kubelet::Kubelet;
use crate::store::{timestamp, Kind};

/// How a further container of a pod stands once the kubelet tried it.
pub(crate) enum Sidecar {
    Running {
        name: String,
        id: String,
    },
    Waiting {
        name: String,
        reason: String,
        message: String,
    },
}

impl Sidecar {
    fn name(&self) -> &str {
        match self {
            Sidecar::Running { name, .. } | Sidecar::Waiting { name, .. } => name,
        }
    }
}

/// A pod's containers after the first: its native sidecars, then the
/// rest of `containers`.
pub(crate) fn further_containers(spec: &Value) -> Vec<&Value> {
    spec["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["restartPolicy"] == "Always")
        .chain(spec["containers"].as_array().into_iter().flatten().skip(1))
        .collect()
}

/// Whether `name` is one of the pod's native sidecars.
pub(crate) fn is_native_sidecar(spec: &Value, name: &str) -> bool {
    spec["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["name"] == name && c["restartPolicy"] == "Always")
}

/// Every container name of the pod: its containers, then its init ones.
pub(crate) fn container_names(spec: &Value) -> Vec<&str> {
    spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(spec["initContainers"].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect()
}

impl Kubelet {
    /// Starts `spec`'s containers after the first, joined to the first's
    /// (`main`) network namespace.
    pub(crate) async fn start_sidecars(
        &self,
        ns: &str,
        pod: &Value,
        spec: &Value,
        main: &str,
    ) -> Vec<Sidecar> {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let mut out = Vec::new();
        for container in further_containers(spec) {
            let cname = container["name"].as_str().unwrap_or_default().to_string();
            let image = container["image"].as_str().unwrap_or_default().to_string();
            if self.docker.inspect_image(&image).await.is_err() {
                let message = format!("Back-off pulling image {image:?}");
                self.event(
                    pod,
                    "Warning",
                    "Failed",
                    &format!("Failed to pull image {image:?}: not found"),
                    "kubelet",
                );
                out.push(Sidecar::Waiting {
                    name: cname,
                    reason: "ImagePullBackOff".into(),
                    message,
                });
                continue;
            }
            let env = match self.resolve_env(ns, container) {
                Ok(env) => env,
                Err(message) => {
                    out.push(Sidecar::Waiting {
                        name: cname,
                        reason: "CreateContainerConfigError".into(),
                        message,
                    });
                    continue;
                }
            };
            let created = self
                .create_container(ns, name, spec, container, env, Some(main))
                .await;
            let id = match created {
                Ok(id) => id,
                Err(err) => {
                    out.push(Sidecar::Waiting {
                        name: cname,
                        reason: "CreateContainerError".into(),
                        message: err.to_string(),
                    });
                    continue;
                }
            };
            self.sidecars()
                .entry((ns.to_string(), name.to_string()))
                .or_default()
                .push((cname.clone(), id.clone()));
            if let Err(err) = self.docker.start_container(&id, None).await {
                out.push(Sidecar::Waiting {
                    name: cname,
                    reason: "RunContainerError".into(),
                    message: err.to_string(),
                });
                continue;
            }
            self.event(
                pod,
                "Normal",
                "Started",
                &format!("Started container {cname}"),
                "kubelet",
            );
            out.push(Sidecar::Running { name: cname, id });
        }
        out
    }

    /// The status entries of `sidecars`: those of plain containers, those
    /// of native sidecars, and whether all of them run.
    pub(crate) fn sidecar_statuses(
        spec: &Value,
        sidecars: &[Sidecar],
    ) -> (Vec<Value>, Vec<Value>, bool) {
        let image_of = |name: &str| {
            further_containers(spec)
                .into_iter()
                .find(|c| c["name"] == name)
                .map(|c| c["image"].clone())
                .unwrap_or(Value::Null)
        };
        let mut all = true;
        let (native, plain): (Vec<&Sidecar>, Vec<&Sidecar>) = sidecars
            .iter()
            .partition(|s| is_native_sidecar(spec, s.name()));
        let mut status_of = |s: &Sidecar| match s {
            Sidecar::Running { name, id } => json!({
                "name": name, "image": image_of(name), "imageID": "",
                "containerID": format!("docker://{id}"), "ready": true, "restartCount": 0,
                "started": true, "state": {"running": {"startedAt": timestamp()}},
            }),
            Sidecar::Waiting {
                name,
                reason,
                message,
            } => {
                all = false;
                json!({
                    "name": name, "image": image_of(name), "imageID": "", "ready": false,
                    "restartCount": 0, "started": false,
                    "state": {"waiting": {"reason": reason, "message": message}},
                })
            }
        };
        let plain = plain.into_iter().map(&mut status_of).collect();
        let native = native.into_iter().map(&mut status_of).collect();
        (plain, native, all)
    }

    /// Records that the pod's container `cname` exited with `code`: its
    /// status is terminated and the pod is no longer ready, but it runs
    /// on while its first container does (`restartPolicy: Never`).
    pub(crate) fn sidecar_ended(&self, ns: &str, name: &str, cname: &str, code: i64) {
        self.store.update(Kind::Pod, ns, name, |p| {
            let s = &mut p["status"];
            if s["phase"] != "Running" {
                return;
            }
            for c in s["conditions"].as_array_mut().into_iter().flatten() {
                if c["type"] == "Ready" || c["type"] == "ContainersReady" {
                    c["status"] = json!("False");
                    c["reason"] = json!("ContainersNotReady");
                    c["message"] = json!(format!("containers with unready status: [{cname}]"));
                }
            }
            for list in ["containerStatuses", "initContainerStatuses"] {
                let Some(list) = s.get_mut(list).and_then(Value::as_array_mut) else {
                    continue;
                };
                for cs in list.iter_mut() {
                    if cs["name"] != cname {
                        continue;
                    }
                    let started = cs["state"]["running"]["startedAt"].clone();
                    cs["ready"] = json!(false);
                    cs["started"] = json!(false);
                    cs["state"] = json!({"terminated": {
                        "exitCode": code,
                        "reason": if code == 0 { "Completed" } else { "Error" },
                        "startedAt": started, "finishedAt": timestamp(),
                        "containerID": cs["containerID"].clone(),
                    }});
                }
            }
        });
    }

    /// The engine's id of the pod's container `cname`: its first for
    /// `None` or the first's name.
    pub fn container_named(&self, ns: &str, name: &str, cname: Option<&str>) -> Option<String> {
        let first = self.container_of(ns, name)?;
        let Some(cname) = cname else {
            return Some(first);
        };
        let is_first = self
            .store
            .get(Kind::Pod, ns, name)
            .is_some_and(|p| p["spec"]["containers"][0]["name"].as_str() == Some(cname));
        if is_first {
            return Some(first);
        }
        self.sidecars()
            .get(&(ns.to_string(), name.to_string()))?
            .iter()
            .find(|(n, _)| n == cname)
            .map(|(_, id)| id.clone())
    }

    /// `GET .../pods/{name}/log?container=&tailLines=`: the container's
    /// output, stdout and stderr merged, its last `tail` lines.
    pub async fn pod_log(
        &self,
        ns: &str,
        name: &str,
        cname: Option<&str>,
        tail: Option<u64>,
    ) -> Option<String> {
        let id = self.container_named(ns, name, cname)?;
        let options = LogsOptions {
            stdout: true,
            stderr: true,
            tail: tail.map_or_else(|| "all".to_string(), |n| n.to_string()),
            ..Default::default()
        };
        let mut stream = self.docker.logs(&id, Some(options));
        let mut text = Vec::new();
        while let Some(Ok(piece)) = stream.next().await {
            text.extend_from_slice(&piece.into_bytes());
        }
        Some(String::from_utf8_lossy(&text).into_owned())
    }

    /// Removes the pod's further containers.
    pub(crate) async fn remove_sidecars(&self, ns: &str, name: &str) {
        let ids = self
            .sidecars()
            .remove(&(ns.to_string(), name.to_string()))
            .unwrap_or_default();
        for (_, id) in ids {
            self.remove_container(&id).await;
        }
    }
}
