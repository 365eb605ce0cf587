//! Discovery and the OpenAPI document kubectl reads first.

use bytes::Bytes;
use http::{Method, Response};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use crate::shared::Shared;

use super::*;

pub(super) fn openapi_doc(kinds: &[(&str, &str, &str)]) -> Value {
    let mut paths = serde_json::Map::new();
    for (group, kind, plural) in kinds {
        let prefix = if group.is_empty() {
            "/api/v1".to_string()
        } else {
            format!("/apis/{group}/v1")
        };
        let path = if *kind == "Namespace" {
            format!("{prefix}/namespaces/{{name}}")
        } else if ["RuntimeClass", "PriorityClass"].contains(kind) {
            format!("{prefix}/{plural}/{{name}}")
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

/// The API groups beside the core one.
const GROUPS: [&str; 3] = ["batch", "node.k8s.io", "scheduling.k8s.io"];

/// An API group with its one version, v1.
fn group(name: &str) -> Value {
    let version = json!({"groupVersion": format!("{name}/v1"), "version": "v1"});
    json!({"name": name, "versions": [version], "preferredVersion": version})
}

pub(super) fn discovery(shared: &Shared, method: &Method, path: &str) -> Option<Response<Body>> {
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
                resource("persistentvolumeclaims", "PersistentVolumeClaim", true, &crud),
                resource("namespaces", "Namespace", false, &["get"]),
                resource("nodes", "Node", false, &["get", "list"]),
            ],
        }),
        "/apis" => json!({
            "kind": "APIGroupList", "apiVersion": "v1",
            "groups": GROUPS.iter().map(|g| group(g)).collect::<Vec<_>>(),
        }),
        "/apis/node.k8s.io" | "/apis/scheduling.k8s.io" => {
            let mut g = group(&path.trim_end_matches('/')["/apis/".len()..]);
            g["kind"] = json!("APIGroup");
            g["apiVersion"] = json!("v1");
            g
        }
        "/apis/node.k8s.io/v1" => json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "node.k8s.io/v1",
            "resources": [resource("runtimeclasses", "RuntimeClass", false, &crud)],
        }),
        "/apis/scheduling.k8s.io/v1" => json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "scheduling.k8s.io/v1",
            "resources": [resource("priorityclasses", "PriorityClass", false, &crud)],
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
            "apis/node.k8s.io/v1": {"serverRelativeURL": "/openapi/v3/apis/node.k8s.io/v1?hash=knotless"},
            "apis/scheduling.k8s.io/v1": {"serverRelativeURL": "/openapi/v3/apis/scheduling.k8s.io/v1?hash=knotless"},
        }}),
        "/openapi/v3/apis/node.k8s.io/v1" => {
            openapi_doc(&[("node.k8s.io", "RuntimeClass", "runtimeclasses")])
        }
        "/openapi/v3/apis/scheduling.k8s.io/v1" => {
            openapi_doc(&[("scheduling.k8s.io", "PriorityClass", "priorityclasses")])
        }
        "/openapi/v3/api/v1" => openapi_doc(&[
            ("", "Pod", "pods"),
            ("", "Secret", "secrets"),
            ("", "Event", "events"),
            ("", "PersistentVolumeClaim", "persistentvolumeclaims"),
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
