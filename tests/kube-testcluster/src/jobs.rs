//! The Job controller and garbage collector: one pod per Job, status from
//! the pod, the Job's deadline and TTL, cascading deletion.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::kubelet::Kubelet;
use crate::store::{timestamp, Kind, Store};

/// How a delete treats what the object owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Dependents are deleted first; the owner goes last.
    Foreground,
    /// The owner goes now; dependents are deleted after.
    Background,
    /// Dependents are left, no longer owned.
    Orphan,
}

impl Propagation {
    /// Parses `propagationPolicy`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Foreground" => Some(Propagation::Foreground),
            "Background" => Some(Propagation::Background),
            "Orphan" => Some(Propagation::Orphan),
            _ => None,
        }
    }
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut n = crate::tls::random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

fn job_name_of(job: &Value) -> String {
    job["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// An event about the Job from the job-controller, as `kubectl describe
/// job` shows it.
fn job_event(store: &Store, job: &Value, kind: &str, reason: &str, message: &str) {
    crate::kubelet::record_event(
        store,
        job,
        "Job",
        "batch/v1",
        kind,
        reason,
        message,
        "job-controller",
    );
}

/// Creates the Job's pod (from a task of its own, after the Job's create
/// is answered) and starts the Job's clocks.
pub fn job_created(store: &Arc<Store>, kubelet: &Arc<Kubelet>, job: &Value) {
    let ns = job["metadata"]["namespace"]
        .as_str()
        .unwrap_or("default")
        .to_string();
    let job_name = job["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let uid = job["metadata"]["uid"].clone();
    let template = &job["spec"]["template"];
    let mut labels = template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    for key in ["batch.kubernetes.io/job-name", "job-name"] {
        labels[key] = json!(job_name);
    }
    for key in ["batch.kubernetes.io/controller-uid", "controller-uid"] {
        labels[key] = uid.clone();
    }
    let pod_name = format!("{job_name}-{}", random_suffix());
    let pod = json!({
        "metadata": {
            "name": pod_name,
            "generateName": format!("{job_name}-"),
            "labels": labels,
            "annotations": template["metadata"]["annotations"].clone(),
            "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": uid,
                "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "spec": template["spec"].clone(),
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    });
    // As the real controller: after the Job is answered, from its own
    // loop, with the Job's status and an event of its own.
    let (store2, kubelet2, ns2, job2) = (store.clone(), kubelet.clone(), ns.clone(), job.clone());
    tokio::spawn(async move {
        tokio::task::yield_now().await;
        if store2.get(Kind::Job, &ns2, &job_name_of(&job2)).is_none() {
            return;
        }
        let mut pod = pod;
        if let Err(refused) = crate::admission::admit_pod(&store2, &ns2, &mut pod) {
            // As the controller: the Job stays active, the refusal is an
            // event, and it tries again (with no pod ever made).
            job_event(
                &store2,
                &job2,
                "Warning",
                "FailedCreate",
                &format!("Error creating: {}", refused.message),
            );
            return;
        }
        if store2.create(Kind::Pod, &ns2, pod).is_ok() {
            let name = job_name_of(&job2);
            store2.update(Kind::Job, &ns2, &name, |j| {
                j["status"] = json!({"active": 1, "startTime": timestamp(), "ready": 0, "terminating": 0, "uncountedTerminatedPods": {}});
            });
            job_event(
                &store2,
                &job2,
                "Normal",
                "SuccessfulCreate",
                &format!("Created pod: {pod_name}"),
            );
            kubelet2.spawn_pod(ns2, pod_name);
        }
    });
    if let Some(deadline) = job["spec"]["activeDeadlineSeconds"].as_u64() {
        let (store, kubelet, ns, job_name) =
            (store.clone(), kubelet.clone(), ns.clone(), job_name.clone());
        tokio::spawn(async move {
            // The Job's own clock, as the controller keeps it.
            tokio::time::sleep(Duration::from_secs(deadline)).await;
            let Some(job) = store.get(Kind::Job, &ns, &job_name) else {
                return;
            };
            if job["status"]["active"].as_u64().unwrap_or(0) == 0 {
                return;
            }
            for (kind, pns, pname) in
                store.owned_by(job["metadata"]["uid"].as_str().unwrap_or_default())
            {
                if kind == Kind::Pod {
                    kubelet.delete_pod(&pns, &pname).await;
                }
            }
            finish(
                &store,
                &ns,
                &job_name,
                false,
                Some((
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                )),
            );
        });
    }
}

/// Updates the owning Job when its pod finishes.
pub fn pod_finished(store: &Arc<Store>, pod: &Value, succeeded: bool) {
    let Some(owner) = pod["metadata"]["ownerReferences"].get(0) else {
        return;
    };
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("default");
    let job = owner["name"].as_str().unwrap_or_default();
    let reason = (!succeeded).then_some((
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    ));
    finish(store, ns, job, succeeded, reason);
}

fn finish(store: &Arc<Store>, ns: &str, job: &str, succeeded: bool, failure: Option<(&str, &str)>) {
    let now = timestamp();
    let Some(done) = store.update(Kind::Job, ns, job, |j| {
        let status = &mut j["status"];
        status["active"] = json!(0);
        status["ready"] = json!(0);
        if succeeded {
            status["succeeded"] = json!(1);
            status["completionTime"] = json!(now);
            status["conditions"] = json!([
                {"type": "SuccessCriteriaMet", "status": "True", "lastProbeTime": now, "lastTransitionTime": now},
                {"type": "Complete", "status": "True", "lastProbeTime": now, "lastTransitionTime": now},
            ]);
        } else {
            let (reason, message) = failure.unwrap_or(("BackoffLimitExceeded", "Job has reached the specified backoff limit"));
            status["failed"] = json!(1);
            status["conditions"] = json!([
                {"type": "FailureTarget", "status": "True", "reason": reason, "message": message, "lastProbeTime": now, "lastTransitionTime": now},
                {"type": "Failed", "status": "True", "reason": reason, "message": message, "lastProbeTime": now, "lastTransitionTime": now},
            ]);
        }
    }) else {
        return;
    };
    if let Some(ttl) = done["spec"]["ttlSecondsAfterFinished"].as_u64() {
        let (store, ns, job) = (store.clone(), ns.to_string(), job.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(ttl)).await;
            // The TTL controller deletes with background propagation; the
            // garbage collector then removes the pod and owned objects.
            if let Some(job) = store.remove(Kind::Job, &ns, &job) {
                let uid = job["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                for (kind, ons, oname) in store.owned_by(&uid) {
                    store.remove(kind, &ons, &oname);
                }
            }
        });
    }
}

/// Deletes an object with the given propagation; returns the object as
/// the API answers the DELETE.
pub async fn delete(
    store: &Arc<Store>,
    kubelet: &Arc<Kubelet>,
    kind: Kind,
    ns: &str,
    name: &str,
    propagation: Propagation,
    grace: Option<u64>,
) -> Option<Value> {
    let object = store.get(kind, ns, name)?;
    let uid = object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if kind == Kind::Pod {
        // The API answers at once with the pod marked; the kubelet ends it
        // within its grace period.
        let (ns2, name2, kubelet) = (ns.to_string(), name.to_string(), kubelet.clone());
        let marked = store.update(Kind::Pod, ns, name, |p| {
            let own = p["spec"]["terminationGracePeriodSeconds"].as_u64();
            p["metadata"]["deletionTimestamp"] = json!(timestamp());
            p["metadata"]["deletionGracePeriodSeconds"] = json!(grace.or(own).unwrap_or(30));
        });
        tokio::spawn(async move { kubelet.delete_pod_within(&ns2, &name2, grace).await });
        return marked.or(Some(object));
    }
    match propagation {
        Propagation::Orphan => {
            for (okind, ons, oname) in store.owned_by(&uid) {
                store.update(okind, &ons, &oname, |o| {
                    if let Some(refs) = o["metadata"]["ownerReferences"].as_array_mut() {
                        refs.retain(|r| r["uid"] != uid.as_str());
                    }
                });
            }
            store.remove(kind, ns, name)
        }
        Propagation::Background => {
            let removed = store.remove(kind, ns, name);
            let (store, kubelet) = (store.clone(), kubelet.clone());
            tokio::spawn(async move { collect(&store, &kubelet, &uid).await });
            removed
        }
        Propagation::Foreground => {
            let marked = store.update(kind, ns, name, |o| {
                o["metadata"]["deletionTimestamp"] = json!(timestamp());
                o["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                o["metadata"]["finalizers"] = json!(["foregroundDeletion"]);
            });
            let (store2, kubelet2, ns2, name2) = (
                store.clone(),
                kubelet.clone(),
                ns.to_string(),
                name.to_string(),
            );
            tokio::spawn(async move {
                collect(&store2, &kubelet2, &uid).await;
                store2.remove(kind, &ns2, &name2);
            });
            marked
        }
    }
}

/// Deletes everything owned by `uid`: pods through the kubelet, the rest directly.
async fn collect(store: &Arc<Store>, kubelet: &Arc<Kubelet>, uid: &str) {
    for (kind, ns, name) in store.owned_by(uid) {
        if kind == Kind::Pod {
            kubelet.delete_pod(&ns, &name).await;
        } else {
            store.remove(kind, &ns, &name);
        }
    }
}
