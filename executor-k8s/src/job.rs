//! The Job and Secret a run gets.

use std::collections::BTreeMap;

use executor_container::container::{environment_name, Marks, KEEP_ALIVE};
use executor_core::labels::{label_value, RUNNER_LABEL};
use executor_core::RunSpec;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use serde_json::json;

use crate::K8sOptions;

/// The container's name in the pod.
pub const CONTAINER: &str = "run";
/// The folder, an emptyDir, holding the runner's own files.
pub use executor_container::container::STATE_DIR;

/// Annotation of the Job naming the steps' user, for a resumed runner.
pub(crate) const STEP_USER_KEY: &str = "dev.knotless.step-user";

/// The capabilities the root side keeps: becoming the steps' user
/// (`SETUID`, `SETGID`), ending their processes (`KILL`), and giving them
/// their folders and reading what they leave (`CHOWN`, `DAC_OVERRIDE`,
/// `FOWNER`). A step loses every one as it drops to its uid.
pub(crate) const ROOT_SIDE_CAPABILITIES: [&str; 6] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "KILL",
    "SETGID",
    "SETUID",
];

/// Names and labels of one run's objects.
#[derive(Debug, Clone)]
pub struct RunObjects {
    /// The Job's name, also the Secret's.
    pub name: String,
    /// Selector of the Job's pods.
    pub pod_selector: String,
    /// The Job.
    pub job: Job,
    /// The Secret holding every variable, if there are any.
    pub secret: Option<Secret>,
}

/// Secret key of a step's variable; steps export it under its own name.
pub fn step_key(step: usize, key: &str) -> String {
    format!("KNOTLESS_S{step}_{key}")
}

/// The variables of the step at `index` the run's Secret holds under
/// [`step_key`]: its own, and those of the runner's that hold one of the
/// run's `secrets` (a step named after one), which must not travel in the
/// step's start.
pub(crate) fn held_step_variables(
    run: &RunSpec,
    index: usize,
    secrets: &executor_core::Masker,
) -> Vec<(String, String)> {
    let own = run
        .steps
        .get(index)
        .map(|s| s.env.clone())
        .unwrap_or_default();
    own.into_iter()
        .chain(
            run.runner_variables(index)
                .into_iter()
                .filter(|(_, v)| matches!(secrets.mask_str(v), std::borrow::Cow::Owned(_))),
        )
        .collect()
}

/// Builds the run's Job and Secret. `suffix` makes the name unique;
/// `native_sidecars` says the server runs init containers with
/// `restartPolicy: Always` as sidecars (v1.29 and later), which is how the
/// run's services are then given. `step_user`, where the steps' user is
/// kept apart, makes the step container root's with only the capabilities
/// of the drop to that user ([`crate::executor`]'s isolation).
pub fn objects(
    run: &RunSpec,
    options: &K8sOptions,
    suffix: &str,
    now: u64,
    plan_digest: &str,
    native_sidecars: bool,
    step_user: Option<&str>,
) -> Result<RunObjects, String> {
    let image = run.image_for("k8s").map_err(|e| e.to_string())?.to_string();
    let name = environment_name(run, suffix);
    let marks = Marks::of(run, now, options.grace, plan_digest);
    let deadline = run.lifetime().saturating_add(options.grace).as_secs();
    let labels: BTreeMap<_, _> = marks.labels.into_iter().collect();
    let mut annotations: BTreeMap<_, _> = marks.notes.into_iter().collect();
    if let Some(user) = step_user {
        annotations.insert(STEP_USER_KEY.to_string(), user.to_string());
    }

    let mut data = BTreeMap::new();
    for (key, value) in &run.env {
        data.insert(key.clone(), value.clone());
    }
    for (key, value) in &run.secrets {
        data.insert(key.clone(), value.expose().to_string());
    }
    let secrets = run.masker();
    for i in 0..run.steps.len() {
        for (key, value) in held_step_variables(run, i, &secrets) {
            data.insert(step_key(i, &key), value);
        }
    }
    let secret = (!data.is_empty()).then(|| {
        serde_json::from_value::<Secret>(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
            "type": "Opaque",
            "stringData": data,
        }))
    });
    let secret = secret.transpose().map_err(|e| e.to_string())?;

    let mut resources = json!({});
    for (kind, key, value) in [
        ("requests", "cpu", &options.cpu_request),
        ("limits", "cpu", &options.cpu_limit),
        ("requests", "memory", &options.memory_request),
        ("limits", "memory", &options.memory_limit),
    ] {
        if let Some(v) = value {
            resources[kind][key] = json!(v);
        }
    }
    let mut pod_spec = json!({
        "restartPolicy": "Never",
        "automountServiceAccountToken": false,
        "terminationGracePeriodSeconds": 0,
        "containers": [{
            "name": CONTAINER,
            "image": image,
            "command": KEEP_ALIVE,
            "workingDir": "/work",
            "env": [
                {"name": "WORK_DIR", "value": "/work"},
                {"name": "STEPS_DIR", "value": "/steps"},
                {"name": "OUTPUTS_DIR", "value": "/outputs"},
            ],
            "securityContext": step_security_context(options, step_user.is_some()),
            "resources": resources,
            "volumeMounts": [
                {"name": "work", "mountPath": "/work"},
                {"name": "steps", "mountPath": "/steps"},
                {"name": "outputs", "mountPath": "/outputs"},
                {"name": "knotless", "mountPath": STATE_DIR},
            ],
        }],
        "volumes": [
            {"name": "work", "emptyDir": {}},
            {"name": "steps", "emptyDir": {}},
            {"name": "outputs", "emptyDir": {}},
            {"name": "knotless", "emptyDir": {}},
        ],
    });
    if secret.is_some() {
        pod_spec["containers"][0]["envFrom"] = json!([{"secretRef": {"name": name}}]);
    }
    add_services(&mut pod_spec, run, options, &resources, native_sidecars);
    if !options.node_selector.is_empty() {
        pod_spec["nodeSelector"] = json!(options
            .node_selector
            .iter()
            .cloned()
            .collect::<BTreeMap<_, _>>());
    }
    if !options.tolerations.is_empty() {
        pod_spec["tolerations"] = json!(options.tolerations);
    }
    if let Some(sa) = &options.service_account {
        pod_spec["serviceAccountName"] = json!(sa);
    }
    if let Some(secret) = &options.image_pull_secret {
        pod_spec["imagePullSecrets"] = json!([{"name": secret}]);
    }
    if options.isolate {
        // A node to itself: no other run's pod on the same host.
        pod_spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchExpressions": [{"key": RUNNER_LABEL, "operator": "Exists"}]},
            "topologyKey": "kubernetes.io/hostname",
        }]}});
    }
    let mut pod = json!({"metadata": {"labels": labels}, "spec": pod_spec});
    if let Some(template) = &options.pod_template {
        if run.trust == executor_core::Trust::Untrusted {
            template
                .check_untrusted()
                .map_err(|e| format!("K8sOptions::pod_template: {e}"))?;
        }
        template
            .lay_under(&mut pod)
            .map_err(|e| format!("K8sOptions::pod_template: {e}"))?;
    }
    let job = serde_json::from_value::<Job>(json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": options.ttl_after_finished.as_secs(),
            "template": pod,
        },
    }))
    .map_err(|e| e.to_string())?;
    Ok(RunObjects {
        pod_selector: format!("job-name={name}"),
        name,
        job,
        secret,
    })
}

