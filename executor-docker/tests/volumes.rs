//! The container's anonymous volumes on the real engine.

mod common;

use executor_conformance::fixture::{assert_nothing_left, run_with_caches, Fixture};
use executor_core::{CacheSpec, CacheStore, RunStatus, Step};

use common::Docker;

/// A cache over a folder the image fills (`/bin` holds busybox and its
/// applets: without them no step starts) is a volume of its own that
/// starts as the image's copy, and the cache restored into it is there
/// for the steps.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn an_absolute_cache_is_a_volume_that_keeps_the_image_content() {
    let backend = Docker(common::executor(common::options()).await);
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = CacheStore::new(dir.path().join("caches"), 1 << 30);
    let script = r#"
        grep -q ' /bin ' /proc/mounts
        if [ -f /bin/knotless-cache ]; then echo "warm: $(cat /bin/knotless-cache)"; else echo cold; fi
        echo "$RUN" > /bin/knotless-cache
    "#;
    // One runner: a runner's caches are its own.
    let runner = Fixture::new("cachevol").runner;
    for (run, expect) in [("one", "cold"), ("two", "warm: one")] {
        let mut fx = Fixture::new("cachevol");
        fx.runner = runner.clone();
        let mut spec = fx
            .spec(&backend, run)
            .step(Step::new("use", script))
            .env("RUN", run);
        spec.caches = vec![CacheSpec {
            key: "bin".into(),
            path: "/bin".into(),
        }];
        let (result, log) = run_with_caches(&backend, &spec, &store).await;
        assert_eq!(result.status, RunStatus::Success, "{}", log.text());
        assert!(log.text().contains(expect), "{}", log.text());
        assert_nothing_left(&backend, &fx.runner).await;
    }
}

/// A container removed without its volumes (a removal that failed half
/// way, an operator's `docker rm`) leaves the run's volumes: the probe
/// finds them by the runner's label, and cleanup removes them once no
/// container uses them.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn volumes_left_by_a_container_removed_without_them_are_found_and_cleaned_up() {
    use executor_core::{CleanupScope, Executor, RunLog};
    let backend = Docker(common::executor(common::options()).await);
    let fx = Fixture::new("leftvolumes");
    let spec = fx
        .spec(&backend, "left-volumes")
        .step(Step::new("s", "true"));
    let handle = backend
        .0
        .start(
            &spec,
            &RunLog::discard(),
            tokio_util::sync::CancellationToken::new(),
        )
        .await
        .unwrap();
    // While the container lives, cleanup leaves its volumes alone.
    let report = backend
        .0
        .cleanup(&fx.runner, CleanupScope::Expired)
        .await
        .unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    let docker = bollard::Docker::connect_with_defaults().unwrap();
    docker
        .remove_container(
            &handle.id,
            Some(bollard::query_parameters::RemoveContainerOptions {
                force: true,
                v: false,
                ..Default::default()
            }),
        )
        .await
        .unwrap();
    let left = backend.0.leftovers(&fx.runner).await.unwrap();
    assert!(
        !left.is_empty() && left.iter().all(|l| l.starts_with("volume/")),
        "{left:?}"
    );
    let report = backend
        .0
        .cleanup(&fx.runner, CleanupScope::Expired)
        .await
        .unwrap();
    assert_eq!(report.removed.len(), left.len(), "{report:?}");
    assert_nothing_left(&backend, &fx.runner).await;
}
