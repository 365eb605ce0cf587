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
}

impl Kind {
    /// The object's `kind`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Job => "Job",
            Kind::Pod => "Pod",
            Kind::Secret => "Secret",
            Kind::Event => "Event",
        }
    }
    /// The object's `apiVersion`.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Job => "batch/v1",
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
        }
    }
    /// The API group (`""` for core).
    pub fn group(self) -> &'static str {
        match self {
            Kind::Job => "batch",
            _ => "",
        }
    }
}
