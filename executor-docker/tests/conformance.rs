//! The shared conformance suite on the Docker executor, against the real
//! engine `scripts/prepare-engine.sh` prepared.

mod common;

use executor_conformance::{conformance_tests, Backend};
use executor_core::Executor;
use executor_docker::DockerExecutor;

struct Docker(DockerExecutor);

#[async_trait::async_trait]
impl Backend for Docker {
    fn executor(&self) -> &dyn Executor {
        &self.0
    }
    fn image(&self) -> Option<String> {
        Some(common::image())
    }
    async fn leftovers(&self, runner: &str) -> Vec<String> {
        self.0
            .leftovers(runner)
            .await
            .unwrap_or_else(|e| vec![format!("cannot list containers: {e}")])
    }
}

async fn docker() -> Docker {
    Docker(common::executor(common::options()).await)
}

conformance_tests!(docker);
