//! The real cluster: the Kubernetes API through kube-rs, with retries for
//! the calls that are safe to repeat.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use async_trait::async_trait;
use executor_core::outage::ride_out;
use executor_core::ExecutorError;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{
    Api, AttachParams, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::cluster::{Cluster, ExecSession, PodEvents};
use crate::exec::WsExec;

/// Where the client comes from, as kubectl finds it.
#[derive(Debug, Clone, Default)]
pub struct KubeconfigSource {
    /// `--kubeconfig`; otherwise `KUBECONFIG`, then `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context`; otherwise the current context.
    pub context: Option<String>,
    /// `--namespace`; otherwise the context's namespace, then `default`.
    pub namespace: Option<String>,
    /// Accept a kubeconfig whose cluster sets `insecure-skip-tls-verify`.
    /// Without it such a kubeconfig is refused: the server's certificate
    /// would go unchecked, and anyone on the path could pose as the
    /// cluster and receive the run's checkout and secrets.
    pub insecure_skip_tls_verify: bool,
}

/// A cluster reached through kube-rs.
pub struct KubeCluster {
    client: Client,
    namespace: String,
    tls_unverified: bool,
    server: String,
    keepalive: std::time::Duration,
    reconnect_timeout: std::time::Duration,
}

fn retryable(err: &kube::Error) -> bool {
    match err {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        // A dropped or refused connection may pass next time; a TLS
        // handshake the server refused for a certificate will not.
        kube::Error::HyperError(_) | kube::Error::Service(_) => {
            let said = describe(err).to_ascii_lowercase();
            !(said.contains("fatal alert") || said.contains("certificate"))
        }
        _ => false,
    }
}

/// The error a failed call becomes: `unreachable` when a later call may
/// succeed (no answer, 429, 5xx), else the server's answer as it stands.
fn failed(what: &str, err: kube::Error) -> ExecutorError {
    let described = if retryable(&err) {
        ExecutorError::unreachable(what, describe(&err))
    } else {
        ExecutorError::backend(what, describe(&err))
    };
    described.with_source(err)
}

fn describe(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) => format!("{} (HTTP {}, {})", s.message, s.code, s.reason),
        other => {
            let mut msg = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            msg
        }
    }
}

fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 404)
}

/// Repeats `call` while the server does not answer (429, 5xx, refused or
/// dropped connections) for up to `within`: see [`ride_out`]; the error
/// is the call's, classified by [`failed`].
async fn retry<T, F, Fut>(what: &str, within: Duration, mut call: F) -> Result<T, ExecutorError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    ride_out(what, within, || {
        let answer = call();
        async move { answer.await.map_err(|e| failed(what, e)) }
    })
    .await
}

/// Whether the server said the object already exists: a create whose
/// first try was done though its answer was lost.
fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409)
}

/// Where the kubeconfig's current user keeps its client certificate, for
/// an error about it: the file, or the user whose data holds it.
fn client_certificate_of(source: &KubeconfigSource) -> String {
    let kubeconfig = match &source.kubeconfig {
        Some(path) => Kubeconfig::read_from(path),
        None => Kubeconfig::read(),
    };
    let Ok(kubeconfig) = kubeconfig else {
        return "the current user's".into();
    };
    let context = source
        .context
        .clone()
        .or_else(|| kubeconfig.current_context.clone())
        .unwrap_or_default();
    let user = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone())
        .unwrap_or_default();
    let auth = kubeconfig
        .auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.as_ref());
    match auth.and_then(|a| a.client_certificate.clone()) {
        Some(path) => path,
        None => format!("client-certificate-data of user {user}"),
    }
}

