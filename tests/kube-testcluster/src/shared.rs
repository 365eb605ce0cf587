//! What every connection shares: the store, the kubelet, the faults, the
//! credentials it takes, and what it recorded.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::exec::Protocol;
use crate::faults::Faults;
use crate::kubelet::Kubelet;
use crate::store::Store;

/// How clients must authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthMode {
    /// A client certificate signed by the cluster's CA.
    #[default]
    ClientCertificate,
    /// `Authorization: Bearer <token>`.
    Token,
}

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// Path.
    pub path: String,
    /// Raw query string.
    pub query: String,
    /// Whether it carried a valid credential.
    pub authenticated: bool,
}

/// The body of one request that had one, as the server read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedBody {
    /// HTTP method.
    pub method: String,
    /// Path.
    pub path: String,
    /// The bytes as sent.
    pub body: Vec<u8>,
}

/// State shared by every connection.
pub struct Shared {
    pub(crate) store: Arc<Store>,
    pub(crate) kubelet: Arc<Kubelet>,
    pub(crate) faults: Arc<Faults>,
    pub(crate) v4_only: bool,
    pub(crate) address: String,
    pub(crate) auth: AuthMode,
    pub(crate) token: String,
    /// The tenant certificate's DER: a client presenting it is the tenant.
    pub(crate) tenant_cert: Vec<u8>,
    pub(crate) tenant_role: Mutex<Option<crate::rbac::Role>>,
    pub(crate) requests: Mutex<Vec<Recorded>>,
    pub(crate) bodies: Mutex<Vec<RecordedBody>>,
    /// The namespaces that exist: creating anything elsewhere is 404.
    pub(crate) namespaces: Mutex<std::collections::BTreeSet<String>>,
    pub(crate) protocols: Mutex<Vec<Protocol>>,
    /// Moves once per outage: every open connection and exec ends.
    pub(crate) cut: tokio::sync::watch::Sender<u64>,
    /// Outages asked for by a request, for the accept loop.
    pub(crate) outages: tokio::sync::mpsc::UnboundedSender<Duration>,
}

impl Shared {
    pub(crate) fn record_body(&self, method: &str, path: &str, body: &[u8]) {
        if body.is_empty() {
            return;
        }
        self.bodies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(RecordedBody {
                method: method.to_string(),
                path: path.to_string(),
                body: body.to_vec(),
            });
    }

    pub(crate) fn note_protocol(&self, p: Protocol) {
        self.protocols
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(p);
    }
}
