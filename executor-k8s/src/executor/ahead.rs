//! Starts opened ahead: while a step runs, the next ones' execs are
//! opened (the connection, its TLS and the upgrade), each waiting at its
//! gate ([`StepFiles::gated_start_argv`](executor_core::detached::StepFiles::gated_start_argv)),
//! and a step begins with one line on its exec's stdin: one trip to a
//! remote API server instead of an exec's set-up.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use executor_core::container::{gated_start_argv, Prepared, StepStart};
use executor_core::detached::{ExecEnd, GatedStart, GATE_OPEN};
use executor_core::{ExecutorError, StepCommand};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{K8sExecutor, LiveRun};
use crate::cluster::{Cluster, Ended, ExecIo, ExecSession};
use crate::job::CONTAINER;

/// A start being opened, or open, for one step.
pub(super) struct Ahead {
    argv: Vec<String>,
    /// The pod it is opened in.
    pod: String,
    /// The step's script and variables, to tell it is the same step.
    script: String,
    env: Vec<(String, String)>,
    opening: JoinHandle<Result<Box<dyn ExecSession>, ExecutorError>>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        // Unreleased, its connection goes, its stdin closes, and the
        // exec ends having started nothing.
        self.opening.abort();
    }
}

/// The starts opened ahead, by Job and step id.
pub(super) type AheadMap = HashMap<(String, String), Ahead>;

impl K8sExecutor {
    /// Opens the starts of `step`'s upcoming steps not yet opened.
    pub(super) fn open_ahead(
        &self,
        job: &str,
        live: &LiveRun,
        work_dir: &str,
        step: &StepCommand,
        reconnect: std::time::Duration,
    ) {
        if self.dry {
            return;
        }
        let mut ahead = self.ahead();
        for next in &step.upcoming {
            let key = (job.to_string(), next.id.clone());
            if ahead.contains_key(&key) {
                continue;
            }
            let Ok(prelude) = super::step_prelude(live, next, work_dir) else {
                continue;
            };
            let start = StepStart {
                scripts: &live.scripts,
                prelude: &prelude,
                reconnect,
            };
            let Ok(argv) = gated_start_argv(next, start) else {
                continue;
            };
            let cluster: Arc<dyn Cluster> = Arc::clone(&self.cluster);
            let (pod, opened_argv) = (live.pod.clone(), argv.clone());
            let opening =
                tokio::spawn(
                    async move { cluster.exec(&pod, CONTAINER, &opened_argv, true).await },
                );
            ahead.insert(
                key,
                Ahead {
                    argv,
                    pod: live.pod.clone(),
                    script: next.script.clone(),
                    env: next.env.clone(),
                    opening,
                },
            );
        }
    }

    /// The start opened ahead for `step`, once open, if there is one and
    /// it is `step`'s as it is now; `None` (a start opened as usual) when
    /// there is none or it could not be opened.
    pub(super) async fn take_ahead(&self, job: &str, step: &StepCommand) -> Option<Prepared> {
        let mut ahead = self.ahead().remove(&(job.to_string(), step.id.clone()))?;
        if ahead.script != step.script || ahead.env != step.env || step.follow_from.is_some() {
            return None;
        }
        match (&mut ahead.opening).await {
            Ok(Ok(session)) => Some(Prepared {
                argv: std::mem::take(&mut ahead.argv),
                gate: Box::new(Gate { session }),
            }),
            Ok(Err(err)) => {
                tracing::debug!(%err, step = %step.name, "a start opened ahead failed; opening it now");
                None
            }
            Err(join) => {
                tracing::debug!(%join, step = %step.name, "a start opened ahead failed; opening it now");
                None
            }
        }
    }

    /// Lets go of every start opened ahead for Job `job`.
    pub(super) fn drop_ahead(&self, job: &str) {
        self.ahead().retain(|(of, _), _| of != job);
    }

    /// Lets go of every start opened ahead in `pod`.
    pub(super) fn drop_ahead_of_pod(&self, pod: &str) {
        self.ahead().retain(|_, ahead| ahead.pod != pod);
    }

    fn ahead(&self) -> std::sync::MutexGuard<'_, AheadMap> {
        self.ahead.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A start opened ahead, released by its step.
struct Gate {
    session: Box<dyn ExecSession>,
}

#[async_trait]
impl GatedStart for Gate {
    async fn release(
        self: Box<Self>,
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        let mut go = GoThenHold { sent: 0 };
        let io = ExecIo {
            stdin: Some(&mut go),
            stdout,
            stderr,
        };
        Ok(match self.session.finish(io, interrupt).await? {
            Ended::Exited(code) => ExecEnd::Exited(code),
            Ended::Interrupted => ExecEnd::Interrupted,
            // The line may have gone: the step may run; follow it.
            Ended::Failed(why) | Ended::Closed(why) => ExecEnd::Cut(why),
        })
    }
}

/// An exec's stdin that says [`GATE_OPEN`] and then nothing, never ending:
/// on v4 an ended stdin would end the exec.
struct GoThenHold {
    sent: usize,
}

impl AsyncRead for GoThenHold {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let left = GATE_OPEN.get(self.sent..).unwrap_or_default();
        if left.is_empty() {
            // Woken never: the exec's end ends the session.
            return Poll::Pending;
        }
        let n = left.len().min(buf.remaining());
        buf.put_slice(&left[..n]);
        self.sent += n;
        Poll::Ready(Ok(()))
    }
}
