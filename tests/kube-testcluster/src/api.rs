//! Routing and the resource handlers.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use serde_json::{json, Value};

use crate::exec::{self, form_pairs, ExecParams};
use crate::jobs::{self, Propagation};
use crate::selectors::Selector;
use crate::server::Shared;
use crate::status::{self, ApiError};
use crate::store::Kind;
use crate::validate;

/// Response bodies: whole JSON, or a watch stream.
pub type Body = BoxBody<Bytes, Infallible>;

pub fn json_response(code: u16, value: &Value) -> Response<Body> {
    Response::builder()
        .status(code)
        .header("Content-Type", "application/json")
        .body(Full::new(Bytes::from(value.to_string())).boxed())
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = json_response(e.code, &e.body());
    if e.code == 429 {
        r.headers_mut()
            .insert("Retry-After", http::HeaderValue::from_static("1"));
    }
    r
}

/// A parsed resource path.
#[derive(Debug)]
struct Route {
    kind: Kind,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

fn parse_route(path: &str) -> Option<Route> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let rest: &[&str] = match parts.as_slice() {
        ["api", "v1", rest @ ..] => rest,
        ["apis", "batch", "v1", rest @ ..] => rest,
        _ => return None,
    };
    let batch = parts[0] == "apis";
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let kind = match *rest.first()? {
        "jobs" if batch => Kind::Job,
        "pods" if !batch => Kind::Pod,
        "secrets" if !batch => Kind::Secret,
        "events" if !batch => Kind::Event,
        _ => return None,
    };
    Some(Route {
        kind,
        ns,
        name: rest.get(1).map(|s| s.to_string()),
        sub: rest.get(2).map(|s| s.to_string()),
    })
}

fn query_get(query: &str, key: &str) -> Option<String> {
    form_pairs(query)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// Answers one authenticated request.
pub async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().to_string();
    let method = req.method().clone();

    if let Some(code) = shared.faults.take_request_fault(method.as_str(), &path) {
        return error_response(&ApiError::injected(code));
    }
    if let Some(r) = discovery(&shared, &method, &path) {
        return r;
    }
    if method == Method::GET
        && (path == "/api/v1/nodes" || path == format!("/api/v1/nodes/{}", crate::NODE))
    {
        return json_response(200, &nodes(&shared, path.ends_with("/nodes")));
    }
    let Some(route) = parse_route(&path) else {
        if path.starts_with("/api/v1/namespaces/") && path.matches('/').count() == 4 {
            let ns = path.rsplit('/').next().unwrap_or("default");
            return json_response(
                200,
                &json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": ns}, "status": {"phase": "Active"}}),
            );
        }
        return error_response(&ApiError::no_route(&path));
    };
    let result = match (&method, &route.name, route.sub.as_deref()) {
        (&Method::GET, Some(_), Some("exec")) | (&Method::POST, Some(_), Some("exec"))
            if route.kind == Kind::Pod =>
        {
            return exec_upgrade(shared, req, &route, &query);
        }
        (&Method::GET, Some(name), Some("log")) if route.kind == Kind::Pod => {
            return pod_log(&shared, &route, name, &query).await;
        }
        (&Method::GET, None, _) => {
            if query_get(&query, "watch").is_some_and(|w| w == "true" || w == "1") {
                return watch(&shared, &route, &query);
            }
            list(&shared, &route, &query)
        }
        (&Method::GET, Some(name), None) | (&Method::GET, Some(name), Some("status")) => {
            let ns = route.ns.as_deref().unwrap_or("default");
            shared
                .store
                .get(route.kind, ns, name)
                .map(|o| (200, o))
                .ok_or_else(|| ApiError::not_found(route.kind, name))
        }
        (&Method::POST, None, _) => {
            let body = match read_json(&shared, req).await {
                Ok(b) => b,
                Err(e) => return error_response(&e),
            };
            create(&shared, &route, body)
        }
        (&Method::PATCH, Some(name), None) => {
            let content_type = req
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            if !content_type.starts_with("application/merge-patch+json") {
                return error_response(&ApiError::unsupported_media(&content_type));
            }
            let patch = match read_json(&shared, req).await {
                Ok(b) => b,
                Err(e) => return error_response(&e),
            };
            let ns = route.ns.as_deref().unwrap_or("default");
            shared
                .store
                .update(route.kind, ns, name, |object| merge_patch(object, &patch))
                .map(|o| (200, o))
                .ok_or_else(|| ApiError::not_found(route.kind, name))
        }
        (&Method::DELETE, Some(name), None) => {
            let path = req.uri().path().to_string();
            let body = req
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            shared.record_body("DELETE", &path, &body);
            let options: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            delete(&shared, &route, name, &query, &options).await
        }
        _ => Err(ApiError::method_not_allowed()),
    };
    match result {
        Ok((code, v)) => json_response(code, &v),
        Err(e) => error_response(&e),
    }
}

