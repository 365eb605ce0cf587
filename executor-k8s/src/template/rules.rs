//! What a template may not set: what the runner owns (always), and what
//! would loosen the hardening (for untrusted code).

use serde_json::Value;

use super::{covers_run_folder, item, PodTemplate, TemplateError, RUN_VOLUMES};
use crate::job::CONTAINER;

/// What the step container takes from a template.
const STEP_CONTAINER_TAKES: [&str; 6] = [
    "name",
    "env",
    "envFrom",
    "resources",
    "volumeMounts",
    "securityContext",
];
/// The step container's fields the runner sets.
const STEP_CONTAINER_OWNED: [&str; 4] = ["image", "command", "args", "workingDir"];
/// Variables every step gets from the runner.
const RUN_VARIABLES: [&str; 3] = ["WORK_DIR", "STEPS_DIR", "OUTPUTS_DIR"];
/// Metadata an export of a live Pod carries and a template does not need.
const METADATA_IGNORED: [&str; 7] = [
    "name",
    "namespace",
    "generateName",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
];

/// Whether a label or annotation key is one the runner or the Job
/// controller sets.
fn owned_key(key: &str) -> bool {
    key.starts_with("dev.knotless.")
        || key.starts_with("batch.kubernetes.io/")
        || key == "job-name"
        || key == "controller-uid"
}

impl PodTemplate {
    /// Refuses a template that sets what the runner owns.
    pub(super) fn check_owned(&self) -> Result<(), TemplateError> {
        let metadata = self.metadata();
        if let Some(fields) = metadata.as_object() {
            for (key, value) in fields {
                match key.as_str() {
                    "labels" | "annotations" => {
                        for k in value.as_object().into_iter().flatten().map(|(k, _)| k) {
                            if owned_key(k) {
                                return Err(self.refuse_metadata(
                                    &format!("{key}.{k}"),
                                    "the runner sets this key to find and own what it makes; use another",
                                ));
                            }
                        }
                    }
                    k if METADATA_IGNORED.contains(&k) => {}
                    _ => {
                        return Err(self.refuse_metadata(
                            key,
                            "a Job's pod takes only labels and annotations from a template",
                        ))
                    }
                }
            }
        }
        let spec = self.spec();
        if !spec.is_object() && !spec.is_null() {
            return Err(self.refuse("", "a pod spec is a mapping"));
        }
        if let Some(policy) = spec.get("restartPolicy") {
            if policy != "Never" {
                return Err(self.refuse(
                    "restartPolicy",
                    "the runner's Job never restarts its pod (Never); remove it",
                ));
            }
        }
        if spec.get("automountServiceAccountToken") == Some(&Value::Bool(true)) {
            return Err(self.refuse(
                "automountServiceAccountToken",
                "the step container never gets the service account's token; remove it",
            ));
        }
        for (at, volume) in self.volumes() {
            if let Some(name) = volume["name"].as_str() {
                if RUN_VOLUMES.contains(&name) {
                    return Err(self.refuse(
                        &format!("{at}.name"),
                        format!("{name} is one of the run's own volumes; name yours otherwise"),
                    ));
                }
            }
        }
        for (at, container) in self.containers() {
            let name = container["name"].as_str().unwrap_or_default();
            if name == CONTAINER && at.starts_with("initContainers") {
                return Err(self.refuse(
                    &format!("{at}.name"),
                    format!("{CONTAINER} is the step container's name; name an init container otherwise"),
                ));
            }
        }
        if let Some((at, container)) = self.step_container() {
            self.check_step_container(&at, container)?;
        }
        Ok(())
    }

