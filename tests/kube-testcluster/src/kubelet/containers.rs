//! Making a pod's containers: its variables from Secrets, its user
//! checked, its emptyDirs, its mounts and hosts; and removing them.

use std::collections::HashMap;

use base64::Engine as _;
use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};
use bollard::query_parameters::{CreateContainerOptions, RemoveContainerOptions};
use futures_util::StreamExt;
use serde_json::{json, Value};

use super::*;
use crate::store::Kind;

impl Kubelet {
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
    pub(crate) async fn check_non_root(
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
    pub(crate) async fn open_empty_dirs(&self, id: &str, spec: &Value, container: &Value) {
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
        let mut mounts: Vec<Mount> = empty_dir_mounts(spec, container)
            .into_iter()
            .map(|path| Mount {
                target: Some(path),
                typ: Some(MountType::VOLUME),
                ..Default::default()
            })
            .collect();
        mounts.extend(self.claim_mounts(ns, spec, container).await);
        // The pod's RuntimeClass names the engine's runtime (its handler).
        let runtime = spec["runtimeClassName"]
            .as_str()
            .and_then(|class| self.store.get(Kind::RuntimeClass, "", class))
            .and_then(|class| class["handler"].as_str().map(str::to_string));
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
                runtime,
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
}

/// The pod's `hostAliases` as the engine's extra hosts (`name:ip`).
pub(super) fn host_aliases(spec: &Value) -> Option<Vec<String>> {
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
pub(super) fn empty_dir_mounts(spec: &Value, container: &Value) -> Vec<String> {
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
