//! Every fault the test cluster can inject, a killed runner, bad
//! credentials, and the dry-run against a real run.

#[path = "../common/mod.rs"]
mod common;
use common::K8s;
use executor_conformance::fixture::SharedBuf;
use executor_conformance::fixture::{
    assert_nothing_left, run_to_end, run_watched, Fixture, WatchedLog,
};
use executor_core::{CleanupScope, Executor, FailureKind, RunLog, RunStatus, Step, StepStatus};
use executor_k8s::{K8sExecutor, K8sOptions, KubeconfigSource};
use kube_testcluster::{ClusterOptions, ImagePullFault, KubeconfigAuth, PodFault};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

mod connections;
mod placement;
mod pods;
mod runner;

async fn k8s() -> K8s {
    K8s::start(ClusterOptions::default(), common::options()).await
}

fn error_of(result: &executor_core::RunResult) -> String {
    result.error.clone().unwrap_or_default()
}
