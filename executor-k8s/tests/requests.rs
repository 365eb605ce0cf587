//! What a run asks of the API server: a fixed number of requests per run,
//! whatever its number of steps (every step goes through the one
//! channel), and none that polls.

mod common;

use std::collections::BTreeMap;

use common::K8s;
use executor_conformance::fixture::{assert_nothing_left, run_to_end, Fixture};
use executor_core::{RunStatus, Step};
use kube_testcluster::ClusterOptions;

/// The requests one run of `steps` steps of `true` makes, by verb and
/// resource.
async fn requests_of(
    backend: &K8s,
    fx: &Fixture,
    name: &str,
    steps: usize,
) -> BTreeMap<String, u64> {
    let before = backend.cluster.request_counts();
    let mut spec = fx.spec(backend, name);
    for i in 0..steps {
        spec = spec.step(Step::new(format!("s{i}"), "true"));
    }
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    let after = backend.cluster.request_counts();
    after
        .into_iter()
        .filter_map(|(key, n)| {
            let made = n - before.get(&key).copied().unwrap_or(0);
            (made > 0).then_some((key, made))
        })
        .collect()
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runs_requests_do_not_grow_with_its_steps() {
    for cluster in [
        ClusterOptions::default(),
        ClusterOptions {
            v4_only: true,
            ..ClusterOptions::default()
        },
    ] {
        let backend = K8s::start(cluster, common::options()).await;
        let fx = Fixture::new("requests");
        // The first run checks the permissions, once per executor.
        requests_of(&backend, &fx, "warm", 1).await;
        let mut one = requests_of(&backend, &fx, "one", 1).await;
        let mut many = requests_of(&backend, &fx, "many", 30).await;
        println!("requests of a run of 1 step: {one:?}");
        // The pod's events are read as its start changes (scheduled,
        // pulled, ready), a few times, however many steps come after.
        for events in [one.remove("list events"), many.remove("list events")] {
            assert!(events.unwrap_or(0) <= 4, "{events:?} lists of events");
        }
        assert_eq!(one, many, "a run of 30 steps asks more than a run of one");
        let total: u64 = one.values().sum();
        assert!(total <= 20, "{total} requests for one run: {one:?}");
        assert_nothing_left(&backend, &fx.runner).await;
    }
}
