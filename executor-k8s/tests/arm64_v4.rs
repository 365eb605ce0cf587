//! The shared conformance suite on the arm64 busybox image, on the test
//! cluster in v4-only mode (as API servers before 1.30): the aarch64
//! agent's start over `v4.channel.k8s.io` (issue 56).

mod common;

use common::arm64::Arm64;
use executor_conformance::conformance_tests;
use kube_testcluster::ClusterOptions;

async fn arm64_v4() -> Arm64 {
    let cluster = ClusterOptions {
        v4_only: true,
        ..ClusterOptions::default()
    };
    Arm64(common::K8s::start(cluster, common::options()).await)
}

conformance_tests!(engine knotless_arm64 "needs the aarch64 helpers, an arm64 image and qemu: run scripts/test.sh": arm64_v4);
