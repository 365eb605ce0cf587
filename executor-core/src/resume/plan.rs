//! The run's plan: what a new runner process needs to carry a run on.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::expr::{Condition, Template};
use crate::mask::Secret;
use crate::{CacheSpec, ExecutorError, RunSpec, Step, Trust};

/// The label (Docker) or annotation (Kubernetes) that holds the SHA-256
/// of a run's plan: out of the steps' reach, so a step that rewrites the
/// plan file cannot change what a resume does (its trust, its caches).
pub const PLAN_DIGEST_KEY: &str = "dev.knotless.plan-sha256";

/// The folder, under a backend's state folder, that holds the plan.
pub const PLAN_DIR: &str = "plan";

/// The plan's file in [`PLAN_DIR`].
pub const PLAN_FILE: &str = "plan.json";

/// The largest plan read back: scripts travel in it, 1 MiB ones included.
pub const MAX_PLAN_BYTES: u64 = 64 << 20;

/// A run as a new runner process needs it: the steps in order with their
/// scripts and variables, the run's variables, timeouts, caches and
/// trust, and when it started. Secret values are never in it, only their
/// names: a resume is given them again.
///
/// A container backend writes it into the environment at start
/// ([`RunPlan::to_json`], beside the step scripts) and its digest into a
/// label or annotation ([`PLAN_DIGEST_KEY`]); [`RunPlan::parse`] takes
/// it back only if the digest matches.
///
/// ```
/// use executor_core::mask::Secret;
/// use executor_core::resume::RunPlan;
/// use executor_core::{RunSpec, Step};
/// let spec = RunSpec::new("r", "did:plc:r", ".", "out")
///     .step(Step::new("build", "make"))
///     .secret("TOKEN", Secret::new("tok-123456"));
/// let plan = RunPlan::of(&spec);
/// let json = plan.to_json();
/// assert!(!String::from_utf8_lossy(&json).contains("tok-123456"));
/// let back = RunPlan::parse(&json, &RunPlan::digest(&json)).unwrap();
/// let spec = back.into_spec("out2".into(), vec![("TOKEN".into(), Secret::new("tok-123456"))]).unwrap();
/// assert_eq!(spec.steps[0].script, "make");
/// assert!(RunPlan::parse(&json, "0000").is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPlan {
    /// The format's version: 1.
    pub version: u32,
    /// `RunSpec::name`.
    pub name: String,
    /// `RunSpec::runner`.
    pub runner: String,
    /// `RunSpec::image`.
    pub image: Option<String>,
    /// When the environment was asked for: the run timeout counts from here.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// `RunSpec::run_timeout`, in milliseconds.
    pub run_timeout_ms: u64,
    /// `RunSpec::step_timeout`, in milliseconds.
    pub step_timeout_ms: u64,
    /// `RunSpec::outputs_timeout`, in milliseconds.
    pub outputs_timeout_ms: u64,
    /// `RunSpec::env`.
    pub env: Vec<(String, String)>,
    /// The names of `RunSpec::secrets`, never their values.
    pub secrets: Vec<String>,
    /// `RunSpec::steps`, scripts included.
    pub steps: Vec<PlannedStep>,
    /// `RunSpec::caches`.
    pub caches: Vec<CacheSpec>,
    /// `RunSpec::trust`.
    pub trust: Trust,
}

