//! The flags of each container backend.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::values::{parse_bytes, parse_capability, parse_duration};

/// Flags of the k8s executor.
#[derive(Debug, Args, Default, Clone)]
#[command(next_help_heading = "Kubernetes (--executor k8s)")]
pub struct K8sArgs {
    /// Kubeconfig file; default KUBECONFIG, then ~/.kube/config.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context; default the current context.
    #[arg(long)]
    pub context: Option<String>,
    /// Namespace; default the context's, then `default`.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Accept a kubeconfig whose cluster sets insecure-skip-tls-verify (the
    /// server's certificate goes unchecked; the log says so). Without this
    /// flag such a kubeconfig is refused.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    /// Accept a kubeconfig whose server is plain http:// (its token, the
    /// run's Secret and the checkout cross the network unencrypted; the
    /// log says so). Without this flag such a kubeconfig is refused.
    #[arg(long)]
    pub insecure_plain_http: bool,
    /// CPU request of the run's pod, e.g. 500m.
    #[arg(long)]
    pub cpu_request: Option<String>,
    /// CPU limit of the run's pod.
    #[arg(long)]
    pub cpu_limit: Option<String>,
    /// Memory request of the run's pod, e.g. 512Mi.
    #[arg(long)]
    pub memory_request: Option<String>,
    /// Memory limit of the run's pod.
    #[arg(long)]
    pub memory_limit: Option<String>,
    /// A node selector entry (repeatable).
    #[arg(long = "node-selector", value_name = "KEY=VALUE", value_parser = parse_pair)]
    pub node_selector: Vec<(String, String)>,
    /// A toleration (repeatable): KEY[=VALUE]:EFFECT, e.g. dedicated=ci:NoSchedule.
    #[arg(long = "toleration", value_name = "KEY[=VALUE]:EFFECT", value_parser = parse_toleration)]
    pub tolerations: Vec<serde_json::Value>,
    /// Service account of the run's pod.
    #[arg(long)]
    pub service_account: Option<String>,
    /// Image pull secret of the run's pod.
    #[arg(long)]
    pub image_pull_secret: Option<String>,
    /// Run the steps as this user id. The pod's own side (the agent that
    /// starts and supervises each step) then runs as root apart from them,
    /// unless --step-isolation off.
    #[arg(long, value_name = "UID")]
    pub run_as_user: Option<i64>,
    /// Whether the steps' user (--run-as-user) is kept apart from the pod's
    /// root side: auto (where the namespace's admission takes the root
    /// side, else one user for all, said in the log), required (else exit
    /// 2), off (one user for every process).
    #[arg(long, default_value = "auto", value_parser = parse_step_isolation)]
    pub step_isolation: executor_k8s::StepIsolation,
    /// Run the steps with this group id (runAsGroup).
    #[arg(long, value_name = "GID")]
    pub run_as_group: Option<i64>,
    /// Refuse to start the pod if it would run as root (runAsNonRoot).
    #[arg(long)]
    pub run_as_non_root: bool,
    /// Give the run a node to itself (required pod anti-affinity); on by
    /// default for --trigger pull.
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    pub isolate: Option<bool>,
    /// A pod template the run's Job is laid over (YAML or JSON: a Pod, a
    /// PodTemplate, a PodTemplateSpec or a PodSpec): volumes, a runtime
    /// class, a priority class, annotations, sidecars, and for the
    /// container named `run` mounts, variables, resources and a tighter
    /// security context. What the runner owns is refused with its line.
    #[arg(long, value_name = "FILE")]
    pub pod_template: Option<PathBuf>,
    /// How long the pod may take to be ready (renting a node counts).
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub pod_timeout: Duration,
    /// How long a call the Kubernetes API server or the Docker engine does
    /// not answer (refused, reset, 429, 5xx) is tried again, backing off,
    /// before it fails; stop and cleanup ride out an outage this long.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub reconnect_timeout: Duration,
    /// Whether the checkout, the steps and caches go into the container or
    /// pod gzip-compressed: auto (when the engine's or API server's round
    /// trip shows a link between machines, 2 ms or more), always, never.
    #[arg(long, default_value = "auto", value_parser = parse_compression)]
    pub compression: executor_core::tar::Compression,
}