impl KubeCluster {
    /// Builds a client as kubectl would and checks the server answers; an
    /// unreachable server or a refused credential is an error naming the server.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] for a kubeconfig that cannot be read or
    /// used (naming `KubeconfigSource::kubeconfig`), or one that skips TLS
    /// verification without [`KubeconfigSource::insecure_skip_tls_verify`];
    /// `Backend` of kind `unreachable` when the server does not answer, and a
    /// refusal when it rejects the credentials.
    pub async fn connect(source: &KubeconfigSource) -> Result<Self, ExecutorError> {
        let options = KubeConfigOptions {
            context: source.context.clone(),
            ..KubeConfigOptions::default()
        };
        let bad =
            |e: &dyn std::fmt::Display| ExecutorError::InvalidInput(format!("kubeconfig: {e}"));
        let config = match &source.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
                    ExecutorError::InvalidInput(format!(
                        "KubeconfigSource::kubeconfig {}: {e}",
                        path.display()
                    ))
                })?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| bad(&e))?
            }
            None => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| bad(&e))?,
        };
        let server = config.cluster_url.to_string();
        if config.accept_invalid_certs && !source.insecure_skip_tls_verify {
            return Err(ExecutorError::InvalidInput(format!(
                "the kubeconfig's cluster {server} sets insecure-skip-tls-verify: its certificate \
                 would not be checked, and anyone on the path could pose as the cluster and \
                 receive the run's checkout and secrets; give the kubeconfig the cluster's \
                 certificate-authority-data, or accept the risk explicitly \
                 (KubeconfigSource::insecure_skip_tls_verify)"
            )));
        }
        let tls_unverified = config.accept_invalid_certs;
        let namespace = source
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).map_err(|e| {
            let text = e.to_string();
            if text.contains("UnsupportedCertVersion") {
                ExecutorError::InvalidInput(format!(
                    "the kubeconfig's client certificate ({}) is X.509 v1; kubectl accepts that, \
                     but this runner's TLS library takes only X.509 v3 client certificates. \
                     Reissue it as v3, e.g. openssl x509 -req -in user.csr -CA ca.crt -CAkey ca.key \
                     -days 365 -out user.crt -extfile <(printf 'basicConstraints=CA:FALSE\\n\
                     keyUsage=critical,digitalSignature,keyEncipherment\\nextendedKeyUsage=clientAuth'), \
                     or through the cluster's CertificateSigningRequest API ({text})",
                    client_certificate_of(source)
                ))
            } else {
                bad(&e)
            }
        })?;
        client.apiserver_version().await.map_err(|e| {
            let what = "connecting to the cluster";
            let described = if retryable(&e) {
                ExecutorError::unreachable(
                    what,
                    format!(
                        "the Kubernetes API server at {server} did not answer: {}",
                        describe(&e)
                    ),
                )
            } else {
                ExecutorError::backend(
                    what,
                    format!(
                        "the Kubernetes API server at {server} refused: {}",
                        describe(&e)
                    ),
                )
            };
            described.with_source(e)
        })?;
        Ok(KubeCluster {
            client,
            namespace,
            server,
            tls_unverified,
            keepalive: crate::K8sOptions::default().keepalive,
            reconnect_timeout: crate::K8sOptions::default().reconnect_timeout,
        })
    }

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

    /// The API server's URL.
    pub fn server(&self) -> &str {
        &self.server
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
        let answer = retry(
            "checking the run's permissions",
            self.reconnect_timeout,
            || api.create(&post, &review),
        )
        .await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    async fn create_secret(&self, secret: &Secret) -> Result<(), ExecutorError> {
        let api = self.api::<Secret>();
        let post = PostParams::default();
        // The name is the run's own: a conflict is this create's earlier
        // try, done though its answer was lost.
        retry(
            "creating the run's Secret",
            self.reconnect_timeout,
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
        retry("creating the run's Job", self.reconnect_timeout, || async {
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
        retry(
            "giving the Secret to its Job",
            self.reconnect_timeout,
            || api.patch(name, &pp, &patch),
        )
        .await?;
        Ok(())
    }

    async fn list_pods(&self, selector: &str) -> Result<(Vec<Pod>, String), ExecutorError> {
        let api = self.api::<Pod>();
        let lp = ListParams::default().labels(selector);
        let list = retry("listing pods", self.reconnect_timeout, || api.list(&lp)).await?;
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
        let stream = retry("watching pods", self.reconnect_timeout, || {
            api.watch(&wp, resource_version)
        })
        .await?;
        Ok(stream.map_err(|e| failed("watching pods", e)).boxed())
    }

    async fn get_pod(&self, name: &str) -> Result<Option<Pod>, ExecutorError> {
        let api = self.api::<Pod>();
        retry("reading the pod", self.reconnect_timeout, || {
            api.get_opt(name)
        })
        .await
    }

    async fn pod_events(&self, pod: &str) -> Result<Vec<Event>, ExecutorError> {
        let api = self.api::<Event>();
        let lp = ListParams::default().fields(&format!("involvedObject.name={pod}"));
        Ok(
            retry("listing the pod's events", self.reconnect_timeout, || {
                api.list(&lp)
            })
            .await?
            .items,
        )
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
        let connection = retry("starting an exec", self.reconnect_timeout, || {
            self.client.connect(request.clone())
        })
        .await?;
        let v5 = connection.supports_stream_close();
        Ok(Box::new(WsExec::new(
            Box::pin(connection.into_stream()),
            v5,
            self.keepalive,
        )))
    }

    async fn delete_job(&self, name: &str) -> Result<(), ExecutorError> {
        let api = self.api::<Job>();
        let dp = DeleteParams::foreground();
        match api.delete(name, &dp).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(_) => {
                retry("deleting the Job", self.reconnect_timeout, || async {
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
        retry("deleting the Secret", self.reconnect_timeout, || async {
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
        Ok(
            retry("listing Jobs", self.reconnect_timeout, || api.list(&lp))
                .await?
                .items,
        )
    }

    async fn list_secrets(&self, selector: &str) -> Result<Vec<Secret>, ExecutorError> {
        let api = self.api::<Secret>();
        let lp = ListParams::default().labels(selector);
        Ok(
            retry("listing Secrets", self.reconnect_timeout, || api.list(&lp))
                .await?
                .items,
        )
    }
}
