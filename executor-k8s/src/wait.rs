//! Waiting on the run's pod: Ready (with progress while a node is rented,
//! failing fast on what will not heal) and gone.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use executor_core::{ExecutorError, FailureKind, RunLog};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::WatchEvent;
use tokio_util::sync::CancellationToken;

use crate::cluster::Cluster;

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
}

impl Fate {
    fn new(kind: FailureKind, message: String) -> Self {
        Fate {
            kind,
            retryable: kind.retryable(),
            message,
            exit_code: None,
        }
    }

    /// The error this fate is, for the call `context`.
    pub fn into_error(self, context: impl Into<String>) -> ExecutorError {
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

/// Reads a pod's status.
pub fn pod_state(pod: &Pod) -> PodState {
    let Some(status) = &pod.status else {
        return PodState::Pending("no status yet".into());
    };
    let phase = status.phase.as_deref().unwrap_or("Pending");
    let conditions = status.conditions.as_deref().unwrap_or_default();
    let waiting = status
        .container_statuses
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find_map(|c| c.state.as_ref()?.waiting.clone());
    let terminated = terminated_state(pod);
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

fn terminated_state(pod: &Pod) -> Option<k8s_openapi::api::core::v1::ContainerStateTerminated> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_deref()
        .unwrap_or_default()
        .iter()
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

/// Waits until the pod of `selector` is Ready and returns its name.
///
/// A long Pending is normal while the cluster rents a node: its phase,
/// reasons and events go to the log as they change, with the time waited.
/// Reasons that will not heal end the wait at once; an Unschedulable pod
/// fails only at `timeout`.
pub async fn ready(
    cluster: &dyn Cluster,
    selector: &str,
    timeout: Duration,
    progress_every: Duration,
    log: &RunLog,
    interrupt: &CancellationToken,
) -> Result<String, ExecutorError> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_summary = String::new();
    let mut seen_events = HashSet::new();
    let mut pod_name: Option<String> = None;
    let unscheduled = std::sync::atomic::AtomicBool::new(false);
    // An interval of zero would spin (and tokio refuses it).
    let progress_every = progress_every.max(Duration::from_millis(100));
    let mut progress =
        tokio::time::interval_at(tokio::time::Instant::now() + progress_every, progress_every);
    loop {
        let (pods, rv) = cluster.list_pods(selector).await?;
        let unscheduled = &unscheduled;
        let check = |pod: &Pod,
                     pod_name: &mut Option<String>,
                     last: &mut String|
         -> Option<Result<String, ExecutorError>> {
            let name = pod.metadata.name.clone().unwrap_or_default();
            *pod_name = Some(name.clone());
            let state = pod_state(pod);
            match state.clone() {
                PodState::Ready => Some(Ok(name)),
                PodState::Fatal(fate) => Some(Err(fate.into_error(format!("starting pod {name}")))),
                PodState::Pending(summary) | PodState::Unscheduled(summary) => {
                    unscheduled.store(
                        matches!(state, PodState::Unscheduled(_)),
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    if summary != *last {
                        log.line(&format!(
                            "pod {name}: {summary} (waited {}s)",
                            started.elapsed().as_secs()
                        ));
                        *last = summary;
                    }
                    None
                }
            }
        };
        if let Some(pod) = pods.first() {
            if let Some(done) = check(pod, &mut pod_name, &mut last_summary) {
                return done;
            }
        }
        let mut events = cluster.watch_pods(selector, &rv).await?;
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(WatchEvent::Added(pod))) | Some(Ok(WatchEvent::Modified(pod))) => {
                        if let Some(done) = check(&pod, &mut pod_name, &mut last_summary) {
                            return done;
                        }
                        report_events(cluster, pod_name.as_deref(), &mut seen_events, log).await;
                    }
                    Some(Ok(WatchEvent::Deleted(pod))) => {
                        return Err(ExecutorError::EnvironmentLost(format!(
                            "pod {} was deleted while starting",
                            pod.metadata.name.unwrap_or_default()
                        )));
                    }
                    Some(Ok(_)) => {}
                    // The watch ended or broke: list again and watch on.
                    Some(Err(_)) | None => break,
                },
                _ = progress.tick() => {
                    report_events(cluster, pod_name.as_deref(), &mut seen_events, log).await;
                    log.line(&format!(
                        "still waiting for the pod to be ready after {}s: {}",
                        started.elapsed().as_secs(),
                        if last_summary.is_empty() { "no pod yet" } else { &last_summary }
                    ));
                }
                _ = tokio::time::sleep_until(deadline) => {
                    // Still not placed: no node fits, and none came.
                    let kind = if unscheduled.load(std::sync::atomic::Ordering::Relaxed) {
                        FailureKind::Unschedulable
                    } else {
                        FailureKind::Internal
                    };
                    return Err(ExecutorError::classified(
                        kind,
                        "starting the pod",
                        format!(
                            "not ready within the pod timeout of {}s: {}",
                            timeout.as_secs(),
                            if last_summary.is_empty() { "no pod was created" } else { &last_summary }
                        ),
                    ));
                }
                _ = interrupt.cancelled() => return Err(ExecutorError::Interrupted),
            }
        }
    }
}

async fn report_events(
    cluster: &dyn Cluster,
    pod: Option<&str>,
    seen: &mut HashSet<String>,
    log: &RunLog,
) {
    let Some(pod) = pod else { return };
    let Ok(events) = cluster.pod_events(pod).await else {
        return;
    };
    for e in events {
        let key = e.metadata.name.clone().unwrap_or_default();
        if seen.insert(key) {
            log.line(&format!(
                "event {} {}: {}",
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            ));
        }
    }
}

