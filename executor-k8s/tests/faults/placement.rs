//! A step that replaces tar, node selectors and taints, and isolated runs

use super::*;

/// A header that declares `size` bytes of GNU long name and brings none:
/// what a step's own `tar` sends to make the runner allocate.
fn long_name_bomb(size: u64) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..13].copy_from_slice(b"././@LongLink");
    h[100..107].copy_from_slice(b"0000644");
    h[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = b'L';
    h[257..263].copy_from_slice(b"ustar ");
    h[263..265].copy_from_slice(b" \0");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    h.to_vec()
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_that_replaces_tar_cannot_bomb_or_flood_the_runner() {
    // On Kubernetes the `tar` that packs /outputs is the step's to replace.
    for (name, fake, expect) in [
        (
            "bomb",
            "cat /work/bomb.tar; head -c 1048576 /dev/zero",
            "GNU long name header declares 629145600 bytes",
        ),
        (
            "flood",
            "head -c 10000000 /dev/zero | tr '\\0' x >&2; printf '\\033[2J' >&2; exit 1",
            "more bytes)",
        ),
    ] {
        // Uncompressed, so `tar` is the step's to replace: compressed, the
        // copy runs `sh -c 'tar c | gzip'`, and busybox's sh runs its own
        // tar applet, never the step's file (compression is on when the
        // connect-time round trip, slower under load, says so).
        let backend = K8s::start(
            ClusterOptions::default(),
            K8sOptions {
                compression: executor_core::tar::Compression::Never,
                ..common::options()
            },
        )
        .await;
        let fx = Fixture::new(name);
        std::fs::write(fx.checkout().join("bomb.tar"), long_name_bomb(600 << 20)).unwrap();
        let replace =
            "rm -f /bin/tar && printf '#!/bin/sh\\n%s\\n' \"$FAKE\" > /bin/tar && chmod +x /bin/tar";
        let spec = fx
            .spec(&backend, name)
            .step(Step::new("replace-tar", replace).env("FAKE", fake));
        let (result, log) = run_to_end(&backend, &spec).await;
        assert_eq!(result.status, RunStatus::Error, "{}", log.text());
        let error = error_of(&result);
        assert!(error.contains(expect), "{name}: {error}");
        // The flood is cut to its first few KiB and has no escape codes.
        assert!(error.len() < 6000, "{name}: {} bytes of error", error.len());
        assert!(!error.contains('\u{1b}'), "{name}: {error}");
        assert!(!log.text().contains('\u{1b}'), "{name}");
        assert_nothing_left(&backend, &fx.runner).await;
    }
}

/// The scheduling inputs the executor sets are the scheduler's to honour:
/// a node selector the node does not match, or a taint the pod does not
/// tolerate, leaves the pod Pending until the pod timeout (`unschedulable`);
/// the toleration lets it run.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_selectors_and_taints_decide_where_the_pod_may_run() {
    let start = |options: K8sOptions| async move {
        K8s::start(
            ClusterOptions::default(),
            K8sOptions {
                pod_timeout: Duration::from_secs(3),
                ..options
            },
        )
        .await
    };
    let expect_unschedulable = |result: &executor_core::RunResult, why: &str| {
        let failure = result.failure.clone().unwrap();
        assert_eq!(
            failure.kind,
            FailureKind::Unschedulable,
            "{}",
            failure.message
        );
        assert!(failure.message.contains(why), "{}", failure.message);
    };

    let backend = start(K8sOptions {
        node_selector: vec![("pool".into(), "gpu".into())],
        ..common::options()
    })
    .await;
    let fx = Fixture::new("selector");
    let spec = fx.spec(&backend, "selector").step(Step::new("s", "true"));
    let (result, _) = run_to_end(&backend, &spec).await;
    expect_unschedulable(&result, "didn't match Pod's node affinity/selector");
    assert_nothing_left(&backend, &fx.runner).await;

    let tainted = |options: K8sOptions| async move {
        let backend = start(options).await;
        backend
            .cluster
            .faults()
            .taint_node("dedicated", "ci", "NoSchedule");
        backend
    };
    let backend = tainted(common::options()).await;
    let fx = Fixture::new("taint");
    let spec = fx.spec(&backend, "taint").step(Step::new("s", "true"));
    let (result, _) = run_to_end(&backend, &spec).await;
    expect_unschedulable(&result, "untolerated taint {dedicated: ci}");
    assert_nothing_left(&backend, &fx.runner).await;

    let backend = tainted(K8sOptions {
        tolerations: vec![serde_json::json!({
            "key": "dedicated", "operator": "Equal", "value": "ci", "effect": "NoSchedule"
        })],
        ..common::options()
    })
    .await;
    let fx = Fixture::new("tolerated");
    let spec = fx
        .spec(&backend, "tolerated")
        .step(Step::new("s", "echo ran-on-the-tainted-node"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert_nothing_left(&backend, &fx.runner).await;
}

/// `isolate` gives a run a node to itself: on a one-node cluster a second
/// isolated run waits Pending (pod anti-affinity) until the first one's pod
/// is gone, then runs.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_isolated_runs_on_one_node_take_turns() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            isolate: true,
            ..common::options()
        },
    )
    .await;
    let (first, second) = (Fixture::new("isolated-a"), Fixture::new("isolated-b"));
    let first_spec = first.spec(&backend, "isolated-a").step(Step::new(
        "hold",
        // Holds the node until the second run is seen waiting for it.
        "echo holding-the-node; while [ ! -e /work/release ]; do sleep 0.05; done",
    ));
    let second_spec = second
        .spec(&backend, "isolated-b")
        .step(Step::new("after", "echo second-ran"));
    let (first_log, second_log) = (WatchedLog::default(), WatchedLog::default());
    let second_run = async {
        first_log.wait_for("holding-the-node").await;
        let result = run_watched(
            &backend,
            &second_spec,
            &second_log,
            CancellationToken::new(),
        )
        .await;
        (result, second_log.text())
    };
    let release = async {
        second_log
            .wait_for("didn't match pod anti-affinity rules")
            .await;
        // Let the first run end: its step waits for this file in its pod.
        let pods = backend.cluster.all_pods();
        let (ns, pod) = pods
            .iter()
            .find(|(_, p)| p.starts_with("knotless-isolated-a"))
            .cloned()
            .unwrap();
        backend
            .cluster
            .exec_in_pod(&ns, &pod, &["touch", "/work/release"])
            .await;
    };
    let (first_result, (second_result, second_text), ()) = tokio::join!(
        run_watched(&backend, &first_spec, &first_log, CancellationToken::new()),
        second_run,
        release
    );
    assert_eq!(
        first_result.status,
        RunStatus::Success,
        "{}",
        first_log.text()
    );
    assert_eq!(second_result.status, RunStatus::Success, "{second_text}");
    assert!(second_text.contains("second-ran"), "{second_text}");
    assert_nothing_left(&backend, &first.runner).await;
}
