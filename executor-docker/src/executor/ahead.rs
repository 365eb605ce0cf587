//! Starts opened ahead: while a step runs, the next ones' execs are
//! created and started, each waiting at its gate
//! ([`StepFiles::gated_start_argv`](executor_container::detached::StepFiles::gated_start_argv)),
//! and a step begins with one line written to its exec's stdin: one trip
//! to a remote engine instead of an exec's create and start.

use std::sync::Arc;

use async_trait::async_trait;
use executor_container::container::{gated_start_argv, StepStart};
use executor_container::detached::{variables_prelude, ExecEnd, GatedStart, GATE_OPEN};
use executor_core::{ExecutorError, StepCommand};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::DockerExecutor;
use crate::engine::{Engine, ExecInput, ExecOutput, ExecSpec};

/// An exec opened at its gate: its output and its stdin.
struct Opened {
    output: ExecOutput,
    input: ExecInput,
}

impl DockerExecutor {
    /// Opens the starts of `step`'s upcoming steps in container `id` not
    /// yet opened.
    pub(super) fn open_ahead(
        &self,
        id: &str,
        working_dir: &str,
        step: &StepCommand,
        start: StepStart<'_>,
    ) {
        // A dry-run prints each call once, when it is made.
        if self.dry {
            return;
        }
        for next in &step.upcoming {
            if self.ahead.has(id, next) {
                continue;
            }
            // Its own variables, not the step's before it.
            let (prelude, env) = variables_prelude(&next.env);
            let start = StepStart {
                prelude: &prelude,
                ..start
            };
            let Ok(argv) = gated_start_argv(next, start) else {
                continue;
            };
            let exec = ExecSpec {
                cmd: argv.clone(),
                env,
                working_dir: working_dir.to_string(),
                user: self.user_of(id),
                stdin: true,
            };
            let engine = Arc::clone(&self.engine);
            let container = id.to_string();
            let opening = async move { open(engine.as_ref(), &container, &exec).await };
            self.ahead.open(id, next, argv, opening);
        }
    }
}

async fn open(
    engine: &dyn Engine,
    id: &str,
    exec: &ExecSpec,
) -> Result<Box<dyn GatedStart>, ExecutorError> {
    let exec_id = engine.exec_create(id, exec).await?;
    let (output, input) = engine.exec_start_with_input(&exec_id).await?;
    Ok(Box::new(Gate {
        opened: Opened { output, input },
    }))
}

/// A start opened ahead, released by its step.
struct Gate {
    opened: Opened,
}

#[async_trait]
impl GatedStart for Gate {
    async fn release(
        self: Box<Self>,
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        let Opened { output, mut input } = self.opened;
        let released = async {
            input.write_all(GATE_OPEN).await?;
            input.flush().await
        };
        if let Err(err) = released.await {
            // The line may have gone: the step may run; follow it.
            return Ok(ExecEnd::Cut(format!("releasing its start: {err}")));
        }
        // Kept open until the exec ends: the exec's stdin is its own.
        let _input = input;
        Ok(super::execs::pump(output, stdout, stderr, interrupt)
            .await?
            .unwrap_or(ExecEnd::Ended))
    }
}
