//! Who may do what, as the API server's RBAC authorizer decides it: the
//! admin (the cluster's client certificate, or the token) everything; the
//! tenant (its own client certificate) only what its Role grants, in the
//! Role's namespace. A refusal is a 403 `Status` as a real server writes
//! it, and `SelfSubjectAccessReview` answers what a request would get.

use serde_json::{json, Value};

use crate::status::ApiError;

/// The tenant's user name, the common name of its certificate.
pub const TENANT: &str = "knotless-tenant";

/// One rule of a Role: these verbs on these resources (`pods/exec` for a
/// subresource) of one API group (`""` for the core group).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// `""` for core, `batch`, ...
    pub api_group: String,
    /// `jobs`, `pods/exec`, ...
    pub resources: Vec<String>,
    /// `get`, `list`, `watch`, `create`, `patch`, `delete`, ...
    pub verbs: Vec<String>,
}

impl Rule {
    /// A rule of `verbs` on `resources` in `api_group`.
    pub fn new(api_group: &str, resources: &[&str], verbs: &[&str]) -> Self {
        Rule {
            api_group: api_group.to_string(),
            resources: resources.iter().map(|s| s.to_string()).collect(),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn allows(&self, a: &Attributes) -> bool {
        let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
        (self.api_group == "*" || self.api_group == a.group)
            && any(&self.resources, &a.resource)
            && any(&self.verbs, &a.verb)
    }
}

/// The rules of the first Role in a manifest written as
/// `scripts/runner-role.yaml` is: each rule's `apiGroups`, `resources` and
/// `verbs` as one-line flow lists, in that order.
pub fn rules_from_role_yaml(text: &str) -> Vec<Rule> {
    let role = text.split("\n---").next().unwrap_or_default();
    let list = |line: &str| -> Vec<String> {
        let inner = line
            .split_once('[')
            .and_then(|(_, rest)| rest.split_once(']'))
            .map_or("", |(inner, _)| inner);
        inner
            .split(',')
            .map(|s| s.trim().trim_matches('"').to_string())
            .collect()
    };
    let mut rules = Vec::new();
    let (mut group, mut resources) = (None, None);
    for line in role.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("- apiGroups:") {
            group = list(rest).into_iter().next();
        } else if let Some(rest) = line.strip_prefix("resources:") {
            resources = Some(list(rest));
        } else if let Some(rest) = line.strip_prefix("verbs:") {
            rules.push(Rule {
                api_group: group.take().unwrap_or_default(),
                resources: resources.take().unwrap_or_default(),
                verbs: list(rest),
            });
        }
    }
    rules
}

/// A Role bound to the tenant: its rules hold in `namespace` only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// Where the rules hold.
    pub namespace: String,
    /// What they allow.
    pub rules: Vec<Rule>,
}

/// Who is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum User {
    Admin,
    Tenant,
}

impl User {
    pub(crate) fn name(self) -> &'static str {
        match self {
            User::Admin => "knotless-test-admin",
            User::Tenant => TENANT,
        }
    }
}

/// What a request does, as the authorizer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attributes {
    pub verb: String,
    pub group: String,
    /// With the subresource: `pods/exec`.
    pub resource: String,
    pub namespace: Option<String>,
    pub name: Option<String>,
}

/// The attributes of a resource request; `None` for non-resource paths
/// (discovery, version), which every authenticated user may read.
pub(crate) fn attributes(method: &str, path: &str, query: &str) -> Option<Attributes> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest): (&str, &[&str]) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", group, _version, rest @ ..] => (group, rest),
        _ => return None,
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest),
        _ => (None, rest),
    };
    let resource = rest.first()?;
    let name = rest.get(1).map(|s| s.to_string());
    let sub = rest.get(2);
    let watching = query
        .split('&')
        .any(|kv| kv == "watch=true" || kv == "watch=1");
    let verb = match (method, &name, sub) {
        // A WebSocket exec is a GET; servers since 1.31 authorize it as
        // `create`, as the POST it stands for.
        ("GET" | "POST", Some(_), Some(&"exec" | &"attach" | &"portforward")) => "create",
        ("GET", None, _) if watching => "watch",
        ("GET", None, _) => "list",
        ("GET", Some(_), _) => "get",
        ("POST", _, _) => "create",
        ("PUT", _, _) => "update",
        ("PATCH", _, _) => "patch",
        ("DELETE", None, _) => "deletecollection",
        ("DELETE", Some(_), _) => "delete",
        _ => return None,
    };
    Some(Attributes {
        verb: verb.to_string(),
        group: group.to_string(),
        resource: match sub {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.to_string(),
        },
        namespace,
        name,
    })
}

/// Whether `user` with the tenant's `role` may do `a`.
pub(crate) fn allowed(user: User, role: Option<&Role>, a: &Attributes) -> bool {
    match user {
        User::Admin => true,
        User::Tenant => role.is_some_and(|role| {
            a.namespace.as_deref() == Some(role.namespace.as_str())
                && role.rules.iter().any(|rule| rule.allows(a))
        }),
    }
}

