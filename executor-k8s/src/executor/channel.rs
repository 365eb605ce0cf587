//! The step channel of each pod ([`StepChannel`]): one exec that starts
//! every step, instead of an exec per step.

use std::sync::Arc;

use async_trait::async_trait;
use executor_container::detached::{ChannelExec, ChannelIo, StepChannel};
use executor_core::ExecutorError;
use tokio_util::sync::CancellationToken;

use super::K8sExecutor;
use crate::cluster::{Cluster, ExecIo};
use crate::job::CONTAINER;

/// How large each stream's buffer between the exec and the step is.
const BUFFER: usize = 256 * 1024;

impl K8sExecutor {
    /// `pod`'s step channel, made on first use: as the pod's user, or as
    /// root starting each step as `step_user` (`UID:GID:GROUPS`).
    pub(super) fn step_channel(&self, pod: &str, step_user: Option<&str>) -> Arc<StepChannel> {
        self.channels.of(pod, || {
            Arc::new(PodChannel {
                cluster: Arc::clone(&self.cluster),
                pod: pod.to_string(),
                step_user: step_user.map(str::to_string),
            })
        })
    }
}

/// Opens a channel's exec in one pod.
struct PodChannel {
    cluster: Arc<dyn Cluster>,
    pod: String,
    step_user: Option<String>,
}

#[async_trait]
impl ChannelExec for PodChannel {
    fn step_user(&self) -> Option<String> {
        self.step_user.clone()
    }

    async fn open(&self, argv: &[String]) -> Result<ChannelIo, ExecutorError> {
        let session = self.cluster.exec(&self.pod, CONTAINER, argv, true).await?;
        let (stdin, mut stdin_end) = tokio::io::duplex(BUFFER);
        let (mut stdout_end, stdout) = tokio::io::duplex(BUFFER);
        let (mut stderr_end, stderr) = tokio::io::duplex(BUFFER);
        // The session runs until its stdin ends, its output has nowhere to
        // go, or the channel is dropped (which aborts it): each ends the
        // exec's connection.
        let pump = tokio::spawn(async move {
            let io = ExecIo {
                stdin: Some(&mut stdin_end),
                stdout: &mut stdout_end,
                stderr: &mut stderr_end,
            };
            let ended = session.finish(io, &CancellationToken::new()).await;
            tracing::debug!(?ended, "a step channel ended");
        });
        Ok(ChannelIo {
            stdin: Box::new(stdin),
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
            pump: Some(pump),
        })
    }
}
