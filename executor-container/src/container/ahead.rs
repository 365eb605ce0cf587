//! Starts opened ahead ([`StepCommand::upcoming`]): what a container
//! backend keeps of the next steps' execs while a step runs, each open
//! one a [`GatedStart`] of the backend's own.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;

use tokio::task::JoinHandle;

use super::Prepared;
use crate::detached::GatedStart;
use executor_core::{ExecutorError, StepCommand};

/// An open start, waiting at its gate.
type Gate = Box<dyn GatedStart>;

/// The starts opened ahead in each environment, by step id. Dropped, or
/// let go of, an unreleased one ends its exec's connection, so its gate
/// reads the end of its stdin and runs nothing.
#[derive(Default)]
pub struct AheadStarts {
    opened: Mutex<HashMap<(String, String), Ahead>>,
}

struct Ahead {
    /// The argv it was opened with.
    argv: Vec<String>,
    /// The step's script and variables, to tell it is the same step.
    script: String,
    env: Vec<(String, String)>,
    opening: JoinHandle<Result<Gate, ExecutorError>>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.opening.abort();
    }
}

impl AheadStarts {
    /// Whether `step`'s start in environment `env` is opened already.
    pub fn has(&self, env: &str, step: &StepCommand) -> bool {
        self.opened()
            .contains_key(&(env.to_string(), step.id.clone()))
    }

    /// Opens `step`'s start in `env` with `argv`, in a task of its own:
    /// `opening` is the engine's open, ending in the start at its gate.
    pub fn open(
        &self,
        env: &str,
        step: &StepCommand,
        argv: Vec<String>,
        opening: impl Future<Output = Result<Gate, ExecutorError>> + Send + 'static,
    ) {
        let ahead = Ahead {
            argv,
            script: step.script.clone(),
            env: step.env.clone(),
            opening: tokio::spawn(opening),
        };
        self.opened()
            .insert((env.to_string(), step.id.clone()), ahead);
    }

    /// `step`'s start in `env`, once open, if one was opened for it as it
    /// is now; `None` (a start opened as usual) when there is none or it
    /// could not be opened.
    pub async fn take(&self, env: &str, step: &StepCommand) -> Option<Prepared> {
        let mut ahead = self.opened().remove(&(env.to_string(), step.id.clone()))?;
        if ahead.script != step.script || ahead.env != step.env || step.follow_from.is_some() {
            return None;
        }
        match (&mut ahead.opening).await {
            Ok(Ok(gate)) => Some(Prepared {
                argv: std::mem::take(&mut ahead.argv),
                gate,
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

    /// Lets go of every start opened ahead in `env`.
    pub fn let_go(&self, env: &str) {
        self.opened().retain(|(of, _), _| of != env);
    }

    fn opened(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Ahead>> {
        self.opened.lock().unwrap_or_else(|p| p.into_inner())
    }
}
