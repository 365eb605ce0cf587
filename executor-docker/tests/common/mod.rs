//! The engine and image the Docker tests use, as scripts/prepare-engine.sh left them.

#![allow(dead_code)]

use executor_docker::{DockerExecutor, DockerOptions, PullPolicy};

/// The local busybox image `scripts/prepare-engine.sh` imports.
pub fn image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE").unwrap_or_else(|_| "knotless-busybox:local".into())
}

/// Options for tests: no pulling (no registry is reachable) and no network
/// (steps need none, and the default bridge needs iptables, which podman
/// machines may lack).
pub fn options() -> DockerOptions {
    DockerOptions {
        pull: PullPolicy::Never,
        network: Some("none".into()),
        ..DockerOptions::default()
    }
}

/// An executor on the test engine; fails the test with the reason when
/// there is none (run `eval "$(scripts/prepare-engine.sh)"` first).
pub async fn executor(options: DockerOptions) -> DockerExecutor {
    match DockerExecutor::connect(options).await {
        Ok(e) => e,
        Err(err) => panic!("{err}\nrun `eval \"$(scripts/prepare-engine.sh)\"` first"),
    }
}

/// The Docker executor as a conformance backend.
pub struct Docker(pub DockerExecutor);

#[async_trait::async_trait]
impl executor_conformance::Backend for Docker {
    fn executor(&self) -> &dyn executor_core::Executor {
        &self.0
    }
    fn image(&self) -> Option<String> {
        Some(image())
    }
    fn services(&self) -> bool {
        true
    }
    async fn leftovers(&self, runner: &str) -> Vec<String> {
        self.0
            .leftovers(runner)
            .await
            .unwrap_or_else(|e| vec![format!("cannot list containers: {e}")])
    }
    async fn another_runner(&self) -> Option<Box<dyn executor_core::Executor>> {
        Some(Box::new(executor(options()).await))
    }
    async fn lose_environment(&self, runner: &str) -> bool {
        use executor_docker::engine::Engine as _;
        let ids = self.0.containers(runner).await.unwrap_or_default();
        let engine = executor_docker::BollardEngine::connect()
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for id in &ids {
            engine.remove(id).await.unwrap_or_else(|e| panic!("{e}"));
        }
        !ids.is_empty()
    }
}