    fn check_step_container(&self, at: &str, container: &Value) -> Result<(), TemplateError> {
        for (key, _) in container.as_object().into_iter().flatten() {
            if STEP_CONTAINER_OWNED.contains(&key.as_str()) {
                return Err(self.refuse(
                    &format!("{at}.{key}"),
                    format!(
                        "the step container's {key} is the runner's (the run's image, its own \
                         command, /work); remove it"
                    ),
                ));
            }
            if !STEP_CONTAINER_TAKES.contains(&key.as_str()) {
                return Err(self.refuse(
                    &format!("{at}.{key}"),
                    "the step container takes only env, envFrom, resources, volumeMounts and \
                     securityContext from a template",
                ));
            }
        }
        for (i, var) in container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(name) = var["name"].as_str() {
                if RUN_VARIABLES.contains(&name) {
                    return Err(self.refuse(
                        &format!("{}.name", item(&format!("{at}.env"), i)),
                        format!("{name} is set by the runner for every step; remove it"),
                    ));
                }
            }
        }
        for (i, mount) in container["volumeMounts"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let here = item(&format!("{at}.volumeMounts"), i);
            if let Some(name) = mount["name"].as_str() {
                if RUN_VOLUMES.contains(&name) {
                    return Err(self.refuse(
                        &format!("{here}.name"),
                        format!("{name} is one of the run's own volumes, mounted by the runner; remove it"),
                    ));
                }
            }
            let target = mount["mountPath"].as_str().unwrap_or_default();
            if let Some(folder) = covers_run_folder(target) {
                return Err(self.refuse(
                    &format!("{here}.mountPath"),
                    format!("{target:?} would cover or sit in the run's own folder {folder}; mount it elsewhere"),
                ));
            }
        }
        let context = format!("{at}.securityContext");
        if let Some(field) = loosening(&container["securityContext"]) {
            return Err(self.refuse(
                &format!("{context}.{field}"),
                "it would loosen the step container's hardening; a template may only tighten it \
                 (add capabilities with K8sOptions::cap_add)",
            ));
        }
        Ok(())
    }

    /// Refuses what would loosen the hardening for untrusted code: host
    /// namespaces, host paths, a shared process namespace, a writable
    /// claim, and any container's privileged mode, added capabilities,
    /// privilege escalation or unconfined profile.
    ///
    /// ```
    /// use executor_k8s::PodTemplate;
    /// let dind = PodTemplate::parse(
    ///     "containers:\n  - name: docker\n    image: docker:dind\n    securityContext:\n      privileged: true\n",
    /// ).unwrap();
    /// let refused = dind.check_untrusted().unwrap_err();
    /// assert_eq!(refused.field, "containers[0].securityContext.privileged");
    /// ```
    ///
    /// # Errors
    /// A [`TemplateError`] naming the first such field and its line.
    pub fn check_untrusted(&self) -> Result<(), TemplateError> {
        let spec = self.spec();
        for key in ["hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace"] {
            if spec.get(key) == Some(&Value::Bool(true)) {
                return Err(self.refuse(
                    key,
                    "untrusted code shares nothing with the node or the pod's other containers; remove it, or run as a trusted trigger",
                ));
            }
        }
        if let Some(field) = loosening(&spec["securityContext"]) {
            return Err(self.refuse(
                &format!("securityContext.{field}"),
                "it would loosen the hardening of untrusted code; remove it, or run as a trusted trigger",
            ));
        }
        if spec["securityContext"].get("sysctls").is_some() {
            return Err(self.refuse(
                "securityContext.sysctls",
                "untrusted code sets no kernel parameter; remove it, or run as a trusted trigger",
            ));
        }
        for (at, volume) in self.volumes() {
            if volume.get("hostPath").is_some() {
                return Err(self.refuse(
                    &format!("{at}.hostPath"),
                    "untrusted code mounts nothing of the node's; remove it, or run as a trusted trigger",
                ));
            }
            let claim = &volume["persistentVolumeClaim"];
            if claim.is_object() && claim["readOnly"] != true {
                let name = volume["name"].as_str().unwrap_or_default();
                if let Some(mount) = self.writable_mount(name) {
                    return Err(self.refuse(
                        &mount,
                        "untrusted code mounts no claim writable (a later run would trust what it left); add readOnly: true",
                    ));
                }
            }
        }
        for (at, container) in self.containers() {
            if let Some(field) = loosening(&container["securityContext"]) {
                return Err(self.refuse(
                    &format!("{at}.securityContext.{field}"),
                    "it would loosen the hardening of untrusted code; remove it, or run as a trusted trigger",
                ));
            }
        }
        Ok(())
    }

    /// The path of a mount of volume `name` that is not read-only.
    fn writable_mount(&self, name: &str) -> Option<String> {
        self.containers().find_map(|(at, container)| {
            container["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
                .find(|(_, m)| m["name"] == name && m["readOnly"] != true)
                .map(|(i, _)| item(&format!("{at}.volumeMounts"), i))
        })
    }
}

/// The field of a security context that loosens what the runner sets.
fn loosening(context: &Value) -> Option<&'static str> {
    if context["privileged"] == true {
        return Some("privileged");
    }
    if context["allowPrivilegeEscalation"] == true {
        return Some("allowPrivilegeEscalation");
    }
    if context["capabilities"]["add"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        return Some("capabilities.add");
    }
    if context["seccompProfile"]["type"] == "Unconfined" {
        return Some("seccompProfile.type");
    }
    if context["procMount"] == "Unmasked" {
        return Some("procMount");
    }
    if context["appArmorProfile"]["type"] == "Unconfined" {
        return Some("appArmorProfile.type");
    }
    None
}
