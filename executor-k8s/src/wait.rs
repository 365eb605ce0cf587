//! Waiting on the run's pod: one list-then-watch wait, [`await_pods`], and
//! the conditions the executor waits for with it: Ready (with progress
//! while a node is rented, failing fast on what will not heal), gone, and
//! a pod's fate.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use executor_core::{ExecutorError, FailureKind, RunLog};
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::WatchEvent;
use tokio::sync::Notify;
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

/// The pods a selector matches, as the list and the watch after it have
/// shown them so far.
#[derive(Debug, Default)]
pub struct PodsNow {
    pods: BTreeMap<String, Pod>,
}

impl PodsNow {
    /// The pod called `name`, if it is there.
    pub fn get(&self, name: &str) -> Option<&Pod> {
        self.pods.get(name)
    }

    /// One of the pods (a run's Job has one), if any is there.
    pub fn first(&self) -> Option<&Pod> {
        self.pods.values().next()
    }

    /// Whether no pod matches.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// The names of the pods that match.
    pub fn names(&self) -> Vec<String> {
        self.pods.keys().cloned().collect()
    }

    fn put(&mut self, pod: Pod) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        self.pods.insert(name, pod);
    }

    fn remove(&mut self, pod: &Pod) {
        if let Some(name) = &pod.metadata.name {
            self.pods.remove(name);
        }
    }
}

/// Lists the pods of `selector`, then watches them, calling `condition`
/// with the pods as they are after the list and after every change, until
/// it returns `Some`.
///
/// A watch that ends or breaks (the server's own expiry, an ERROR such as
/// 410 Gone for a compacted version) is followed by a fresh list and a new
/// watch, so no change is missed. An error listing or starting a watch
/// ends the wait with that error. There is no deadline: the caller bounds
/// the wait (`tokio::time::timeout`) and decides what running out of time
/// means, as with `kube_runtime::wait::await_condition`.
pub async fn await_pods<T>(
    cluster: &dyn Cluster,
    selector: &str,
    mut condition: impl FnMut(&PodsNow) -> Option<T>,
) -> Result<T, ExecutorError> {
    loop {
        let (pods, rv) = cluster.list_pods(selector).await?;
        let mut now = PodsNow::default();
        for pod in pods {
            now.put(pod);
        }
        if let Some(done) = condition(&now) {
            return Ok(done);
        }
        let mut events = cluster.watch_pods(selector, &rv).await?;
        while let Some(Ok(event)) = events.next().await {
            match event {
                WatchEvent::Added(pod) | WatchEvent::Modified(pod) => now.put(pod),
                WatchEvent::Deleted(pod) => now.remove(&pod),
                WatchEvent::Bookmark(_) => continue,
                // 410 Gone and the like: what came after is unknown.
                WatchEvent::Error(_) => break,
            }
            if let Some(done) = condition(&now) {
                return Ok(done);
            }
        }
    }
}

/// Where a pod that is not ready yet stands, for the progress lines.
#[derive(Default)]
struct Progress {
    pod: Option<String>,
    summary: String,
    unscheduled: bool,
}

