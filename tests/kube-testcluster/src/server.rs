//! The HTTPS listener: TLS, authentication, request recording, routing.

use std::sync::{Arc, Mutex};

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::api::{self, error_response};
use crate::exec::Protocol;
use crate::faults::Faults;
use crate::kubelet::Kubelet;
use crate::status::ApiError;
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

/// State shared by every connection.
pub struct Shared {
    pub(crate) store: Arc<Store>,
    pub(crate) kubelet: Arc<Kubelet>,
    pub(crate) faults: Arc<Faults>,
    pub(crate) v4_only: bool,
    pub(crate) address: String,
    pub(crate) auth: AuthMode,
    pub(crate) token: String,
    pub(crate) requests: Mutex<Vec<Recorded>>,
    pub(crate) protocols: Mutex<Vec<Protocol>>,
}

impl Shared {
    pub(crate) fn note_protocol(&self, p: Protocol) {
        self.protocols
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(p);
    }
}

/// Accepts connections until the listener task is aborted.
pub async fn serve(listener: TcpListener, acceptor: TlsAcceptor, shared: Arc<Shared>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, shared) = (acceptor.clone(), shared.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let has_cert = tls
                .get_ref()
                .1
                .peer_certificates()
                .is_some_and(|c| !c.is_empty());
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let shared = shared.clone();
                async move {
                    let token_ok = req
                        .headers()
                        .get(http::header::AUTHORIZATION)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.strip_prefix("Bearer "))
                        .is_some_and(|t| t == shared.token);
                    let authenticated = match shared.auth {
                        AuthMode::ClientCertificate => has_cert,
                        AuthMode::Token => token_ok || has_cert,
                    };
                    shared
                        .requests
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(Recorded {
                            method: req.method().to_string(),
                            path: req.uri().path().to_string(),
                            query: req.uri().query().unwrap_or_default().to_string(),
                            authenticated,
                        });
                    let response = if !authenticated {
                        error_response(&ApiError::unauthorized())
                    } else {
                        api::handle(shared, req).await
                    };
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades();
            if let Err(err) = conn.await {
                tracing::debug!(%err, "test cluster connection ended");
            }
        });
    }
}
