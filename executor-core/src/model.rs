//! The run model: what a CI run is, independent of where it runs.

use std::path::PathBuf;
use std::time::Duration;

use crate::mask::{Masker, Secret, MIN_SECRET_LEN};
use crate::ExecutorError;

mod checks;
mod expressions;
mod step;

pub use checks::validate_env_key;
use checks::{check_dir, check_outputs};
pub use step::{Step, STEP_OUTPUTS_FOLDER};

/// Everything an executor needs to know about one run.
///
/// ```
/// use executor_core::{RunSpec, Step};
/// let spec = RunSpec::new("build-42", "did:plc:runner", "./checkout", "./out")
///     .image("busybox:local")
///     .step(Step::new("hello", "echo hello"));
/// spec.validate().unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Human-chosen run name; appears in labels and the result.
    pub name: String,
    /// The runner's identity, a DID such as `did:plc:runner`.
    pub runner: String,
    /// Container image for backends that use one; ignored by the shell executor.
    pub image: Option<String>,
    /// Host folder streamed into the environment's work folder.
    pub checkout: PathBuf,
    /// Host folder of shared step files streamed into the steps folder, if any.
    pub steps_dir: Option<PathBuf>,
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Host folder that receives the environment's outputs folder.
    pub outputs: PathBuf,
    /// Variables for every step.
    pub env: Vec<(String, String)>,
    /// Secret variables for every step: handed to the environment without
    /// passing through any command line, and masked wherever the run
    /// prints (see [`crate::mask`]). Values are at least
    /// [`crate::mask::MIN_SECRET_LEN`] characters.
    pub secrets: Vec<(String, Secret)>,
    /// Wall-clock limit of the whole run, start to stop.
    pub run_timeout: Duration,
    /// Limit of each step.
    pub step_timeout: Duration,
    /// Limit of bringing the outputs back, after the steps (and after the
    /// run timeout, when that is what ended them): outputs matter most
    /// after a failure.
    pub outputs_timeout: Duration,
    /// Caches restored before the first step and saved after the last.
    pub caches: Vec<crate::CacheSpec>,
    /// Whether the steps are trusted code; an untrusted run's cache saves
    /// go to a namespace trusted runs never read (see [`crate::Trust`]).
    pub trust: crate::Trust,
    /// Service containers beside the steps, each ready before the first
    /// step (see [`crate::service`]); backends without them refuse a run
    /// that has any.
    pub services: Vec<crate::Service>,
    /// Limit of each service's start and readiness.
    pub service_timeout: Duration,
}

/// Default run timeout: one hour, as GitLab Runner's default job timeout.
pub const DEFAULT_RUN_TIMEOUT: Duration = Duration::from_secs(3600);
/// Default step timeout: the run timeout.
pub const DEFAULT_STEP_TIMEOUT: Duration = DEFAULT_RUN_TIMEOUT;
/// Default outputs timeout: 15 minutes. Generous: outputs are often large
/// (screenshots, builds) and must come back after a failure.
pub const DEFAULT_OUTPUTS_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// The longest run or step timeout accepted: 30 days. Longer ones are
/// refused rather than overflowing a clock or an expiry label.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(30 * 24 * 3600);

impl RunSpec {
    /// A run with no steps, no image and default timeouts.
    pub fn new(
        name: impl Into<String>,
        runner: impl Into<String>,
        checkout: impl Into<PathBuf>,
        outputs: impl Into<PathBuf>,
    ) -> Self {
        RunSpec {
            name: name.into(),
            runner: runner.into(),
            image: None,
            checkout: checkout.into(),
            steps_dir: None,
            steps: Vec::new(),
            outputs: outputs.into(),
            env: Vec::new(),
            secrets: Vec::new(),
            run_timeout: DEFAULT_RUN_TIMEOUT,
            step_timeout: DEFAULT_STEP_TIMEOUT,
            services: Vec::new(),
            service_timeout: crate::service::DEFAULT_SERVICE_TIMEOUT,
            outputs_timeout: DEFAULT_OUTPUTS_TIMEOUT,
            caches: Vec::new(),
            trust: crate::Trust::Trusted,
        }
    }

    /// Sets the image.
    pub fn image(mut self, image: impl Into<String>) -> Self {
        self.image = Some(image.into());
        self
    }