/// One step of a [`RunPlan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedStep {
    /// `Step::name`.
    pub name: String,
    /// `Step::script`.
    pub script: String,
    /// `Step::env`.
    pub env: Vec<(String, String)>,
    /// `Step::timeout`, in milliseconds. Absent in plans of steps without
    /// one, so their bytes (and digests) are those of earlier runners.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// `Step::continue_on_error`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continue_on_error: bool,
    /// `Step::always`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub always: bool,
    /// `Step::id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// `Step::condition`, as it reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    /// `Step::inputs`, each template as it reads.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<(String, String)>,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl RunPlan {
    /// The plan of `spec`, started now.
    pub fn of(spec: &RunSpec) -> Self {
        RunPlan {
            version: 1,
            name: spec.name.clone(),
            runner: spec.runner.clone(),
            image: spec.image.clone(),
            started_at: OffsetDateTime::now_utc(),
            run_timeout_ms: millis(spec.run_timeout),
            step_timeout_ms: millis(spec.step_timeout),
            outputs_timeout_ms: millis(spec.outputs_timeout),
            env: spec.env.clone(),
            secrets: spec.secrets.iter().map(|(k, _)| k.clone()).collect(),
            steps: spec
                .steps
                .iter()
                .map(|s| PlannedStep {
                    name: s.name.clone(),
                    script: s.script.clone(),
                    env: s.env.clone(),
                    timeout_ms: s.timeout.map(millis),
                    continue_on_error: s.continue_on_error,
                    always: s.always,
                    id: s.id.clone(),
                    condition: s.condition.as_ref().map(ToString::to_string),
                    inputs: s
                        .inputs
                        .iter()
                        .map(|(k, t)| (k.clone(), t.to_string()))
                        .collect(),
                })
                .collect(),
            caches: spec.caches.clone(),
            trust: spec.trust,
        }
    }

    /// The plan as the bytes written into the environment.
    pub fn to_json(&self) -> Vec<u8> {
        // Plain data with string keys: serialising it cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The SHA-256 of `json`, in hex: what [`PLAN_DIGEST_KEY`] holds.
    pub fn digest(json: &[u8]) -> String {
        use sha2::{Digest, Sha256};
        hex::encode(Sha256::digest(json))
    }

    /// The plan in `json`, if its digest is `digest`.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] when the digest differs (the file
    /// was changed in the environment: a step can write there) or the
    /// bytes are not a plan of this version.
    pub fn parse(json: &[u8], digest: &str) -> Result<Self, ExecutorError> {
        let actual = Self::digest(json);
        if !actual.eq_ignore_ascii_case(digest.trim()) {
            return Err(ExecutorError::InvalidInput(format!(
                "the run's plan in its environment was changed after it started (SHA-256 {actual}, \
                 its label says {digest}); a step can write there, so it is not resumed: stop it \
                 with cleanup and run it again"
            )));
        }
        let plan: RunPlan = serde_json::from_slice(json).map_err(|e| {
            ExecutorError::InvalidInput(format!("the run's plan cannot be read: {e}"))
        })?;
        if plan.version != 1 {
            return Err(ExecutorError::InvalidInput(format!(
                "the run's plan is of version {}, this runner reads version 1",
                plan.version
            )));
        }
        Ok(plan)
    }

    /// The run again as a [`RunSpec`], its outputs going to `outputs` and
    /// with `secrets`, which must be exactly the ones it was started with
    /// (by name). The checkout is already in the environment.
    ///
    /// # Errors
    /// `InvalidInput` naming a secret the run had and `secrets` lacks, or
    /// one it did not have.
    pub fn into_spec(
        self,
        outputs: PathBuf,
        secrets: Vec<(String, Secret)>,
    ) -> Result<RunSpec, ExecutorError> {
        for name in &self.secrets {
            if !secrets.iter().any(|(k, _)| k == name) {
                return Err(ExecutorError::InvalidInput(format!(
                    "the run was started with the secret {name}: give it again (RunSpec::secrets), \
                     so that the log masks it"
                )));
            }
        }
        if let Some((extra, _)) = secrets.iter().find(|(k, _)| !self.secrets.contains(k)) {
            return Err(ExecutorError::InvalidInput(format!(
                "the run was not started with the secret {extra}; its environment cannot have it"
            )));
        }
        Ok(self.build(outputs, secrets))
    }

    /// The run as a [`RunSpec`] without secret values or host folders:
    /// what a backend needs to know its environment again (the scripts
    /// it holds, the variables it carries).
    pub fn spec(&self) -> RunSpec {
        self.clone().build(PathBuf::new(), Vec::new())
    }

    fn build(self, outputs: PathBuf, secrets: Vec<(String, Secret)>) -> RunSpec {
        let mut spec = RunSpec::new(self.name, self.runner, PathBuf::new(), outputs);
        spec.image = self.image;
        spec.run_timeout = Duration::from_millis(self.run_timeout_ms);
        spec.step_timeout = Duration::from_millis(self.step_timeout_ms);
        spec.outputs_timeout = Duration::from_millis(self.outputs_timeout_ms);
        spec.env = self.env;
        spec.secrets = secrets;
        spec.steps = self
            .steps
            .into_iter()
            .map(|s| {
                let mut step = Step::new(s.name, s.script)
                    .continue_on_error(s.continue_on_error)
                    .always(s.always);
                step.env = s.env;
                step.timeout = s.timeout_ms.map(Duration::from_millis);
                step.id = s.id;
                // The plan's digest vouches for what this runner wrote:
                // each reads as it did.
                step.condition = s.condition.and_then(|c| Condition::parse(&c).ok());
                step.inputs = s
                    .inputs
                    .into_iter()
                    .filter_map(|(k, t)| Template::parse(&t).ok().map(|t| (k, t)))
                    .collect();
                step
            })
            .collect();
        spec.caches = self.caches;
        spec.trust = self.trust;
        spec
    }
}
