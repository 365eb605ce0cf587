//! What bounds a run's steps on Docker besides its container's settings:
//! an untrusted run's network of its own (so its container reaches no
//! other run's) and fewer capabilities, and the user steps run as, kept
//! in the container's labels so whoever resumes or stops the run keeps
//! to them.

use std::collections::HashMap;

use executor_core::{ExecutorError, RunSpec, Trust};

use super::DockerExecutor;

/// The container's label naming the run's own network, so whoever stops
/// the container (a later runner, resume, the journal) removes it too.
pub(crate) const NETWORK_LABEL: &str = "knotless.network";

/// The container's label naming the user its steps run as
/// (`DockerOptions::user`): a step's user is each exec's, not the
/// container's, so a resumed run reads it back here.
pub(crate) const USER_LABEL: &str = "knotless.user";

/// What bounds a run's steps besides its container's own settings (its
/// limits, capabilities, root filesystem and network mode hold for
/// every exec by themselves), as its labels record it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct RunBounds {
    /// The run's own network, if it has one.
    pub(super) network: Option<String>,
    /// The user its steps run as; `None`: the image's.
    pub(super) user: Option<String>,
    /// The run container's name its services are labelled with, when it
    /// has services.
    pub(super) services_of: Option<String>,
    /// What resolving the steps' user in the container found (the user
    /// the agent starts each step as, the architecture); never read from a
    /// label.
    pub(super) resolved: super::step_user::StepUser,
}

impl RunBounds {
    pub(super) fn of(labels: &HashMap<String, String>) -> Self {
        RunBounds {
            network: labels.get(NETWORK_LABEL).cloned(),
            user: labels.get(USER_LABEL).cloned(),
            services_of: labels.get(super::services::SERVICES_LABEL).cloned(),
            resolved: Default::default(),
        }
    }
}

/// Capabilities Docker grants by default that an untrusted run's
/// container loses: raw sockets (spoofing and sniffing on a bridge),
/// device nodes, the audit log, file capabilities, `chroot` and changing
/// its own capability sets. What a build does as root (own and write any
/// file, change user, kill its processes, bind low ports) stays.
pub const UNTRUSTED_CAP_DROP: [&str; 6] = [
    "NET_RAW",
    "MKNOD",
    "AUDIT_WRITE",
    "SETFCAP",
    "SYS_CHROOT",
    "SETPCAP",
];

impl DockerExecutor {
    /// The network a run's container joins, and whether it is the run's
    /// own: an untrusted run without a chosen network gets one named as
    /// its container, and so does a run with services; every other run the chosen network or the
    /// engine's default.
    pub(super) fn network_for(&self, run: &RunSpec, container: &str) -> (Option<String>, bool) {
        match (&self.options.network, run.trust) {
            // No network, but services: a network of the run's own with
            // no route out, so the steps reach their services and nothing
            // else.
            (Some(none), _) if none == "none" && !run.services.is_empty() => {
                (Some(container.to_string()), true)
            }
            (Some(chosen), _) => (Some(chosen.clone()), false),
            (None, Trust::Untrusted) => (Some(container.to_string()), true),
            // Services are reached by name, which only a network of the
            // engine's own making (not the default bridge) resolves.
            (None, Trust::Trusted) if !run.services.is_empty() => {
                (Some(container.to_string()), true)
            }
            (None, Trust::Trusted) => (None, false),
        }
    }

    /// The capabilities a run's container loses.
    pub(super) fn cap_drop_for(&self, run: &RunSpec) -> Vec<String> {
        let mut drop = self.options.cap_drop.clone();
        if run.trust == Trust::Untrusted {
            drop.extend(UNTRUSTED_CAP_DROP.iter().map(|c| c.to_string()));
        }
        drop.sort();
        drop.dedup();
        drop
    }

    /// Removes the run's own network once its container is gone; a
    /// network still in use (it never is by then) is left to cleanup.
    pub(super) async fn remove_network(&self, network: &str) -> Result<(), ExecutorError> {
        if !self.engine.remove_network(network).await? {
            tracing::warn!(%network, "the run's network is still in use; cleanup removes it later");
        }
        Ok(())
    }

    /// The network a container's labels name as the run's own.
    pub(super) fn own_network(labels: &HashMap<String, String>) -> Option<String> {
        labels.get(NETWORK_LABEL).cloned()
    }
}
