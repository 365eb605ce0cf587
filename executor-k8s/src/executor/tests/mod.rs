//! The executor's branches over a mocked cluster seam and scripted exec
//! sessions, in milliseconds: what a real cluster shows only under faults.
//! (The wire protocols under a session are tested in `exec.rs`.)

use super::{K8sExecutor, LiveRun, PodVariables};
use crate::cluster::{Ended, ExecIo, ExecSession, MockCluster};
use crate::K8sOptions;
use async_trait::async_trait;
use executor_container::detached::{end_key, end_mark, BEGIN_MARK};
use executor_core::{
    CommandOutcome, Executor, ExecutorError, FailureKind, RunHandle, RunLog, RunSpec, Step,
    StepCommand,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

mod outcomes;
mod transfers;
mod variables;

/// What a scripted exec was given on stdin.
type Stdin = Arc<Mutex<Vec<u8>>>;

/// An exec that reads all of its stdin, writes its stdout and ends as
/// scripted.
struct ScriptedExec {
    v5: bool,
    stdout: &'static str,
    ended: Ended,
    stdin: Stdin,
    /// The key of its end marks, for a step's start or follow: it begins
    /// both streams with the begin mark and, when it exits, ends them with
    /// the end mark, as the wrapper does.
    marked: Option<String>,
}

#[async_trait]
impl ExecSession for ScriptedExec {
    fn closes_stdin(&self) -> bool {
        self.v5
    }
    async fn finish(
        self: Box<Self>,
        io: ExecIo<'_>,
        _: &CancellationToken,
    ) -> Result<Ended, ExecutorError> {
        if let Some(stdin) = io.stdin {
            let mut all = Vec::new();
            stdin.read_to_end(&mut all).await.unwrap();
            self.stdin.lock().unwrap().extend(all);
        }
        if self.marked.is_some() {
            io.stdout.write_all(BEGIN_MARK).await.unwrap();
            io.stderr.write_all(BEGIN_MARK).await.unwrap();
        }
        io.stdout.write_all(self.stdout.as_bytes()).await.unwrap();
        // The wrapper's mark carries the status it exits with; a stream
        // cut short has none.
        if let (Some(key), Ended::Exited(code)) = (&self.marked, &self.ended) {
            let status = u8::try_from(*code).unwrap_or(u8::MAX);
            io.stdout.write_all(&end_mark(key, status)).await.unwrap();
            io.stderr.write_all(&end_mark(key, status)).await.unwrap();
        }
        Ok(self.ended)
    }
}

/// An exec on a v5 cluster that prints `stdout` and ends as `ended`.
fn exec(stdout: &'static str, ended: Ended) -> Box<dyn ExecSession> {
    scripted(true, stdout, ended, &Stdin::default())
}

/// As [`exec`], for a step's start or follow, `argv`.
fn step_exec(argv: &[String], stdout: &'static str, ended: Ended) -> Box<dyn ExecSession> {
    Box::new(ScriptedExec {
        v5: true,
        stdout,
        ended,
        stdin: Stdin::default(),
        marked: Some(end_key(argv).unwrap_or_default().to_string()),
    })
}

fn scripted(v5: bool, stdout: &'static str, ended: Ended, stdin: &Stdin) -> Box<dyn ExecSession> {
    Box::new(ScriptedExec {
        v5,
        stdout,
        ended,
        stdin: stdin.clone(),
        marked: None,
    })
}

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

/// An executor with one live run, `job`, whose pod is `p`, started from `spec`.
fn live_from(cluster: MockCluster, spec: &RunSpec) -> K8sExecutor {
    let executor = K8sExecutor::with_cluster(Arc::new(cluster), K8sOptions::default());
    executor.live().insert(
        "job".into(),
        LiveRun {
            pod: "p".into(),
            pod_selector: "job-name=job".into(),
            has_secret: false,
            variables: PodVariables::of(spec, &RunHandle::in_container("job")),
            scripts: Default::default(),
            services: Vec::new(),
            log: None,
        },
    );
    executor
}

/// An executor with one live run, `job`, of one step `s` and no variables.
fn live(cluster: MockCluster) -> K8sExecutor {
    live_from(
        cluster,
        &RunSpec::new("r", "did:plc:r", ".", "out").step(Step::new("s", "make")),
    )
}

async fn run_step(
    executor: &K8sExecutor,
    env: Vec<(String, String)>,
) -> Result<CommandOutcome, ExecutorError> {
    let command = StepCommand {
        id: executor_core::labels::random_hex(8),
        follow_from: None,
        upcoming: Vec::new(),
        name: "s".into(),
        script: "make".into(),
        env,
    };
    executor
        .command(
            &RunHandle::in_container("job"),
            &command,
            &RunLog::discard(),
            CancellationToken::new(),
        )
        .await
}

async fn step(executor: &K8sExecutor) -> Result<CommandOutcome, ExecutorError> {
    run_step(executor, Vec::new()).await
}
