//! The seam: the few Kubernetes API calls the executor makes.
//!
//! [`Cluster`] is implemented by the real client ([`KubeCluster`](crate::KubeCluster))
//! and by the dry-run ([`DryRunCluster`](crate::DryRunCluster)), so what a
//! dry-run prints and what a run does are one sequence of calls.

use std::pin::Pin;

use async_trait::async_trait;
use executor_core::ExecutorError;
use futures_util::{Sink, Stream};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::WatchEvent;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

/// A WebSocket, as an exec's channel.
pub trait WebSocket:
    Stream<Item = Result<Message, WsError>> + Sink<Message, Error = WsError> + Send + Unpin
{
}
impl<T> WebSocket for T where
    T: Stream<Item = Result<Message, WsError>> + Sink<Message, Error = WsError> + Send + Unpin
{
}

/// An open exec.
pub struct ExecConnection {
    /// The WebSocket carrying the exec's channels.
    pub socket: Pin<Box<dyn WebSocket>>,
    /// Whether the server chose `v5.channel.k8s.io`, which can close stdin alone.
    pub v5: bool,
}

/// A stream of pod watch events.
pub type PodEvents = Pin<Box<dyn Stream<Item = Result<WatchEvent<Pod>, ExecutorError>> + Send>>;

/// The Kubernetes API calls the executor makes, all in one namespace.
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
    /// `POST /apis/authorization.k8s.io/v1/selfsubjectaccessreviews`:
    /// whether the credentials may do `permission` in the namespace.
    async fn access_review(
        &self,
        permission: &crate::access::Permission,
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
    /// `GET /api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name={pod}`.
    async fn pod_events(&self, pod: &str) -> Result<Vec<Event>, ExecutorError>;
    /// `GET /api/v1/namespaces/{ns}/pods/{pod}/exec?command=...` upgraded to a WebSocket.
    async fn exec(
        &self,
        pod: &str,
        container: &str,
        argv: &[String],
        stdin: bool,
    ) -> Result<ExecConnection, ExecutorError>;
    /// `DELETE /apis/batch/v1/namespaces/{ns}/jobs/{name}` with foreground propagation; gone is fine.
    async fn delete_job(&self, name: &str) -> Result<(), ExecutorError>;
    /// `DELETE /api/v1/namespaces/{ns}/secrets/{name}`; gone is fine.
    async fn delete_secret(&self, name: &str) -> Result<(), ExecutorError>;
    /// `GET /apis/batch/v1/namespaces/{ns}/jobs?labelSelector=...`.
    async fn list_jobs(&self, selector: &str) -> Result<Vec<Job>, ExecutorError>;
    /// `GET /api/v1/namespaces/{ns}/secrets?labelSelector=...`.
    async fn list_secrets(&self, selector: &str) -> Result<Vec<Secret>, ExecutorError>;
}
