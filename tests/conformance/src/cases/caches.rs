//! Run caches: restored before the first step, saved after the last.

use executor_core::tar::UnpackLimits;
use executor_core::{
    CacheSpec, CacheStore, CommandOutcome, RunLog, RunSpec, RunStatus, Step, StepCommand,
};
use tokio_util::sync::CancellationToken;

use crate::fixture::{assert_nothing_left, bounded, run_with_caches, Fixture};
use crate::Backend;

fn cache() -> CacheSpec {
    // Relative to WORK_DIR: the one form every backend accepts.
    CacheSpec {
        key: "conformance".into(),
        path: ".cache-dir".into(),
    }
}

fn store() -> (tempfile::TempDir, CacheStore) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = CacheStore::new(dir.path().join("caches"), 1 << 30);
    (dir, store)
}

/// A run of `fx` named `name` with one step and the conformance cache.
fn cached_spec(backend: &dyn Backend, fx: &Fixture, name: &str, step: Step) -> RunSpec {
    let mut spec = fx.spec(backend, name).step(step);
    spec.caches = vec![cache()];
    spec
}

/// A fixture of `case` run by `runner`: a runner's caches are its own, so
/// the runs of a case that share a cache share a runner.
fn fixture_of(case: &str, runner: &str) -> Fixture {
    let mut fx = Fixture::new(case);
    fx.runner = runner.to_string();
    fx
}

/// `file` of the conformance cache's current copy: the one runner a case
/// has keeps its caches in a folder of its own under the store.
fn stored(store: &CacheStore, file: &str) -> Option<String> {
    let runners = std::fs::read_dir(store.dir().join("runners")).ok()?;
    for runner in runners.filter_map(Result::ok) {
        let own = CacheStore::new(runner.path(), store.max_bytes);
        if let Some((dir, _guard)) = own.current("conformance").ok()? {
            return std::fs::read_to_string(dir.join(file)).ok();
        }
    }
    None
}

const USE_CACHE: &str = r#"
    if [ -f .cache-dir/built ]; then echo "warm: $(cat .cache-dir/built)"; else echo cold-miss; fi
    mkdir -p .cache-dir/nested && echo "${VERSION:-v1}" > .cache-dir/built && echo deep > .cache-dir/nested/file
"#;

/// A cold cache is normal and saved after success; the next run finds it.
pub async fn cache_cold_then_warm(backend: &dyn Backend) {
    let (_keep, store) = store();
    let fx = Fixture::new("cachecold");
    let spec = cached_spec(backend, &fx, "cache-cold", Step::new("use", USE_CACHE));
    let (result, log) = run_with_caches(backend, &spec, &store).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(
        log.text().contains("cold-miss") && log.text().contains("cache conformance: cold"),
        "{}",
        log.text()
    );
    let c = &result.caches[0];
    assert!(!c.hit && c.saved && c.size_out > 0, "{c:?}");
    assert_eq!(stored(&store, "built").as_deref(), Some("v1\n"));
    assert_nothing_left(backend, &fx.runner).await;

    let fx = fixture_of("cachewarm", &fx.runner);
    let spec =
        cached_spec(backend, &fx, "cache-warm", Step::new("use", USE_CACHE)).env("VERSION", "v2");
    let (result, log) = run_with_caches(backend, &spec, &store).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(log.text().contains("warm: v1"), "{}", log.text());
    let c = &result.caches[0];
    assert!(c.hit && c.size_in > 0 && c.saved, "{c:?}");
    assert_eq!(stored(&store, "built").as_deref(), Some("v2\n"));
    assert_eq!(stored(&store, "nested/file").as_deref(), Some("deep\n"));
    assert_nothing_left(backend, &fx.runner).await;
}

async fn seed(backend: &dyn Backend, store: &CacheStore, runner: &str) {
    let fx = fixture_of("cacheseed", runner);
    let spec = cached_spec(backend, &fx, "cache-seed", Step::new("use", USE_CACHE));
    let (result, _) = run_with_caches(backend, &spec, store).await;
    assert_eq!(result.status, RunStatus::Success);
    assert_eq!(stored(store, "built").as_deref(), Some("v1\n"));
}

/// A failed run never saves its cache: a broken build must not poison it.
pub async fn cache_not_saved_after_failure(backend: &dyn Backend) {
    let (_keep, store) = store();
    let fx = Fixture::new("cachefail");
    seed(backend, &store, &fx.runner).await;
    let spec = cached_spec(
        backend,
        &fx,
        "cache-fail",
        Step::new("poison", "echo poisoned > .cache-dir/built; exit 1"),
    );
    let (result, _) = run_with_caches(backend, &spec, &store).await;
    assert_eq!(result.status, RunStatus::Failed);
    assert!(!result.caches[0].saved);
    assert_eq!(
        stored(&store, "built").as_deref(),
        Some("v1\n"),
        "the failed run replaced the cache"
    );
    assert_nothing_left(backend, &fx.runner).await;
}

