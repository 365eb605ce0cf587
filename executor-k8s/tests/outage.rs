//! API-server outages: the listener closes, open connections are cut, and
//! the server comes back. Calls ride an outage out within
//! `K8sOptions::reconnect_timeout`; past it, what stop could not remove
//! goes to the journal, and the next sweep removes it.

mod common;

use std::time::Duration;

use common::K8s;
use executor_conformance::fixture::{
    assert_nothing_left, run_to_end, run_watched, Fixture, WatchedLog,
};
use executor_core::journal::Journal;
use executor_core::{run_with, DriverOptions, RunLog, RunStatus, Step, StepStatus};
use executor_k8s::K8sOptions;
use kube_testcluster::ClusterOptions;
use tokio_util::sync::CancellationToken;

/// Waits, with a deadline, until `n` outages are over.
async fn outages_over(backend: &K8s, n: u64) {
    let mut over = backend.cluster.faults().outages_over();
    tokio::time::timeout(Duration::from_secs(60), over.wait_for(|seen| *seen >= n))
        .await
        .expect("the outage never ended")
        .expect("the test cluster is gone");
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_as_the_job_is_deleted_is_ridden_out_and_leaves_nothing() {
    let backend = K8s::start(ClusterOptions::default(), common::options()).await;
    let fx = Fixture::new("outage-stop");
    // The API server goes down under the delete, for longer than the old
    // five tries took (1.5 s), as a graceful restart does.
    backend
        .cluster
        .faults()
        .outage_on("DELETE", "/jobs/", Duration::from_secs(4));
    let spec = fx
        .spec(&backend, "outage-stop")
        .step(Step::new("work", "echo done-before-the-outage"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    // The run's log says why it stood still, and that it went on.
    let text = log.text();
    let calls: Vec<String> = backend
        .cluster
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(
        text.contains("no answer while deleting"),
        "{text}\n{calls:#?}"
    );
    assert!(text.contains("answered again while deleting"), "{text}");
    outages_over(&backend, 1).await;
    assert_nothing_left(&backend, &fx.runner).await;
    backend.cluster.shutdown().await;
}

/// The API server goes down mid-step, for longer than the step has left
/// to run: the step's stream is cut, the step ends while nothing
/// answers, and the run's end (the status, the outputs, the Job's
/// delete) waits for the server. The step keeps its own code and every
/// line, and nothing is left.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_spanning_a_steps_end_and_the_teardown_leaves_the_run_right() {
    let backend = K8s::start(ClusterOptions::default(), common::options()).await;
    let fx = Fixture::new("outage-step");
    let spec = fx.spec(&backend, "outage-step").step(Step::new(
        "work",
        "echo before; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo after; \
         echo made > \"$OUTPUTS_DIR/made.txt\"; exit 6",
    ));
    let log = WatchedLog::default();
    let outage = async {
        log.wait_for("before").await;
        backend.cluster.outage_now(Duration::from_secs(4));
        // The step goes on without the API server: let it end in the
        // outage, through the engine under the test cluster's kubelet.
        backend.in_the_pod(&["touch", "/tmp/go"]).await;
    };
    let (result, ()) = tokio::join!(
        run_watched(&backend, &spec, &log, CancellationToken::new()),
        outage
    );
    let text = log.text();
    assert_eq!(result.steps[0].exit_code, Some(6), "{text}");
    assert_eq!(result.steps[0].status, StepStatus::Failed, "{text}");
    assert_eq!(text.matches("before\n").count(), 1, "{text}");
    assert_eq!(text.matches("after\n").count(), 1, "{text}");
    assert!(text.contains("the step's stream broke"), "{text}");
    assert!(fx.outputs().join("made.txt").exists(), "{text}");
    outages_over(&backend, 1).await;
    assert_nothing_left(&backend, &fx.runner).await;
    backend.cluster.shutdown().await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_longer_than_the_reconnect_timeout_leaves_the_job_to_the_journal() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            reconnect_timeout: Duration::from_secs(2),
            ..common::options()
        },
    )
    .await;
    let fx = Fixture::new("outage-journal");
    let journal_dir = tempfile::tempdir().unwrap();
    let journal = Journal::new(journal_dir.path());
    backend
        .cluster
        .faults()
        .outage_on("DELETE", "/jobs/", Duration::from_secs(8));
    let spec = fx
        .spec(&backend, "outage-journal")
        .step(Step::new("work", "true"));
    let options = DriverOptions {
        journal: Some(journal.clone()),
        ..DriverOptions::default()
    };
    let (log, text) = RunLog::memory();
    let result = run_with(
        &backend.executor,
        &spec,
        &log,
        CancellationToken::new(),
        &options,
    )
    .await;
    let text = text.text();
    assert_eq!(result.status, RunStatus::Error, "{text}");
    assert!(
        result.error.as_deref().unwrap_or("").contains("stop:"),
        "{:?}",
        result.error
    );
    assert!(text.contains("is in the journal"), "{text}");
    let kept = journal.entries("k8s", &fx.runner).unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");

    // Once the server is back, the next run's sweep removes the Job,
    // whatever its expiry, and forgets it.
    outages_over(&backend, 1).await;
    assert!(
        !backend.cluster.jobs("default").is_empty(),
        "the Job outlived the run, as it would on a cluster that stayed down"
    );
    let swept = journal.sweep(&backend.executor, &fx.runner).await.unwrap();
    assert_eq!(swept, [kept[0].id.clone()]);
    assert!(journal.entries("k8s", &fx.runner).unwrap().is_empty());
    assert_nothing_left(&backend, &fx.runner).await;
    backend.cluster.shutdown().await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_answer_was_lost_is_found_not_made_twice() {
    let backend = K8s::start(ClusterOptions::default(), common::options()).await;
    let fx = Fixture::new("lost-answer");
    // The Secret and the Job are each made, and the server goes down
    // before it answers: the next try's 409 is that first try.
    for path in ["/secrets", "/jobs"] {
        backend
            .cluster
            .faults()
            .outage_after("POST", path, Duration::from_secs(1));
    }
    let spec = fx
        .spec(&backend, "lost-answer")
        .env("MODE", "made-once")
        .step(Step::new("work", "echo \"$MODE\""));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(text.contains("made-once"), "{text}");
    outages_over(&backend, 2).await;
    let posts = |kind: &str| {
        backend
            .cluster
            .requests()
            .iter()
            .filter(|r| r.method == "POST" && r.path.ends_with(kind))
            .count()
    };
    // Each create was tried again (the first try's answer was lost) and
    // found the object it had made.
    assert_eq!((posts("/secrets"), posts("/jobs")), (2, 2));
    assert_nothing_left(&backend, &fx.runner).await;
    backend.cluster.shutdown().await;
}

/// Ten runs at once through one executor on one cluster: three are
/// cancelled mid-step and the API server is down for 3 s while the
/// others' steps run; they ride it out.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_runs_from_one_process_ride_out_an_outage_and_a_cancel() {
    let backend = common::K8s::start(ClusterOptions::default(), common::options()).await;
    let outage = async {
        let mut over = backend.cluster.faults().outages_over();
        backend.cluster.outage_now(Duration::from_secs(3));
        over.wait_for(|n| *n >= 1).await.unwrap();
    };
    let logs =
        executor_conformance::many_runs_ride_out_an_outage_and_a_cancel(&backend, outage).await;
    assert!(
        logs.iter().any(|log| log.contains("waiting up to")),
        "no run met the outage: {logs:#?}"
    );
    backend.cluster.shutdown().await;
}

