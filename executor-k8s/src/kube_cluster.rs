//! The real cluster: the Kubernetes API through kube-rs, with retries for
//! the calls that are safe to repeat.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use executor_core::ExecutorError;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, AttachParams, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams,
};
use kube::Client;

use crate::access;
use crate::answers::{is_conflict, is_not_found, Judge};
use crate::cluster::{Cluster, Ended, ExecIo, ExecSession, PodEvents};
use crate::exec::WsExec;
pub use crate::kubeconfig::KubeconfigSource;

mod connect;
use crate::settling::Settling;

/// A cluster reached through kube-rs.
pub struct KubeCluster {
    client: Client,
    namespace: String,
    tls_unverified: bool,
    server: String,
    keepalive: std::time::Duration,
    reconnect_timeout: std::time::Duration,
    /// What the server proved and when it last went unanswered: a
    /// restarted server's passing 403 is ridden out.
    settling: Arc<Settling>,
    /// One version call on the warm connection, timed at connect.
    round_trip: std::time::Duration,
    /// Whether an exec has warmed the pool yet.
    warmed: AtomicBool,
    /// The server's version, `(major, minor)`, as it told it at connect.
    version: Option<(u32, u32)>,
}

impl KubeCluster {
    /// How long a call that got no answer is tried again
    /// ([`K8sOptions::reconnect_timeout`](crate::K8sOptions::reconnect_timeout)).
    pub fn reconnect_timeout(mut self, within: std::time::Duration) -> Self {
        self.reconnect_timeout = within;
        self
    }

    /// Pings every exec that has been silent this long, so proxies and
    /// load balancers that drop idle connections keep a quiet step's
    /// ([`K8sOptions::keepalive`](crate::K8sOptions::keepalive)).
    pub fn keepalive(mut self, every: std::time::Duration) -> Self {
        self.keepalive = every;
        self
    }

    /// The API server's round trip, as timed at connect (one version
    /// call on the connection the first one opened).
    pub fn round_trip(&self) -> std::time::Duration {
        self.round_trip
    }

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Opens a connection for the next exec while this one runs. An
    /// exec's upgrade takes its connection out of the client's pool, so
    /// without this every exec waited for a TCP and a TLS handshake (two
    /// round trips, 3.3 a step over a 50 ms link against 2 with it); a
    /// version call, which every user may make, leaves one idle in the
    /// pool. The first exec opens two, so one is ready while the next is
    /// still opening; after that each exec replaces the one it took.
    fn warm_for_the_next_exec(&self) {
        let n = if self.warmed.swap(true, Ordering::SeqCst) {
            1
        } else {
            2
        };
        for _ in 0..n {
            let client = self.client.clone();
            tokio::spawn(async move {
                if let Err(err) = client.apiserver_version().await {
                    tracing::debug!(%err, "warming a connection for the next exec failed");
                }
            });
        }
    }

    fn judge(&self) -> Judge<'_> {
        Judge {
            within: self.reconnect_timeout,
            settling: &self.settling,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }
}

#[async_trait]
impl Cluster for KubeCluster {
    fn namespace(&self) -> &str {
        &self.namespace
    }

    fn tls_unverified(&self) -> bool {
        self.tls_unverified
    }

    fn native_sidecars(&self) -> bool {
        self.version.is_some_and(|v| v >= (1, 29))
    }

