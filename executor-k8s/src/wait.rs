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
pub use crate::pod_status::{pod_fate, pod_state, Fate, PodState};

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
/// only at `timeout`, as `unschedulable`. While no pod exists, the Job
/// `job`'s events are read for the controller's refusal to create one,
/// which ends the wait as [`ExecutorError::InvalidInput`].
pub async fn ready(
    cluster: &dyn Cluster,
    job: &str,
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
        // While there is no pod, the Job's events say whether admission
        // refuses it (a policy, a missing RuntimeClass or PriorityClass,
        // a quota): asked at 1 s, 2 s, 4 s ... up to `every`, since the
        // Job controller only retries and no pod will ever say so.
        let mut refusal_check = Duration::from_secs(1).min(every);
        let mut next_refusal_check = tokio::time::Instant::now() + refusal_check;
        loop {
            let still_waiting = tokio::select! {
                _ = tick.tick() => true,
                () = changed.notified() => false,
                () = tokio::time::sleep_until(next_refusal_check) => {
                    if lock(&progress).pod.is_none() {
                        if let Some(refused) = refused_pod(cluster, job).await {
                            return refused;
                        }
                    }
                    refusal_check = (refusal_check * 2).min(every);
                    next_refusal_check = tokio::time::Instant::now() + refusal_check;
                    continue;
                }
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
        refused = report => Err(refused),
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

/// The Job controller's refusal to create `job`'s pod, if its events
/// show one that will not heal: admission said `forbidden` or `invalid`.
async fn refused_pod(cluster: &dyn Cluster, job: &str) -> Option<ExecutorError> {
    let events = cluster.pod_events(job).await.ok()?;
    let message = events.into_iter().find_map(|e| {
        let message = e.message.unwrap_or_default();
        (e.reason.as_deref() == Some("FailedCreate")
            && (message.contains("is forbidden") || message.contains("is invalid")))
        .then_some(message)
    })?;
    Some(ExecutorError::InvalidInput(format!(
        "the cluster refuses to create the Job {job}'s pod: {message}"
    )))
}

async fn report_events(
    cluster: &dyn Cluster,
    pod: Option<&str>,
    seen: &mut HashSet<String>,
    log: &RunLog,
) {
    let Some(pod) = pod else { return };
    let Ok(mut events) = cluster.pod_events(pod).await else {
        return;
    };
    in_servers_order(&mut events);
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

/// Sorts events as the server wrote them: by resource version (its write
/// order), then by time. A list is in the store's key order, which is by
/// name, not by when: `Pulled` could come before `Scheduled`.
pub(crate) fn in_servers_order(events: &mut [k8s_openapi::api::core::v1::Event]) {
    events.sort_by_cached_key(|e| {
        let version = e
            .metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(u64::MAX);
        let time = e
            .event_time
            .as_ref()
            .map(|t| t.0.to_string())
            .or_else(|| e.last_timestamp.as_ref().map(|t| t.0.to_string()))
            .or_else(|| e.first_timestamp.as_ref().map(|t| t.0.to_string()))
            .unwrap_or_default();
        (version, time)
    });
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
mod tests;
