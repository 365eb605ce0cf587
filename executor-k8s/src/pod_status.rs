//! What a pod's status says: ready, still coming, or never going to run
//! (and what kind of failure that is); and, for a pod a step's exec ended
//! on, what happened to it.

use executor_core::{ExecutorError, FailureKind};
use k8s_openapi::api::core::v1::Pod;

/// Waiting reasons that will not heal by waiting longer, with the kind of
/// failure each is.
const FATAL_WAITING: &[(&str, FailureKind)] = &[
    ("ImagePullBackOff", FailureKind::Image),
    ("ErrImagePull", FailureKind::Image),
    ("InvalidImageName", FailureKind::Image),
    ("ErrImageNeverPull", FailureKind::Image),
    // The pod's own configuration is wrong (runAsNonRoot with a root
    // image, a missing Secret key): the run's input.
    ("CreateContainerConfigError", FailureKind::Input),
    ("CreateContainerError", FailureKind::Internal),
    ("RunContainerError", FailureKind::Internal),
];
/// Pod reasons of a pod the node gave up, rather than one that was deleted
/// or whose container failed: eviction, preemption, a node shut down or lost.
const EVICTED_REASONS: &[&str] = &[
    "Evicted",
    "Preempting",
    "Shutdown",
    "NodeShutdown",
    "Terminated",
    "NodeLost",
    "UnexpectedAdmissionError",
];

/// What happened to a pod that will not run (or run on), and what kind of
/// failure it is, from the pod's own status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fate {
    /// The kind the status shows: `oom`, `evicted`, `image`, ...
    pub kind: FailureKind,
    /// Whether a fresh attempt could fix it.
    pub retryable: bool,
    /// What the status says, in words.
    pub message: String,
    /// The container's exit code, when it terminated.
    pub exit_code: Option<i32>,
    /// The service container it is about, for a `service` fate.
    pub service: Option<String>,
}

impl Fate {
    fn new(kind: FailureKind, message: String) -> Self {
        Fate {
            kind,
            retryable: kind.retryable(),
            message,
            exit_code: None,
            service: None,
        }
    }

    /// The error this fate is, for the call `context`.
    pub fn into_error(self, context: impl Into<String>) -> ExecutorError {
        if let Some(service) = self.service {
            // The service, not the call that found it, is what failed.
            return ExecutorError::classified(
                FailureKind::Service,
                format!("service {service}"),
                self.message,
            );
        }
        match self.kind {
            FailureKind::Image => ExecutorError::image(context, self.message, self.retryable),
            kind => ExecutorError::classified(kind, context, self.message),
        }
    }
}

/// What a pod's status says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Running and Ready.
    Ready,
    /// Still coming; the summary says where it is.
    Pending(String),
    /// Not placed on a node yet (PodScheduled False): normal while a node
    /// is rented, `unschedulable` if it lasts past the pod timeout.
    Unscheduled(String),
    /// Will never run; the fate says why.
    Fatal(Fate),
}

/// The statuses of a pod's service containers: beside the step container,
/// or native sidecars among its init containers.
pub fn service_statuses(pod: &Pod) -> Vec<&k8s_openapi::api::core::v1::ContainerStatus> {
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    let all: Vec<_> = status
        .container_statuses
        .iter()
        .chain(&status.init_container_statuses)
        .flatten()
        .collect();
    // A pod of one container has only the step's, whatever its name.
    if all.len() < 2 {
        return Vec::new();
    }
    all.into_iter()
        .filter(|c| c.name != crate::job::CONTAINER)
        .collect()
}

/// What a service container's status says when it will not be ready:
/// it ended, or it waits for a reason that will not heal.
pub fn service_fate(pod: &Pod) -> Option<Fate> {
    service_statuses(pod).into_iter().find_map(|c| {
        let state = c.state.as_ref()?;
        let message = if let Some(t) = &state.terminated {
            format!(
                "exited {} ({})",
                t.exit_code,
                t.reason.clone().unwrap_or_default()
            )
        } else {
            let w = state.waiting.as_ref()?;
            let reason = w.reason.clone().unwrap_or_default();
            if !FATAL_WAITING.iter().any(|(r, _)| *r == reason) {
                return None;
            }
            format!("{reason}: {}", w.message.clone().unwrap_or_default())
                .trim_end_matches(": ")
                .to_string()
        };
        let mut fate = Fate::new(FailureKind::Service, message);
        fate.service = Some(c.name.clone());
        Some(fate)
    })
}