/// The run's services as containers of its pod, beside the step
/// container: they share its network, so steps reach them on `localhost`
/// and, through the pod's host aliases, by name. Their resources and
/// security context are the step container's. Where the server has native
/// sidecars they are init containers with `restartPolicy: Always`, which
/// the kubelet starts before the step container; elsewhere (before v1.29)
/// plain containers beside it. Either way the runner waits for each to be
/// ready, and deleting the Job ends them.
fn add_services(
    pod_spec: &mut serde_json::Value,
    run: &RunSpec,
    options: &K8sOptions,
    resources: &serde_json::Value,
    native_sidecars: bool,
) {
    if run.services.is_empty() {
        return;
    }
    for service in &run.services {
        let mut container = json!({
            "name": service.name,
            "image": service.image,
            "env": service.env.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
            "securityContext": security_context(options),
            "resources": resources,
        });
        if let Some(script) = &service.command {
            container["command"] = json!(["sh", "-ec", script]);
        }
        let list = if native_sidecars {
            container["restartPolicy"] = json!("Always");
            "initContainers"
        } else {
            "containers"
        };
        if pod_spec.get(list).is_none() {
            pod_spec[list] = json!([]);
        }
        if let Some(containers) = pod_spec[list].as_array_mut() {
            containers.push(container);
        }
    }
    let names: Vec<&str> = run.services.iter().map(|s| s.name.as_str()).collect();
    pod_spec["hostAliases"] = json!([{"ip": "127.0.0.1", "hostnames": names}]);
}

/// The step container's security context: no privilege escalation, no
/// capability but those asked for, the runtime's default seccomp profile.
fn security_context(options: &K8sOptions) -> serde_json::Value {
    let mut context = json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    if !options.cap_add.is_empty() {
        context["capabilities"]["add"] = json!(options.cap_add);
    }
    if let Some(uid) = options.run_as_user {
        context["runAsUser"] = json!(uid);
    }
    if let Some(gid) = options.run_as_group {
        context["runAsGroup"] = json!(gid);
    }
    // A user other than root is one the kubelet can hold to it, and the
    // `restricted` Pod Security level asks for the promise.
    if options.run_as_non_root || options.run_as_user.is_some_and(|uid| uid != 0) {
        context["runAsNonRoot"] = json!(true);
    }
    context
}

