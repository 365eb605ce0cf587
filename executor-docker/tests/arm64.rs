//! The shared conformance suite on an arm64 busybox image, run by the
//! same engine under qemu (issue 56): every step takes the aarch64 agent's
//! start, copies out go through the aarch64 compressor, statuses are
//! signed, and a step user is kept apart, as on x86_64.

mod common;

use executor_conformance::fixture::{assert_nothing_left, run_to_end, Fixture};
use executor_conformance::{conformance_tests, Backend};
use executor_core::{RunStatus, Step, StepIsolation};
use executor_docker::DockerOptions;

/// The arm64 image `scripts/prepare-engine.sh` imported.
fn image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE_ARM64")
        .ok()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| "knotless-busybox-arm64:local".into())
}

/// The Docker backend, its runs on the arm64 image.
struct Arm64(common::Docker);

#[async_trait::async_trait]
impl Backend for Arm64 {
    fn executor(&self) -> &dyn executor_core::Executor {
        self.0.executor()
    }
    fn image(&self) -> Option<String> {
        Some(image())
    }
    fn services(&self) -> bool {
        true
    }
    async fn leftovers(&self, runner: &str) -> Vec<String> {
        self.0.leftovers(runner).await
    }
    async fn another_runner(&self) -> Option<Box<dyn executor_core::Executor>> {
        self.0.another_runner().await
    }
    async fn lose_environment(&self, runner: &str) -> bool {
        self.0.lose_environment(runner).await
    }
}

async fn arm64() -> Arm64 {
    Arm64(common::Docker(common::executor(common::options()).await))
}

conformance_tests!(engine knotless_arm64 "needs the aarch64 helpers, an arm64 image and qemu: run scripts/test.sh": arm64;
    cut_streams: "the engine's own socket cuts nothing: tests/outage.rs runs this case through a cutting proxy",
);

/// What held on aarch64, in the result: the agent ran, and the steps'
/// user was kept apart from the runner's side.
#[cfg_attr(
    not(knotless_arm64),
    ignore = "needs the aarch64 helpers, an arm64 image and qemu: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_starts_every_step_on_aarch64_with_the_user_apart() {
    let backend = Arm64(common::Docker(
        common::executor(DockerOptions {
            user: Some("65534:65534".into()),
            ..common::options()
        })
        .await,
    ));
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

/// The leftover that forges, stops and kills what it finds of the
/// runner's side settles nothing on aarch64 either.
#[cfg_attr(
    not(knotless_arm64),
    ignore = "needs the aarch64 helpers, an arm64 image and qemu: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_of_the_step_user_cannot_touch_the_runners_side_on_aarch64() {
    let backend = Arm64(common::Docker(
        common::executor(DockerOptions {
            user: Some("65534:65534".into()),
            ..common::options()
        })
        .await,
    ));
    executor_conformance::a_leftover_of_the_step_user_cannot_touch_the_runners_side(&backend).await;
}
