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

/// A real containerd node's words for a command the image lacks, and
/// an older runtime's (waiting `RunContainerError`).
#[test]
fn an_image_without_sh_is_the_images_failure_not_retried() {
    let containerd = pod(json!({
        "metadata": {"name": "p"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{
                "name": "step", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 128, "reason": "StartError",
                    "message": "failed to create containerd task: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: exec: \"sh\": executable file not found in $PATH: unknown"}}
            }]
        }
    }));
    let waiting = pod(json!({
        "metadata": {"name": "p"},
        "status": {
            "phase": "Pending",
            "containerStatuses": [{
                "name": "step", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "RunContainerError",
                    "message": "exec: \"sh\": stat sh: no such file or directory"}}
            }]
        }
    }));
    for pod in [containerd, waiting] {
        let PodState::Fatal(fate) = pod_state(&pod) else {
            panic!("not fatal: {pod:?}");
        };
        assert_eq!(fate.kind, FailureKind::Image);
        assert!(!fate.retryable);
        assert!(fate.message.contains("has no sh"), "{}", fate.message);
    }
    // Another start error is not taken for a missing shell.
    let other = failed_pod("", json!([]), "StartError");
    let PodState::Fatal(fate) = pod_state(&other) else {
        panic!("not fatal");
    };
    assert_ne!(fate.kind, FailureKind::Image);
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