/// Waits until the pod of `selector` is Ready and returns its name.
///
/// A long Pending is normal while the cluster rents a node: its phase,
/// reasons and events go to the log as they change, with the time waited,
/// and a line every `progress_every` says it is still waiting. Reasons
/// that will not heal end the wait at once; an Unschedulable pod fails
/// only at `timeout`, as `unschedulable`.
pub async fn ready(
    cluster: &dyn Cluster,
    selector: &str,
    timeout: Duration,
    progress_every: Duration,
    log: &RunLog,
    interrupt: &CancellationToken,
) -> Result<String, ExecutorError> {
    let started = Instant::now();
    // Shared by the condition and the reporter, never held across an await.
    let progress = Mutex::new(Progress::default());
    let changed = Notify::new();
    let is_ready = |now: &PodsNow| {
        changed.notify_one();
        let mut progress = lock(&progress);
        let Some(pod) = now.first() else {
            return progress.pod.as_ref().map(|name| {
                Err(ExecutorError::EnvironmentLost(format!(
                    "pod {name} was deleted while starting"
                )))
            });
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        progress.pod = Some(name.clone());
        let (summary, unscheduled) = match pod_state(pod) {
            PodState::Ready => return Some(Ok(name)),
            PodState::Fatal(fate) => {
                return Some(Err(fate.into_error(format!("starting pod {name}"))))
            }
            PodState::Pending(summary) => (summary, false),
            PodState::Unscheduled(summary) => (summary, true),
        };
        progress.unscheduled = unscheduled;
        if summary != progress.summary {
            log.line(&format!(
                "pod {name}: {summary} (waited {}s)",
                started.elapsed().as_secs()
            ));
            progress.summary = summary;
        }
        None
    };
    // An interval of zero would spin (and tokio refuses it).
    let every = progress_every.max(Duration::from_millis(100));
    let report = async {
        let mut seen_events = HashSet::new();
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            let still_waiting = tokio::select! {
                _ = tick.tick() => true,
                () = changed.notified() => false,
            };
            let pod = lock(&progress).pod.clone();
            report_events(cluster, pod.as_deref(), &mut seen_events, log).await;
            if still_waiting {
                let summary = lock(&progress).summary.clone();
                log.line(&format!(
                    "still waiting for the pod to be ready after {}s: {}",
                    started.elapsed().as_secs(),
                    if summary.is_empty() {
                        "no pod yet"
                    } else {
                        &summary
                    }
                ));
            }
        }
    };
    tokio::select! {
        done = await_pods(cluster, selector, is_ready) => done?,
        _ = report => unreachable_report(),
        () = tokio::time::sleep(timeout) => {
            let progress = lock(&progress);
            // Still not placed: no node fits, and none came.
            let kind = if progress.unscheduled {
                FailureKind::Unschedulable
            } else {
                FailureKind::Internal
            };
            Err(ExecutorError::classified(
                kind,
                "starting the pod",
                format!(
                    "not ready within the pod timeout of {}s: {}",
                    timeout.as_secs(),
                    if progress.summary.is_empty() { "no pod was created" } else { &progress.summary }
                ),
            ))
        }
        () = interrupt.cancelled() => Err(ExecutorError::Interrupted),
    }
}

fn lock(progress: &Mutex<Progress>) -> MutexGuard<'_, Progress> {
    progress.lock().unwrap_or_else(|p| p.into_inner())
}

