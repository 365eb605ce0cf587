//! The HTTPS listener: TLS, authentication, request recording, routing.

use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::api::{self, error_response};
use crate::rbac::{self, User};
use crate::status::ApiError;

pub use crate::shared::{AuthMode, Recorded, RecordedBody, Shared};

/// Answers an authenticated request as `user` may have it: a
/// `SelfSubjectAccessReview`, a 403, or the API itself.
async fn authorized(
    shared: Arc<Shared>,
    user: User,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<api::Body> {
    let role = shared
        .tenant_role
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    // A restarted server whose roles are still loading grants the tenant
    // nothing, as its RBAC authorizer has no Role to go by yet.
    let role = role.filter(|_| user == User::Admin || !shared.faults.rbac_loading());
    let path = req.uri().path().to_string();
    if req.method() == http::Method::POST
        && path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
    {
        use http_body_util::BodyExt;
        let body = match req.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(e) => return error_response(&ApiError::bad_request(e.to_string())),
        };
        let review = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .or_else(|| rbac::review_from_protobuf(&body));
        let Some(review) = review else {
            return error_response(&ApiError::bad_request(
                "the body is not a SelfSubjectAccessReview in JSON or protobuf",
            ));
        };
        return api::json_response(201, &rbac::review(user, role.as_ref(), &review));
    }
    let query = req.uri().query().unwrap_or_default().to_string();
    if let Some(attrs) = rbac::attributes(req.method().as_str(), &path, &query) {
        if !rbac::allowed(user, role.as_ref(), &attrs) {
            return error_response(&rbac::forbidden(user, &attrs));
        }
    }
    api::handle(shared, req).await
}

/// Accepts connections until the listener task is aborted. An outage
/// closes the listener (new connections are refused), cuts every open
/// connection, and listens again on the same address when it is over.
pub async fn serve(
    mut listener: TcpListener,
    acceptor: TlsAcceptor,
    shared: Arc<Shared>,
    mut outages: tokio::sync::mpsc::UnboundedReceiver<Duration>,
) {
    let Ok(addr) = listener.local_addr() else {
        return;
    };
    loop {
        let tcp = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(_) => continue,
            },
            Some(down) = outages.recv() => {
                drop(listener);
                shared.cut.send_modify(|n| *n += 1);
                shared.faults.note_outage_begun();
                // The outage's length is the fault itself, not a wait for anything.
                tokio::time::sleep(down).await;
                shared.faults.note_restarting();
                listener = loop {
                    match TcpListener::bind(addr).await {
                        Ok(l) => break l,
                        Err(err) => {
                            tracing::debug!(%err, "test cluster relistening");
                            tokio::task::yield_now().await;
                        }
                    }
                };
                shared.faults.note_outage_over();
                continue;
            }
        };
        // As a real API server's are (Go's TCP connections send at once by
        // default): a small frame is not held for the peer's delayed ACK,
        // which would add 40 ms to every short exchange on an exec.
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(%err, "test cluster: TCP_NODELAY");
        }
        let (acceptor, shared) = (acceptor.clone(), shared.clone());
        let mut cut = shared.cut.subscribe();
        // What a request on this connection checks: the outage's cut
        // reaches each connection's task in its own time, and a request
        // that one of them reads meanwhile must not be answered, as no
        // request is once a real server is down.
        let down = shared.cut.subscribe();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let peer = tls.get_ref().1.peer_certificates();
            let has_cert = peer.is_some_and(|c| !c.is_empty());
            let user = if peer
                .and_then(|c| c.first())
                .is_some_and(|c| c.as_ref() == shared.tenant_cert.as_slice())
            {
                User::Tenant
            } else {
                User::Admin
            };
            let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let shared = shared.clone();
                let down = down.clone();
                async move {
                    if down.has_changed().unwrap_or(true) {
                        std::future::pending::<()>().await;
                    }
                    let outage = shared
                        .faults
                        .take_outage(req.method().as_str(), req.uri().path());
                    if let Some(outage) = outage.as_ref().filter(|o| !o.after) {
                        // The server goes down under this request: no answer.
                        let _ = shared.outages.send(outage.down);
                        std::future::pending::<()>().await;
                    }
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
                        authorized(shared.clone(), user, req).await
                    };
                    if let Some(outage) = outage.filter(|o| o.after) {
                        // Done, and the server goes down before it answers.
                        let _ = shared.outages.send(outage.down);
                        std::future::pending::<()>().await;
                    }
                    Ok::<_, std::convert::Infallible>(response)
                }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .with_upgrades();
            tokio::select! {
                biased;
                // An outage: dropping the connection closes its socket.
                _ = cut.changed() => {}
                ended = conn => if let Err(err) = ended {
                    tracing::debug!(%err, "test cluster connection ended");
                },
            }
        });
    }
}
