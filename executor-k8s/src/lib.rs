//! The Kubernetes backend of [`executor_core`]: each run is one `batch/v1`
//! Job on the user's cluster, its one pod runs a container that only waits,
//! and every step runs as `sh -ec <script>` in it, started through one
//! long-lived exec (the step channel). The runner stays
//! outside the cluster: the checkout and `/outputs` travel as tar over
//! exec, so the cluster needs no volume or object store, and deleting the
//! Job lets a cluster that scales to zero give its node back.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use executor_core::{run, RunLog, RunSpec, Step};
//! use executor_k8s::{K8sExecutor, K8sOptions, KubeconfigSource};
//! use tokio_util::sync::CancellationToken;
//!
//! let executor = K8sExecutor::connect(&KubeconfigSource::default(), K8sOptions::default()).await?;
//! let spec = RunSpec::new("build-1", "did:plc:runner", "checkout", "outputs")
//!     .image("busybox:1.36")
//!     .step(Step::new("hello", "echo hello from $(hostname)"));
//! let result = run(&executor, &spec, &RunLog::stdout(), CancellationToken::new()).await;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
// Every public function that can fail says how: embedders match on it.
#![warn(clippy::missing_errors_doc)]

pub mod access;
mod answers;
pub mod cluster;
mod dry_run;
mod exec;
mod executor;
mod framed;
mod job;
mod kube_cluster;
mod kubeconfig;
mod permission;
mod pod_status;
mod settling;
mod template;
mod wait;
mod yaml;

use std::sync::Arc;
use std::time::Duration;

use executor_core::tar::Compression;
use executor_core::ExecutorError;

pub use dry_run::{calls as dry_run_calls, DryRunCluster, DRY_POD_SUFFIX};
pub use executor::K8sExecutor;
pub use job::{runner_selector, CONTAINER};
pub use kube_cluster::{KubeCluster, KubeconfigSource};
pub use template::{PodTemplate, TemplateError};
pub use wait::{pod_state, PodState};

/// Settings of the Kubernetes executor; `Default` is what `runner-cli` uses without flags.
#[derive(Debug, Clone)]
pub struct K8sOptions {
    /// `resources.requests.cpu`, e.g. `500m`.
    pub cpu_request: Option<String>,
    /// `resources.limits.cpu`.
    pub cpu_limit: Option<String>,
    /// `resources.requests.memory`, e.g. `512Mi`.
    pub memory_request: Option<String>,
    /// `resources.limits.memory`.
    pub memory_limit: Option<String>,
    /// `nodeSelector` entries.
    pub node_selector: Vec<(String, String)>,
    /// `tolerations`, as Kubernetes objects.
    pub tolerations: Vec<serde_json::Value>,
    /// `serviceAccountName`.
    pub service_account: Option<String>,
    /// One `imagePullSecrets` entry.
    pub image_pull_secret: Option<String>,
    /// Required pod anti-affinity against every other run's pod on
    /// `kubernetes.io/hostname`: a node to itself.
    pub isolate: bool,
    /// Capabilities added back to the step container, which drops all of
    /// them (`capabilities.drop: [ALL]`), e.g. `CHOWN`, `SETUID`,
    /// `SETGID` for a step that installs packages as root.
    pub cap_add: Vec<String>,
    /// `securityContext.runAsUser` of the step container.
    pub run_as_user: Option<i64>,
    /// `securityContext.runAsGroup` of the step container.
    pub run_as_group: Option<i64>,
    /// `securityContext.runAsNonRoot`: the kubelet refuses to start the
    /// pod if it would run as root.
    pub run_as_non_root: bool,
    /// How long the pod may take to be Ready (a node may be rented meanwhile).
    pub pod_timeout: Duration,
    /// How often a long wait for the pod says in the log that it still
    /// waits, with the pod's latest state and events.
    pub progress_every: Duration,
    /// Added to the run's lifetime ([`RunSpec::lifetime`](executor_core::RunSpec::lifetime):
    /// run timeout plus outputs timeout) for `activeDeadlineSeconds` and the expiry.
    pub grace: Duration,
    /// `ttlSecondsAfterFinished`: the cluster's own clean-up of a Job that ended.
    pub ttl_after_finished: Duration,
    /// How long stop waits for the pod to be gone.
    pub stop_timeout: Duration,
    /// How often a silent exec is pinged.
    pub keepalive: Duration,
    /// How long a call the API server did not answer (refused, reset,
    /// timed out, 429, 5xx) is tried again, backing off, before it fails:
    /// an API server restarting or a gateway blinking is ridden out.
    pub reconnect_timeout: Duration,
    /// Whether what goes into the pod (the checkout, the steps, a cache)
    /// is sent gzip-compressed and unpacked by `gzip -dc | tar x` where
    /// the image has `gzip` (as it is, where not). `Auto` compresses when
    /// the API server's round trip, timed at connect, shows a link
    /// between machines.
    pub compression: Compression,
    /// The operator's pod template the run's Job is laid over
    /// ([`PodTemplate`]): volumes, a runtime class, a priority class,
    /// annotations, sidecars. Its PersistentVolumeClaims must exist in the
    /// namespace before a run starts.
    pub pod_template: Option<PodTemplate>,
    /// Whether the steps' user (`run_as_user`) is kept apart from the
    /// runner's side ([`StepIsolation`]).
    pub step_isolation: StepIsolation,
}

