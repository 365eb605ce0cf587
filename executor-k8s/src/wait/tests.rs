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
        "j",
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
        "j",
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
        "j",
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

#[test]
fn events_are_told_in_the_order_the_server_wrote_them() {
    let event = |name: &str, version: &str| -> k8s_openapi::api::core::v1::Event {
        serde_json::from_value(json!({
            "metadata": {"name": name, "resourceVersion": version},
            "involvedObject": {}, "reason": name
        }))
        .unwrap()
    };
    let mut events = vec![
        event("p.pulled", "12"),
        event("p.scheduled", "9"),
        event("p.started", "130"),
        event("p.created", "100"),
    ];
    super::in_servers_order(&mut events);
    let names: Vec<_> = events
        .iter()
        .map(|e| e.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(names, ["p.scheduled", "p.pulled", "p.created", "p.started"]);
}
