//! The admission plugins a pod meets on a real server that the runner's
//! pods can trip: `PodSecurity`, `RuntimeClass` and `Priority`, with
//! their words.

use serde_json::{json, Value};

use crate::status::ApiError;
use crate::store::{Kind, Store};

/// Admits a pod about to be stored in `ns`: the namespace's Pod Security
/// level ([`crate::pod_security`]) must find nothing, its runtime class and its
/// priority class must exist (the latter's value becomes the pod's
/// `spec.priority`), as the `RuntimeClass` and `Priority` plugins do.
///
/// # Errors
/// 403 Forbidden in the plugin's words.
pub fn admit_pod(store: &Store, ns: &str, pod: &mut Value) -> Result<(), ApiError> {
    let name = pod["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if let Some(level) = store.pod_security(ns) {
        let faults = crate::pod_security::violations(&pod["spec"], &level);
        if !faults.is_empty() {
            return Err(ApiError::forbidden(format!(
                "pods \"{name}\" is forbidden: violates PodSecurity \"{level}:latest\": {}",
                faults.join(", ")
            )));
        }
    }
    // An empty name is none, as a protobuf body without the field reads.
    let named = |field: &str| {
        pod["spec"][field]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    if let Some(class) = named("runtimeClassName").as_deref() {
        if store.get(Kind::RuntimeClass, "", class).is_none() {
            return Err(ApiError::forbidden(format!(
                "pods \"{name}\" is forbidden: pod rejected: RuntimeClass \"{class}\" not found"
            )));
        }
    }
    if let Some(class) = named("priorityClassName").as_deref() {
        let Some(found) = store.get(Kind::PriorityClass, "", class) else {
            return Err(ApiError::forbidden(format!(
                "pods \"{name}\" is forbidden: no PriorityClass with name {class} was found"
            )));
        };
        pod["spec"]["priority"] = json!(found["value"].as_i64().unwrap_or(0));
    }
    Ok(())
}