/// The 403 a real server answers.
pub(crate) fn forbidden(user: User, a: &Attributes) -> ApiError {
    let qualified = if a.group.is_empty() {
        a.resource.split('/').next().unwrap_or_default().to_string()
    } else {
        format!(
            "{}.{}",
            a.resource.split('/').next().unwrap_or_default(),
            a.group
        )
    };
    let subject = match &a.name {
        Some(name) => format!("{qualified} \"{name}\""),
        None => qualified.clone(),
    };
    let scope = match &a.namespace {
        Some(ns) => format!(" in the namespace \"{ns}\""),
        None => " at the cluster scope".to_string(),
    };
    let mut error = ApiError::forbidden(format!(
        "{subject} is forbidden: User \"{}\" cannot {} resource \"{}\" in API group \"{}\"{scope}",
        user.name(),
        a.verb,
        a.resource,
        a.group
    ));
    let mut details =
        json!({"group": a.group, "kind": a.resource.split('/').next().unwrap_or_default()});
    if let Some(name) = &a.name {
        details["name"] = json!(name);
    }
    error.details = Some(details);
    error
}

/// Answers a `SelfSubjectAccessReview` body.
pub(crate) fn review(user: User, role: Option<&Role>, body: &Value) -> Value {
    let attrs = &body["spec"]["resourceAttributes"];
    let text = |k: &str| attrs[k].as_str().unwrap_or_default().to_string();
    let resource = match text("subresource") {
        sub if sub.is_empty() => text("resource"),
        sub => format!("{}/{sub}", text("resource")),
    };
    let a = Attributes {
        verb: text("verb"),
        group: text("group"),
        resource,
        namespace: Some(text("namespace")).filter(|n| !n.is_empty()),
        name: Some(text("name")).filter(|n| !n.is_empty()),
    };
    let ok = allowed(user, role, &a);
    let mut status = json!({"allowed": ok});
    if ok && user == User::Tenant {
        status["reason"] = json!(format!("RBAC: allowed by RoleBinding \"knotless-runner\" of Role \"knotless-runner\" to User \"{TENANT}\""));
    }
    json!({
        "kind": "SelfSubjectAccessReview",
        "apiVersion": "authorization.k8s.io/v1",
        "metadata": {"creationTimestamp": null},
        "spec": body["spec"].clone(),
        "status": status,
    })
}

/// A `SelfSubjectAccessReview` in Kubernetes' protobuf encoding (what
/// kubectl sends), as the JSON a JSON client would have sent: the magic
/// `k8s\0`, an `Unknown` envelope whose field 2 holds the object, whose
/// field 2 is the spec, whose field 1 the resource attributes.
pub(crate) fn review_from_protobuf(bytes: &[u8]) -> Option<Value> {
    use crate::protobuf::field;
    let unknown = bytes.strip_prefix(b"k8s\0")?;
    let object = field(unknown, 2)?;
    let spec = field(object, 2)?;
    let attrs = field(spec, 1)?;
    let text = |n| {
        field(attrs, n)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .unwrap_or_default()
    };
    Some(json!({"spec": {"resourceAttributes": {
        "namespace": text(1), "verb": text(2), "group": text(3), "version": text(4),
        "resource": text(5), "subresource": text(6), "name": text(7),
    }}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_map_to_verbs_as_the_authorizer_sees_them() {
        let a = |m, p, q| attributes(m, p, q).map(|a| (a.verb, a.group, a.resource));
        let t = |v: &str, g: &str, r: &str| Some((v.to_string(), g.to_string(), r.to_string()));
        assert_eq!(
            a("GET", "/api/v1/namespaces/ci/pods", "watch=true"),
            t("watch", "", "pods")
        );
        assert_eq!(
            a("GET", "/api/v1/namespaces/ci/pods", ""),
            t("list", "", "pods")
        );
        assert_eq!(
            a("GET", "/api/v1/namespaces/ci/pods/p/exec", "command=sh"),
            t("create", "", "pods/exec")
        );
        assert_eq!(
            a("POST", "/apis/batch/v1/namespaces/ci/jobs", ""),
            t("create", "batch", "jobs")
        );
        assert_eq!(
            a("DELETE", "/apis/batch/v1/namespaces/ci/jobs/j", ""),
            t("delete", "batch", "jobs")
        );
        assert_eq!(
            a("PATCH", "/api/v1/namespaces/ci/secrets/s", ""),
            t("patch", "", "secrets")
        );
        assert_eq!(a("GET", "/api", ""), None);
        assert_eq!(a("GET", "/version", ""), None);
    }

    #[test]
    fn a_tenant_gets_its_rules_in_its_namespace_only() {
        let role = Role {
            namespace: "ci".into(),
            rules: vec![Rule::new("batch", &["jobs"], &["create"])],
        };
        let create = attributes("POST", "/apis/batch/v1/namespaces/ci/jobs", "").unwrap();
        let elsewhere = attributes("POST", "/apis/batch/v1/namespaces/default/jobs", "").unwrap();
        let delete = attributes("DELETE", "/apis/batch/v1/namespaces/ci/jobs/j", "").unwrap();
        assert!(allowed(User::Tenant, Some(&role), &create));
        assert!(!allowed(User::Tenant, Some(&role), &elsewhere));
        assert!(!allowed(User::Tenant, Some(&role), &delete));
        assert!(!allowed(User::Tenant, None, &create));
        assert!(allowed(User::Admin, None, &delete));
        let message = forbidden(User::Tenant, &delete).message;
        assert_eq!(
            message,
            "jobs.batch \"j\" is forbidden: User \"knotless-tenant\" cannot delete resource \"jobs\" in API group \"batch\" in the namespace \"ci\""
        );
    }
}