    async fn access_review(
        &self,
        permission: &crate::access::Permission,
    ) -> Result<bool, ExecutorError> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(self.namespace.clone()),
                    verb: Some(permission.verb.to_string()),
                    group: Some(permission.group.to_string()),
                    resource: Some(permission.resource.to_string()),
                    subresource: text(permission.subresource),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        let post = PostParams::default();
        let answer = self
            .judge()
            .retry("checking the run's permissions", &[], || {
                api.create(&post, &review)
            })
            .await?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        if allowed {
            self.settling.proven(*permission);
        }
        Ok(allowed)
    }

    async fn create_secret(&self, secret: &Secret) -> Result<(), ExecutorError> {
        let api = self.api::<Secret>();
        let post = PostParams::default();
        // The name is the run's own: a conflict is this create's earlier
        // try, done though its answer was lost.
        self.judge()
            .retry(
                "creating the run's Secret",
                &[access::CREATE_SECRETS],
                || async {
                    match api.create(&post, secret).await {
                        Err(e) if is_conflict(&e) => Ok(()),
                        other => other.map(|_| ()),
                    }
                },
            )
            .await
    }

    async fn create_job(&self, job: &Job) -> Result<Job, ExecutorError> {
        let api = self.api::<Job>();
        let post = PostParams::default();
        let name = job.metadata.name.clone().unwrap_or_default();
        self.judge()
            .retry("creating the run's Job", &[access::CREATE_JOBS], || async {
                match api.create(&post, job).await {
                    Err(e) if is_conflict(&e) => api.get(&name).await,
                    other => other,
                }
            })
            .await
    }

    async fn own_secret(&self, name: &str, owner: &OwnerReference) -> Result<(), ExecutorError> {
        let patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
        let api = self.api::<Secret>();
        let (pp, patch) = (PatchParams::default(), Patch::Merge(&patch));
        self.judge()
            .retry(
                "giving the Secret to its Job",
                &[access::PATCH_SECRETS],
                || api.patch(name, &pp, &patch),
            )
            .await?;
        Ok(())
    }

    async fn list_pods(&self, selector: &str) -> Result<(Vec<Pod>, String), ExecutorError> {
        let api = self.api::<Pod>();
        let lp = ListParams::default().labels(selector);
        let list = self
            .judge()
            .retry("listing pods", &[access::LIST_PODS], || api.list(&lp))
            .await?;
        Ok((
            list.items,
            list.metadata.resource_version.unwrap_or_default(),
        ))
    }

    async fn watch_pods(
        &self,
        selector: &str,
        resource_version: &str,
    ) -> Result<PodEvents, ExecutorError> {
        let api = self.api::<Pod>();
        let wp = WatchParams::default().labels(selector).timeout(290);
        let stream = self
            .judge()
            .retry("watching pods", &[access::WATCH_PODS], || {
                api.watch(&wp, resource_version)
            })
            .await?;
        let (within, settling) = (self.reconnect_timeout, self.settling.clone());
        Ok(stream
            .map_err(move |e| {
                let judge = Judge {
                    within,
                    settling: &settling,
                };
                judge.failed("watching pods", &[access::WATCH_PODS], e)
            })
            .boxed())
    }

    async fn get_pod(&self, name: &str) -> Result<Option<Pod>, ExecutorError> {
        let api = self.api::<Pod>();
        self.judge()
            .retry("reading the pod", &[access::GET_PODS], || api.get_opt(name))
            .await
    }

    async fn admits_pod(&self, pod: &Pod) -> Result<Result<(), String>, ExecutorError> {
        let api = self.api::<Pod>();
        let post = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        self.judge()
            .retry(
                "asking admission about the run's pod",
                &[access::CREATE_PODS],
                || async {
                    match api.create(&post, pod).await {
                        Ok(_) => Ok(Ok(())),
                        // Admission's refusal is its answer, not a failure.
                        Err(kube::Error::Api(s)) if s.code == 403 || s.code == 422 => {
                            Ok(Err(s.message))
                        }
                        Err(e) => Err(e),
                    }
                },
            )
            .await
    }

    async fn claim_exists(&self, name: &str) -> Result<bool, ExecutorError> {
        let api = self.api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>();
        self.judge()
            .retry(
                "reading a PersistentVolumeClaim",
                &[access::GET_CLAIMS],
                || api.get_opt(name),
            )
            .await
            .map(|claim| claim.is_some())
    }

    async fn container_log(
        &self,
        pod: &str,
        container: &str,
        lines: usize,
    ) -> Result<String, ExecutorError> {
        let api = self.api::<Pod>();
        let params = kube::api::LogParams {
            container: Some(container.to_string()),
            tail_lines: i64::try_from(lines).ok(),
            // A line without end is cut: the runner holds no more than this.
            limit_bytes: Some(1 << 16),
            ..Default::default()
        };
        self.judge()
            .retry(
                "reading a container's output",
                &[access::GET_POD_LOGS],
                || api.logs(pod, &params),
            )
            .await
    }

    async fn pod_events(&self, pod: &str) -> Result<Vec<Event>, ExecutorError> {
        let api = self.api::<Event>();
        let lp = ListParams::default().fields(&format!("involvedObject.name={pod}"));
        Ok(self
            .judge()
            .retry("listing the pod's events", &[access::LIST_EVENTS], || {
                api.list(&lp)
            })
            .await?
            .items)
    }

    async fn exec(
        &self,
        pod: &str,
        container: &str,
        argv: &[String],
        stdin: bool,
    ) -> Result<Box<dyn ExecSession>, ExecutorError> {
        let ap = AttachParams::default()
            .container(container)
            .stdin(stdin)
            .stdout(true)
            .stderr(true);
        let request =
            kube::core::Request::new(format!("/api/v1/namespaces/{}/pods", self.namespace))
                .exec(pod, argv.iter().cloned(), &ap)
                .map_err(|e| ExecutorError::backend("building an exec request", e))?;
        let connection = self
            .judge()
            .retry("starting an exec", &access::EXEC, || {
                self.client.connect(request.clone())
            })
            .await?;
        self.warm_for_the_next_exec();
        let v5 = connection.supports_stream_close();
        Ok(Box::new(Watched {
            exec: Box::new(WsExec::new(
                Box::pin(connection.into_stream()),
                v5,
                self.keepalive,
            )),
            settling: self.settling.clone(),
        }))
    }

    async fn delete_job(&self, name: &str) -> Result<(), ExecutorError> {
        let api = self.api::<Job>();
        let dp = DeleteParams::foreground();
        match api.delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(_) => {
                self.judge()
                    .retry("deleting the Job", &[access::DELETE_JOBS], || async {
                        match api.delete(name, &dp).await {
                            Err(e) if is_not_found(&e) => Ok(()),
                            other => other.map(|_| ()),
                        }
                    })
                    .await
            }
        }
    }

    async fn delete_secret(&self, name: &str) -> Result<(), ExecutorError> {
        let api = self.api::<Secret>();
        self.judge()
            .retry("deleting the Secret", &[access::DELETE_SECRETS], || async {
                match api.delete(name, &DeleteParams::default()).await {
                    Err(e) if is_not_found(&e) => Ok(()),
                    other => other.map(|_| ()),
                }
            })
            .await
    }

    async fn list_jobs(&self, selector: &str) -> Result<Vec<Job>, ExecutorError> {
        let api = self.api::<Job>();
        let lp = ListParams::default().labels(selector);
        Ok(self
            .judge()
            .retry("listing Jobs", &[access::LIST_JOBS], || api.list(&lp))
            .await?
            .items)
    }

    async fn list_secrets(&self, selector: &str) -> Result<Vec<Secret>, ExecutorError> {
        let api = self.api::<Secret>();
        let lp = ListParams::default().labels(selector);
        Ok(self
            .judge()
            .retry("listing Secrets", &[access::LIST_SECRETS], || api.list(&lp))
            .await?
            .items)
    }
}

/// An exec whose broken connection counts as the server going unanswered
/// ([`Settling::unanswered`]): a restart that cuts a step's stream opens
/// the window for the 403s of the server coming back.
struct Watched {
    exec: Box<dyn ExecSession>,
    settling: Arc<Settling>,
}

#[async_trait]
impl ExecSession for Watched {
    fn closes_stdin(&self) -> bool {
        self.exec.closes_stdin()
    }

    async fn finish(
        self: Box<Self>,
        io: ExecIo<'_>,
        interrupt: &tokio_util::sync::CancellationToken,
    ) -> Result<Ended, ExecutorError> {
        let ended = self.exec.finish(io, interrupt).await;
        if matches!(ended, Ok(Ended::Closed(_))) {
            self.settling.unanswered();
        }
        ended
    }
}
