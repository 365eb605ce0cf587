//! Connecting as kubectl does: the kubeconfig read and checked, TLS and
//! plain http refused unless asked for, the server's version and round
//! trip taken on the first connection.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use executor_core::ExecutorError;
use kube::config::KubeConfigOptions;
use kube::{Client, Config};

use super::KubeCluster;
use crate::answers::{describe, retryable};
use crate::kubeconfig::KubeconfigSource;

impl KubeCluster {
    /// Builds a client as kubectl would and checks the server answers; an
    /// unreachable server or a refused credential is an error naming the server.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] for a kubeconfig that cannot be read or
    /// used (naming `KubeconfigSource::kubeconfig`), or one that skips TLS
    /// verification without [`KubeconfigSource::insecure_skip_tls_verify`],
    /// or whose server is plain `http://` without
    /// [`KubeconfigSource::insecure_plain_http`];
    /// `Backend` of kind `unreachable` when the server does not answer, and a
    /// refusal when it rejects the credentials.
    pub async fn connect(source: &KubeconfigSource) -> Result<Self, ExecutorError> {
        let cluster = Self::prepare(source).await?;
        let mut reached = cluster.reach().await?;
        reached.round_trip = time_round_trip(cluster.client.clone(), cluster.server.clone()).await;
        Ok(cluster.reached(reached))
    }

    /// The client [`KubeCluster::connect`] builds, before any call: the
    /// kubeconfig read and checked, nothing sent.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`], as [`KubeCluster::connect`].
    pub(crate) async fn prepare(source: &KubeconfigSource) -> Result<Self, ExecutorError> {
        let options = KubeConfigOptions {
            context: source.context.clone(),
            ..KubeConfigOptions::default()
        };
        let bad =
            |e: &dyn std::fmt::Display| ExecutorError::InvalidInput(format!("kubeconfig: {e}"));
        let kubeconfig = crate::kubeconfig::read(source)?;
        let config = Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| bad(&e))?;
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
        let plain_http = config.cluster_url.scheme_str() == Some("http");
        if plain_http && !source.insecure_plain_http {
            return Err(ExecutorError::InvalidInput(format!(
                "the kubeconfig's cluster {server} is plain http: its credentials, and every \
                 run's Secret and checkout, would cross the network in plain text, readable and \
                 changeable by anyone on the path; give the cluster an https:// server, or \
                 accept the risk explicitly (KubeconfigSource::insecure_plain_http)"
            )));
        }
        let tls_unverified = config.accept_invalid_certs || plain_http;
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
                    crate::kubeconfig::client_certificate_of(source)
                ))
            } else {
                bad(&e)
            }
        })?;
        Ok(KubeCluster {
            client,
            round_trip: std::time::Duration::ZERO,
            warmed: AtomicBool::new(false),
            version: None,
            namespace,
            server,
            tls_unverified,
            keepalive: crate::K8sOptions::default().keepalive,
            reconnect_timeout: crate::K8sOptions::default().reconnect_timeout,
            settling: Arc::default(),
        })
    }

    /// Asks the server its version. Takes `&self` so that other calls (the
    /// permission reviews) can go out at the same time;
    /// [`KubeCluster::reached`] keeps what it learned.
    ///
    /// # Errors
    /// `Backend` of kind `unreachable` when the server does not answer,
    /// and a refusal when it rejects the credentials, naming the server.
    pub(crate) async fn reach(&self) -> Result<Reached, ExecutorError> {
        let (client, server) = (&self.client, &self.server);
        let info = client.apiserver_version().await.map_err(|e| {
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
        Ok(Reached {
            version: version_of(&info.major, &info.minor),
            round_trip: std::time::Duration::ZERO,
        })
    }

    /// Times the server's round trip in the background
    /// ([`time_round_trip`]), for a caller that need not wait for it.
    pub(crate) fn timing(&self) -> tokio::task::JoinHandle<std::time::Duration> {
        tokio::spawn(time_round_trip(self.client.clone(), self.server.clone()))
    }

    /// This cluster, with what [`KubeCluster::reach`] learned.
    pub(crate) fn reached(mut self, reached: Reached) -> Self {
        self.version = reached.version;
        self.round_trip = reached.round_trip;
        self
    }
}

/// What the first calls to a server told: its version and round trip.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reached {
    version: Option<(u32, u32)>,
    round_trip: std::time::Duration,
}

/// Version calls, on a connection an earlier call left open: the link's
/// round trip (the least of a few,
/// [`least_round_trip`](executor_core::tar::least_round_trip)), which
/// decides whether copies in are compressed. Zero when none was answered.
async fn time_round_trip(client: Client, server: String) -> std::time::Duration {
    let what = format!("{server}'s version call");
    executor_core::tar::least_round_trip(&what, || client.apiserver_version()).await
}

/// The server's `(major, minor)` from its version answer; a managed
/// cluster's minor may carry a `+` (`"29+"`).
fn version_of(major: &str, minor: &str) -> Option<(u32, u32)> {
    let digits = |s: &str| -> Option<u32> {
        s.chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .ok()
    };
    Some((digits(major)?, digits(minor)?))
}