/// Waits until no pod matches `selector`, within `timeout`.
pub async fn gone(
    cluster: &dyn Cluster,
    selector: &str,
    timeout: Duration,
) -> Result<(), ExecutorError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let (pods, rv) = cluster.list_pods(selector).await?;
        if pods.is_empty() {
            return Ok(());
        }
        let mut events = cluster.watch_pods(selector, &rv).await?;
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(WatchEvent::Deleted(_))) | Some(Err(_)) | None => break,
                    Some(Ok(_)) => {}
                },
                _ = tokio::time::sleep_until(deadline) => {
                    let names: Vec<String> = pods.iter().filter_map(|p| p.metadata.name.clone()).collect();
                    return Err(ExecutorError::backend(
                        "deleting the run's pod",
                        format!("{} still present {}s after the Job was deleted", names.join(", "), timeout.as_secs()),
                    ));
                }
            }
        }
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

/// Waits, within `timeout`, for the pod `name` (matched by `selector`) to
/// say what happened to it.
///
/// The kubelet reports a killed container some time after the kill, so an
/// exec can end before the pod's status explains why. `None` when the
/// status still says nothing at the deadline.
pub async fn fate(
    cluster: &dyn Cluster,
    selector: &str,
    name: &str,
    timeout: Duration,
) -> Option<Fate> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let (pods, rv) = cluster.list_pods(selector).await.ok()?;
        let pod = pods
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name));
        if let Some(fate) = pod_fate(name, pod) {
            return Some(fate);
        }
        let mut events = cluster.watch_pods(selector, &rv).await.ok()?;
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(WatchEvent::Added(pod))) | Some(Ok(WatchEvent::Modified(pod)))
                        if pod.metadata.name.as_deref() == Some(name) =>
                    {
                        if let Some(fate) = pod_fate(name, Some(&pod)) {
                            return Some(fate);
                        }
                    }
                    Some(Ok(WatchEvent::Deleted(pod))) if pod.metadata.name.as_deref() == Some(name) => {
                        return pod_fate(name, None);
                    }
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => break,
                },
                _ = tokio::time::sleep_until(deadline) => return None,
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn failed_pod(reason: &str, conditions: serde_json::Value, terminated: &str) -> Pod {
        pod(json!({
            "metadata": {"name": "p"},
            "status": {
                "phase": "Failed", "reason": reason, "message": "words",
                "conditions": conditions,
                "containerStatuses": [{
                    "name": "step", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 137, "reason": terminated}}
                }]
            }
        }))
    }

    #[test]
    fn an_ended_pod_is_evicted_oom_or_lost_as_its_status_says() {
        let evicted = failed_pod("Evicted", json!([]), "Error");
        assert_eq!(
            pod_fate("p", Some(&evicted)).unwrap().kind,
            FailureKind::Evicted
        );
        let disrupted = failed_pod(
            "",
            json!([{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]),
            "Error",
        );
        assert_eq!(
            pod_fate("p", Some(&disrupted)).unwrap().kind,
            FailureKind::Evicted
        );
        let oom = pod(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "step", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            }]}
        }));
        let fate = pod_fate("p", Some(&oom)).unwrap();
        assert_eq!((fate.kind, fate.exit_code), (FailureKind::Oom, Some(137)));
        assert_eq!(
            pod_fate("p", None).unwrap().kind,
            FailureKind::EnvironmentLost
        );
        // Deleted by someone, or deleted for a preemption.
        let mut deleted = pod(json!({"metadata": {"name": "p"}, "status": {"phase": "Running"}}));
        deleted.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        assert_eq!(
            pod_fate("p", Some(&deleted)).unwrap().kind,
            FailureKind::EnvironmentLost
        );
        let mut preempted = disrupted.clone();
        preempted.metadata.deletion_timestamp = deleted.metadata.deletion_timestamp.clone();
        assert_eq!(
            pod_fate("p", Some(&preempted)).unwrap().kind,
            FailureKind::Evicted
        );
    }

    #[test]
    fn a_pull_is_retryable_only_when_the_registry_did_not_answer() {
        let waiting = |reason: &str, message: &str| {
            pod(json!({
                "metadata": {"name": "p"},
                "status": {"phase": "Pending", "containerStatuses": [{
                    "name": "step", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                    "state": {"waiting": {"reason": reason, "message": message}}
                }]}
            }))
        };
        let fate = |p: &Pod| match pod_state(p) {
            PodState::Fatal(fate) => (fate.kind, fate.retryable),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            fate(&waiting(
                "ErrImagePull",
                "failed to pull: dial tcp 10.0.0.1:443: i/o timeout"
            )),
            (FailureKind::Image, true)
        );
        assert_eq!(
            fate(&waiting(
                "ErrImagePull",
                "failed to pull and unpack image: not found"
            )),
            (FailureKind::Image, false)
        );
        assert_eq!(
            fate(&waiting(
                "InvalidImageName",
                "couldn't parse image name: timeout"
            )),
            (FailureKind::Image, false)
        );
        assert_eq!(
            fate(&waiting(
                "CreateContainerConfigError",
                "container has runAsNonRoot and image will run as root"
            )),
            (FailureKind::Input, false)
        );
        let unscheduled = pod(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}
            ]}
        }));
        assert!(matches!(pod_state(&unscheduled), PodState::Unscheduled(_)));
    }
}
