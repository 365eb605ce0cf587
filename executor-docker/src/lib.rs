//! The Docker backend of [`executor_core`]: one container per run on a
//! Docker-compatible engine (Docker, or podman's Docker API), through
//! `bollard`.
//!
//! The container runs a command that only waits; `/work`, `/steps` and
//! `/outputs` are anonymous volumes, as is each absolute cache folder
//! outside them (starting as the image's copy); the checkout and steps folder go in
//! as streamed tar bodies; each step is an attached exec of
//! `sh -ec <script>`; `/outputs` comes back through the untrusted unpacker;
//! stop force-removes the container and its anonymous volumes.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use executor_core::{run, RunLog, RunSpec, Step};
//! use executor_docker::{DockerExecutor, DockerOptions};
//! use tokio_util::sync::CancellationToken;
//!
//! let executor = DockerExecutor::connect(DockerOptions::default()).await?;
//! let spec = RunSpec::new("build-1", "did:plc:runner", "checkout", "outputs")
//!     .image("busybox:latest")
//!     .step(Step::new("hello", "echo hello from $(hostname)"));
//! let result = run(&executor, &spec, &RunLog::stdout(), CancellationToken::new()).await;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]
// Every public function that can fail says how: embedders match on it.
#![warn(clippy::missing_errors_doc)]

mod bollard_engine;
mod dry_run;
pub mod engine;
mod executor;
mod host;
mod pooled;
mod registry_auth;

use std::sync::Arc;
use std::time::Duration;

use executor_core::tar::Compression;
use executor_core::ExecutorError;

pub use bollard_engine::BollardEngine;
pub use dry_run::DryRunEngine;
pub use executor::{DockerExecutor, UNTRUSTED_CAP_DROP};
pub use host::{HostSettings, Mounted};
pub use registry_auth::{Credentials, RegistryAuth, Secret};

/// The default pids limit: room for any build's parallel jobs, far from
/// what a fork bomb needs to starve the host.
pub const DEFAULT_PIDS_LIMIT: i64 = 4096;

/// When the image is pulled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PullPolicy {
    /// Never: a missing image is an error.
    Never,
    /// Only when the engine does not have it.
    #[default]
    Missing,
    /// Before every run.
    Always,
}

/// Settings of the Docker executor; `Default` is what `runner-cli` uses
/// without flags.
#[derive(Debug, Clone)]
pub struct DockerOptions {
    /// Memory limit in bytes (`--memory`); no swap beyond it.
    pub memory: Option<i64>,
    /// CPU limit (`--cpus`).
    pub cpus: Option<f64>,
    /// Network mode (`--network`); `None` is the engine's default.
    pub network: Option<String>,
    /// User the steps run as (`--user`).
    pub user: Option<String>,
    /// When to pull (`--pull`).
    pub pull: PullPolicy,
    /// Most processes (and threads) the container may hold (`--pids-limit`):
    /// a fork bomb in a step stops there instead of taking the host.
    /// `None` is the engine's default (unlimited).
    pub pids_limit: Option<i64>,
    /// Capabilities dropped from the container (`--cap-drop`), e.g. `ALL`.
    pub cap_drop: Vec<String>,
    /// Capabilities added to the container (`--cap-add`).
    pub cap_add: Vec<String>,
    /// A read-only root filesystem (`--read-only`): only the run's folders,
    /// its cache volumes and a `/tmp` tmpfs are writable.
    pub read_only: bool,
    /// Added to the run's lifetime (run timeout plus outputs timeout) for
    /// the container's expiry label, after which cleanup may remove it.
    pub expiry_grace: Duration,
    /// How long a call the engine does not answer (refused or dropped
    /// connections, 429, 502-504) is tried again, backing off, before it
    /// fails: inspections, lists, removals and creating an exec.
    pub reconnect_timeout: Duration,
    /// Whether what goes into the container (the checkout, the steps, a
    /// cache) is sent gzip-compressed; the engine decompresses it, so the
    /// image needs no tool for it. `Auto` compresses when the engine's
    /// round trip, timed at connect, shows a link between machines.
    pub compression: Compression,
    /// The credentials image pulls send. `None` reads them as the docker
    /// CLI does at connect ([`RegistryAuth::from_docker_config`]).
    pub registry_auth: Option<RegistryAuth>,
    /// The operator's settings of each run's container: volumes,
    /// runtime, `/dev/shm`, hosts, DNS, devices, privileged mode
    /// (checked against each run's trust: [`HostSettings::check`]).
    pub host: HostSettings,
}

impl Default for DockerOptions {
    fn default() -> Self {
        DockerOptions {
            memory: None,
            cpus: None,
            network: None,
            user: None,
            pull: PullPolicy::Missing,
            pids_limit: Some(DEFAULT_PIDS_LIMIT),
            cap_drop: Vec::new(),
            cap_add: Vec::new(),
            read_only: false,
            expiry_grace: Duration::from_secs(300),
            reconnect_timeout: Duration::from_secs(300),
            compression: Compression::Auto,
            registry_auth: None,
            host: HostSettings::default(),
        }
    }
}

impl DockerExecutor {
    /// Connects to the engine as the docker CLI does (`DOCKER_HOST`, else
    /// `/var/run/docker.sock`); an engine that does not answer is an error
    /// naming where it looked.
    ///
    /// # Errors
    /// `Backend` of kind `unreachable` when no engine answers where it looked;
    /// as [`BollardEngine::connect`].
    pub async fn connect(options: DockerOptions) -> Result<Self, ExecutorError> {
        let registry_auth = match &options.registry_auth {
            Some(auth) => auth.clone(),
            None => RegistryAuth::from_docker_config()?,
        };
        let engine = BollardEngine::open(&bollard_engine::docker_host())
            .await?
            .reconnect_timeout(options.reconnect_timeout)
            .registry_auth(registry_auth);
        // Timed while the image is checked and the container made: the
        // first upload is the first to need it.
        let timing = engine.timing();
        Ok(Self::with_engine(Arc::new(engine), options).measuring(timing))
    }

    /// An executor that prints the container config and every engine call
    /// to `out`, and contacts nothing.
    pub fn dry_run(options: DockerOptions, out: impl std::io::Write + Send + 'static) -> Self {
        let mut executor = Self::with_engine(Arc::new(DryRunEngine::new(out)), options);
        executor.dry = true;
        executor
    }
}
