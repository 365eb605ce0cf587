//! Starts opened ahead: while a step runs, the next ones' execs are
//! created and started, each waiting at its gate
//! ([`StepFiles::gated_start_argv`](executor_core::detached::StepFiles::gated_start_argv)),
//! and a step begins with one line written to its exec's stdin: one trip
//! to a remote engine instead of an exec's create and start.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use executor_core::container::{gated_start_argv, Prepared, StepStart};
use executor_core::detached::{ExecEnd, GatedStart, GATE_OPEN};
use executor_core::{ExecutorError, StepCommand};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::DockerExecutor;
use crate::engine::{Engine, ExecInput, ExecOutput, ExecSpec};

/// An exec opened at its gate: its output and its stdin.
struct Opened {
    output: ExecOutput,
    input: ExecInput,
}

/// A start being opened, or open, for one step.
pub(super) struct Ahead {
    /// The argv it was opened with.
    argv: Vec<String>,
    /// The step's script and variables, to tell it is the same step.
    script: String,
    env: Vec<(String, String)>,
    opening: JoinHandle<Result<Opened, ExecutorError>>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        // Unreleased, its connection goes, its stdin closes, and the
        // exec ends having started nothing.
        self.opening.abort();
    }
}

/// The starts opened ahead, by run and step id.
pub(super) type AheadMap = HashMap<(String, String), Ahead>;

impl DockerExecutor {
    /// Opens the starts of `step`'s upcoming steps not yet opened.
    pub(super) fn open_ahead(
        &self,
        run_id: &str,
        working_dir: &str,
        step: &StepCommand,
        start: StepStart<'_>,
    ) {
        // A dry-run prints each call once, when it is made.
        if self.dry {
            return;
        }
        let mut ahead = self.ahead();
        for next in &step.upcoming {
            let key = (run_id.to_string(), next.id.clone());
            if ahead.contains_key(&key) {
                continue;
            }
            let Ok(argv) = gated_start_argv(next, start) else {
                continue;
            };
            let exec = ExecSpec {
                cmd: argv.clone(),
                env: next.env.clone(),
                working_dir: working_dir.to_string(),
                user: self.user_of(run_id),
                stdin: true,
            };
            let engine = Arc::clone(&self.engine);
            let id = run_id.to_string();
            let opening = tokio::spawn(async move { open(engine.as_ref(), &id, &exec).await });
            ahead.insert(
                key,
                Ahead {
                    argv,
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
    pub(super) async fn take_ahead(&self, run_id: &str, step: &StepCommand) -> Option<Prepared> {
        let mut ahead = self
            .ahead()
            .remove(&(run_id.to_string(), step.id.clone()))?;
        if ahead.script != step.script || ahead.env != step.env || step.follow_from.is_some() {
            return None;
        }
        match (&mut ahead.opening).await {
            Ok(Ok(opened)) => Some(Prepared {
                argv: std::mem::take(&mut ahead.argv),
                gate: Box::new(Gate { opened }),
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

    /// Lets go of every start opened ahead for run `run_id`.
    pub(super) fn drop_ahead(&self, run_id: &str) {
        self.ahead().retain(|(run, _), _| run != run_id);
    }
}

async fn open(engine: &dyn Engine, id: &str, exec: &ExecSpec) -> Result<Opened, ExecutorError> {
    let exec_id = engine.exec_create(id, exec).await?;
    let (output, input) = engine.exec_start_with_input(&exec_id).await?;
    Ok(Opened { output, input })
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