/// A copy in whose exec's stdin is cut partway, and a copy out whose
/// output is: each loses its status, and goes again, whole.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_in_or_out_cut_partway_goes_again_whole() {
    let backend = K8s::start(ClusterOptions::default(), common::options()).await;
    let at = [executor_conformance::COPY_CUT_AT];
    // The copy in is the first exec with that much stdin; the copy out
    // the first with that much output.
    backend.cluster.faults().cut_exec_input_after(&at);
    let text = executor_conformance::a_copy_cut_partway_goes_again_whole(&backend).await;
    assert!(
        text.contains("no answer while copying the checkout"),
        "{text}"
    );
    backend.cluster.faults().cut_execs_after(&at);
    let text = executor_conformance::a_copy_cut_partway_goes_again_whole(&backend).await;
    assert!(
        text.contains("no answer while copying /outputs out"),
        "{text}"
    );
    backend.cluster.shutdown().await;
}

/// The API server goes down at each request of a run in turn, every open
/// connection cut and the request unanswered, or carried out with its
/// answer lost: whichever it was (the Job's create, a pod list or watch,
/// an exec, the outputs' exec, the delete), the run rides it out, every
/// line once, its outputs back, nothing left.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_at_any_request_of_a_run_is_ridden_out() {
    // With a step user, so the execs that give it the run's folders go
    // through the outages too.
    let options = K8sOptions {
        run_as_user: Some(65534),
        run_as_group: Some(65534),
        ..common::options()
    };
    let backend = K8s::start(ClusterOptions::default(), options).await;
    let before = backend.cluster.requests().len();
    executor_conformance::a_run_rides_out_an_outage_at_one_request(&backend, "none").await;
    let methods: Vec<String> = backend.cluster.requests()[before..]
        .iter()
        .map(|r| r.method.clone())
        .collect();
    assert!(methods.len() > 5, "{methods:?}");
    let faults = backend.cluster.faults();
    // A read whose answer is lost is one never answered: only a change
    // is also carried out with its answer lost.
    let outages = (1..).zip(&methods).flat_map(|(n, method)| {
        let change = method != "GET";
        [(n, false)].into_iter().chain(change.then_some((n, true)))
    });
    for (n, after) in outages {
        let begun = *faults.outages_begun().borrow();
        faults.outage_at_request(n, Duration::from_millis(300), after);
        let fault = format!("request {n} (its answer lost: {after})");
        executor_conformance::a_run_rides_out_an_outage_at_one_request(&backend, &fault).await;
        // A run of fewer requests than `n` met none: the next must not.
        faults.outage_at_request(u64::MAX, Duration::ZERO, false);
        let now = *faults.outages_begun().borrow();
        if now > begun {
            outages_over(&backend, now).await;
        }
    }
    backend.cluster.shutdown().await;
}
