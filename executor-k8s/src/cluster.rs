//! The seam: the few Kubernetes API calls the executor makes.
//!
//! [`Cluster`] is implemented by the real client ([`KubeCluster`](crate::KubeCluster)),
//! by the dry-run ([`DryRunCluster`](crate::DryRunCluster)) and by mocks in
//! unit tests, so what a dry-run prints and what a run does are one
//! sequence of calls. An exec is an [`ExecSession`]: streams and a status,
//! above the wire protocol the cluster speaks.

use std::pin::Pin;

use async_trait::async_trait;
use executor_core::ExecutorError;
use futures_util::Stream;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::WatchEvent;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_util::sync::CancellationToken;

/// How an exec ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The command exited with this code.
    Exited(i32),
    /// The server reported a failure that is not an exit code.
    Failed(String),
    /// The exec ended without a status: the connection broke or closed.
    Closed(String),
    /// The interrupt token fired first.
    Interrupted,
}

/// What an exec's command reads and writes.
pub struct ExecIo<'a> {
    /// Streamed into the command's stdin, if the exec was opened with
    /// stdin; its end is the command's end of file where the protocol can
    /// close stdin alone ([`ExecSession::closes_stdin`]).
    pub stdin: Option<&'a mut (dyn AsyncRead + Send + Unpin)>,
    /// Where the command's stdout goes, as it arrives.
    pub stdout: &'a mut (dyn AsyncWrite + Send + Unpin),
    /// Where the command's stderr goes, as it arrives.
    pub stderr: &'a mut (dyn AsyncWrite + Send + Unpin),
}

/// An exec the cluster has started: stdin in, stdout and stderr out, and
/// a status at the end. The wire protocol (`v5.channel.k8s.io` or
/// `v4.channel.k8s.io`) is the cluster's choice and stays behind this.
#[async_trait]
pub trait ExecSession: Send {
    /// Whether stdin can end while the command runs (v5). Where it cannot
    /// (v4), ending stdin ends the exec and loses its status, so a stream
    /// in must carry its own end (see the framed copy).
    fn closes_stdin(&self) -> bool;

    /// Moves the streams until the command ends, and says how it ended.
    /// A slow writer holds the output back; `interrupt` ends the session
    /// at once with [`Ended::Interrupted`] (the command itself is not
    /// killed: that is the caller's next exec).
    ///
    /// # Errors
    /// `Backend` when stdin could not be read or the output not written;
    /// a broken connection is [`Ended::Closed`], not an error.
    async fn finish(
        self: Box<Self>,
        io: ExecIo<'_>,
        interrupt: &CancellationToken,
    ) -> Result<Ended, ExecutorError>;
}

/// A stream of pod watch events.
pub type PodEvents = Pin<Box<dyn Stream<Item = Result<WatchEvent<Pod>, ExecutorError>> + Send>>;

/// The Kubernetes API calls the executor makes, all in one namespace.
///
/// # Errors
/// Every call fails with an [`ExecutorError::Backend`] naming the call.
/// Its kind says whether another try may pass: `unreachable` for no
/// answer, a dropped connection, 429 or 5xx (after the client's own
/// retries), otherwise what the server refused as it stands. A missing
/// object is not an error where the call says so (`get_pod`, the deletes).
#[cfg_attr(test, mockall::automock)]
#[async_trait]
pub trait Cluster: Send + Sync {
    /// The namespace every call is in.
    fn namespace(&self) -> &str;
    /// Whether the server's certificate goes unchecked (a kubeconfig's
    /// `insecure-skip-tls-verify`, accepted explicitly).
    fn tls_unverified(&self) -> bool {
        false
    }
    /// Whether the server runs native sidecars (init containers with
    /// `restartPolicy: Always`, on by default since v1.29).
    fn native_sidecars(&self) -> bool {
        false
    }
    /// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`:
    /// whether the credentials may do `permission` in the namespace.
    async fn access_review(
        &self,
        permission: &crate::permission::Permission,
    ) -> Result<bool, ExecutorError>;
    /// `POST /api/v1/namespaces/{ns}/secrets`.
    async fn create_secret(&self, secret: &Secret) -> Result<(), ExecutorError>;
    /// `POST /apis/batch/v1/namespaces/{ns}/jobs`; returns the created Job (with its uid).
    async fn create_job(&self, job: &Job) -> Result<Job, ExecutorError>;
    /// `PATCH /api/v1/namespaces/{ns}/secrets/{name}`: sets the owner.
    async fn own_secret(&self, name: &str, owner: &OwnerReference) -> Result<(), ExecutorError>;
    /// `GET /api/v1/namespaces/{ns}/pods?labelSelector=...`; the pods and the list's resourceVersion.
    async fn list_pods(&self, selector: &str) -> Result<(Vec<Pod>, String), ExecutorError>;
    /// `GET /api/v1/namespaces/{ns}/pods?labelSelector=...&watch=true&resourceVersion=...`.
    async fn watch_pods(
        &self,
        selector: &str,
        resource_version: &str,
    ) -> Result<PodEvents, ExecutorError>;
    /// `GET /api/v1/namespaces/{ns}/pods/{name}`; `None` when it is gone.
    async fn get_pod(&self, name: &str) -> Result<Option<Pod>, ExecutorError>;
    /// `POST /api/v1/namespaces/{ns}/pods?dryRun=All`: what admission
    /// says of `pod`, with nothing made: `Ok(Err(message))` where it
    /// refuses it (a Pod Security level, a policy engine, a quota).
    async fn admits_pod(&self, pod: &Pod) -> Result<Result<(), String>, ExecutorError>;
    /// `GET /api/v1/namespaces/{ns}/persistentvolumeclaims/{name}`:
    /// whether the claim exists.
    async fn claim_exists(&self, name: &str) -> Result<bool, ExecutorError>;
    /// `GET /api/v1/namespaces/{ns}/pods/{pod}/log?container=&tailLines=`:
    /// the last `lines` lines of a container's output.
    async fn container_log(
        &self,
        pod: &str,
        container: &str,
        lines: usize,
    ) -> Result<String, ExecutorError>;
    /// `GET /api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name={pod}`.
    async fn pod_events(&self, pod: &str) -> Result<Vec<Event>, ExecutorError>;
    /// `GET /api/v1/namespaces/{ns}/pods/{pod}/exec?command=...`: starts
    /// `argv` in the container, with stdin attached if `stdin`.
    async fn exec(
        &self,
        pod: &str,
        container: &str,
        argv: &[String],
        stdin: bool,
    ) -> Result<Box<dyn ExecSession>, ExecutorError>;
    /// `DELETE /apis/batch/v1/namespaces/{ns}/jobs/{name}` with foreground propagation; gone is fine.
    async fn delete_job(&self, name: &str) -> Result<(), ExecutorError>;
    /// `DELETE /api/v1/namespaces/{ns}/secrets/{name}`; gone is fine.
    async fn delete_secret(&self, name: &str) -> Result<(), ExecutorError>;
    /// `GET /apis/batch/v1/namespaces/{ns}/jobs?labelSelector=...`.
    async fn list_jobs(&self, selector: &str) -> Result<Vec<Job>, ExecutorError>;
    /// `GET /api/v1/namespaces/{ns}/secrets?labelSelector=...`.
    async fn list_secrets(&self, selector: &str) -> Result<Vec<Secret>, ExecutorError>;
}
