//! The step channel of each run's container ([`StepChannel`]): one exec
//! that starts every step, instead of an exec per step.

use std::sync::Arc;

use async_trait::async_trait;
use executor_container::container::{gated_start_argv, Prepared, StepStart};
use executor_container::detached::{ChannelExec, ChannelIo, Signing, StepChannel};
use executor_core::{ExecutorError, Offsets, StepCommand};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use super::DockerExecutor;
use crate::engine::{Engine, ExecSpec, StepStream};

/// How large each stream's buffer between the exec and the step is.
const BUFFER: usize = 256 * 1024;

impl DockerExecutor {
    /// Container `id`'s step channel, made on first use.
    pub(super) fn step_channel(&self, id: &str, working_dir: &str) -> Arc<StepChannel> {
        self.channels.of(id, || {
            Arc::new(ContainerChannel {
                engine: Arc::clone(&self.engine),
                id: id.to_string(),
                user: self.user_of(id),
                step_user: self.step_user_of(id),
                working_dir: working_dir.to_string(),
            })
        })
    }

    /// How `step` starts in container `id`: through the channel, or an
    /// exec of its own opened ahead, or (`None`) an exec opened now.
    ///
    /// # Errors
    /// A step whose files cannot be named.
    pub(super) async fn prepared_start(
        &self,
        id: &str,
        working_dir: &str,
        step: &StepCommand,
        start: StepStart<'_>,
        signing: Signing,
    ) -> Result<Option<Prepared>, ExecutorError> {
        // Every start goes through the container's channel: one message,
        // not an exec's create and start. A step an earlier runner started
        // is followed; one it may not have started (the log has nothing
        // of it) has its start ready, released only if it never started.
        let may_start = matches!(
            step.follow_from,
            None | Some(Offsets {
                stdout: 0,
                stderr: 0
            })
        );
        // Only the channel's agent starts a step as its user: an exec of
        // its own, as root, would run its shell as root.
        let apart = self.step_user_of(id).is_some();
        let through_channel = if may_start && (self.through_channel || apart) {
            let argv = gated_start_argv(step, start)?;
            self.step_channel(id, working_dir)
                .start(argv.clone(), Some(working_dir), signing)
                .map(|gate| Prepared { gate, argv })
        } else {
            None
        };
        let prepared = match through_channel {
            Some(prepared) => Some(prepared),
            None if may_start && apart => {
                return Err(ExecutorError::InvalidInput(format!(
                    "step {}: it cannot be started through the step channel, the only start that runs it as DockerOptions::user",
                    step.name
                )))
            }
            None => self.ahead.take(id, step).await,
        };
        if !self.through_channel && !apart {
            self.open_ahead(id, working_dir, step, start);
        }
        Ok(prepared)
    }
}

/// Opens a channel's exec in one container, as its steps' user, or as
/// root where its agent starts each step as `step_user`.
struct ContainerChannel {
    engine: Arc<dyn Engine>,
    id: String,
    user: Option<String>,
    step_user: Option<String>,
    working_dir: String,
}

#[async_trait]
impl ChannelExec for ContainerChannel {
    fn step_user(&self) -> Option<String> {
        self.step_user.clone()
    }

    async fn open(&self, argv: &[String]) -> Result<ChannelIo, ExecutorError> {
        let exec = ExecSpec {
            cmd: argv.to_vec(),
            env: Vec::new(),
            working_dir: self.working_dir.clone(),
            user: self.user.clone(),
            stdin: true,
        };
        let exec_id = self.engine.exec_create(&self.id, &exec).await?;
        let (mut output, input) = self.engine.exec_start_with_input(&exec_id).await?;
        let (mut stdout_end, stdout) = tokio::io::duplex(BUFFER);
        let (mut stderr_end, stderr) = tokio::io::duplex(BUFFER);
        // The stream is read until it ends, its output has nowhere to go,
        // or the channel is dropped (which aborts it): each drops the
        // exec's connection.
        let pump = tokio::spawn(async move {
            while let Some(chunk) = output.next().await {
                let written = match chunk {
                    Ok((StepStream::Stdout, bytes)) => stdout_end.write_all(&bytes).await,
                    Ok((StepStream::Stderr, bytes)) => stderr_end.write_all(&bytes).await,
                    Err(err) => {
                        tracing::debug!(%err, "a step channel's stream broke");
                        break;
                    }
                };
                if written.is_err() {
                    break;
                }
            }
        });
        Ok(ChannelIo {
            stdin: Box::new(input),
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
            pump: Some(pump),
        })
    }
}
