//! A Kubernetes API server for tests that speaks the real wire protocol.
//!
//! No Kubernetes cluster runs on the machines this project is tested on, so
//! the Kubernetes backend is tested against this: HTTPS on 127.0.0.1 with a
//! CA of its own that asks for a client certificate (or a bearer token),
//! discovery, `batch/v1` Jobs, `v1` Pods, Secrets and Events with list and
//! watch, `pods/exec` over WebSocket (`v5.channel.k8s.io` and
//! `v4.channel.k8s.io`), and a kubelet whose pods are real containers in the
//! Docker-compatible engine the Docker backend's tests use. Faults are
//! injected on demand, and every request is recorded. It is proven against
//! the real `kubectl` in its own tests.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_testcluster::Error> {
//! let cluster = kube_testcluster::TestCluster::start(Default::default()).await?;
//! println!("KUBECONFIG={}", cluster.kubeconfig().display());
//! cluster.shutdown().await;
//! # Ok(()) }
//! ```

mod admission;
mod api;
pub mod exec;
pub mod faults;
mod jobs;
mod kind;
mod kubelet;
mod pod_security;
mod protobuf;
pub mod rbac;
pub mod scheduler;
mod selectors;
mod server;
mod shared;
mod sidecars;
pub mod status;
pub mod store;
pub mod tls;
mod validate;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bollard::Docker;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

pub use exec::Protocol;
pub use faults::{Faults, ImagePullFault, Outage, PodFault};
pub use kubelet::{parse_quantity, CLUSTER_LABEL, NODE};
pub use server::{AuthMode, Recorded, RecordedBody};
pub use tls::KubeconfigAuth;

use server::Shared;
use store::{Kind, Store};

/// Why the cluster could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Certificates could not be made or loaded.
    #[error("test cluster TLS: {0}")]
    Tls(String),
    /// A file could not be written.
    #[error("test cluster: writing {0}: {1}")]
    Io(String, #[source] std::io::Error),
    /// The container engine is not reachable.
    #[error(
        "test cluster: no container engine for its kubelet ({0}); run scripts/prepare-engine.sh"
    )]
    Engine(String),
}

/// How to start a cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    /// Client certificate (default) or token.
    pub auth: AuthMode,
    /// Refuse `v5.channel.k8s.io` with 403, as servers before 1.30 do.
    pub v4_only: bool,
    /// Network mode of pod containers; `None` is `none` (pods here need no network).
    pub pod_network: Option<String>,
    /// Namespace written into the kubeconfig; default `default`.
    pub namespace: Option<String>,
}

/// A running test cluster; [`shutdown`](TestCluster::shutdown) removes its containers.
pub struct TestCluster {
    shared: Arc<Shared>,
    server: JoinHandle<()>,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
    creds: tls::Credentials,
    url: String,
    shut_down: bool,
}

