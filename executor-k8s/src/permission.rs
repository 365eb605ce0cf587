//! One permission the runner needs of the cluster, as RBAC names it.

/// One permission: a verb on a resource (and subresource) of an API group,
/// in the executor's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Permission {
    /// `create`, `list`, ...
    pub verb: &'static str,
    /// `""` for the core group, `batch`.
    pub group: &'static str,
    /// `jobs`, `pods`, ...
    pub resource: &'static str,
    /// `exec`, or `""`.
    pub subresource: &'static str,
}

impl std::fmt::Display for Permission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.verb, self.resource)?;
        if !self.subresource.is_empty() {
            write!(f, "/{}", self.subresource)?;
        }
        if !self.group.is_empty() {
            write!(f, " ({})", self.group)?;
        }
        Ok(())
    }
}
