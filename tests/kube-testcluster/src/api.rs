//! Routing and the resource handlers.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{json, Value};

use crate::exec::form_pairs;
use crate::jobs::{self, Propagation};
use crate::selectors::Selector;
use crate::shared::Shared;
use crate::status::{self, ApiError};
use crate::store::Kind;
use crate::validate;

mod discovery;
mod pods;
mod watch;

use discovery::discovery;
use pods::{exec_upgrade, pod_log};
use watch::watch;

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

/// Where the requests served so far are counted, by verb and resource as
/// the authorizer sees them (`kubectl get --raw /knotless/requests`), for
/// a benchmark that measures what a run asks of the server.
pub const REQUEST_COUNTS: &str = "/knotless/requests";

/// Every request so far but those to [`REQUEST_COUNTS`], counted by
/// `VERB RESOURCE` (`create pods/exec`, `watch pods`); a path that is no
/// resource (discovery, version) as `get PATH`.
pub fn request_counts(shared: &Shared) -> Value {
    let mut counts = std::collections::BTreeMap::<String, u64>::new();
    let recorded = shared
        .requests
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for r in recorded.iter().filter(|r| r.path != REQUEST_COUNTS) {
        let key = match crate::rbac::attributes(&r.method, &r.path, &r.query) {
            Some(a) => format!("{} {}", a.verb, a.resource),
            None => format!("{} {}", r.method.to_lowercase(), r.path),
        };
        *counts.entry(key).or_default() += 1;
    }
    json!(counts)
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
    let (group, rest): (&str, &[&str]) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group @ ("batch" | "node.k8s.io" | "scheduling.k8s.io"), "v1", rest @ ..] => {
            (group, rest)
        }
        _ => return None,
    };
    let (ns, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let resource = *rest.first()?;
    let kind = [
        Kind::Job,
        Kind::Pod,
        Kind::Secret,
        Kind::Event,
        Kind::PersistentVolumeClaim,
        Kind::RuntimeClass,
        Kind::PriorityClass,
    ]
    .into_iter()
    .find(|k| k.group() == group && k.plural() == resource)?;
    // A cluster-scoped kind has no namespace in its path, a namespaced one
    // is listed across namespaces without one.
    if ns.is_some() && !kind.namespaced() {
        return None;
    }
    let ns = if kind.namespaced() {
        ns
    } else {
        Some(String::new())
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
    if method == Method::GET && path == REQUEST_COUNTS {
        return json_response(200, &request_counts(&shared));
    }
    if method == Method::GET
        && (path == "/api/v1/nodes" || path == format!("/api/v1/nodes/{}", crate::NODE))
    {
        return json_response(200, &nodes(&shared, path.ends_with("/nodes")));
    }
    let Some(route) = parse_route(&path) else {
        if path.starts_with("/api/v1/namespaces/") && path.matches('/').count() == 4 {
            let ns = path.rsplit('/').next().unwrap_or("default");
            let mut labels = json!({"kubernetes.io/metadata.name": ns});
            if let Some(level) = shared.store.pod_security(ns) {
                labels[crate::pod_security::ENFORCE_LABEL] = json!(level);
            }
            return json_response(
                200,
                &json!({"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": ns, "labels": labels}, "status": {"phase": "Active"}}),
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
            let dry_run = query_get(&query, "dryRun").is_some_and(|d| d == "All");
            create(&shared, &route, body, dry_run)
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

/// The request's object: JSON, or Kubernetes' protobuf as kubectl's
/// typed clients send it ([`crate::protobuf`]).
async fn read_json(shared: &Shared, req: Request<Incoming>) -> Result<Value, ApiError> {
    let (method, path) = (req.method().to_string(), req.uri().path().to_string());
    let protobuf = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/vnd.kubernetes.protobuf"));
    let body = req
        .into_body()
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(e.to_string()))?
        .to_bytes();
    shared.record_body(&method, &path, &body);
    if protobuf {
        return crate::protobuf::object_from(&body).map_err(|e| ApiError::unreadable_protobuf(&e));
    }
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

/// Creates the object in `body`; with `dry_run` (`?dryRun=All`) it is
/// validated and admitted, answered as created, and not kept.
fn create(
    shared: &Arc<Shared>,
    route: &Route,
    mut body: Value,
    dry_run: bool,
) -> Result<(u16, Value), ApiError> {
    let ns = route.ns.clone().unwrap_or_else(|| "default".into());
    let exists = !route.kind.namespaced()
        || shared
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
        Kind::RuntimeClass => validate::runtime_class(&body),
        Kind::PriorityClass => validate::priority_class(&body),
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
    if route.kind == Kind::PersistentVolumeClaim {
        // As a dynamic provisioner that binds at once.
        body["status"] =
            json!({"phase": "Bound", "accessModes": body["spec"]["accessModes"].clone()});
    }
    if route.kind == Kind::Pod {
        crate::admission::admit_pod(&shared.store, &ns, &mut body)?;
    }
    if dry_run {
        body["metadata"]["namespace"] = json!(ns);
        return Ok((201, body));
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
        Some(_) if route.kind == Kind::PersistentVolumeClaim => {
            shared.kubelet.claim_deleted(ns, name).await;
            Ok((200, status::success()))
        }
        Some(_) if route.kind == Kind::Secret || route.kind == Kind::Event => {
            Ok((200, status::success()))
        }
        Some(object) => Ok((200, object)),
        None => Err(ApiError::not_found(route.kind, name)),
    }
}
