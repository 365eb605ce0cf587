//! Starts opened ahead: while a step runs, the next ones' execs are
//! opened (the connection, its TLS and the upgrade), each waiting at its
//! gate ([`StepFiles::gated_start_argv`](executor_container::detached::StepFiles::gated_start_argv)),
//! and a step begins with one line on its exec's stdin: one trip to a
//! remote API server instead of an exec's set-up.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use executor_container::container::{gated_start_argv, StepStart};
use executor_container::detached::{ExecEnd, GatedStart, GATE_OPEN};
use executor_core::{ExecutorError, StepCommand};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;

use super::{K8sExecutor, LiveRun};
use crate::cluster::{Cluster, Ended, ExecIo, ExecSession};
use crate::job::CONTAINER;

impl K8sExecutor {
    /// Opens the starts of `step`'s upcoming steps in `live`'s pod not
    /// yet opened.
    pub(super) fn open_ahead(
        &self,
        live: &LiveRun,
        work_dir: &str,
        step: &StepCommand,
        reconnect: std::time::Duration,
    ) {
        if self.dry {
            return;
        }
        for next in &step.upcoming {
            if self.ahead.has(&live.pod, next) {
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
            let opening = async move {
                let session = cluster.exec(&pod, CONTAINER, &opened_argv, true).await?;
                Ok(Box::new(Gate { session }) as Box<dyn GatedStart>)
            };
            self.ahead.open(&live.pod, next, argv, opening);
        }
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
