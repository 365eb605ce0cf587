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
        let mut marked = self.marked.clone();
        if let Some(stdin) = io.stdin {
            match channel_start(stdin).await {
                // The step channel: one start, whose marks carry its key.
                Ok((key, command)) => {
                    self.stdin.lock().unwrap().extend(command.into_bytes());
                    marked = Some(key);
                }
                Err(all) => {
                    let mut all = all;
                    stdin.read_to_end(&mut all).await.unwrap();
                    self.stdin.lock().unwrap().extend(all);
                }
            }
        }
        if marked.is_some() {
            io.stdout.write_all(BEGIN_MARK).await.unwrap();
            io.stderr.write_all(BEGIN_MARK).await.unwrap();
        }
        io.stdout.write_all(self.stdout.as_bytes()).await.unwrap();
        // The wrapper's mark carries the status it exits with; a stream
        // cut short has none.
        if let (Some(key), Ended::Exited(code)) = (&marked, &self.ended) {
            let status = u8::try_from(*code).unwrap_or(u8::MAX);
            io.stdout.write_all(&end_mark(key, status)).await.unwrap();
            io.stderr.write_all(&end_mark(key, status)).await.unwrap();
        }
        Ok(self.ended)
    }
}

/// The key and the command of the start a step channel's stdin carries
/// first; what was read, when the stdin is something else.
async fn channel_start(
    stdin: &mut (dyn tokio::io::AsyncRead + Send + Unpin),
) -> Result<(String, String), Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while head.len() < 12 {
        if stdin.read(&mut byte).await.unwrap() == 0 {
            return Err(head);
        }
        head.push(byte[0]);
        if byte[0] == b'\n' {
            break;
        }
    }
    let Some(n) = std::str::from_utf8(&head)
        .ok()
        .and_then(|h| h.trim_end().parse::<usize>().ok())
    else {
        return Err(head);
    };
    let mut command = vec![0u8; n];
    stdin.read_exact(&mut command).await.unwrap();
    let Some(line) = std::str::from_utf8(&command)
        .ok()
        .and_then(|c| c.strip_suffix("\n#knotless-end"))
    else {
        head.extend(command);
        return Err(head);
    };
    let key = executor_container::detached::message_key(line);
    Ok((key.to_string(), line.to_string()))
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
            step_user: Default::default(),
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
