//! The shared conformance suite on an arm64 busybox image, on the test
//! cluster speaking `v5.channel.k8s.io` (its pods are the engine's
//! containers, run under qemu): every step takes the aarch64 agent's
//! start (issue 56).

mod common;

use common::arm64::Arm64;
use executor_conformance::conformance_tests;
use executor_conformance::fixture::{assert_nothing_left, run_to_end, Fixture};
use executor_core::{RunStatus, Step, StepIsolation};
use executor_k8s::K8sOptions;
use kube_testcluster::ClusterOptions;

async fn arm64() -> Arm64 {
    Arm64(common::K8s::start(ClusterOptions::default(), common::options()).await)
}

conformance_tests!(engine knotless_arm64 "needs the aarch64 helpers, an arm64 image and qemu: run scripts/test.sh": arm64);

/// The result says the agent ran on aarch64 and kept the steps' user
/// apart.
#[cfg_attr(
    not(knotless_arm64),
    ignore = "needs the aarch64 helpers, an arm64 image and qemu: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_starts_every_step_on_aarch64_with_the_user_apart() {
    let backend = Arm64(
        common::K8s::start(
            ClusterOptions::default(),
            K8sOptions {
                run_as_user: Some(65534),
                run_as_group: Some(65534),
                ..common::options()
            },
        )
        .await,
    );
    let fx = Fixture::new("arm64");
    let spec = fx
        .spec(&backend, "arm64")
        .step(Step::new("arch", "uname -m; id -u"));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(text.contains("aarch64\n65534\n"), "{text}");
    let environment = result.attempts[0]
        .environment
        .clone()
        .expect("the environment");
    assert_eq!(environment.architecture.as_deref(), Some("aarch64"));
    assert!(environment.agent, "{environment:?}");
    assert_eq!(environment.step_isolation, StepIsolation::Uid);
    assert_nothing_left(&backend, &fx.runner).await;
}