    /// Sets the shared steps folder.
    pub fn steps_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.steps_dir = Some(dir.into());
        self
    }

    /// Appends a step.
    pub fn step(mut self, step: Step) -> Self {
        self.steps.push(step);
        self
    }

    /// Adds a service container ([`crate::service`]).
    pub fn service(mut self, service: crate::Service) -> Self {
        self.services.push(service);
        self
    }

    /// Adds a variable for every step.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Adds a secret variable for every step.
    ///
    /// ```
    /// use executor_core::{mask::Secret, RunSpec};
    /// let spec = RunSpec::new("r", "did:plc:r", ".", "out")
    ///     .secret("DEPLOY_TOKEN", Secret::new("tok-123456"));
    /// assert_eq!(spec.masker().mask_str("tok-123456"), "[MASKED]");
    /// assert!(!format!("{spec:?}").contains("tok-123456"));
    /// ```
    pub fn secret(mut self, key: impl Into<String>, value: Secret) -> Self {
        self.secrets.push((key.into(), value));
        self
    }

    /// How long the run's environment may be needed at most: the run
    /// timeout, then the outputs phase. A backend's own deadline and
    /// expiry for the environment must not be shorter, or a cleanup (or
    /// the cluster) could remove a live run while its outputs come back.
    ///
    /// ```
    /// use std::time::Duration;
    /// let spec = executor_core::RunSpec::new("r", "did:plc:r", ".", "out")
    ///     .timeouts(Duration::from_secs(600), Duration::from_secs(60));
    /// assert_eq!(spec.lifetime(), Duration::from_secs(600 + 15 * 60));
    /// ```
    pub fn lifetime(&self) -> Duration {
        self.run_timeout.saturating_add(self.outputs_timeout)
    }

    /// The variables the runner gives the step at `index`, before the
    /// run's own: `CI=true`, `KNOTLESS_RUN_NAME`, `KNOTLESS_STEP_NAME` and
    /// `KNOTLESS_STEP_INDEX` (0-based). The driver adds
    /// `KNOTLESS_ATTEMPT`, `KNOTLESS_JOB_STATUS`, `STEP_OUTPUT` and
    /// `GITHUB_OUTPUT`, known only when the step starts.
    ///
    /// ```
    /// let spec = executor_core::RunSpec::new("r", "did:plc:r", ".", "out")
    ///     .step(executor_core::Step::new("build", "make"));
    /// let vars = spec.runner_variables(0);
    /// assert!(vars.contains(&("CI".into(), "true".into())));
    /// assert!(vars.contains(&("KNOTLESS_STEP_NAME".into(), "build".into())));
    /// ```
    pub fn runner_variables(&self, index: usize) -> Vec<(String, String)> {
        let name = self
            .steps
            .get(index)
            .map(|s| s.name.clone())
            .unwrap_or_default();
        vec![
            ("CI".into(), "true".into()),
            ("KNOTLESS_RUN_NAME".into(), self.name.clone()),
            ("KNOTLESS_STEP_NAME".into(), name),
            ("KNOTLESS_STEP_INDEX".into(), index.to_string()),
        ]
    }

    /// The masker of this run's secret values.
    pub fn masker(&self) -> Masker {
        Masker::new(self.secrets.iter().map(|(_, v)| v))
    }

    /// Sets both timeouts.
    pub fn timeouts(mut self, run: Duration, step: Duration) -> Self {
        self.run_timeout = run;
        self.step_timeout = step;
        self
    }

    /// Checks what every backend relies on; the message names the field and the fix.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] naming the first field at fault
    /// (`RunSpec::name`, `RunSpec::runner`, a variable's key, a step, a cache,
    /// a timeout) and what to do.
    pub fn validate(&self) -> Result<(), ExecutorError> {
        let bad = |msg: String| Err(ExecutorError::InvalidInput(msg));
        if self.name.trim().is_empty() {
            return bad("run name is empty: set RunSpec::name".into());
        }
        if self.name.chars().any(char::is_control) {
            return bad(format!(
                "run name {:?} has a control character; names are one plain line",
                self.name
            ));
        }
        if self.runner.trim().is_empty() {
            return bad(
                "runner id is empty: set RunSpec::runner to a DID such as did:plc:runner".into(),
            );
        }
        if !self.runner.starts_with("did:") {
            return bad(format!(
                "runner id {:?} is not a DID: use the form did:METHOD:ID, e.g. did:plc:runner",
                self.runner
            ));
        }
        let timeouts = [self.run_timeout, self.step_timeout, self.outputs_timeout];
        if timeouts.iter().any(Duration::is_zero) {
            return bad("timeouts must be greater than zero".into());
        }
        if timeouts.iter().any(|t| *t > MAX_TIMEOUT) {
            return bad(format!(
                "timeouts are at most {} days (run_timeout {:?}, step_timeout {:?}, outputs_timeout {:?})",
                MAX_TIMEOUT.as_secs() / 86400,
                self.run_timeout,
                self.step_timeout,
                self.outputs_timeout
            ));
        }
        let mut services = std::collections::HashSet::new();
        for service in &self.services {
            service.check().map_err(ExecutorError::InvalidInput)?;
            if !services.insert(service.name.as_str()) {
                return bad(format!("service name {:?} is used twice", service.name));
            }
        }
        if !self.services.is_empty()
            && (self.service_timeout.is_zero() || self.service_timeout > MAX_TIMEOUT)
        {
            return bad(format!(
                "service_timeout {:?} must be greater than zero and at most {} days",
                self.service_timeout,
                MAX_TIMEOUT.as_secs() / 86400
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for step in &self.steps {
            if step.name.trim().is_empty() {
                return bad("a step has an empty name".into());
            }
            if step.name.chars().any(char::is_control) {
                return bad(format!(
                    "step name {:?} has a control character; names are one plain line",
                    step.name
                ));
            }
            if step.script.contains('\0') {
                return bad(format!("the script of step {:?} has a NUL byte", step.name));
            }
            if !seen.insert(step.name.as_str()) {
                return bad(format!("step name {:?} is used twice", step.name));
            }
            if let Some(limit) = step.timeout {
                if limit.is_zero() || limit > MAX_TIMEOUT {
                    return bad(format!(
                        "the timeout of step {:?} ({limit:?}) must be greater than zero and at most {} days",
                        step.name,
                        MAX_TIMEOUT.as_secs() / 86400
                    ));
                }
            }
        }
        for (key, _) in self
            .env
            .iter()
            .chain(self.steps.iter().flat_map(|s| &s.env))
        {
            validate_env_key(key)?;
        }
        expressions::check(self)?;
        self.validate_secrets()
    }

    fn validate_secrets(&self) -> Result<(), ExecutorError> {
        let bad = |msg: String| Err(ExecutorError::InvalidInput(msg));
        let mut seen = std::collections::HashSet::new();
        for (key, value) in &self.secrets {
            validate_env_key(key)?;
            if !seen.insert(key.as_str()) {
                return bad(format!("secret {key} is given twice"));
            }
            let plain = self
                .env
                .iter()
                .chain(self.steps.iter().flat_map(|s| &s.env))
                .any(|(k, _)| k == key);
            if plain {
                return bad(format!(
                    "{key} is both a secret and a plain variable (RunSpec::env or Step::env); \
                     give it one value"
                ));
            }
            if value.expose().chars().count() < MIN_SECRET_LEN {
                return bad(format!(
                    "the value of secret {key} is shorter than {MIN_SECRET_LEN} characters: \
                     masking it would shred the log, so it is refused; use a longer value \
                     or pass it as a plain variable"
                ));
            }
            if value.expose().contains('\0') {
                return bad(format!("the value of secret {key} has a NUL byte"));
            }
        }
        Ok(())
    }
}

impl RunSpec {
    /// Checks that the checkout and steps folders are folders on this host;
    /// every backend calls it first in `start`, before creating anything.
    ///
    /// ```
    /// let spec = executor_core::RunSpec::new("r", "did:plc:r", "/no/such/folder", "out");
    /// assert!(spec.check_folders().unwrap_err().to_string().contains("RunSpec::checkout /no/such/folder"));
    /// ```
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] naming `RunSpec::checkout` or
    /// `RunSpec::steps_dir` when it is missing or not a folder.
    pub fn check_folders(&self) -> Result<(), ExecutorError> {
        check_dir(&self.checkout, "RunSpec::checkout")?;
        if let Some(steps) = &self.steps_dir {
            check_dir(steps, "RunSpec::steps_dir")?;
        }
        check_outputs(&self.outputs)
    }

    /// The image, for a backend that runs in containers (`executor` names
    /// it in the error).
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] naming `RunSpec::image` when there is none.
    ///
    /// ```
    /// let mut spec = executor_core::RunSpec::new("r", "did:plc:r", ".", "out");
    /// assert!(spec.image_for("docker").unwrap_err().to_string().contains("RunSpec::image"));
    /// spec.image = Some("busybox".into());
    /// assert_eq!(spec.image_for("docker").unwrap(), "busybox");
    /// ```
    pub fn image_for(&self, executor: &str) -> Result<&str, ExecutorError> {
        self.image.as_deref().ok_or_else(|| {
            ExecutorError::InvalidInput(format!(
                "the {executor} executor needs RunSpec::image, the image steps run in"
            ))
        })
    }
}
