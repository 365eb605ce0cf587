//! The dry-run: the calls a run would make, printed instead of made.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use executor_core::labels::{dns_name, label_value};
use executor_core::script::ScriptFiles;
use executor_core::tar::{UnpackLimits, UnpackSummary};
use executor_core::{CommandOutcome, ExecutorError, RunLog, RunSpec, StepCommand};
use nix::unistd::Pid;
use tokio_util::sync::CancellationToken;

use crate::host::{Groups, Host};
use crate::process::Finished;
use crate::root::RunRoot;

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
}

#[async_trait]
impl Host for Plan {
    fn create_run(&self, base: &Path, run: &RunSpec) -> Result<RunRoot, ExecutorError> {
        let path = base
            .join(label_value(&run.runner))
            .join(format!("{}-XXXXXX", dns_name(&[&run.name], 40)));
        self.say(format!("environment: run folder {}", path.display()));
        self.say(format!(
            "mkdir {}/{{work,steps,outputs}} (locked by {}/.lock)",
            path.display(),
            path.display()
        ));
        if !run.secrets.is_empty() {
            let names: Vec<&str> = run.secrets.iter().map(|(k, _)| k.as_str()).collect();
            self.say(format!(
                "secrets for every step's environment: {} (values not shown)",
                names.join(",")
            ));
        }
        Ok(RunRoot::unlocked(path, "XXXXXX".into()))
    }

    async fn copy(
        &self,
        from: &Path,
        into: &Path,
        _limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError> {
        self.say(format!("tar {} -> {}", from.display(), into.display()));
        Ok(UnpackSummary::default())
    }

    fn write_scripts(&self, run: &RunSpec, dir: &Path) -> Result<ScriptFiles, ExecutorError> {
        self.say(format!(
            "write {} step scripts into {}",
            run.steps.len(),
            dir.display()
        ));
        Ok(ScriptFiles::planned(run, &dir.display().to_string()))
    }

    async fn run_step(
        &self,
        work_dir: &Path,
        step: &StepCommand,
        script_file: Option<std::path::PathBuf>,
        _log: &RunLog,
        _interrupt: CancellationToken,
        _groups: Groups,
    ) -> Result<Finished, ExecutorError> {
        let keys: Vec<&str> = step.env.iter().map(|(k, _)| k.as_str()).collect();
        let from = script_file.map_or_else(String::new, |f| format!(", script in {}", f.display()));
        self.say(format!(
            "exec [step {}] sh -ec {:?} (cwd {}, env {}{from})",
            step.name,
            step.script,
            work_dir.display(),
            keys.join(",")
        ));
        Ok(Finished {
            outcome: CommandOutcome::exited(0),
            lingering: Vec::new(),
            usage: None,
        })
    }

    async fn kill_run(&self, _groups: &[Pid], _mark: &str) -> usize {
        self.say("kill the run's process groups and every process carrying the run's mark".into());
        0
    }

    fn remove_run(&self, root: RunRoot) -> Result<(), ExecutorError> {
        self.say(format!("rm -rf {}", root.path.display()));
        Ok(())
    }

    async fn remove_dead(&self, base: &Path, runner: &str) -> Result<Vec<String>, ExecutorError> {
        self.say(format!(
            "rm -rf every unlocked run folder under {}",
            base.join(label_value(runner)).display()
        ));
        Ok(Vec::new())
    }
}
