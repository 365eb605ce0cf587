//! The test cluster's backend with its runs on the arm64 busybox image,
//! for the arm64 suites (v5 and v4).

use executor_conformance::Backend;
use executor_core::{Executor, RunSpec};

use super::K8s;

/// The arm64 busybox image `scripts/prepare-engine.sh` imports.
pub fn arm64_image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE_ARM64")
        .ok()
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| "knotless-busybox-arm64:local".into())
}

/// The test cluster's backend, its runs on the arm64 image.
pub struct Arm64(pub K8s);

#[async_trait::async_trait]
impl Backend for Arm64 {
    fn executor(&self) -> &dyn Executor {
        self.0.executor()
    }
    fn image(&self) -> Option<String> {
        Some(arm64_image())
    }
    fn services(&self) -> bool {
        true
    }
    fn adjust(&self, spec: &mut RunSpec) {
        self.0.adjust(spec)
    }
    async fn leftovers(&self, runner: &str) -> Vec<String> {
        self.0.leftovers(runner).await
    }
    async fn lose_environment(&self, runner: &str) -> bool {
        self.0.lose_environment(runner).await
    }
    async fn cut_streams_after(&self, bytes: &[u64]) -> bool {
        self.0.cut_streams_after(bytes).await
    }
    async fn another_runner(&self) -> Option<Box<dyn Executor>> {
        self.0.another_runner().await
    }
}
