//! Whether a pod fits the one node, as the default scheduler decides it
//! for the inputs a run's pod carries: its node selector, the node's
//! taints against its tolerations, and required pod anti-affinity.

use serde_json::Value;

use crate::selectors::Selector;
use crate::store::{Kind, Store};

/// The node's labels, as `GET /api/v1/nodes` shows them.
pub fn node_labels() -> serde_json::Map<String, Value> {
    let mut labels = serde_json::Map::new();
    for (k, v) in [
        ("kubernetes.io/hostname", crate::NODE),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
    ] {
        labels.insert(k.into(), Value::String(v.into()));
    }
    labels
}

/// A taint on the node: `key`, `value`, `effect` (`NoSchedule`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// The taint's key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// Its effect.
    pub effect: String,
}

/// `Err` with the scheduler's words when `pod` does not fit the node.
pub fn fits(store: &Store, pod: &Value, taints: &[Taint]) -> Result<(), String> {
    let spec = &pod["spec"];
    let labels = node_labels();
    if let Some(selector) = spec["nodeSelector"].as_object() {
        if selector.iter().any(|(k, v)| labels.get(k) != Some(v)) {
            return Err(unfit("node(s) didn't match Pod's node affinity/selector"));
        }
    }
    let tolerations = spec["tolerations"].as_array().cloned().unwrap_or_default();
    if let Some(taint) = taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
    {
        return Err(unfit(&format!(
            "node(s) had untolerated taint {{{}: {}}}",
            taint.key, taint.value
        )));
    }
    let terms = spec["affinity"]["podAntiAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let me = pod["metadata"]["uid"].clone();
    let (pods, _) = store.list(Kind::Pod, None, &Selector::default());
    let on_node = pods.iter().filter(|p| {
        p["metadata"]["uid"] != me
            && p["spec"]["nodeName"].as_str() == Some(crate::NODE)
            && p["metadata"].get("deletionTimestamp").is_none()
            && !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
    });
    let on_node: Vec<&Value> = on_node.collect();
    for term in &terms {
        // One node: every topology key the node has puts all pods in one domain.
        let key = term["topologyKey"].as_str().unwrap_or_default();
        if !labels.contains_key(key) {
            continue;
        }
        if on_node
            .iter()
            .any(|p| label_selector_matches(&term["labelSelector"], &p["metadata"]["labels"]))
        {
            return Err(unfit("node(s) didn't match pod anti-affinity rules"));
        }
    }
    Ok(())
}

fn unfit(why: &str) -> String {
    format!("0/1 nodes are available: 1 {why}. preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
}

fn tolerates(toleration: &Value, taint: &Taint) -> bool {
    let effect_ok = toleration["effect"]
        .as_str()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    let key = toleration["key"].as_str().unwrap_or_default();
    match toleration["operator"].as_str().unwrap_or("Equal") {
        "Exists" => effect_ok && (key.is_empty() || key == taint.key),
        _ => {
            effect_ok
                && key == taint.key
                && toleration["value"].as_str().unwrap_or_default() == taint.value
        }
    }
}

/// A `metav1.LabelSelector` (matchLabels and matchExpressions) against labels.
fn label_selector_matches(selector: &Value, labels: &Value) -> bool {
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let labels_ok = selector["matchLabels"]
        .as_object()
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    let expressions_ok = selector["matchExpressions"].as_array().is_none_or(|exprs| {
        exprs.iter().all(|e| {
            let key = e["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = e["values"]
                .as_array()
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            match e["operator"].as_str().unwrap_or_default() {
                "Exists" => label(key).is_some(),
                "DoesNotExist" => label(key).is_none(),
                "In" => label(key).is_some_and(|v| values.contains(&v)),
                "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
                _ => false,
            }
        })
    });
    labels_ok && expressions_ok
}
