//! The dry-run: the calls a run would make, printed instead of made.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use executor_core::labels::{dns_name, label_value};
use executor_core::{CommandOutcome, RunHandle, RunSpec, StepCommand};

/// Where a dry-run writes the calls it would make, one line each.
///
/// Variable *values* are never printed, only their names, since they may be secrets.
#[derive(Clone)]
pub struct Plan {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan").finish_non_exhaustive()
    }
}

impl Plan {
    /// A plan written to any writer, e.g. standard output.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        Plan {
            out: Arc::new(Mutex::new(Box::new(out))),
        }
    }

    fn say(&self, line: String) {
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        let _ = writeln!(out, "{line}");
    }

    pub(crate) fn start(&self, base: &Path, run: &RunSpec) -> RunHandle {
        let root = base
            .join(label_value(&run.runner))
            .join(format!("{}-XXXXXX", dns_name(&[&run.name], 40)));
        let handle = RunHandle {
            id: root.display().to_string(),
            work_dir: root.join("work").display().to_string(),
            steps_dir: root.join("steps").display().to_string(),
            outputs_dir: root.join("outputs").display().to_string(),
        };
        self.say(format!("environment: run folder {}", handle.id));
        self.say(format!(
            "mkdir {}/{{work,steps,outputs}} (locked by {}/.lock)",
            handle.id, handle.id
        ));
        self.say(format!(
            "tar {} -> {}",
            run.checkout.display(),
            handle.work_dir
        ));
        if let Some(steps) = &run.steps_dir {
            self.say(format!("tar {} -> {}", steps.display(), handle.steps_dir));
        }
        if !run.secrets.is_empty() {
            let names: Vec<&str> = run.secrets.iter().map(|(k, _)| k.as_str()).collect();
            self.say(format!(
                "secrets for every step's environment: {} (values not shown)",
                names.join(",")
            ));
        }
        handle
    }

    pub(crate) fn command(&self, run: &RunHandle, step: &StepCommand) -> CommandOutcome {
        let keys: Vec<&str> = step.env.iter().map(|(k, _)| k.as_str()).collect();
        self.say(format!(
            "exec [step {}] sh -ec {:?} (cwd {}, env {})",
            step.name,
            step.script,
            run.work_dir,
            keys.join(",")
        ));
        CommandOutcome::exited(0)
    }

    pub(crate) fn copy(&self, from: &str, to: &str) {
        self.say(format!("tar {from} -> {to}"));
    }

    pub(crate) fn stop(&self, run: &RunHandle) {
        self.say(format!("kill the run's process groups; rm -rf {}", run.id));
    }

    pub(crate) fn cleanup(&self, base: &Path, runner: &str) {
        self.say(format!(
            "rm -rf every unlocked run folder under {}",
            base.join(label_value(runner)).display()
        ));
    }
}
