//! The seam: the few Docker Engine calls the executor makes.
//!
//! [`Engine`] is implemented by the real engine client
//! ([`BollardEngine`](crate::BollardEngine)), by the dry-run
//! ([`DryRunEngine`](crate::DryRunEngine)), and by mocks in unit tests, so
//! what a dry-run prints and what a run does are the same sequence of calls.

use std::collections::HashMap;

use async_trait::async_trait;
use bytes::Bytes;
use executor_core::tar::PackStream;
use executor_core::ExecutorError;
use futures_util::stream::BoxStream;

/// The container a run gets, as the engine is asked to create it.
#[derive(Debug, Clone, PartialEq)]
pub struct ContainerSpec {
    /// Container name.
    pub name: String,
    /// Image reference.
    pub image: String,
    /// The command: the keep-alive, which only waits, for a run's
    /// container; empty for the image's own.
    pub cmd: Vec<String>,
    /// In place of the image's entrypoint, if set.
    pub entrypoint: Option<Vec<String>>,
    /// Plain variables of the container (a service's).
    pub env: Vec<(String, String)>,
    /// Names the container is reached by on its network (a service's).
    pub network_aliases: Vec<String>,
    /// Labels, including the runner, run and expiry labels.
    pub labels: HashMap<String, String>,
    /// `--user`, if any.
    pub user: Option<String>,
    /// Working folder of the container's main process.
    pub working_dir: String,
    /// Memory limit in bytes.
    pub memory: Option<i64>,
    /// CPU limit in units of 10^-9 CPUs.
    pub nano_cpus: Option<i64>,
    /// Network mode; `None` leaves the engine's default.
    pub network_mode: Option<String>,
    /// Security options, always including `no-new-privileges`.
    pub security_opt: Vec<String>,
    /// Anonymous volumes mounted at these paths, labelled as the
    /// container is; removed with the container.
    pub volumes: Vec<String>,
    /// `PidsLimit`.
    pub pids_limit: Option<i64>,
    /// `CapDrop`.
    pub cap_drop: Vec<String>,
    /// `CapAdd`.
    pub cap_add: Vec<String>,
    /// `ReadonlyRootfs`, with a `/tmp` tmpfs.
    pub read_only: bool,
    /// The run's secret variables, in the container's own environment:
    /// given once in the create call, never in an exec's arguments.
    pub secret_env: Vec<(String, executor_core::Secret)>,
    /// The operator's settings (a run's container; none for a service's).
    pub host: crate::HostSettings,
}

/// One command to run in the container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecSpec {
    /// argv.
    pub cmd: Vec<String>,
    /// `KEY=VALUE` pairs.
    pub env: Vec<(String, String)>,
    /// Working folder.
    pub working_dir: String,
    /// User to run as; `None` is the container's user.
    pub user: Option<String>,
    /// Whether its stdin is attached, for [`Engine::exec_start_with_input`].
    pub stdin: bool,
}

/// An exec's state once inspected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecState {
    /// Still running.
    pub running: bool,
    /// Exit code, once it has one.
    pub exit_code: Option<i64>,
}

/// A container's state once inspected.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerState {
    /// The container exists.
    pub exists: bool,
    /// Its main process runs.
    pub running: bool,
    /// The kernel's OOM killer struck in it.
    pub oom_killed: bool,
    /// How its main process ended, once it has.
    pub exit_code: Option<i64>,
    /// Its labels.
    pub labels: HashMap<String, String>,
}

/// A container found by label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Container id.
    pub id: String,
    /// Its labels.
    pub labels: HashMap<String, String>,
}

/// An exec's stdin, as the engine takes it.
pub type ExecInput = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// A stream of bytes from the engine (an archive being downloaded).
pub type OutputStream = BoxStream<'static, Result<Bytes, ExecutorError>>;

/// Output of an attached exec: chunks of stdout and stderr as they arrive,
/// each with the stream it came from.
pub type ExecOutput = BoxStream<'static, Result<(StepStream, Bytes), ExecutorError>>;

pub use executor_core::events::OutputStream as StepStream;

