//! A pod's subresources: exec (the upgrade, or a real server's refusal)
//! and logs.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::Value;

use crate::exec::{self, ExecParams};
use crate::shared::Shared;
use crate::status::ApiError;
use crate::store::Kind;

use super::*;

pub(super) fn exec_upgrade(
    shared: Arc<Shared>,
    mut req: Request<Incoming>,
    route: &Route,
    query: &str,
) -> Response<Body> {
    let ns = route.ns.clone().unwrap_or_else(|| "default".into());
    let name = route.name.clone().unwrap_or_default();
    let Some(pod) = shared.store.get(Kind::Pod, &ns, &name) else {
        return error_response(&ApiError::not_found(Kind::Pod, &name));
    };
    let params = ExecParams::parse(query);
    // What a real server refuses before any upgrade, with its words.
    if let Err(refusal) = exec_refusal(&shared, &pod, &ns, &name, &params) {
        return error_response(&refusal);
    }
    let headers = req.headers();
    let is_ws = headers
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let Some(key) = headers.get("Sec-WebSocket-Key").cloned().filter(|_| is_ws) else {
        return error_response(&ApiError::bad_request(
            "exec needs a WebSocket upgrade (SPDY is not served)",
        ));
    };
    let offer = headers
        .get("Sec-WebSocket-Protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let protocol = match exec::negotiate(&offer, shared.v4_only) {
        Ok(p) => p,
        Err(msg) => return error_response(&ApiError::forbidden(msg)),
    };
    shared.note_protocol(protocol);
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let container = shared
        .kubelet
        .container_named(&ns, &name, params.container.as_deref());
    let upgrade = hyper::upgrade::on(&mut req);
    let mut cut = shared.cut.subscribe();
    tokio::spawn(async move {
        match upgrade.await {
            Ok(upgraded) => {
                let served = exec::serve(
                    upgraded,
                    protocol,
                    &shared.kubelet,
                    &shared.faults,
                    container,
                    params,
                );
                tokio::select! {
                    () = served => {}
                    // An outage cuts the exec's stream; the command goes on
                    // in its container, as it does behind a real API server.
                    _ = cut.changed() => {}
                }
            }
            Err(err) => tracing::debug!(%err, "exec upgrade failed"),
        }
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(http::header::UPGRADE, "websocket")
        .header(http::header::CONNECTION, "Upgrade")
        .header("Sec-WebSocket-Accept", accept)
        .header("Sec-WebSocket-Protocol", protocol.as_str())
        .body(Full::new(Bytes::new()).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

/// `GET .../pods/{name}/log`: the container's output as plain text, as
/// the kubelet serves it through the API server.
pub(super) async fn pod_log(
    shared: &Shared,
    route: &Route,
    name: &str,
    query: &str,
) -> Response<Body> {
    let ns = route.ns.as_deref().unwrap_or("default");
    let Some(pod) = shared.store.get(Kind::Pod, ns, name) else {
        return error_response(&ApiError::not_found(Kind::Pod, name));
    };
    let containers = crate::sidecars::container_names(&pod["spec"]);
    let container = query_get(query, "container");
    match container.as_deref() {
        Some(c) if !containers.contains(&c) => {
            return error_response(&ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )))
        }
        None if containers.len() > 1 => {
            return error_response(&ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: {containers:?}"
            )))
        }
        _ => {}
    }
    let tail = query_get(query, "tailLines").and_then(|n| n.parse().ok());
    match shared
        .kubelet
        .pod_log(ns, name, container.as_deref(), tail)
        .await
    {
        Some(text) => Response::builder()
            .status(200)
            .header("Content-Type", "text/plain")
            .body(Full::new(Bytes::from(text)).boxed())
            .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed())),
        None => error_response(&ApiError::bad_request(format!(
            "container {:?} in pod {name} is waiting to start",
            container.unwrap_or_default()
        ))),
    }
}

/// Why a real API server (and the kubelet behind it) would refuse this
/// exec before upgrading the connection.
pub(super) fn exec_refusal(
    shared: &Shared,
    pod: &Value,
    ns: &str,
    name: &str,
    params: &ExecParams,
) -> Result<(), ApiError> {
    if !(params.stdin || params.stdout || params.stderr) {
        return Err(ApiError::bad_request(
            "you must specify at least 1 of stdin, stdout, stderr",
        ));
    }
    let containers = crate::sidecars::container_names(&pod["spec"]);
    let container = match params.container.as_deref() {
        Some(c) if containers.contains(&c) => c,
        Some(c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )))
        }
        None if containers.len() == 1 => containers[0],
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: {containers:?}"
            )))
        }
    };
    let phase = pod["status"]["phase"].as_str().unwrap_or("Pending");
    if phase == "Succeeded" || phase == "Failed" {
        return Err(ApiError::bad_request(format!(
            "cannot exec into a container in a completed pod; current phase is {phase}"
        )));
    }
    if pod["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    if shared.kubelet.container_of(ns, name).is_none() {
        return Err(ApiError::internal(format!(
            "unable to upgrade connection: container not found (\"{container}\")"
        )));
    }
    Ok(())
}
