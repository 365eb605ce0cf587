//! The untrusted data path: what a hostile step leaves in `OUTPUTS_DIR`
//! or a cache, and a checkout that cannot be packed.

use executor_core::{CacheSpec, CacheStore, RunStatus, Step, Trust};

use crate::fixture::{assert_nothing_left, run_to_end, run_with_caches, Fixture};
use crate::Backend;

/// Each hostile entry in `OUTPUTS_DIR` (a fifo, a link that escapes only
/// when followed through another link, a plain absolute link) is skipped
/// and named in the result; every other output comes back, and the run's
/// status stays its steps'.
pub async fn hostile_outputs_are_skipped_one_by_one(backend: &dyn Backend) {
    let fx = Fixture::new("hostileout");
    let script = r#"
        cd "$OUTPUTS_DIR"
        echo kept > report.txt
        mkfifo pipe
        ln -s /etc/passwd absolute
        mkdir d && ln -s .. d/up
        ln -s d/up/../escaped chained
        mkdir z && echo also-kept > z/last.txt
    "#;
    let spec = fx
        .spec(backend, "hostile-outputs")
        .step(Step::new("evil", script));
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    let out = fx.outputs();
    assert_eq!(
        std::fs::read_to_string(out.join("report.txt")).unwrap_or_default(),
        "kept\n"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("z/last.txt")).unwrap_or_default(),
        "also-kept\n"
    );
    let refused: Vec<&str> = result
        .refused
        .iter()
        .map(|r| r.path.trim_start_matches("./"))
        .collect();
    // Of the two links that make the chain, the one unpacked second is
    // refused (which one depends on the archive's order).
    assert!(
        refused.contains(&"chained") || refused.contains(&"d/up"),
        "the chain was not broken: {refused:?}"
    );
    for name in ["pipe", "absolute"] {
        assert!(refused.contains(&name), "{name} not refused: {refused:?}");
        assert!(
            std::fs::symlink_metadata(out.join(name)).is_err(),
            "{name} was created on the host"
        );
        assert!(log.text().contains(name), "{}", log.text());
    }
    // No link on the host leads outside the outputs folder, dangling ones
    // included (a link to a path that does not exist yet is one write away).
    let leaving = executor_core::tar::links_leaving(&out).unwrap_or_else(|e| panic!("{e}"));
    assert!(leaving.is_empty(), "links lead out: {leaving:?}");
    assert_nothing_left(backend, &fx.runner).await;
}

/// A checkout with a file that cannot be packed (a socket) fails the run
/// with the file named, instead of arriving short and passing.
pub async fn unpackable_checkout_fails_by_name(backend: &dyn Backend) {
    let fx = Fixture::new("socketcheckout");
    std::fs::write(fx.checkout().join("a-before"), "a").unwrap_or_else(|e| panic!("{e}"));
    let _socket = std::os::unix::net::UnixListener::bind(fx.checkout().join("b.sock"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(fx.checkout().join("c-after"), "c").unwrap_or_else(|e| panic!("{e}"));
    let spec = fx
        .spec(backend, "socket-checkout")
        .step(Step::new("look", "ls; test -f c-after"));
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Error, "{}", log.text());
    let error = result.error.unwrap_or_default();
    assert!(error.contains("b.sock"), "{error}");
    assert!(error.contains("socket"), "{error}");
    assert_nothing_left(backend, &fx.runner).await;
}

/// An untrusted run may restore the trusted copy of a cache but saves only
/// into its own namespace: what it plants never reaches a trusted run.
pub async fn untrusted_saves_never_reach_trusted_runs(backend: &dyn Backend) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = CacheStore::new(dir.path().join("caches"), 1 << 30);
    let cache = CacheSpec {
        key: "trust".into(),
        path: ".cache-dir".into(),
    };
    let read = "if [ -f .cache-dir/tool ]; then echo \"restored: $(cat .cache-dir/tool)\"; fi";
    // One runner: a runner's caches are its own.
    let runner = Fixture::new("trust").runner;
    let run = |name: &str, trust: Trust, script: String| {
        let mut fx = Fixture::new(name);
        fx.runner = runner.clone();
        let mut spec = fx.spec(backend, name).step(Step::new("use", script));
        spec.caches = vec![cache.clone()];
        spec.trust = trust;
        (fx, spec)
    };

    let (fx, spec) = run(
        "trusted-seed",
        Trust::Trusted,
        "mkdir -p .cache-dir && echo good > .cache-dir/tool".into(),
    );
    let (result, log) = run_with_caches(backend, &spec, &store).await;
    assert!(result.caches[0].saved, "{}", log.text());
    assert_nothing_left(backend, &fx.runner).await;

    let (fx, spec) = run(
        "untrusted-plant",
        Trust::Untrusted,
        format!("{read}; echo planted > .cache-dir/tool"),
    );
    let (result, log) = run_with_caches(backend, &spec, &store).await;
    assert!(log.text().contains("restored: good"), "{}", log.text());
    let c = &result.caches[0];
    assert!(c.saved, "{c:?}");
    assert_eq!(
        (c.namespace, c.restored_from),
        (Trust::Untrusted, Some(Trust::Trusted))
    );
    assert_nothing_left(backend, &fx.runner).await;

    let (fx, spec) = run("trusted-after", Trust::Trusted, read.into());
    let (result, log) = run_with_caches(backend, &spec, &store).await;
    assert!(log.text().contains("restored: good"), "{}", log.text());
    assert!(!log.text().contains("planted"), "{}", log.text());
    assert_eq!(result.caches[0].restored_from, Some(Trust::Trusted));
    assert_nothing_left(backend, &fx.runner).await;
}
