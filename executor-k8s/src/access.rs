//! The permissions a run and a cleanup use, checked before either
//! creates anything, as `kubectl auth can-i` checks them.

use executor_core::ExecutorError;

use crate::cluster::Cluster;

pub use crate::permission::Permission;

const fn p(
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    subresource: &'static str,
) -> Permission {
    Permission {
        verb,
        group,
        resource,
        subresource,
    }
}

// Each permission a call needs; a call's 403 is judged against these.
pub(crate) const LIST_JOBS: Permission = p("list", "batch", "jobs", "");
pub(crate) const CREATE_JOBS: Permission = p("create", "batch", "jobs", "");
pub(crate) const DELETE_JOBS: Permission = p("delete", "batch", "jobs", "");
pub(crate) const LIST_SECRETS: Permission = p("list", "", "secrets", "");
pub(crate) const CREATE_SECRETS: Permission = p("create", "", "secrets", "");
pub(crate) const PATCH_SECRETS: Permission = p("patch", "", "secrets", "");
pub(crate) const DELETE_SECRETS: Permission = p("delete", "", "secrets", "");
pub(crate) const GET_PODS: Permission = p("get", "", "pods", "");
pub(crate) const LIST_PODS: Permission = p("list", "", "pods", "");
pub(crate) const WATCH_PODS: Permission = p("watch", "", "pods", "");
pub(crate) const LIST_EVENTS: Permission = p("list", "", "events", "");
/// Reading a service container's output; not in [`RUN`]: a run without
/// services never reads it, and one with them says what it could not read.
pub(crate) const GET_POD_LOGS: Permission = p("get", "", "pods", "log");
/// Reading the PersistentVolumeClaims a pod template names; not in
/// [`RUN`]: only a run whose template mounts a claim asks.
pub(crate) const GET_CLAIMS: Permission = p("get", "", "persistentvolumeclaims", "");
/// Asking admission, by a dry-run create, whether the run's pod with a
/// root side would be taken; not in [`RUN`]: only a run with a step user
/// asks. It grants nothing a Job's create does not: the Job controller
/// makes the same pod.
pub(crate) const CREATE_PODS: Permission = p("create", "", "pods", "");
/// Servers before 1.31 authorize a WebSocket exec as `get`, later ones
/// as `create`: either serves.
pub(crate) const EXEC: [Permission; 2] = [
    p("create", "", "pods", "exec"),
    p("get", "", "pods", "exec"),
];

/// What removing a crashed run's objects uses: listing and deleting this
/// runner's Jobs and Secrets, and waiting for the pods to go.
pub const CLEANUP: &[Permission] = &[
    LIST_JOBS,
    DELETE_JOBS,
    LIST_SECRETS,
    DELETE_SECRETS,
    LIST_PODS,
    WATCH_PODS,
];

/// What a caller is about to do, and so which permissions it checks
/// first ([`K8sExecutor::connect_checked`](crate::K8sExecutor::connect_checked)).
///
/// ```
/// use executor_k8s::access::{Purpose, RUN};
/// assert_eq!(Purpose::Run.permissions(), RUN);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// Runs: [`RUN`].
    Run,
    /// Removes crashed runs' objects: [`CLEANUP`].
    Cleanup,
    /// Runs with service containers, besides [`Purpose::Run`]: [`SERVICES`].
    Services,
    /// Runs whose pod template mounts PersistentVolumeClaims, besides
    /// [`Purpose::Run`]: [`CLAIMS`].
    Claims,
    /// Runs whose steps' user is kept apart, besides [`Purpose::Run`]:
    /// [`ISOLATION`].
    Isolation,
}

impl Purpose {
    /// The permissions this purpose uses.
    pub fn permissions(self) -> &'static [Permission] {
        match self {
            Purpose::Run => RUN,
            Purpose::Cleanup => CLEANUP,
            Purpose::Services => SERVICES,
            Purpose::Claims => CLAIMS,
            Purpose::Isolation => ISOLATION,
        }
    }

    /// Its name: `run`, `cleanup` or `services`.
    pub fn name(self) -> &'static str {
        match self {
            Purpose::Run => "run",
            Purpose::Cleanup => "cleanup",
            Purpose::Services => "services",
            Purpose::Claims => "claims",
            Purpose::Isolation => "isolation",
        }
    }
}

/// What a run uses, its pre-run cleanup included: the Secret (created,
/// given its owner, deleted), the Job, its pod (found, watched, read), the
/// pod's events, and exec into it (`create` and `get`: servers before 1.31
/// authorize a WebSocket exec as `get`, later ones as `create`).
pub const RUN: &[Permission] = &[
    CREATE_SECRETS,
    PATCH_SECRETS,
    DELETE_SECRETS,
    LIST_SECRETS,
    CREATE_JOBS,
    DELETE_JOBS,
    LIST_JOBS,
    GET_PODS,
    LIST_PODS,
    WATCH_PODS,
    LIST_EVENTS,
    EXEC[0],
    EXEC[1],
];

/// What a run with services uses besides [`RUN`]: reading their output.
pub const SERVICES: &[Permission] = &[GET_POD_LOGS];

/// What a run whose pod template mounts claims uses besides [`RUN`]:
/// reading each claim, to refuse the run before its Job is made when one
/// is missing (a real scheduler would leave the pod Pending).
pub const CLAIMS: &[Permission] = &[GET_CLAIMS];

/// What a run whose steps' user is kept apart uses besides [`RUN`]: a
/// dry-run create of its pod, so admission's refusal of the root side is
/// known before anything is made.
pub const ISOLATION: &[Permission] = &[CREATE_PODS];

/// Asks the server about every permission in `needed` and fails, naming
/// each one missing and the namespace, when any is.
///
/// # Errors
/// [`ExecutorError::InvalidInput`] naming each permission missing and the
/// namespace; `Backend` when the server could not be asked.
pub async fn check(cluster: &dyn Cluster, needed: &[Permission]) -> Result<(), ExecutorError> {
    let answers =
        futures_util::future::join_all(needed.iter().map(|p| cluster.access_review(p))).await;
    let mut missing = Vec::new();
    for (permission, answer) in needed.iter().zip(answers) {
        if !answer? {
            missing.push(permission.to_string());
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(ExecutorError::InvalidInput(format!(
        "the cluster's credentials lack {} permission(s) in namespace {}: {}; bind the user to a \
         Role that grants them (the minimal Role of docs/kubernetes-operators.md, scripts/runner-role.yaml)",
        missing.len(),
        cluster.namespace(),
        missing.join(", ")
    )))
}
