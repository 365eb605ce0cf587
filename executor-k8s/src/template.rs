//! The operator's pod template (`K8sOptions::pod_template`): a Pod, a
//! PodTemplate, a PodTemplateSpec or a bare PodSpec, in YAML or JSON, that
//! the runner's own Job is laid over.
//!
//! What the template may carry is what an operator brings from another
//! runner: volumes (a warm-cache PersistentVolumeClaim, a ConfigMap of CA
//! certificates), `runtimeClassName`, `priorityClassName`, affinity,
//! `dnsConfig`, annotations an autoscaler or a mesh reads, sidecars; and,
//! in the entry named for the step container ([`CONTAINER`]), mounts,
//! variables, resources and a tighter security context. What the runner
//! owns stays its own, and a template that sets it is refused with the
//! field and the line.
//!
//! ```
//! use executor_k8s::PodTemplate;
//!
//! let template = PodTemplate::parse(
//!     "spec:\n  runtimeClassName: gvisor\n  containers:\n    - name: run\n      image: alpine\n",
//! );
//! let refused = template.unwrap_err();
//! assert_eq!(refused.field, "spec.containers[0].image");
//! assert_eq!(refused.line, Some(5));
//! ```

use serde_json::{json, Value};

use crate::job::CONTAINER;

mod lay;
mod located;
mod rules;
#[cfg(test)]
mod tests;

use located::{field, item, Located};

/// A template the runner refuses, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {problem}", field, line.map(|l| format!(" (line {l})")).unwrap_or_default())]
pub struct TemplateError {
    /// The field, as the file spells its path (`spec.containers[0].image`);
    /// empty for the file as a whole.
    pub field: String,
    /// The line it is on, where the file has it.
    pub line: Option<u64>,
    /// What is wrong and what to do.
    pub problem: String,
}

/// An operator's pod template, read and checked against what the runner
/// owns ([`PodTemplate::parse`]).
#[derive(Debug, Clone, Default)]
pub struct PodTemplate {
    document: Located,
    /// Where the pod's metadata is in the file (`metadata`,
    /// `template.metadata`), if the form has one.
    metadata_at: Option<String>,
    /// Where the pod's spec is in the file (`spec`, `template.spec`, or
    /// the file itself for a PodSpec).
    spec_at: String,
}

/// Folders of the run's own that no template mount may cover or sit in.
const RUN_FOLDERS: [&str; 4] = ["/work", "/steps", "/outputs", "/.knotless"];
/// The run's own volumes.
const RUN_VOLUMES: [&str; 4] = ["work", "steps", "outputs", "knotless"];

impl PodTemplate {
    /// Reads a template: YAML or JSON, a `Pod`, a `PodTemplate`, a
    /// PodTemplateSpec (`metadata` and `spec`) or a PodSpec (its fields at
    /// the top), and checks it sets nothing the runner owns.
    ///
    /// # Errors
    /// A [`TemplateError`] naming the field and its line: text that is not
    /// YAML, a form that is not one of the four, or a field the runner owns
    /// (the step container's image, command, arguments or working folder,
    /// the run's volumes and mounts, the runner's labels and annotations,
    /// a restart policy but `Never`, a mounted service-account token) or a
    /// step container's security context looser than the runner's.
    pub fn parse(text: &str) -> Result<PodTemplate, TemplateError> {
        let document = Located::parse(text).map_err(|problem| TemplateError {
            field: String::new(),
            line: None,
            problem: format!("not YAML or JSON: {problem}"),
        })?;
        let refuse = |field: &str, problem: String| TemplateError {
            field: field.to_string(),
            line: document.line(field),
            problem,
        };
        if !document.value.is_object() {
            return Err(refuse(
                "",
                "a pod template is a mapping: a Pod, a PodTemplate, a PodTemplateSpec or a PodSpec"
                    .into(),
            ));
        }
        let (metadata_at, spec_at) = match document.value.get("kind").and_then(Value::as_str) {
            Some("Pod") => (Some("metadata".to_string()), "spec".to_string()),
            Some("PodTemplate") => (
                Some("template.metadata".to_string()),
                "template.spec".to_string(),
            ),
            Some(other) => {
                return Err(refuse(
                    "kind",
                    format!("{other} is not a pod template; give a Pod, a PodTemplate, a PodTemplateSpec or a PodSpec"),
                ))
            }
            None if document.value.get("spec").is_some()
                || document.value.get("metadata").is_some() =>
            {
                (Some("metadata".to_string()), "spec".to_string())
            }
            None => (None, String::new()),
        };
        let template = PodTemplate {
            document,
            metadata_at,
            spec_at,
        };
        template.check_owned()?;
        Ok(template)
    }

