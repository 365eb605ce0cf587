//! The signals that end the runner. The first cancels the run, which still
//! stops its environment and writes its result. A second exits at once:
//! it records the environment in the journal (the next run or `cleanup`
//! of this runner removes it), says what is left and the command that
//! removes it now, and writes the result as it stands.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use executor_core::events::{Event, EventSink};
use executor_core::journal::{Journal, Leftover};
use executor_core::{Failure, FailureKind, RunResult, StepResult};
use tokio_util::sync::CancellationToken;

use crate::EXIT_CANCELLED;

pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Registers the handlers now (not when a task first runs), so no
    /// signal from here on takes the default action of killing the runner.
    pub(crate) fn install() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    pub(crate) async fn cancel_on_signal(mut self, cancel: CancellationToken, left: Arc<Abandon>) {
        for n in 0.. {
            let name = tokio::select! {
                _ = self.interrupt.recv() => "SIGINT",
                _ = self.terminate.recv() => "SIGTERM",
                _ = self.hangup.recv() => "SIGHUP",
            };
            if n > 0 {
                left.now(name);
                std::process::exit(EXIT_CANCELLED);
            }
            say!("runner-cli: {name}: cancelling the run (signal again to exit at once)");
            cancel.cancel();
        }
    }
}

/// What a runner that exits at a second signal leaves, as the run goes.
#[derive(Default)]
pub(crate) struct Abandon {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The backend, the runner, the journal and the `cleanup` command
    /// that removes this run's environment.
    owner: Option<Owner>,
    /// The environment up now.
    environment: Option<String>,
    /// The result as it stands, and where it goes.
    result: Option<(RunResult, PathBuf)>,
}

pub(crate) struct Owner {
    pub executor: &'static str,
    pub runner: String,
    pub journal: Journal,
    /// `runner-cli cleanup ...` with the flags that reach this run's
    /// backend.
    pub cleanup: String,
}

impl Abandon {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Who owns the run, once the backend is known.
    pub(crate) fn owned_by(&self, owner: Owner) {
        self.state().owner = Some(owner);
    }

    /// The environment up now, known other than from the run's events (a
    /// resumed run's).
    pub(crate) fn environment(&self, id: &str) {
        self.state().environment = Some(id.to_string());
    }

    /// The result written if the runner must exit at once: the run's
    /// steps, cancelled, to `path`.
    pub(crate) fn result(&self, result: RunResult, path: PathBuf) {
        self.state().result = Some((result, path));
    }

    /// A sink that follows the environment and the steps' ends.
    pub(crate) fn sink(self: &Arc<Self>) -> Arc<dyn EventSink> {
        let this = Arc::clone(self);
        Arc::new(move |event: &Event| {
            let mut state = this.state();
            match event {
                Event::EnvironmentReady { environment, .. } if !environment.is_empty() => {
                    state.environment = Some(environment.clone());
                }
                // Running when a second signal ends the runner: it was
                // cancelled, not skipped; its end, if it comes, says more.
                Event::StepStarted { step, .. } | Event::StepResumed { step, .. } => {
                    if let Some((result, _)) = state.result.as_mut() {
                        if let Some(s) = result.steps.iter_mut().find(|s| &s.name == step) {
                            s.status = executor_core::StepStatus::Cancelled;
                        }
                    }
                }
                Event::StepFinished {
                    step,
                    status,
                    exit_code,
                    duration_ms,
                    ..
                } => {
                    if let Some((result, _)) = state.result.as_mut() {
                        if let Some(s) = result.steps.iter_mut().find(|s| &s.name == step) {
                            s.status = *status;
                            s.exit_code = *exit_code;
                            s.duration_ms = *duration_ms;
                        }
                    }
                }
                // Stopped, and the result written by the run itself.
                Event::RunFinished { .. } => {
                    state.environment = None;
                    state.result = None;
                }
                _ => {}
            }
        })
    }

    /// The second signal: record, say, and write what is left.
    fn now(&self, signal: &str) {
        let mut state = self.state();
        let left = match (&state.owner, &state.environment) {
            (Some(owner), Some(id)) => {
                let recorded = owner
                    .journal
                    .record(&Leftover::new(
                        owner.executor,
                        &owner.runner,
                        id,
                        format!("the runner exited at a second signal ({signal})"),
                    ))
                    .is_ok();
                let later = if recorded {
                    "the next run of this runner removes it, or now: "
                } else {
                    "remove it with "
                };
                format!(
                    "; the run's environment {id} is left ({later}{})",
                    owner.cleanup
                )
            }
            (Some(owner), None) => format!(
                "; an environment being started may be left: {} removes it once it expires (with --force at once, with every other environment of this runner that is not live)",
                owner.cleanup
            ),
            (None, _) => String::new(),
        };
        say!("runner-cli: second signal ({signal}), exiting without cleanup{left}");
        if let Some((mut result, path)) = state.result.take() {
            let failure = Failure::new(
                FailureKind::Cancelled,
                format!("the runner exited at a second signal ({signal}) without stopping its environment{left}"),
            );
            result.finished_at = time::OffsetDateTime::now_utc();
            result.status = failure.kind.run_status();
            result.error = Some(failure.message.clone());
            result.failure = Some(failure);
            result.mask(&crate::secrets::masker());
            if let Err(err) = crate::result_file::write_result(&result, &path) {
                say!("runner-cli: {err}");
            }
        }
    }
}

/// The `runner-cli cleanup` that removes a run's environment, with the
/// flags that reach its backend and journal.
pub(crate) fn cleanup_command(
    executor: crate::args::ExecutorKind,
    runner: &str,
    cache_dir: Option<&std::path::Path>,
    k8s: &crate::args::K8sArgs,
    shell_root: Option<&std::path::Path>,
) -> String {
    use crate::args::ExecutorKind;
    let mut words = vec![
        "runner-cli cleanup --executor".to_string(),
        executor.name().to_string(),
        "--runner".to_string(),
        quoted(runner),
    ];
    let mut flag = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            words.push(name.to_string());
            words.push(quoted(&value));
        }
    };
    flag("--cache-dir", cache_dir.map(|p| p.display().to_string()));
    match executor {
        ExecutorKind::K8s => {
            flag(
                "--kubeconfig",
                k8s.kubeconfig.as_ref().map(|p| p.display().to_string()),
            );
            flag("--context", k8s.context.clone());
            flag("--namespace", k8s.namespace.clone());
        }
        ExecutorKind::Shell => flag("--shell-root", shell_root.map(|p| p.display().to_string())),
        ExecutorKind::Docker => {}
    }
    words.join(" ")
}

/// `text` as one shell word.
fn quoted(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@+,".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// The result of a run whose steps are named, none of them run yet.
pub(crate) fn unfinished(
    name: &str,
    runner: &str,
    executor: &str,
    started_at: time::OffsetDateTime,
    steps: impl Iterator<Item = String>,
) -> RunResult {
    RunResult {
        name: name.to_string(),
        runner: runner.to_string(),
        executor: executor.to_string(),
        status: executor_core::RunStatus::Cancelled,
        error: None,
        failure: None,
        started_at,
        finished_at: started_at,
        steps: steps.map(StepResult::skipped).collect(),
        outputs: Vec::new(),
        refused: Vec::new(),
        caches: Vec::new(),
        phases: Default::default(),
        attempts: Vec::new(),
    }
}