pub(crate) fn parse_step_isolation(text: &str) -> Result<executor_k8s::StepIsolation, String> {
    match text {
        "auto" => Ok(executor_k8s::StepIsolation::Auto),
        "required" => Ok(executor_k8s::StepIsolation::Required),
        "off" => Ok(executor_k8s::StepIsolation::Off),
        other => Err(format!("{other:?} is not auto, required or off")),
    }
}

pub(crate) fn parse_compression(text: &str) -> Result<executor_core::tar::Compression, String> {
    text.parse()
}

pub(crate) fn parse_pair(text: &str) -> Result<(String, String), String> {
    let (k, v) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    if k.is_empty() {
        return Err(format!("{text:?} has an empty key"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// `key[=value]:Effect` as a Kubernetes toleration.
pub fn parse_toleration(text: &str) -> Result<serde_json::Value, String> {
    let (kv, effect) = text.rsplit_once(':').ok_or_else(|| {
        format!("{text:?} is not KEY[=VALUE]:EFFECT (e.g. dedicated=ci:NoSchedule)")
    })?;
    if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
        return Err(format!(
            "toleration effect {effect:?} must be NoSchedule, PreferNoSchedule or NoExecute"
        ));
    }
    Ok(match kv.split_once('=') {
        Some((k, v)) => {
            serde_json::json!({"key": k, "operator": "Equal", "value": v, "effect": effect})
        }
        None => serde_json::json!({"key": kv, "operator": "Exists", "effect": effect}),
    })
}

/// Flags of the docker executor.
#[derive(Debug, Args, Default)]
#[command(next_help_heading = "Docker (--executor docker)")]
pub struct DockerArgs {
    /// Memory limit of the container: bytes, or with k, m, g (512m, 2g).
    #[arg(long, value_parser = parse_bytes)]
    pub memory: Option<i64>,
    /// CPU limit of the container, e.g. 1.5.
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Network of the container (default: the engine's default).
    #[arg(long)]
    pub network: Option<String>,
    /// User the steps run as, e.g. 1000:1000.
    #[arg(long)]
    pub user: Option<String>,
    /// When to pull the image.
    #[arg(long, value_enum, default_value = "missing")]
    pub pull: Pull,
    /// Most processes the container may hold; 0 for the engine's default
    /// (unlimited).
    #[arg(long, default_value_t = executor_docker::DEFAULT_PIDS_LIMIT)]
    pub pids_limit: i64,
    /// A capability dropped from the container (repeatable), e.g. ALL.
    #[arg(long = "cap-drop", value_name = "CAP", value_parser = parse_capability)]
    pub cap_drop: Vec<String>,
    /// A read-only root filesystem: only /work, /steps, /outputs, cache
    /// volumes and a /tmp tmpfs are writable.
    #[arg(long)]
    pub read_only: bool,
    /// A host path or named volume mounted into the container, as
    /// `docker run -v` (repeatable): `SRC:DST[:ro]`. The runner never
    /// removes it. Untrusted triggers get read-only ones only.
    #[arg(long = "volume", value_name = "SRC:DST[:ro]")]
    pub volumes: Vec<executor_docker::Mounted>,
    /// Run the container privileged (Docker-in-Docker); refused for
    /// untrusted triggers.
    #[arg(long)]
    pub privileged: bool,
    /// The engine's runtime for the container (runsc for gVisor,
    /// sysbox-runc); default the engine's.
    #[arg(long, value_name = "NAME")]
    pub runtime: Option<String>,
    /// Size of /dev/shm: bytes, or with k, m, g.
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub shm_size: Option<i64>,
    /// A HOST:IP line added to /etc/hosts (repeatable).
    #[arg(long = "add-host", value_name = "HOST:IP")]
    pub add_hosts: Vec<String>,
    /// A DNS server of the container (repeatable).
    #[arg(long = "dns", value_name = "IP")]
    pub dns: Vec<String>,
    /// A host device for the container, `HOST[:CONTAINER[:rwm]]`
    /// (repeatable); refused for untrusted triggers.
    #[arg(long = "device", value_name = "DEVICE")]
    pub devices: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Pull {
    /// Never pull: a missing image is an error.
    Never,
    /// Pull only when the engine lacks the image.
    #[default]
    Missing,
    /// Pull before every run.
    Always,
}