async fn read_json(shared: &Shared, req: Request<Incoming>) -> Result<Value, ApiError> {
    let (method, path) = (req.method().to_string(), req.uri().path().to_string());
    let body = req
        .into_body()
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(e.to_string()))?
        .to_bytes();
    shared.record_body(&method, &path, &body);
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not JSON: {e}")))
}

/// The one node, as a list or alone.
fn nodes(shared: &Shared, list: bool) -> Value {
    let (pods, _) = shared.store.list(Kind::Pod, None, &Selector::default());
    let node = json!({
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": crate::NODE, "labels": crate::scheduler::node_labels(), "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"taints": shared.faults.taints().iter().map(|t| json!({"key": t.key, "value": t.value, "effect": t.effect})).collect::<Vec<_>>()},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "the test kubelet runs pods as containers"}],
            "nodeInfo": {"kubeletVersion": "v1.32.0-knotless-test", "containerRuntimeVersion": "docker://engine", "osImage": "test cluster", "kernelVersion": "", "architecture": "amd64", "operatingSystem": "linux"},
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "allocatable": {"pods": "110"},
        },
        "knotlessPods": pods.len(),
    });
    if list {
        json!({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": shared.store.resource_version().to_string()}, "items": [node]})
    } else {
        node
    }
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(fields) => {
            if !target.is_object() {
                *target = json!({});
            }
            for (k, v) in fields {
                if v.is_null() {
                    target.as_object_mut().map(|o| o.remove(k));
                } else {
                    merge_patch(&mut target[k], v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn list(shared: &Shared, route: &Route, query: &str) -> Result<(u16, Value), ApiError> {
    let selector = Selector::parse(
        query_get(query, "labelSelector").as_deref(),
        query_get(query, "fieldSelector").as_deref(),
    )?;
    let (items, rv) = shared
        .store
        .list(route.kind, route.ns.as_deref(), &selector);
    Ok((
        200,
        json!({
            "kind": format!("{}List", route.kind.name()),
            "apiVersion": route.kind.api_version(),
            "metadata": {"resourceVersion": rv.to_string()},
            "items": items,
        }),
    ))
}

fn watch(shared: &Shared, route: &Route, query: &str) -> Response<Body> {
    let selector = match Selector::parse(
        query_get(query, "labelSelector").as_deref(),
        query_get(query, "fieldSelector").as_deref(),
    ) {
        Ok(s) => s,
        Err(e) => return error_response(&e),
    };
    let since: u64 = query_get(query, "resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = query_get(query, "timeoutSeconds").and_then(|v| v.parse::<u64>().ok());
    let kind = route.kind;
    // A real server compacts its history: a watch from a version it no
    // longer holds gets one ERROR event (410 Gone) and the stream ends, and
    // the client must list again.
    if since > 0 && since < shared.faults.compacted_at() {
        shared.faults.note_watch_gone();
        let gone = json!({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("too old resource version: {since} ({})", shared.faults.compacted_at()),
            "reason": "Expired", "code": 410,
        }});
        let body = Bytes::from(format!("{gone}\n"));
        return Response::builder()
            .status(StatusCode::OK)
            .header("Content-Type", "application/json")
            .body(Full::new(body).boxed())
            .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()));
    }
    // And it ends every watch after a while, whatever the client asked.
    let expiry = shared.faults.watch_expiry_now();
    let watch_faults = shared.faults.clone();
    if kind == Kind::Pod {
        shared.faults.note_pod_watch();
    }
    let ns = route.ns.clone();
    let matches = move |object: &Value| {
        ns.as_deref()
            .is_none_or(|n| object["metadata"]["namespace"] == n)
            && selector.matches(object)
    };
    // resourceVersion 0 or unset: current objects first, as ADDED.
    let mut initial = Vec::new();
    let (past, mut rx) = if since == 0 {
        let rv = shared.store.resource_version();
        let (items, _) = shared
            .store
            .list(kind, route.ns.as_deref(), &Selector::default());
        initial.extend(
            items
                .into_iter()
                .filter(|o| matches(o))
                .map(|o| json!({"type": "ADDED", "object": o})),
        );
        shared.store.subscribe(rv)
    } else {
        shared.store.subscribe(since)
    };
    let (tx, out) = tokio::sync::mpsc::channel::<Bytes>(64);
    tokio::spawn(async move {
        let line = |v: &Value| Bytes::from(format!("{v}\n"));
        for event in initial {
            if tx.send(line(&event)).await.is_err() {
                return;
            }
        }
        let mut last = since;
        let forward = |c: &crate::store::Change| -> Option<Value> {
            (c.kind == kind && matches(&c.object))
                .then(|| json!({"type": c.event, "object": c.object}))
        };
        for c in past {
            last = c.rv;
            if let Some(e) = forward(&c) {
                if tx.send(line(&e)).await.is_err() {
                    return;
                }
            }
        }
        let asked = timeout.map(std::time::Duration::from_secs);
        let lasts = match (asked, expiry) {
            (Some(a), Some(e)) => Some(a.min(e)),
            (a, e) => a.or(e),
        };
        let deadline = lasts.map(|d| tokio::time::Instant::now() + d);
        loop {
            let next = async {
                match deadline {
                    Some(at) => {
                        let got = tokio::time::timeout_at(at, rx.recv()).await.ok();
                        if got.is_none() && expiry.is_some() {
                            watch_faults.note_watch_expired();
                        }
                        got
                    }
                    None => Some(rx.recv().await),
                }
            };
            tokio::select! {
                got = next => match got {
                    Some(Ok(c)) if c.rv > last => {
                        last = c.rv;
                        if let Some(e) = forward(&c) {
                            if tx.send(line(&e)).await.is_err() { return; }
                        }
                    }
                    Some(Ok(_)) => {}
                    Some(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => return,
                    Some(Err(_)) | None => return,
                },
                _ = tx.closed() => return,
            }
        }
    });
    let stream = tokio_stream_from(out).map(|b| Ok::<_, Infallible>(Frame::data(b)));
    Response::builder()
        .status(StatusCode::OK)
        .header("Content-Type", "application/json")
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap_or_else(|_| Response::new(Full::new(Bytes::new()).boxed()))
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<Bytes>,
) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

fn create(shared: &Arc<Shared>, route: &Route, mut body: Value) -> Result<(u16, Value), ApiError> {
    let ns = route.ns.clone().unwrap_or_else(|| "default".into());
    let exists = shared
        .namespaces
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&ns);
    if !exists {
        return Err(ApiError::namespace_not_found(&ns));
    }
    if body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        if let Some(prefix) = body["metadata"]["generateName"].as_str() {
            body["metadata"]["name"] = json!(format!(
                "{prefix}{:05x}",
                crate::tls::random_u64() & 0xfffff
            ));
        }
    }
    let name = body["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let causes = match route.kind {
        Kind::Job => validate::job(&body),
        _ => validate::metadata(&body),
    };
    if !causes.is_empty() {
        return Err(ApiError::invalid(route.kind, &name, causes));
    }
    if route.kind == Kind::Secret {
        // stringData is write-only: merged into data as base64.
        use base64::Engine as _;
        if let Some(sd) = body["stringData"].as_object().cloned() {
            for (k, v) in sd {
                body["data"][k] = json!(base64::engine::general_purpose::STANDARD
                    .encode(v.as_str().unwrap_or_default()));
            }
            body.as_object_mut().map(|o| o.remove("stringData"));
        }
    }
    let created = shared.store.create(route.kind, &ns, body)?;
    if route.kind == Kind::Job {
        jobs::job_created(&shared.store, &shared.kubelet, &created);
    }
    if route.kind == Kind::Pod {
        shared.kubelet.spawn_pod(ns, name);
    }
    Ok((201, created))
}

async fn delete(
    shared: &Arc<Shared>,
    route: &Route,
    name: &str,
    query: &str,
    options: &Value,
) -> Result<(u16, Value), ApiError> {
    let ns = route.ns.as_deref().unwrap_or("default");
    let policy = options["propagationPolicy"]
        .as_str()
        .map(str::to_string)
        .or_else(|| query_get(query, "propagationPolicy"));
    let propagation = match policy.as_deref() {
        Some(p) => Propagation::parse(p)
            .ok_or_else(|| ApiError::bad_request(format!("unsupported propagationPolicy {p:?}")))?,
        // batch/v1 Jobs orphan their pods unless told otherwise, as the real API does.
        None if route.kind == Kind::Job => Propagation::Orphan,
        None => Propagation::Background,
    };
    // A grace the request names wins over the pod's own.
    let grace = options["gracePeriodSeconds"]
        .as_u64()
        .or_else(|| query_get(query, "gracePeriodSeconds").and_then(|g| g.parse().ok()));
    match jobs::delete(
        &shared.store,
        &shared.kubelet,
        route.kind,
        ns,
        name,
        propagation,
        grace,
    )
    .await
    {
        Some(object) if route.kind == Kind::Job && propagation == Propagation::Foreground => {
            Ok((200, object))
        }
        Some(_) if route.kind == Kind::Secret || route.kind == Kind::Event => {
            Ok((200, status::success()))
        }
        Some(object) => Ok((200, object)),
        None => Err(ApiError::not_found(route.kind, name)),
    }
}

fn exec_upgrade(
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
async fn pod_log(shared: &Shared, route: &Route, name: &str, query: &str) -> Response<Body> {
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
fn exec_refusal(
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

fn openapi_doc(kinds: &[(&str, &str, &str)]) -> Value {
    let mut paths = serde_json::Map::new();
    for (group, kind, plural) in kinds {
        let prefix = if group.is_empty() {
            "/api/v1".to_string()
        } else {
            format!("/apis/{group}/v1")
        };
        let path = if *kind == "Namespace" {
            format!("{prefix}/namespaces/{{name}}")
        } else {
            format!("{prefix}/namespaces/{{namespace}}/{plural}/{{name}}")
        };
        paths.insert(path, json!({"patch": {
            "x-kubernetes-group-version-kind": {"group": group, "version": "v1", "kind": kind},
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}}],
            "responses": {"200": {"description": "OK"}},
        }}));
    }
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths})
}

fn discovery(shared: &Shared, method: &Method, path: &str) -> Option<Response<Body>> {
    if method != Method::GET {
        return None;
    }
    let resource = |name: &str, kind: &str, namespaced: bool, verbs: &[&str]| json!({"name": name, "singularName": kind.to_lowercase(), "namespaced": namespaced, "kind": kind, "verbs": verbs});
    let crud = ["create", "delete", "get", "list", "watch"];
    let body = match path.trim_end_matches('/') {
        // A v4-only server is one from before v1.30; this one is as old
        // as the oldest the project proves on, with no native sidecars.
        "/version" if shared.v4_only => json!({
            "major": "1", "minor": "24", "gitVersion": "v1.24.17-knotless-test", "gitCommit": "0000000",
            "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.20",
            "compiler": "gc", "platform": "linux/amd64",
        }),
        "/version" => json!({
            "major": "1", "minor": "32", "gitVersion": "v1.32.0-knotless-test", "gitCommit": "0000000",
            "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23",
            "compiler": "gc", "platform": "linux/amd64",
        }),
        "/api" => json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.address}],
        }),
        "/api/v1" => json!({
            "kind": "APIResourceList", "groupVersion": "v1",
            "resources": [
                resource("pods", "Pod", true, &crud),
                resource("pods/exec", "PodExecOptions", true, &["create", "get"]),
                resource("pods/status", "Pod", true, &["get"]),
                resource("secrets", "Secret", true, &crud),
                resource("events", "Event", true, &crud),
                resource("namespaces", "Namespace", false, &["get"]),
                resource("nodes", "Node", false, &["get", "list"]),
            ],
        }),
        "/apis" => json!({
            "kind": "APIGroupList", "apiVersion": "v1",
            "groups": [{
                "name": "batch",
                "versions": [{"groupVersion": "batch/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "batch/v1", "version": "v1"},
            }],
        }),
        "/apis/batch" => json!({
            "kind": "APIGroup", "apiVersion": "v1", "name": "batch",
            "versions": [{"groupVersion": "batch/v1", "version": "v1"}],
            "preferredVersion": {"groupVersion": "batch/v1", "version": "v1"},
        }),
        "/apis/batch/v1" => json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "batch/v1",
            "resources": [resource("jobs", "Job", true, &crud), resource("jobs/status", "Job", true, &["get"])],
        }),
        // Enough OpenAPI v3 for kubectl to see that the server validates
        // fields itself (fieldValidation on PATCH), so it skips client-side
        // validation, as it does against a real server.
        "/openapi/v3" => json!({"paths": {
            "api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=knotless"},
            "apis/batch/v1": {"serverRelativeURL": "/openapi/v3/apis/batch/v1?hash=knotless"},
        }}),
        "/openapi/v3/api/v1" => openapi_doc(&[
            ("", "Pod", "pods"),
            ("", "Secret", "secrets"),
            ("", "Event", "events"),
            ("", "Namespace", "namespaces"),
        ]),
        "/openapi/v3/apis/batch/v1" => openapi_doc(&[("batch", "Job", "jobs")]),
        "/healthz" | "/livez" | "/readyz" => {
            return Some(Response::new(Full::new(Bytes::from_static(b"ok")).boxed()));
        }
        _ => return None,
    };
    Some(json_response(200, &body))
}
