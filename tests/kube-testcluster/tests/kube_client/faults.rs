//! Faults on demand, expiring watches, terminating pods and outages

use super::*;

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_on_demand() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let client = client(&cluster).await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let events: Api<Event> = Api::default_namespaced(client.clone());

    // 500 and 429 on chosen calls.
    cluster.faults().fail_requests("GET", "/jobs", 500, 1);
    cluster.faults().fail_requests("GET", "/jobs", 429, 1);
    let e = jobs.list(&ListParams::default()).await.unwrap_err();
    assert!(matches!(e, kube::Error::Api(ref s) if s.code == 500), "{e}");
    // kube retries a 429 after its Retry-After on its own.
    let before = cluster.requests().len();
    jobs.list(&ListParams::default()).await.unwrap();
    assert_eq!(cluster.requests().len() - before, 2, "one 429, one retry");

    // Pending while a node is rented, then scheduled.
    cluster.faults().pending_for(Duration::from_secs(1));
    jobs.create(&PostParams::default(), &job("slow-node", &image()))
        .await
        .unwrap();
    let pod = pod_of(&pods, "slow-node").await;
    ready(&pods, &pod).await;
    let reasons: Vec<String> = events
        .list(&ListParams::default().fields(&format!("involvedObject.name={pod}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    for reason in [
        "FailedScheduling",
        "TriggeredScaleUp",
        "Scheduled",
        "Started",
    ] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "{reason} missing from {reasons:?}"
        );
    }
    cluster.faults().pending_for(Duration::ZERO);

    // Unschedulable stays Pending.
    cluster.faults().unschedulable(true);
    jobs.create(&PostParams::default(), &job("no-node", &image()))
        .await
        .unwrap();
    let pod = pod_of(&pods, "no-node").await;
    let unschedulable = await_condition(pods.clone(), &pod, |p: Option<&Pod>| {
        p.and_then(|p| {
            p.status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .find(|c| c.type_ == "PodScheduled")
                .cloned()
        })
        .is_some_and(|c| c.reason.as_deref() == Some("Unschedulable"))
    });
    tokio::time::timeout(Duration::from_secs(30), unschedulable)
        .await
        .unwrap()
        .unwrap();
    cluster.faults().unschedulable(false);

    // A missing image backs off.
    for (name, image, fault, reason) in [
        (
            "no-image",
            "knotless-missing:nope".to_string(),
            None,
            "ImagePullBackOff",
        ),
        (
            "pull-fault",
            image(),
            Some(ImagePullFault::BackOff),
            "ImagePullBackOff",
        ),
        (
            "bad-name",
            image(),
            Some(ImagePullFault::InvalidName),
            "InvalidImageName",
        ),
    ] {
        cluster.faults().image_pull(fault);
        jobs.create(&PostParams::default(), &job(name, &image))
            .await
            .unwrap();
        let pod = pod_of(&pods, name).await;
        let waiting = await_condition(pods.clone(), &pod, move |p: Option<&Pod>| {
            p.and_then(|p| {
                p.status
                    .as_ref()?
                    .container_statuses
                    .as_ref()?
                    .first()?
                    .state
                    .as_ref()?
                    .waiting
                    .clone()
            })
            .is_some_and(|w| w.reason.as_deref() == Some(reason))
        });
        tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .unwrap()
            .unwrap();
    }
    cluster.faults().image_pull(None);
    cluster.shutdown().await;
}

/// Watches end as a real server ends them: after the server's expiry
/// whatever the client asked for, and with one ERROR event (410 Gone)
/// when asked from a version older than the server's compacted history.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_expire_and_old_versions_are_gone() {
    use futures_util::StreamExt;
    use kube::api::{WatchEvent, WatchParams};
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    cluster
        .faults()
        .watch_expiry(Some(Duration::from_millis(300)));
    let pods: Api<Pod> = Api::default_namespaced(client(&cluster).await);
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    // Asked for 290 s; the stream still ends, at the server's expiry.
    let events = pods
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .unwrap();
    let seen: Vec<_> = tokio::time::timeout(Duration::from_secs(60), events.collect::<Vec<_>>())
        .await
        .expect("the watch never ended");
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(cluster.faults().watch_endings(), (1, 0));

    let jobs: Api<Job> = Api::default_namespaced(client(&cluster).await);
    jobs.create(&PostParams::default(), &job("compacted", &image()))
        .await
        .unwrap();
    cluster.compact_history();
    let mut events = pods
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .unwrap()
        .boxed();
    match events.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410, "{e:?}"),
        other => panic!("expected 410 Gone, got {other:?}"),
    }
    assert!(events.next().await.is_none(), "the stream ends after 410");
    assert_eq!(cluster.faults().watch_endings().1, 1);
    cluster.shutdown().await;
}

