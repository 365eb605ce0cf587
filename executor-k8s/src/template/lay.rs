//! The runner's pod laid over a template: the template is the base, and
//! what the runner sets is its own.

use serde_json::{json, Map, Value};

use super::{object_or_empty, PodTemplate};
use crate::job::CONTAINER;

/// Spec fields where the template's entries come first and the runner's
/// are added after.
const ADDED_TO: [&str; 4] = ["volumes", "tolerations", "imagePullSecrets", "hostAliases"];

impl PodTemplate {
    /// Lays the runner's pod (`{"metadata": …, "spec": …}`, as in a Job's
    /// `spec.template`) over this template, in place.
    ///
    /// # Errors
    /// A message naming a container of the template whose name is one of
    /// the run's services'.
    pub(crate) fn lay_under(&self, pod: &mut Value) -> Result<(), String> {
        let metadata = self.metadata();
        for key in ["labels", "annotations"] {
            let mut merged = object_or_empty(&metadata[key]);
            if let (Some(into), Some(ours)) =
                (merged.as_object_mut(), pod["metadata"][key].as_object())
            {
                into.extend(ours.clone());
            }
            if merged.as_object().is_some_and(|m| !m.is_empty()) {
                pod["metadata"][key] = merged;
            }
        }
        let ours = pod["spec"].as_object().cloned().unwrap_or_default();
        let mut spec = object_or_empty(self.spec());
        let taken: Vec<String> = ours
            .get("containers")
            .into_iter()
            .chain(ours.get("initContainers"))
            .flat_map(|list| list.as_array().into_iter().flatten())
            .filter_map(|c| c["name"].as_str())
            .filter(|n| *n != CONTAINER)
            .map(str::to_string)
            .collect();
        for list in ["containers", "initContainers"] {
            for container in spec[list].as_array().into_iter().flatten() {
                if let Some(name) = container["name"].as_str() {
                    if taken.iter().any(|t| t == name) {
                        return Err(format!(
                            "the template's {list} entry {name} has the name of one of the run's services; rename one of them"
                        ));
                    }
                }
            }
        }
        for (key, value) in ours {
            match key.as_str() {
                "containers" => spec[key] = containers(&spec["containers"], &value),
                "initContainers" => spec[key] = appended(&spec[&key], &value),
                k if ADDED_TO.contains(&k) => spec[key] = appended(&spec[&key], &value),
                "nodeSelector" => spec[key] = merged(&spec[&key], &value),
                "affinity" => spec[key] = affinity(&spec[&key], &value),
                _ => spec[key] = value,
            }
        }
        pod["spec"] = spec;
        Ok(())
    }
}

/// `base`'s items, then `ours`.
fn appended(base: &Value, ours: &Value) -> Value {
    let mut items = base.as_array().cloned().unwrap_or_default();
    items.extend(ours.as_array().cloned().unwrap_or_default());
    Value::Array(items)
}

/// `base`'s fields with `ours` laid over, one level deep where both are
/// objects (`requests` and `limits`; a security context's `capabilities`).
fn merged(base: &Value, ours: &Value) -> Value {
    let mut out: Map<String, Value> = base.as_object().cloned().unwrap_or_default();
    for (key, value) in ours.as_object().into_iter().flatten() {
        let next = match (out.get(key), value) {
            (Some(Value::Object(b)), Value::Object(o)) => {
                let mut inner = b.clone();
                inner.extend(o.clone());
                Value::Object(inner)
            }
            _ => value.clone(),
        };
        out.insert(key.clone(), next);
    }
    Value::Object(out)
}

/// The runner's step container over the template's entry for it, first;
/// the template's other containers after it, then the runner's others.
fn containers(base: &Value, ours: &Value) -> Value {
    let ours = ours.as_array().cloned().unwrap_or_default();
    let base = base.as_array().cloned().unwrap_or_default();
    let template_step = base.iter().find(|c| c["name"] == CONTAINER);
    let mut out = Vec::new();
    for container in ours.iter().filter(|c| c["name"] == CONTAINER) {
        let mut step = container.clone();
        if let Some(template) = template_step {
            for key in ["env", "envFrom", "volumeMounts"] {
                let joined = appended(&template[key], &container[key]);
                if joined.as_array().is_some_and(|a| !a.is_empty()) {
                    step[key] = joined;
                }
            }
            for key in ["resources", "securityContext"] {
                if template[key].is_object() {
                    step[key] = merged(&template[key], &container[key]);
                }
            }
        }
        out.push(step);
    }
    out.extend(base.iter().filter(|c| c["name"] != CONTAINER).cloned());
    out.extend(ours.into_iter().filter(|c| c["name"] != CONTAINER));
    Value::Array(out)
}

/// The template's affinity with the runner's required anti-affinity terms
/// added to its own.
fn affinity(base: &Value, ours: &Value) -> Value {
    let mut out = object_or_empty(base);
    const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
    for (kind, rules) in ours.as_object().into_iter().flatten() {
        let terms = appended(&out[kind][REQUIRED], &rules[REQUIRED]);
        if !out[kind].is_object() {
            out[kind] = json!({});
        }
        out[kind][REQUIRED] = terms;
    }
    out
}