/// A runner that dies mid-save, with the new copy on the host disk but not
/// yet swapped in, leaves the old copy current; the next run restores the
/// old copy and its save lands whole.
pub async fn crashed_save_leaves_the_old_copy(backend: &dyn Backend) {
    let (_keep, store) = store();
    let fx = Fixture::new("cachecrash");
    seed(backend, &store, &fx.runner).await;
    let spec = fx.spec(backend, "cache-crash");
    let executor = backend.executor();
    let handle = bounded(executor.start(&spec, &RunLog::discard(), CancellationToken::new()))
        .await
        .unwrap_or_else(|e| panic!("start: {e}"));
    let write = StepCommand {
        id: executor_core::labels::random_hex(8),
        follow_from: None,
        upcoming: Vec::new(),
        name: "write".into(),
        script: "mkdir -p .cache-dir && echo crashed > .cache-dir/built && \
                 for i in $(seq 20); do echo $i > .cache-dir/f$i; done"
            .into(),
        env: handle.standard_env(),
    };
    let outcome = bounded(executor.command(
        &handle,
        &write,
        &RunLog::discard(),
        CancellationToken::new(),
    ))
    .await;
    assert!(
        matches!(outcome, Ok(CommandOutcome::Exited { code: 0, .. })),
        "{outcome:?}"
    );
    let pending = store
        .for_runner(&fx.runner)
        .begin_save("conformance")
        .unwrap_or_else(|e| panic!("{e}"));
    let path = cache().resolve(&handle.work_dir);
    bounded(executor.copy_out(&handle, &path, pending.folder(), UnpackLimits::default()))
        .await
        .unwrap_or_else(|e| panic!("copy out: {e}"));
    assert!(pending.folder().join("built").exists());
    // The runner dies here, between the copy and the swap: no destructor
    // runs. (The save's lock file stays open until this test process ends,
    // where a dead runner's would close; later commits then leave the
    // crashed folder alone rather than remove it, which is the safe side.)
    std::mem::forget(pending);
    assert_eq!(
        stored(&store, "built").as_deref(),
        Some("v1\n"),
        "a save that never swapped replaced the cache"
    );
    executor
        .stop(&handle)
        .await
        .unwrap_or_else(|e| panic!("stop: {e}"));
    assert_nothing_left(backend, &fx.runner).await;

    let fx = fixture_of("cacheafter", &fx.runner);
    let spec =
        cached_spec(backend, &fx, "cache-after", Step::new("use", USE_CACHE)).env("VERSION", "v3");
    let (result, log) = run_with_caches(backend, &spec, &store).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(log.text().contains("warm: v1"), "{}", log.text());
    assert!(result.caches[0].saved, "{:?}", result.caches);
    assert_eq!(stored(&store, "built").as_deref(), Some("v3\n"));
    assert!(stored(&store, "f1").is_none(), "the crashed copy leaked in");
    assert_nothing_left(backend, &fx.runner).await;
}

/// A cache tar from the environment is untrusted, like outputs: a hostile
/// one is refused and the old copy stays; the run itself still succeeds.
pub async fn hostile_cache_is_refused(backend: &dyn Backend) {
    let (_keep, store) = store();
    let fx = Fixture::new("cachehostile");
    seed(backend, &store, &fx.runner).await;
    let spec = cached_spec(
        backend,
        &fx,
        "cache-hostile",
        Step::new(
            "evil",
            "echo evil > .cache-dir/built; ln -s /etc/passwd .cache-dir/passwd",
        ),
    );
    let (result, log) = run_with_caches(backend, &spec, &store).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    let c = &result.caches[0];
    assert!(
        !c.saved && c.note.as_deref().unwrap_or("").contains("entries refused"),
        "{c:?}"
    );
    assert_eq!(stored(&store, "built").as_deref(), Some("v1\n"));
    assert_nothing_left(backend, &fx.runner).await;
}

/// A cache over the limit is not saved, with a warning; the old copy stays.
pub async fn oversized_cache_is_not_saved(backend: &dyn Backend) {
    let (_keep, mut store) = store();
    let fx = Fixture::new("cachebig");
    seed(backend, &store, &fx.runner).await;
    store.max_bytes = 1000;
    let spec = cached_spec(
        backend,
        &fx,
        "cache-big",
        Step::new("grow", "head -c 5000 /dev/zero > .cache-dir/big"),
    );
    let (result, log) = run_with_caches(backend, &spec, &store).await;
    assert_eq!(result.status, RunStatus::Success);
    assert!(
        log.text()
            .contains("warning: cache conformance: not saved: larger than the cache limit"),
        "{}",
        log.text()
    );
    assert_eq!(stored(&store, "built").as_deref(), Some("v1\n"));
    assert!(stored(&store, "big").is_none());
    assert_nothing_left(backend, &fx.runner).await;
}

/// Two runs saving the same key at once leave one whole copy, not a mix.
pub async fn concurrent_saves_never_mix(backend: &dyn Backend) {
    let (_keep, store) = store();
    let a = Fixture::new("cachea");
    let b = fixture_of("cacheb", &a.runner);
    let spec = |fx: &Fixture, who: &str| {
        let write = format!(
            "mkdir -p .cache-dir && for f in 1 2 3 4 5; do echo {who} > .cache-dir/$f; done"
        );
        cached_spec(
            backend,
            fx,
            &format!("cache-{who}"),
            Step::new("write", write),
        )
    };
    let (sa, sb) = (spec(&a, "a"), spec(&b, "b"));
    let ((ra, _), (rb, _)) = tokio::join!(
        run_with_caches(backend, &sa, &store),
        run_with_caches(backend, &sb, &store)
    );
    assert!(
        ra.caches[0].saved && rb.caches[0].saved,
        "{:?} {:?}",
        ra.caches,
        rb.caches
    );
    // A saved copy must exist, be one run's whole, and be nobody else's.
    let first = stored(&store, "1").expect("no saved copy after two saves that succeeded");
    assert!(first == "a\n" || first == "b\n", "{first:?}");
    for f in ["2", "3", "4", "5"] {
        assert_eq!(
            stored(&store, f).as_deref(),
            Some(first.as_str()),
            "the copy mixes two runs, or lost file {f}"
        );
    }
    assert_nothing_left(backend, &a.runner).await;
    assert_nothing_left(backend, &b.runner).await;
}
