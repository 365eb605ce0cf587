//! `Status` bodies, as the real API server writes them.

use serde_json::{json, Value};

use crate::kind::Kind;

/// An API error answered with a `Status` body.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `reason`, e.g. `NotFound`.
    pub reason: &'static str,
    /// Human message.
    pub message: String,
    /// `details`, if any.
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }
    /// 404.
    pub fn not_found(kind: Kind, name: &str) -> Self {
        let mut e = Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", resource(kind)),
        );
        e.details = Some(json!({"name": name, "group": kind.group(), "kind": kind.plural()}));
        e
    }
    /// 404 for a path nothing serves.
    pub fn no_route(path: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }
    /// 409 on create.
    pub fn already_exists(kind: Kind, name: &str) -> Self {
        let mut e = Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", resource(kind)),
        );
        e.details = Some(json!({"name": name, "group": kind.group(), "kind": kind.plural()}));
        e
    }
    /// 422 with field causes.
    pub fn invalid(kind: Kind, name: &str, causes: Vec<(String, String)>) -> Self {
        let summary: Vec<String> = causes.iter().map(|(f, m)| format!("{f}: {m}")).collect();
        let mut e = Self::new(
            422,
            "Invalid",
            format!(
                "{} \"{name}\" is invalid: {}",
                kind.name(),
                summary.join(", ")
            ),
        );
        e.details = Some(json!({
            "name": name,
            "group": kind.group(),
            "kind": kind.name(),
            "causes": causes.iter().map(|(f, m)| json!({"reason": "FieldValueInvalid", "message": m, "field": f})).collect::<Vec<_>>(),
        }));
        e
    }
    /// 404 for a namespace that does not exist, as a create in it gets.
    pub fn namespace_not_found(ns: &str) -> Self {
        let mut e = Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found"));
        e.details = Some(json!({"name": ns, "kind": "namespaces"}));
        e
    }
    /// 500.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }
    /// 400.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }
    /// 401.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }
    /// 403.
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(403, "Forbidden", message)
    }
    /// 415.
    /// 415 for a protobuf body this server does not read (`why`).
    pub fn unreadable_protobuf(why: &str) -> Self {
        Self::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({why})"))
    }
    pub fn unsupported_media(content_type: &str) -> Self {
        Self::new(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/merge-patch+json (got {content_type:?})"))
    }
    /// 405.
    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }
    /// An injected fault: 500, 429 or any other code.
    pub fn injected(code: u16) -> Self {
        let reason = match code {
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            _ => "InternalError",
        };
        let mut e = Self::new(code, reason, format!("injected fault: HTTP {code}"));
        if code == 429 {
            e.details = Some(json!({"retryAfterSeconds": 1}));
        }
        e
    }
    /// The `Status` body.
    pub fn body(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

/// `pods`, `jobs.batch`: how messages name a resource.
fn resource(kind: Kind) -> String {
    match kind.group() {
        "" => kind.plural().to_string(),
        g => format!("{}.{g}", kind.plural()),
    }
}

/// The `Status` of a successful delete.
pub fn success() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
}