    /// The PersistentVolumeClaims its volumes name: each must exist in the
    /// namespace before the Job is made.
    ///
    /// ```
    /// let template = executor_k8s::PodTemplate::parse(
    ///     "volumes:\n  - name: cache\n    persistentVolumeClaim:\n      claimName: warm-cache\n",
    /// ).unwrap();
    /// assert_eq!(template.claims(), ["warm-cache"]);
    /// ```
    pub fn claims(&self) -> Vec<String> {
        self.volumes()
            .filter_map(|(_, v)| v["persistentVolumeClaim"]["claimName"].as_str())
            .map(str::to_string)
            .collect()
    }

    /// The pod spec, as the file has it (`{}` where the file has none).
    fn spec(&self) -> &Value {
        static EMPTY: Value = Value::Null;
        let spec = pointer(&self.document.value, &self.spec_at);
        if spec.is_null() {
            &EMPTY
        } else {
            spec
        }
    }

    /// The pod's metadata, as the file has it.
    fn metadata(&self) -> &Value {
        match &self.metadata_at {
            Some(at) => pointer(&self.document.value, at),
            None => &Value::Null,
        }
    }

    /// The path of `relative` (a pod spec field) in the file.
    fn spec_path(&self, relative: &str) -> String {
        field(&self.spec_at, relative)
    }

    /// A refusal of the spec field at `relative`.
    fn refuse(&self, relative: &str, problem: impl Into<String>) -> TemplateError {
        let path = self.spec_path(relative);
        TemplateError {
            line: self.document.line(&path),
            field: path,
            problem: problem.into(),
        }
    }

    /// A refusal of the metadata field at `relative`.
    fn refuse_metadata(&self, relative: &str, problem: impl Into<String>) -> TemplateError {
        let path = field(self.metadata_at.as_deref().unwrap_or("metadata"), relative);
        TemplateError {
            line: self.document.line(&path),
            field: path,
            problem: problem.into(),
        }
    }

    /// The spec's volumes, each with its path relative to the spec.
    fn volumes(&self) -> impl Iterator<Item = (String, &Value)> {
        self.spec()["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, v)| (item("volumes", i), v))
    }

    /// Every container of the spec (`containers`, `initContainers`), each
    /// with its path relative to the spec.
    fn containers(&self) -> impl Iterator<Item = (String, &Value)> {
        ["containers", "initContainers"]
            .into_iter()
            .flat_map(move |list| {
                self.spec()[list]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .enumerate()
                    .map(move |(i, c)| (item(list, i), c))
            })
    }

    /// The template's entry for the step container, if it has one.
    fn step_container(&self) -> Option<(String, &Value)> {
        self.spec()["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
            .find(|(_, c)| c["name"] == CONTAINER)
            .map(|(i, c)| (item("containers", i), c))
    }
}

/// The value at a dotted path (`template.spec`); `Null` where absent, the
/// whole value for the empty path.
fn pointer<'a>(value: &'a Value, path: &str) -> &'a Value {
    if path.is_empty() {
        return value;
    }
    path.split('.').fold(value, |v, key| &v[key])
}

/// Whether a mount at `target` would cover, or sit in, one of the run's
/// own folders.
fn covers_run_folder(target: &str) -> Option<&'static str> {
    let target = target.trim_end_matches('/');
    RUN_FOLDERS.into_iter().find(|folder| {
        target.is_empty()
            || target == *folder
            || folder.starts_with(&format!("{target}/"))
            || target.starts_with(&format!("{folder}/"))
    })
}

/// An empty object where `value` is not an object.
fn object_or_empty(value: &Value) -> Value {
    if value.is_object() {
        value.clone()
    } else {
        json!({})
    }
}