/// Reads a pod's status.
pub fn pod_state(pod: &Pod) -> PodState {
    let Some(status) = &pod.status else {
        return PodState::Pending("no status yet".into());
    };
    let phase = status.phase.as_deref().unwrap_or("Pending");
    let conditions = status.conditions.as_deref().unwrap_or_default();
    // A service that will never be ready fails the run as the service's.
    if phase == "Running" || phase == "Pending" {
        if let Some(fate) = service_fate(pod) {
            return PodState::Fatal(fate);
        }
    }
    let waiting = status
        .container_statuses
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|c| {
            c.name == crate::job::CONTAINER
                || status
                    .container_statuses
                    .as_ref()
                    .is_some_and(|s| s.len() == 1)
        })
        .find_map(|c| c.state.as_ref()?.waiting.clone());
    let terminated = terminated_state(pod);
    let cannot_start = terminated
        .as_ref()
        .and_then(|t| no_shell(t.reason.as_deref()?, t.message.as_deref()?))
        .or_else(|| {
            let w = waiting.as_ref()?;
            no_shell(w.reason.as_deref()?, w.message.as_deref()?)
        });
    if let Some(fate) = cannot_start {
        return PodState::Fatal(fate);
    }
    match phase {
        "Failed" | "Succeeded" => {
            let reason = status
                .reason
                .clone()
                .or_else(|| terminated.as_ref().and_then(|t| t.reason.clone()))
                .unwrap_or_else(|| phase.to_string());
            let message = status.message.clone().unwrap_or_default();
            let mut fate = Fate::new(
                end_kind(pod),
                format!("the pod ended ({phase}): {reason} {message}")
                    .trim()
                    .to_string(),
            );
            fate.exit_code = terminated.map(|t| t.exit_code);
            return PodState::Fatal(fate);
        }
        "Running"
            if conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True") =>
        {
            return PodState::Ready
        }
        _ => {}
    }
    if let Some(w) = &waiting {
        let reason = w.reason.clone().unwrap_or_default();
        let message = w.message.clone().unwrap_or_default();
        if let Some((_, kind)) = FATAL_WAITING.iter().find(|(r, _)| *r == reason) {
            let mut fate = Fate::new(
                *kind,
                format!("{reason}: {message}")
                    .trim_end_matches(": ")
                    .to_string(),
            );
            // A pull that failed on the network may pass next time; a
            // missing or misnamed image will not.
            fate.retryable = *kind == FailureKind::Image
                && reason != "InvalidImageName"
                && executor_core::failure::transient_pull_error(&message);
            return PodState::Fatal(fate);
        }
        return PodState::Pending(format!("{phase}, {reason}"));
    }
    if let Some(c) = conditions
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    {
        return PodState::Unscheduled(format!(
            "{phase}, not scheduled: {} {}",
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default()
        ));
    }
    PodState::Pending(phase.to_string())
}

/// A step container whose process could not start because the image has
/// no `sh` (its keep-alive and every step run as `sh`), in the words of
/// containerd (`StartError`) and of older runtimes (`RunContainerError`,
/// `ContainerCannotRun`): the image's failure, which no attempt can fix.
fn no_shell(reason: &str, message: &str) -> Option<Fate> {
    let start = matches!(
        reason,
        "StartError" | "RunContainerError" | "CreateContainerError" | "ContainerCannotRun"
    );
    let missing = message.contains("executable file not found")
        || (message.contains("exec:") && message.contains("no such file or directory"));
    if !(start && missing) {
        return None;
    }
    let mut fate = Fate::new(
        FailureKind::Image,
        format!(
            "the image (RunSpec::image) has no sh: its container could not start `sh` ({reason}: {message}), and every step runs as `sh -ec`; use an image with a POSIX shell at /bin/sh"
        ),
    );
    fate.retryable = false;
    Some(fate)
}

/// The step container's terminated state: a service's end is not the
/// environment's.
fn terminated_state(pod: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    let statuses = pod.status.as_ref()?.container_statuses.as_deref()?;
    let only = statuses.len() == 1;
    statuses
        .iter()
        .filter(|c| only || c.name == crate::job::CONTAINER)
        .find_map(|c| c.state.as_ref()?.terminated.clone())
}

/// The kind of an ended pod: `evicted` when the node gave it up (its
/// reason, or the DisruptionTarget condition Kubernetes adds for
/// eviction, preemption and node loss), `oom` when its container was
/// OOM-killed, else `environmentLost`.
fn end_kind(pod: &Pod) -> FailureKind {
    let status = pod.status.as_ref();
    let disrupted = status
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "DisruptionTarget" && c.status == "True");
    let reason = status.and_then(|s| s.reason.as_deref()).unwrap_or_default();
    if disrupted || EVICTED_REASONS.contains(&reason) {
        FailureKind::Evicted
    } else if terminated_state(pod).and_then(|t| t.reason).as_deref() == Some("OOMKilled") {
        FailureKind::Oom
    } else {
        FailureKind::EnvironmentLost
    }
}

/// What a pod's object says happened to it, if it says anything yet: why a
/// step's exec ended without a status. `None` for a pod that still looks
/// healthy.
pub fn pod_fate(name: &str, pod: Option<&Pod>) -> Option<Fate> {
    let Some(pod) = pod else {
        return Some(Fate::new(
            FailureKind::EnvironmentLost,
            format!("pod {name} was deleted"),
        ));
    };
    let kind = end_kind(pod);
    if pod.metadata.deletion_timestamp.is_some() {
        // A pod preempted or evicted through the API is deleted with a
        // DisruptionTarget condition: `evicted`, else someone deleted it.
        let kind = match kind {
            FailureKind::Evicted => FailureKind::Evicted,
            _ => FailureKind::EnvironmentLost,
        };
        return Some(Fate::new(kind, format!("pod {name} was deleted")));
    }
    let status = pod.status.as_ref()?;
    let terminated = terminated_state(pod);
    let exit_code = terminated.as_ref().map(|t| t.exit_code);
    if let Some(reason) = status
        .reason
        .as_ref()
        .filter(|_| status.phase.as_deref() == Some("Failed"))
    {
        let mut fate = Fate::new(
            kind,
            format!(
                "pod {name} was {}: {}",
                reason.to_lowercase(),
                status.message.clone().unwrap_or_default()
            ),
        );
        fate.exit_code = exit_code;
        return Some(fate);
    }
    let terminated = terminated?;
    let mut fate = Fate::new(
        kind,
        format!(
            "pod {name}'s container ended: {} (exit {})",
            terminated.reason.unwrap_or_default(),
            terminated.exit_code
        ),
    );
    fate.exit_code = exit_code;
    Some(fate)
}

#[cfg(test)]
mod tests;