/// Whether a run's steps run under a uid the runner's side (the channel's
/// agent, each step's supervisor, the state folder) does not have, so no
/// process a step leaves behind can start, end or settle a later step.
///
/// ```
/// assert_eq!(executor_k8s::StepIsolation::default(), executor_k8s::StepIsolation::Auto);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StepIsolation {
    /// Apart wherever there is a step user other than root
    /// (`run_as_user`) and nothing rules out the root side.
    #[default]
    Auto,
    /// Apart, or the run is refused before anything is made.
    Required,
    /// Every process of the pod runs as the steps' user: one trust domain.
    Off,
}

impl Default for K8sOptions {
    fn default() -> Self {
        K8sOptions {
            cpu_request: None,
            cpu_limit: None,
            memory_request: None,
            memory_limit: None,
            node_selector: Vec::new(),
            tolerations: Vec::new(),
            service_account: None,
            image_pull_secret: None,
            isolate: false,
            cap_add: Vec::new(),
            run_as_user: None,
            run_as_group: None,
            run_as_non_root: false,
            pod_timeout: Duration::from_secs(600),
            progress_every: Duration::from_secs(10),
            grace: Duration::from_secs(300),
            ttl_after_finished: Duration::from_secs(600),
            stop_timeout: Duration::from_secs(120),
            keepalive: Duration::from_secs(20),
            reconnect_timeout: Duration::from_secs(300),
            compression: Compression::Auto,
            pod_template: None,
            step_isolation: StepIsolation::Auto,
        }
    }
}

impl K8sExecutor {
    /// Connects as kubectl would; an unreachable server or a refused
    /// credential is an error naming the server.
    ///
    /// # Errors
    /// As [`KubeCluster::connect`].
    pub async fn connect(
        source: &KubeconfigSource,
        options: K8sOptions,
    ) -> Result<Self, ExecutorError> {
        let cluster = KubeCluster::connect(source)
            .await?
            .keepalive(options.keepalive)
            .reconnect_timeout(options.reconnect_timeout);
        let round_trip = cluster.round_trip();
        Ok(Self::with_cluster(Arc::new(cluster), options).measured(round_trip))
    }

    /// [`K8sExecutor::connect`] with the permissions `purpose` uses checked
    /// ([`K8sExecutor::check_run_permissions`]): the permission reviews go
    /// out with the first call instead of after it. Each review opens a
    /// connection of its own, a TCP and a TLS handshake, so over a 50 ms
    /// link checking after connecting cost three round trips more.
    ///
    /// # Errors
    /// As [`KubeCluster::connect`], whose errors come first (a server that
    /// does not answer is named as such, whatever the reviews said); then
    /// as [`access::check`].
    pub async fn connect_checked(
        source: &KubeconfigSource,
        options: K8sOptions,
        purpose: access::Purpose,
    ) -> Result<Self, ExecutorError> {
        let cluster = KubeCluster::prepare(source)
            .await?
            .keepalive(options.keepalive)
            .reconnect_timeout(options.reconnect_timeout);
        let reached = {
            let reach = cluster.reach();
            let check = access::check(&cluster, purpose.permissions());
            tokio::pin!(reach, check);
            tokio::select! {
                reached = &mut reach => {
                    let reached = reached?;
                    check.await?;
                    reached
                }
                checked = &mut check => {
                    let reached = reach.await?;
                    checked?;
                    reached
                }
            }
        };
        let cluster = cluster.reached(reached);
        // Timed while the Job is created and its pod starts: the first
        // copy is the first to need it.
        let timing = cluster.timing();
        let executor = Self::with_cluster(Arc::new(cluster), options).measuring(timing);
        executor.granted_for(purpose);
        Ok(executor)
    }

    /// An executor that prints the Job and every call, and contacts nothing.
    pub fn dry_run(
        namespace: &str,
        options: K8sOptions,
        out: impl std::io::Write + Send + 'static,
    ) -> Self {
        let mut executor =
            Self::with_cluster(Arc::new(DryRunCluster::new(namespace, out)), options);
        executor.dry = true;
        executor
    }
}