/// The progress reporter loops for as long as the wait it reports on.
fn unreachable_report() -> Result<String, ExecutorError> {
    Err(ExecutorError::backend(
        "starting the pod",
        "the progress reporter stopped",
    ))
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
    let mut left = Vec::new();
    let none_left = |now: &PodsNow| {
        left = now.names();
        now.is_empty().then_some(())
    };
    match tokio::time::timeout(timeout, await_pods(cluster, selector, none_left)).await {
        Ok(done) => done,
        Err(_) => Err(ExecutorError::backend(
            "deleting the run's pod",
            format!(
                "{} still present {}s after the Job was deleted",
                left.join(", "),
                timeout.as_secs()
            ),
        )),
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
/// status still says nothing at the deadline, or the cluster cannot be
/// asked.
pub async fn fate(
    cluster: &dyn Cluster,
    selector: &str,
    name: &str,
    timeout: Duration,
) -> Option<Fate> {
    let said = await_pods(cluster, selector, |now| pod_fate(name, now.get(name)));
    tokio::time::timeout(timeout, said).await.ok()?.ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{MockCluster, PodEvents};
    use mockall::Sequence;
    use serde_json::json;

    fn phase(name: &str, phase: &str, ready: bool) -> Pod {
        pod(json!({
            "metadata": {"name": name},
            "status": {"phase": phase, "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}
            ]}
        }))
    }

    fn watch(events: Vec<serde_json::Value>) -> PodEvents {
        let events: Vec<_> = events
            .into_iter()
            .map(|e| Ok(serde_json::from_value::<WatchEvent<Pod>>(e).unwrap()))
            .collect();
        futures_util::stream::iter(events).boxed()
    }

    fn gone_410() -> serde_json::Value {
        json!({"type": "ERROR", "object": {"apiVersion": "v1", "kind": "Status",
            "status": "Failure", "reason": "Expired", "message": "too old", "code": 410}})
    }

    fn lists(cluster: &mut MockCluster, seq: &mut Sequence, pods: Vec<Pod>, rv: &'static str) {
        cluster
            .expect_list_pods()
            .times(1)
            .in_sequence(seq)
            .return_once(move |_| Ok((pods, rv.to_string())));
    }

    fn watches(
        cluster: &mut MockCluster,
        seq: &mut Sequence,
        from: &'static str,
        events: Vec<serde_json::Value>,
    ) {
        cluster
            .expect_watch_pods()
            .withf(move |_, rv| rv == from)
            .times(1)
            .in_sequence(seq)
            .return_once(move |_, _| Ok(watch(events)));
    }

    #[tokio::test(start_paused = true)]
    async fn ready_lists_again_after_a_410_and_after_a_watch_ends() {
        let mut cluster = MockCluster::new();
        let mut seq = Sequence::new();
        lists(
            &mut cluster,
            &mut seq,
            vec![phase("p", "Pending", false)],
            "1",
        );
        watches(&mut cluster, &mut seq, "1", vec![gone_410()]);
        lists(
            &mut cluster,
            &mut seq,
            vec![phase("p", "Pending", false)],
            "7",
        );
        // The server's own expiry: the watch just ends.
        watches(&mut cluster, &mut seq, "7", vec![]);
        lists(
            &mut cluster,
            &mut seq,
            vec![phase("p", "Running", false)],
            "9",
        );
        watches(
            &mut cluster,
            &mut seq,
            "9",
            vec![json!({"type": "MODIFIED", "object": phase("p", "Running", true)})],
        );
        cluster.expect_pod_events().returning(|_| Ok(Vec::new()));
        let (log, text) = RunLog::memory();
        let pod = ready(
            &cluster,
            "job-name=j",
            Duration::from_secs(60),
            Duration::from_secs(10),
            &log,
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(pod.unwrap(), "p");
        assert!(
            text.text().contains("pod p: Running (waited"),
            "{}",
            text.text()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn ready_ends_at_the_callers_deadline_as_unschedulable_with_progress() {
        let mut cluster = MockCluster::new();
        let unscheduled = pod(json!({
            "metadata": {"name": "p"},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"}
            ]}
        }));
        cluster
            .expect_list_pods()
            .times(1)
            .return_once(move |_| Ok((vec![unscheduled], "1".into())));
        cluster
            .expect_watch_pods()
            .times(1)
            .return_once(|_, _| Ok(futures_util::stream::pending().boxed()));
        cluster.expect_pod_events().returning(|_| Ok(Vec::new()));
        let (log, text) = RunLog::memory();
        let err = ready(
            &cluster,
            "job-name=j",
            Duration::from_secs(35),
            Duration::from_secs(10),
            &log,
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), FailureKind::Unschedulable, "{err}");
        let text = text.text();
        assert_eq!(
            text.matches("still waiting for the pod").count(),
            3,
            "{text}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_pod_deleted_while_starting_is_a_lost_environment() {
        let mut cluster = MockCluster::new();
        let mut seq = Sequence::new();
        lists(
            &mut cluster,
            &mut seq,
            vec![phase("p", "Pending", false)],
            "1",
        );
        watches(
            &mut cluster,
            &mut seq,
            "1",
            vec![json!({"type": "DELETED", "object": phase("p", "Pending", false)})],
        );
        cluster.expect_pod_events().returning(|_| Ok(Vec::new()));
        let err = ready(
            &cluster,
            "job-name=j",
            Duration::from_secs(60),
            Duration::from_secs(10),
            &RunLog::discard(),
            &CancellationToken::new(),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, ExecutorError::EnvironmentLost(_)), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn gone_and_fate_share_the_wait() {
        let mut cluster = MockCluster::new();
        let mut seq = Sequence::new();
        lists(
            &mut cluster,
            &mut seq,
            vec![phase("p", "Running", true)],
            "1",
        );
        watches(
            &mut cluster,
            &mut seq,
            "1",
            vec![json!({"type": "DELETED", "object": phase("p", "Running", true)})],
        );
        gone(&cluster, "job-name=j", Duration::from_secs(5))
            .await
            .unwrap();

        let mut cluster = MockCluster::new();
        let mut seq = Sequence::new();
        lists(
            &mut cluster,
            &mut seq,
            vec![phase("p", "Running", true)],
            "1",
        );
        let oom = json!({"type": "MODIFIED", "object": {
            "metadata": {"name": "p"},
            "status": {"phase": "Running", "containerStatuses": [{
                "name": "step", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            }]}
        }});
        watches(&mut cluster, &mut seq, "1", vec![oom]);
        let fate = fate(&cluster, "job-name=j", "p", Duration::from_secs(5)).await;
        assert_eq!(fate.map(|f| f.kind), Some(FailureKind::Oom));

        // Still present at the deadline: the caller's timeout names it.
        let mut cluster = MockCluster::new();
        cluster
            .expect_list_pods()
            .return_once(|_| Ok((vec![phase("p", "Running", true)], "1".into())));
        cluster
            .expect_watch_pods()
            .return_once(|_, _| Ok(futures_util::stream::pending().boxed()));
        let err = gone(&cluster, "job-name=j", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("p still present 5s"), "{err}");
    }

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
