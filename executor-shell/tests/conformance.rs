//! The shared conformance suite on the shell executor.

use std::path::PathBuf;

use executor_conformance::{conformance_tests, Backend};
use executor_core::Executor;
use executor_shell::ShellExecutor;

struct Shell {
    executor: ShellExecutor,
    _base: tempfile::TempDir,
}

#[async_trait::async_trait]
impl Backend for Shell {
    fn executor(&self) -> &dyn Executor {
        &self.executor
    }
    async fn leftovers(&self, runner: &str) -> Vec<String> {
        self.executor
            .leftovers(runner)
            .iter()
            .map(|p: &PathBuf| p.display().to_string())
            .collect()
    }
}

async fn shell() -> Shell {
    let base = tempfile::tempdir().expect("temp folder for run roots");
    Shell {
        executor: ShellExecutor::new(base.path()),
        _base: base,
    }
}

conformance_tests!(shell;
    cut_streams: "a shell step's output reaches the runner through no connection to cut",
    another_runner: "a shell run ends with the runner process that started it, so none is resumed",
    lose_environment: "nothing outside the runner removes a shell run's folder mid-run",
    services: "a shell run's steps run on this host, with no service containers to fail",
);
