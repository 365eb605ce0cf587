//! The shared conformance suite on the Kubernetes executor, against the
//! test cluster in v4-only mode (it refuses `v5.channel.k8s.io`, as API
//! servers before 1.30 do).

mod common;

use executor_conformance::conformance_tests;
use kube_testcluster::ClusterOptions;

async fn k8s() -> common::K8s {
    let cluster = ClusterOptions {
        v4_only: true,
        ..ClusterOptions::default()
    };
    common::K8s::start(cluster, common::options()).await
}

conformance_tests!(engine: k8s);

/// The suite above proves v4 only if v4 is what ran: every exec of a run,
/// the checkout's and the steps' alike, went over `v4.channel.k8s.io`,
/// and the checkout arrived whole through the framed stream.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_v4_suite_runs_over_v4() {
    use executor_conformance::fixture::{run_to_end, write, Fixture};
    use executor_core::{RunStatus, Step};
    use kube_testcluster::exec::Protocol;
    let backend = k8s().await;
    let fx = Fixture::new("v4only");
    // Past one frame, so the stream goes in several.
    let big: Vec<u8> = (0..9_000_000u32).map(|i| (i % 253) as u8).collect();
    write(&fx.checkout(), "big.bin", &big);
    let spec = fx.spec(&backend, "v4only").step(Step::new(
        "size",
        "wc -c < big.bin; md5sum big.bin | cut -d' ' -f1",
    ));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(text.contains("exec protocol: v4.channel.k8s.io"), "{text}");
    assert!(text.contains("9000000\n"), "{text}");
    let protocols = backend.cluster.exec_protocols();
    assert!(
        !protocols.is_empty() && protocols.iter().all(|p| *p == Protocol::V4),
        "{protocols:?}"
    );
    let sum = std::process::Command::new("md5sum")
        .arg(fx.checkout().join("big.bin"))
        .output()
        .unwrap();
    let sum = String::from_utf8_lossy(&sum.stdout);
    let sum = sum.split(' ').next().unwrap();
    assert!(text.contains(&format!("\n{sum}\n")), "{sum} {text}");
}
