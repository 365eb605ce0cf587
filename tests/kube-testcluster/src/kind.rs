//! The resource kinds the cluster serves.

/// The resource kinds the cluster serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `batch/v1` Job.
    Job,
    /// `v1` Pod.
    Pod,
    /// `v1` Secret.
    Secret,
    /// `v1` Event.
    Event,
    /// `v1` PersistentVolumeClaim: a Docker volume of the engine's,
    /// kept while the claim is.
    PersistentVolumeClaim,
    /// `node.k8s.io/v1` RuntimeClass (cluster-scoped): its `handler` is
    /// the engine's runtime name.
    RuntimeClass,
    /// `scheduling.k8s.io/v1` PriorityClass (cluster-scoped).
    PriorityClass,
}

impl Kind {
    /// The object's `kind`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Job => "Job",
            Kind::Pod => "Pod",
            Kind::Secret => "Secret",
            Kind::Event => "Event",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::RuntimeClass => "RuntimeClass",
            Kind::PriorityClass => "PriorityClass",
        }
    }
    /// The object's `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Job => "batch/v1",
            Kind::RuntimeClass => "node.k8s.io/v1",
            Kind::PriorityClass => "scheduling.k8s.io/v1",
            _ => "v1",
        }
    }
    /// The plural resource name in URLs.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Job => "jobs",
            Kind::Pod => "pods",
            Kind::Secret => "secrets",
            Kind::Event => "events",
            Kind::PersistentVolumeClaim => "persistentvolumeclaims",
            Kind::RuntimeClass => "runtimeclasses",
            Kind::PriorityClass => "priorityclasses",
        }
    }
    /// The API group (`""` for core).
    pub fn group(self) -> &'static str {
        match self {
            Kind::Job => "batch",
            Kind::RuntimeClass => "node.k8s.io",
            Kind::PriorityClass => "scheduling.k8s.io",
            _ => "",
        }
    }
    /// Whether its objects live in a namespace; cluster-scoped ones are
    /// kept under the namespace `""`.
    pub fn namespaced(self) -> bool {
        !matches!(self, Kind::RuntimeClass | Kind::PriorityClass)
    }
}
