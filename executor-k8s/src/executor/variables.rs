//! A step's variables on Kubernetes: values travel in the run's Secret,
//! set at start; a step's command line names them only.

use std::collections::HashMap;

use executor_core::{ExecutorError, RunHandle, RunSpec, StepCommand};

use crate::job::{held_step_variables, step_key};

/// The variables a run's pod holds for its steps, put there at start (the
/// run's Secret and the container's own environment): a step's variables
/// never travel in an exec's command line, where the API server's audit
/// log would keep them. A step gets exactly its [`StepCommand::env`]
/// from them.
#[derive(Clone, Default)]
pub(super) struct PodVariables {
    /// `(name, value)` to the pod variable that holds that value.
    by_value: HashMap<(String, String), String>,
    /// Every pod variable that holds one: a step sees none it did not ask for.
    pod_vars: Vec<String>,
    /// The run's secret values: a value the pod does not hold travels in
    /// the step's start only when it holds none of them.
    secrets: Option<executor_core::Masker>,
}

impl PodVariables {
    /// What a run started from `run`, whose folders are `handle`'s, carries:
    /// the standard folders and run variables under their own names, each
    /// step's variables under [`step_key`].
    pub(super) fn of(run: &RunSpec, handle: &RunHandle) -> Self {
        let mut vars = PodVariables::default();
        let secrets = run.masker();
        let own = handle
            .standard_env()
            .into_iter()
            .chain(run.env.iter().cloned());
        for (name, value) in own {
            vars.hold(name.clone(), value, name);
        }
        for i in 0..run.steps.len() {
            for (name, value) in held_step_variables(run, i, &secrets) {
                let key = step_key(i, &name);
                vars.hold(name, value, key);
            }
        }
        vars.secrets = Some(secrets);
        vars
    }

    fn hold(&mut self, name: String, value: String, pod_var: String) {
        if !self.pod_vars.contains(&pod_var) {
            self.pod_vars.push(pod_var.clone());
        }
        self.by_value.insert((name, value), pod_var);
    }

    fn holds_no_secret(&self, value: &str) -> bool {
        self.secrets
            .as_ref()
            .is_none_or(|m| matches!(m.mask_str(value), std::borrow::Cow::Borrowed(_)))
    }

    /// The shell words that give `step` exactly its variables: an export
    /// for each whose pod variable has another name, an unset for every
    /// pod variable it did not ask for.
    ///
    /// # Errors
    /// `InvalidInput` for a variable whose value the pod does not hold:
    /// one that was not in the `RunSpec` the run was started with.
    pub(super) fn prelude(&self, step: &StepCommand) -> Result<String, ExecutorError> {
        // As in a process environment, the last value of a name wins.
        let mut wanted: Vec<(&str, &str)> = Vec::new();
        for (name, value) in &step.env {
            wanted.retain(|(n, _)| n != name);
            wanted.push((name, value));
        }
        let mut prelude = String::new();
        for (name, value) in &wanted {
            let key = ((*name).to_string(), (*value).to_string());
            match self.by_value.get(&key) {
                Some(pod_var) if pod_var == name => {}
                Some(pod_var) => prelude.push_str(&format!("export {name}=\"${pod_var}\"; ")),
                // Known only as the step starts (the runner's variables, a
                // value computed from earlier steps' outputs): it holds no
                // secret, so it may travel in the start itself.
                None if self.holds_no_secret(value) => prelude.push_str(&format!(
                    "export {name}={}; ",
                    executor_core::script::quote(value)
                )),
                None => {
                    return Err(ExecutorError::InvalidInput(format!(
                        "step {}: StepCommand::env {name} has a value the run was not started \
                         with, and it holds a secret; the k8s executor carries secrets in the \
                         run's Secret, set from RunSpec::secrets at start, never in an exec's \
                         command line: give the value as a secret of its own",
                        step.name
                    )))
                }
            }
        }
        let unset: Vec<&str> = self
            .pod_vars
            .iter()
            .map(String::as_str)
            .filter(|var| !wanted.iter().any(|(name, _)| name == var))
            .collect();
        if !unset.is_empty() {
            prelude.push_str(&format!("unset {}; ", unset.join(" ")));
        }
        Ok(prelude)
    }
}