/// Deleting a pod honours its grace period: the API answers at once with
/// the pod Terminating, and a PID 1 that ignores SIGTERM (a shell with no
/// trap) keeps it there until the grace ends in SIGKILL.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_pod_is_terminating_for_its_grace_period() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let client = client(&cluster).await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let mut graceful = job("graceful", &image());
    if let Some(spec) = graceful
        .spec
        .as_mut()
        .and_then(|s| s.template.spec.as_mut())
    {
        spec.termination_grace_period_seconds = Some(2);
    }
    jobs.create(&PostParams::default(), &graceful)
        .await
        .unwrap();
    let pod = pod_of(&pods, "graceful").await;
    // The controller says what it did, on the Job.
    let events: Api<Event> = Api::default_namespaced(client.clone());
    let said = events
        .list(&ListParams::default().fields("involvedObject.name=graceful"))
        .await
        .unwrap();
    assert!(
        said.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("SuccessfulCreate")
                && e.message.as_deref() == Some(&format!("Created pod: {pod}"))),
        "{:?}",
        said.items
    );
    ready(&pods, &pod).await;
    let uid = pods.get(&pod).await.unwrap().metadata.uid.unwrap();
    pods.delete(&pod, &DeleteParams::default()).await.unwrap();
    let terminating = pods.get(&pod).await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(2));
    let gone = await_condition(pods.clone(), &pod, conditions::is_deleted(&uid));
    tokio::time::timeout(Duration::from_secs(60), gone)
        .await
        .expect("the pod outlived its grace period")
        .unwrap();

    // A grace the delete names wins over the pod's own.
    jobs.create(&PostParams::default(), &{
        let mut j = graceful.clone();
        j.metadata.name = Some("hurried".into());
        j.metadata.resource_version = None;
        j
    })
    .await
    .unwrap();
    let pod = pod_of(&pods, "hurried").await;
    ready(&pods, &pod).await;
    let answered = pods
        .delete(&pod, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let marked = answered.left().expect("the pod, marked");
    assert_eq!(marked.metadata.deletion_grace_period_seconds, Some(0));
    cluster.shutdown().await;
}

/// A server that goes down answers nothing more, not even a request that
/// reaches a connection the outage has not closed yet: each open
/// connection's task learns of the outage in its own time, and a runner
/// that took such an answer would see an outage ridden out that never
/// was (how `an_outage_as_the_job_is_deleted_is_ridden_out_and_leaves_nothing`
/// failed now and then).
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_request_is_answered_once_an_outage_has_begun() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client(&cluster).await);
    let lp = ListParams::default();
    let lists = |n: usize| {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..n {
            let (pods, lp) = (pods.clone(), lp.clone());
            set.spawn(async move { pods.list(&lp).await.is_ok() });
        }
        set.join_all()
    };
    // Connections left idle in the client's pool, open as the outage begins.
    assert!(lists(8).await.into_iter().all(|ok| ok));
    let mut begun = cluster.faults().outages_begun();
    let mut over = cluster.faults().outages_over();
    cluster
        .faults()
        .outage_on("GET", "/secrets", Duration::from_millis(300));
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::default_namespaced(client(&cluster).await);
    let trigger = tokio::spawn(async move { secrets.list(&ListParams::default()).await });
    tokio::time::timeout(Duration::from_secs(30), begun.wait_for(|n| *n == 1))
        .await
        .expect("the outage never began")
        .unwrap();
    let answered = lists(8).await.into_iter().filter(|ok| *ok).count();
    assert_eq!(answered, 0, "answered while the server was down");
    assert!(trigger.await.unwrap().is_err());
    tokio::time::timeout(Duration::from_secs(30), over.wait_for(|n| *n == 1))
        .await
        .expect("the outage never ended")
        .unwrap();
    assert!(lists(1).await.into_iter().all(|ok| ok), "back after it");
    cluster.shutdown().await;
}
