//! Pod Security admission, as a namespace labelled
//! `pod-security.kubernetes.io/enforce` meets a pod: the checks of the
//! `baseline` and `restricted` levels that a runner's pod can trip, each
//! in the admission's own words. It judges Pods, not Jobs: a Job whose
//! pod it refuses is taken, and its controller records `FailedCreate`.

use serde_json::Value;

/// The namespace label naming the level enforced.
pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// Capabilities `baseline` lets a container add.
const BASELINE_CAPABILITIES: [&str; 13] = [
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

/// Volume kinds `restricted` allows.
const RESTRICTED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers"]
        .into_iter()
        .flat_map(move |list| spec[list].as_array().into_iter().flatten())
}

fn names(list: &[&Value]) -> String {
    let quoted: Vec<String> = list
        .iter()
        .map(|c| format!("{:?}", c["name"].as_str().unwrap_or_default()))
        .collect();
    let noun = if quoted.len() == 1 {
        "container"
    } else {
        "containers"
    };
    format!("{noun} {}", quoted.join(", "))
}

/// What `level` finds wrong with the pod `spec`, each as the admission
/// words it; empty where it is admitted.
pub fn violations(spec: &Value, level: &str) -> Vec<String> {
    let restricted = match level {
        "restricted" => true,
        "baseline" => false,
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let all: Vec<&Value> = containers(spec).collect();
    let with = |f: &dyn Fn(&Value) -> bool| -> Vec<&Value> {
        all.iter()
            .copied()
            .filter(|c| f(&c["securityContext"]))
            .collect()
    };
    let privileged = with(&|s| s["privileged"] == true);
    if !privileged.is_empty() {
        out.push(format!(
            "privileged ({} must not set securityContext.privileged=true)",
            names(&privileged)
        ));
    }
    for key in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec[key] == true {
            out.push(format!("host namespaces ({key}=true)"));
        }
    }
    if restricted {
        let escalating = with(&|s| s["allowPrivilegeEscalation"] != false);
        if !escalating.is_empty() {
            out.push(format!(
                "allowPrivilegeEscalation != false ({} must set securityContext.allowPrivilegeEscalation=false)",
                names(&escalating)
            ));
        }
    }
    let mut capability_faults = Vec::new();
    for c in &all {
        let caps = &c["securityContext"]["capabilities"];
        let name = c["name"].as_str().unwrap_or_default();
        if restricted
            && !caps["drop"]
                .as_array()
                .is_some_and(|d| d.iter().any(|v| v == "ALL"))
        {
            capability_faults.push(format!(
                "container {name:?} must set securityContext.capabilities.drop=[\"ALL\"]"
            ));
        }
        let added: Vec<String> = caps["add"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|cap| {
                if restricted {
                    *cap != "NET_BIND_SERVICE"
                } else {
                    !BASELINE_CAPABILITIES.contains(cap)
                }
            })
            .map(|cap| format!("{cap:?}"))
            .collect();
        if !added.is_empty() {
            capability_faults.push(format!(
                "container {name:?} must not include {} in securityContext.capabilities.add",
                added.join(", ")
            ));
        }
    }
    if !capability_faults.is_empty() {
        let label = if restricted {
            "unrestricted capabilities"
        } else {
            "non-default capabilities"
        };
        out.push(format!("{label} ({})", capability_faults.join("; ")));
    }
    if spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|v| v.get("hostPath").is_some())
    {
        out.push("hostPath volumes".into());
    }
    if restricted {
        let restricted_volumes: Vec<String> = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| !RESTRICTED_VOLUMES.iter().any(|k| v.get(*k).is_some()))
            .filter_map(|v| v["name"].as_str().map(|n| format!("{n:?}")))
            .collect();
        if !restricted_volumes.is_empty() {
            out.push(format!(
                "restricted volume types (volumes {})",
                restricted_volumes.join(", ")
            ));
        }
        let pod_non_root = spec["securityContext"]["runAsNonRoot"] == true;
        let rooted =
            with(&|s| s["runAsNonRoot"] == false || (!pod_non_root && s["runAsNonRoot"] != true));
        if !rooted.is_empty() {
            out.push(format!(
                "runAsNonRoot != true (pod or {} must set securityContext.runAsNonRoot=true)",
                names(&rooted)
            ));
        }
        let root_user = with(&|s| s["runAsUser"] == 0);
        if !root_user.is_empty() {
            out.push(format!(
                "runAsUser=0 ({} must not set runAsUser=0)",
                names(&root_user)
            ));
        }
        let pod_seccomp = spec["securityContext"]["seccompProfile"]["type"].as_str();
        let unconfined = with(&|s| {
            let own = s["seccompProfile"]["type"].as_str().or(pod_seccomp);
            !matches!(own, Some("RuntimeDefault" | "Localhost"))
        });
        if !unconfined.is_empty() {
            out.push(format!(
                "seccompProfile (pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
                names(&unconfined)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_root_side_pod_passes_baseline_and_not_restricted() {
        let spec = json!({"containers": [{"name": "run", "securityContext": {
            "allowPrivilegeEscalation": false, "runAsUser": 0,
            "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "SETUID"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        }}]});
        assert!(violations(&spec, "baseline").is_empty());
        let said = violations(&spec, "restricted").join(", ");
        assert_eq!(
            said,
            "unrestricted capabilities (container \"run\" must not include \"CHOWN\", \"SETUID\" in securityContext.capabilities.add), \
             runAsNonRoot != true (pod or container \"run\" must set securityContext.runAsNonRoot=true), \
             runAsUser=0 (container \"run\" must not set runAsUser=0)"
        );
        let fine = json!({"containers": [{"name": "run", "securityContext": {
            "allowPrivilegeEscalation": false, "runAsUser": 1000, "runAsNonRoot": true,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        }}]});
        assert!(violations(&fine, "restricted").is_empty());
    }
}