/// The step container's security context: [`security_context`], or where
/// the steps' user is kept apart, root with every capability dropped but
/// those the drop to the steps' uid and their supervision need.
fn step_security_context(options: &K8sOptions, apart: bool) -> serde_json::Value {
    let mut context = security_context(options);
    if apart {
        context["runAsUser"] = json!(0);
        context["runAsGroup"] = json!(0);
        if let Some(fields) = context.as_object_mut() {
            fields.remove("runAsNonRoot");
        }
        let mut added: Vec<String> = ROOT_SIDE_CAPABILITIES.map(String::from).to_vec();
        added.extend(options.cap_add.iter().cloned());
        added.sort();
        added.dedup();
        context["capabilities"]["add"] = json!(added);
    }
    context
}

/// The selector of every object of `runner`.
pub fn runner_selector(runner: &str) -> String {
    format!("{RUNNER_LABEL}={}", label_value(runner))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use executor_core::labels::EXPIRES_KEY;
    use executor_core::mask::Secret;

    use super::*;

    fn spec() -> RunSpec {
        RunSpec::new("r", "did:plc:r", ".", "out")
            .image("busybox:local")
            .timeouts(Duration::from_secs(600), Duration::from_secs(60))
            .secret("TOKEN", Secret::new("s3cr3t-value"))
    }

    #[test]
    fn the_job_outlives_the_outputs_phase() {
        let run = spec();
        let options = K8sOptions::default();
        let objects = objects(&run, &options, "abc", 1000, "00", false, None).unwrap();
        let job = serde_json::to_value(&objects.job).unwrap();
        let lives = 600 + run.outputs_timeout.as_secs();
        let deadline = job["spec"]["activeDeadlineSeconds"].as_u64().unwrap();
        assert!(deadline >= lives + options.grace.as_secs(), "{deadline}");
        let expires: u64 = job["metadata"]["annotations"][EXPIRES_KEY]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            expires >= 1000 + lives + options.grace.as_secs(),
            "{expires}"
        );
    }

    #[test]
    fn the_step_container_drops_every_capability_unless_asked() {
        let container = |options: &K8sOptions| {
            let job = objects(&spec(), options, "abc", 1000, "00", false, None)
                .unwrap()
                .job;
            serde_json::to_value(&job).unwrap()["spec"]["template"]["spec"]["containers"][0]
                ["securityContext"]
                .clone()
        };
        let plain = container(&K8sOptions::default());
        assert_eq!(plain["capabilities"], json!({"drop": ["ALL"]}));
        assert_eq!(plain["seccompProfile"]["type"], "RuntimeDefault");
        assert_eq!(plain["allowPrivilegeEscalation"], false);
        assert!(plain.get("runAsNonRoot").is_none());
        let options = K8sOptions {
            cap_add: vec!["CHOWN".into()],
            run_as_user: Some(1000),
            run_as_group: Some(1000),
            run_as_non_root: true,
            ..K8sOptions::default()
        };
        let asked = container(&options);
        assert_eq!(asked["capabilities"]["add"], json!(["CHOWN"]));
        assert_eq!(asked["runAsUser"], 1000);
        assert_eq!(asked["runAsGroup"], 1000);
        assert_eq!(asked["runAsNonRoot"], true);
    }

    #[test]
    fn secret_values_go_in_the_secret_only() {
        let objects = objects(
            &spec(),
            &K8sOptions::default(),
            "abc",
            1000,
            "00",
            false,
            None,
        )
        .unwrap();
        let job = serde_json::to_string(&objects.job).unwrap();
        assert!(!job.contains("s3cr3t-value"), "{job}");
        let secret = objects.secret.unwrap();
        assert_eq!(
            secret.string_data.unwrap().get("TOKEN").map(String::as_str),
            Some("s3cr3t-value")
        );
        let meta = serde_json::to_string(&secret.metadata).unwrap();
        assert!(!meta.contains("s3cr3t-value"), "{meta}");
    }

    #[test]
    fn services_are_native_sidecars_where_the_server_has_them() {
        let run = spec().service(
            executor_core::Service::new("db", "postgres:16")
                .env("POSTGRES_PASSWORD", "pw")
                .command("exec postgres"),
        );
        let pod = |native| {
            let job = objects(
                &run,
                &K8sOptions::default(),
                "abc",
                1000,
                "00",
                native,
                None,
            )
            .unwrap()
            .job;
            serde_json::to_value(&job).unwrap()["spec"]["template"]["spec"].clone()
        };
        let native = pod(true);
        assert_eq!(native["containers"].as_array().unwrap().len(), 1);
        let db = &native["initContainers"][0];
        assert_eq!(db["name"], "db");
        assert_eq!(db["restartPolicy"], "Always");
        assert_eq!(
            db["command"],
            serde_json::json!(["sh", "-ec", "exec postgres"])
        );
        assert_eq!(
            db["securityContext"],
            native["containers"][0]["securityContext"]
        );
        assert_eq!(
            native["hostAliases"][0]["hostnames"],
            serde_json::json!(["db"])
        );
        let plain = pod(false);
        assert!(plain.get("initContainers").is_none());
        assert_eq!(plain["containers"][1]["name"], "db");
        assert!(plain["containers"][1].get("restartPolicy").is_none());
    }
}