/// The Docker Engine calls the executor makes; each maps to one API call.
///
/// # Errors
/// Every call fails with an [`ExecutorError::Backend`] naming the call.
/// Its kind says whether another try may pass: `unreachable` for an
/// engine that did not answer or answered 5xx, `image` for a pull the
/// registry refused, otherwise what the engine refused as it stands. A
/// missing object is not an error where the call says so (`remove`,
/// `remove_volume`).
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait Engine: Send + Sync {
    /// `GET /images/{image}/json`: is the image present?
    async fn image_present(&self, image: &str) -> Result<bool, ExecutorError>;
    /// `POST /images/create`: pull the image.
    async fn pull(&self, image: &str) -> Result<(), ExecutorError>;
    /// `POST /containers/create`; returns the id.
    async fn create(&self, spec: &ContainerSpec) -> Result<String, ExecutorError>;
    /// `POST /containers/{id}/start`.
    async fn start(&self, id: &str) -> Result<(), ExecutorError>;
    /// `POST /containers/{id}/exec`; returns the exec id.
    async fn exec_create(&self, id: &str, exec: &ExecSpec) -> Result<String, ExecutorError>;
    /// `POST /exec/{exec}/start`, attached: the exec's merged output.
    async fn exec_start(&self, exec_id: &str) -> Result<ExecOutput, ExecutorError>;
    /// `POST /exec/{exec}/start`, attached both ways, for an exec created
    /// with [`ExecSpec::stdin`]: its output, and its stdin to write to
    /// (dropped, the exec's stdin closes).
    async fn exec_start_with_input(
        &self,
        exec_id: &str,
    ) -> Result<(ExecOutput, ExecInput), ExecutorError>;
    /// `GET /exec/{exec}/json`.
    async fn exec_inspect(&self, exec_id: &str) -> Result<ExecState, ExecutorError>;
    /// `GET /containers/{id}/json`.
    async fn inspect(&self, id: &str) -> Result<ContainerState, ExecutorError>;
    /// `PUT /containers/{id}/archive?path=...`: a streamed tar body; `what`
    /// says what it holds (for a dry-run to print).
    async fn upload(
        &self,
        id: &str,
        path: &str,
        what: &str,
        tar: PackStream,
    ) -> Result<(), ExecutorError>;
    /// `GET /containers/{id}/archive?path=...`: a streamed tar.
    fn download(&self, id: &str, path: &str) -> OutputStream;
    /// `DELETE /containers/{id}?force=true&v=true`; a missing container is fine.
    async fn remove(&self, id: &str) -> Result<(), ExecutorError>;
    /// `GET /containers/json?all=true&filters=...`: containers with this label.
    async fn list(&self, label: &str, value: &str) -> Result<Vec<Listed>, ExecutorError>;
    /// `GET /volumes?filters=...`: volumes with this label, by name and labels.
    async fn list_volumes(&self, label: &str, value: &str) -> Result<Vec<Listed>, ExecutorError>;
    /// `DELETE /volumes/{name}`: `Ok(false)` when a container still uses
    /// it; a missing volume is fine.
    async fn remove_volume(&self, name: &str) -> Result<bool, ExecutorError>;
    /// `POST /networks/create`: a bridge network of the run's own, with
    /// these labels, `internal` (no route beyond its containers) or not;
    /// one that already exists by this name is fine (a retried call whose
    /// first answer was lost).
    async fn create_network(
        &self,
        name: &str,
        labels: &HashMap<String, String>,
        internal: bool,
    ) -> Result<(), ExecutorError>;
    /// `GET /containers/{id}/logs?tail=N`: the last `lines` lines of the
    /// container's stdout and stderr, merged.
    async fn logs(&self, id: &str, lines: usize) -> Result<String, ExecutorError>;
    /// `GET /networks?filters=...`: networks with this label, by name and labels.
    async fn list_networks(&self, label: &str, value: &str) -> Result<Vec<Listed>, ExecutorError>;
    /// `DELETE /networks/{name}`: `Ok(false)` when a container is still
    /// on it; a missing network is fine.
    async fn remove_network(&self, name: &str) -> Result<bool, ExecutorError>;
}
