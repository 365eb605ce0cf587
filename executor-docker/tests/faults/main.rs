//! Faults and bad input on the real engine, each with its own test.

#[path = "../common/mod.rs"]
mod common;
use common::Docker;
use executor_conformance::fixture::{
    assert_valid_result, run_to_end, run_watched, Fixture, WatchedLog,
};
use executor_conformance::Backend;
use executor_core::labels::{label_value, EXPIRES_KEY, RUNNER_LABEL, RUNNER_RAW_KEY};
use executor_core::{CleanupScope, Executor, FailureKind, RunLog, RunStatus, Step, StepStatus};
use executor_docker::engine::{ContainerSpec, Engine};
use executor_docker::{BollardEngine, DockerExecutor, DockerOptions, PullPolicy};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

mod cleanup;
mod images_and_oom;
mod processes;

async fn docker_with(options: DockerOptions) -> Docker {
    Docker(common::executor(options).await)
}

async fn engine() -> BollardEngine {
    BollardEngine::connect()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}