impl TestCluster {
    /// Starts a cluster on a free loopback port and writes its kubeconfig.
    pub async fn start(options: ClusterOptions) -> Result<Self, Error> {
        let creds = tls::Credentials::generate()?;
        let acceptor = tokio_rustls::TlsAcceptor::from(creds.server_config()?);
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| Error::Io("a loopback listener".into(), e))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::Io("a loopback listener".into(), e))?;
        let url = format!("https://{addr}");
        let docker = Docker::connect_with_defaults()
            .map_err(|e| Error::Engine(e.to_string()))?
            .negotiate_version()
            .await
            .map_err(|e| Error::Engine(e.to_string()))?;
        let cluster_id = format!("{:012x}", tls::random_u64() & 0xffff_ffff_ffff);
        let store = Arc::new(Store::default());
        let faults = Arc::new(Faults::default());
        let network = Some(options.pod_network.clone().unwrap_or_else(|| "none".into()));
        let kubelet = Arc::new(kubelet::Kubelet::new(
            docker,
            cluster_id,
            store.clone(),
            faults.clone(),
            network,
        ));
        let (outages_tx, outages_rx) = tokio::sync::mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            store,
            kubelet,
            faults,
            v4_only: options.v4_only,
            address: addr.to_string(),
            auth: options.auth,
            token: creds.token.clone(),
            tenant_cert: tls::der_of(&creds.tenant.cert)?,
            tenant_role: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            bodies: Mutex::new(Vec::new()),
            namespaces: Mutex::new(
                ["default", "kube-system", "kube-public"]
                    .into_iter()
                    .chain(options.namespace.as_deref())
                    .map(str::to_string)
                    .collect(),
            ),
            protocols: Mutex::new(Vec::new()),
            cut: tokio::sync::watch::Sender::new(0),
            outages: outages_tx,
        });
        let server = tokio::spawn(server::serve(
            listener,
            acceptor,
            shared.clone(),
            outages_rx,
        ));
        let dir = tempfile::Builder::new()
            .prefix("knotless-testcluster-")
            .tempdir()
            .map_err(|e| Error::Io("a temp folder".into(), e))?;
        let namespace = options.namespace.as_deref().unwrap_or("default");
        let auth = match options.auth {
            AuthMode::ClientCertificate => KubeconfigAuth::ClientCert,
            AuthMode::Token => KubeconfigAuth::Token,
        };
        let kubeconfig =
            tls::write_kubeconfig(dir.path(), "kubeconfig", &url, &creds, auth, namespace)?;
        Ok(TestCluster {
            shared,
            server,
            dir,
            kubeconfig,
            creds,
            url,
            shut_down: false,
        })
    }

    /// The kubeconfig with working credentials.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes another kubeconfig for this cluster with other credentials.
    pub fn kubeconfig_with(&self, auth: KubeconfigAuth) -> Result<PathBuf, Error> {
        let file = format!("kubeconfig-{auth:?}").to_lowercase();
        tls::write_kubeconfig(
            self.dir.path(),
            &file,
            &self.url,
            &self.creds,
            auth,
            "default",
        )
    }

    /// Binds the tenant ([`KubeconfigAuth::Tenant`]) to `role`, replacing
    /// any earlier one; without a Role the tenant may do nothing.
    pub fn grant_tenant(&self, role: rbac::Role) {
        *self
            .shared
            .tenant_role
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(role);
    }

    /// Creates the namespace `name`, as an administrator would; until
    /// then creating anything in it is `404 NotFound`, as on a real server.
    pub fn create_namespace(&self, name: &str) {
        self.shared
            .namespaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string());
    }

    /// Labels namespace `name` `pod-security.kubernetes.io/enforce=level`
    /// (`baseline`, `restricted`): Pod Security judges its pods from now on.
    pub fn enforce_pod_security(&self, name: &str, level: &str) {
        self.create_namespace(name);
        self.shared.store.enforce_pod_security(name, level);
    }

    /// A kubeconfig of the tenant whose context is in `namespace`, which
    /// exists from now on (the administrator made it for the tenant).
    pub fn tenant_kubeconfig(&self, namespace: &str) -> Result<PathBuf, Error> {
        self.create_namespace(namespace);
        tls::write_kubeconfig(
            self.dir.path(),
            &format!("kubeconfig-tenant-{namespace}"),
            &self.url,
            &self.creds,
            KubeconfigAuth::Tenant,
            namespace,
        )
    }

    /// The server URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The cluster CA, client certificate and key, as PEM files in the
    /// cluster's folder: `(ca, cert, key)`.
    pub fn credential_files(&self) -> Result<(PathBuf, PathBuf, PathBuf), Error> {
        let write = |name: &str, text: &str| {
            let p = self.dir.path().join(name);
            std::fs::write(&p, text)
                .map(|_| p.clone())
                .map_err(|e| Error::Io(p.display().to_string(), e))
        };
        Ok((
            write("ca.crt", &self.creds.ca.cert)?,
            write("client.crt", &self.creds.client.cert)?,
            write("client.key", &self.creds.client.key)?,
        ))
    }

    /// Compacts the history at the current resource version: a watch from
    /// an older one gets `410 Gone`, as from a real server.
    pub fn compact_history(&self) {
        self.shared
            .faults
            .compact_history(self.shared.store.resource_version());
    }

    /// Takes the API server down now, for `down`, as
    /// [`Faults::outage_on`] does when its request comes: new connections
    /// are refused, every open connection and exec stream is cut, and
    /// the same address listens again after `down`
    /// ([`Faults::outages_over`] moves then).
    pub fn outage_now(&self, down: std::time::Duration) {
        let _ = self.shared.outages.send(down);
    }

    /// Faults to inject from now on.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// Every request so far by `VERB RESOURCE` (`kubectl get --raw /knotless/requests`).
    pub fn request_counts(&self) -> std::collections::BTreeMap<String, u64> {
        serde_json::from_value(api::request_counts(&self.shared)).unwrap_or_default()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The body of every request that had one (creates, patches, deletes,
    /// access reviews), so a test can look for what must never be sent.
    pub fn bodies(&self) -> Vec<RecordedBody> {
        self.shared
            .bodies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Forgets the recorded requests.
    pub fn clear_requests(&self) {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The exec subprotocol of every exec so far.
    pub fn exec_protocols(&self) -> Vec<Protocol> {
        self.shared
            .protocols
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Names of the pods in `ns` now.
    pub fn pods(&self, ns: &str) -> Vec<String> {
        self.names(Kind::Pod, ns)
    }

    /// Names of the Jobs in `ns` now.
    pub fn jobs(&self, ns: &str) -> Vec<String> {
        self.names(Kind::Job, ns)
    }

    /// Names of the Secrets in `ns` now.
    pub fn secrets(&self, ns: &str) -> Vec<String> {
        self.names(Kind::Secret, ns)
    }

    /// Every Job, pod and Secret in any namespace, as `kind/namespace/name`,
    /// whatever its labels: the leftover probe that does not trust the
    /// executor's own label query.
    pub fn everything(&self) -> Vec<String> {
        [Kind::Job, Kind::Pod, Kind::Secret]
            .into_iter()
            .flat_map(|kind| {
                let (items, _) = self.shared.store.list(kind, None, &Default::default());
                // A Job deleted in the foreground waits only for the
                // collector once its pods are gone; its pods are listed.
                let deleted_job = move |o: &serde_json::Value| {
                    kind == Kind::Job && !o["metadata"]["deletionTimestamp"].is_null()
                };
                items
                    .into_iter()
                    .filter(move |o| !deleted_job(o))
                    .map(move |o| {
                        format!(
                            "{}/{}/{}",
                            kind.name(),
                            o["metadata"]["namespace"].as_str().unwrap_or_default(),
                            o["metadata"]["name"].as_str().unwrap_or_default()
                        )
                    })
            })
            .collect()
    }

    /// Every pod in any namespace, as `(namespace, name)`.
    pub fn all_pods(&self) -> Vec<(String, String)> {
        let (items, _) = self.shared.store.list(Kind::Pod, None, &Default::default());
        items
            .iter()
            .map(|o| {
                let field = |k: &str| o["metadata"][k].as_str().unwrap_or_default().to_string();
                (field("namespace"), field("name"))
            })
            .collect()
    }

    fn names(&self, kind: Kind, ns: &str) -> Vec<String> {
        let (items, _) = self.shared.store.list(kind, Some(ns), &Default::default());
        items
            .iter()
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
            .collect()
    }

    /// Runs `argv` in the running pod's container, as an operator's
    /// `kubectl exec` would, and waits for it to end.
    pub async fn exec_in_pod(&self, ns: &str, pod: &str, argv: &[&str]) {
        use futures_util::StreamExt;
        let Some(container) = self.shared.kubelet.container_of(ns, pod) else {
            panic!("pod {ns}/{pod} has no running container");
        };
        let docker = &self.shared.kubelet.docker;
        let options = bollard::exec::CreateExecOptions {
            cmd: Some(argv.iter().map(|a| a.to_string()).collect()),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            ..Default::default()
        };
        let exec = docker
            .create_exec(&container, options)
            .await
            .unwrap_or_else(|e| panic!("exec in {pod}: {e}"));
        if let Ok(bollard::exec::StartExecResults::Attached { mut output, .. }) =
            docker.start_exec(&exec.id, None).await
        {
            while output.next().await.is_some() {}
        }
    }

    /// Makes something happen to a running pod (OOM kill, eviction, deletion).
    pub async fn pod_fault(&self, ns: &str, pod: &str, fault: PodFault) {
        self.shared.kubelet.fault(ns, pod, fault).await;
    }

    /// Stops serving and removes every container the cluster started.
    pub async fn shutdown(mut self) {
        self.server.abort();
        self.shared.kubelet.shutdown().await;
        self.shut_down = true;
    }
}

impl Drop for TestCluster {
    /// A test that panics never reaches `shutdown`: remove its containers
    /// anyway, from a thread of its own since no async code can run here.
    fn drop(&mut self) {
        if self.shut_down {
            return;
        }
        self.server.abort();
        let cluster_id = self.shared.kubelet.cluster_id().to_string();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(docker) = Docker::connect_with_defaults() {
                    if let Ok(docker) = docker.negotiate_version().await {
                        kubelet::remove_cluster_containers(&docker, &cluster_id).await;
                        kubelet::remove_cluster_volumes(&docker, &cluster_id).await;
                    }
                }
            });
        })
        .join();
    }
}
