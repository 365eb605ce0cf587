//! What the container backends share: one long-lived environment per run,
//! named and marked the same way, found again by its marks, and each step
//! run through [`crate::detached`], with the environment asked what an
//! ending means when the code alone cannot say.
//!
//! A backend keeps to the calls its engine really makes (create, exec,
//! copy in and out, delete, list by label); this module decides what they
//! carry. Docker puts every mark in the container's labels; Kubernetes
//! puts [`Marks::labels`] in a Job's labels and [`Marks::notes`] in its
//! annotations, since a label value cannot hold a DID.
//!
//! ```
//! use executor_container::container::{environment_name, Marks, expired, is_runners};
//! use executor_core::RunSpec;
//! use std::collections::HashMap;
//! use std::time::Duration;
//!
//! let run = RunSpec::new("Build #7", "did:plc:runner", "./checkout", "./outputs");
//! assert_eq!(environment_name(&run, "1a2b3c"), "knotless-build-7-1a2b3c");
//! let marks = Marks::of(&run, 1_000, Duration::from_secs(60), "ab12");
//! let notes: HashMap<_, _> = marks.notes.into_iter().collect();
//! assert!(is_runners(&notes, "did:plc:runner"));
//! assert!(!expired(&notes, 1_000));
//! assert!(expired(&notes, u64::MAX));
//! ```

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::time::Duration;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::detached::{
    run_step_released, Follow, GatedStart, Signing, StepEnd, StepExec, StepFiles,
};
use executor_core::labels::{
    dns_name, label_value, random_hex, EXPIRES_KEY, RUNNER_LABEL, RUNNER_RAW_KEY, RUN_LABEL,
    RUN_RAW_KEY,
};
use executor_core::resume::PLAN_DIGEST_KEY;
use executor_core::script::{Script, ScriptFiles};
use executor_core::{CommandOutcome, ExecutorError, RunLog, RunSpec, StepCommand};

pub mod ahead;
pub mod compressing;
pub mod gather;
pub mod oom;
pub mod step_user;

pub use crate::staging::{HELPER_MACHINES, MACHINE_SUFFIX, STATE_DIR};

/// Writes the helpers this build has (the step's stream copier and the
/// compressor of copies out) into `dir`, a folder staged to be sent in as
/// the state folder.
///
/// ```
/// use executor_container::container::{compressing::GZ_FILE, stage_helpers};
/// use executor_container::detached::TEE_FILE;
/// let dir = tempfile::tempdir().unwrap();
/// stage_helpers(dir.path()).unwrap();
/// if cfg!(target_arch = "x86_64") {
///     assert!(dir.path().join(TEE_FILE).exists());
///     assert!(dir.path().join(GZ_FILE).exists());
/// }
/// ```
///
/// # Errors
/// `Io` naming the file that cannot be written.
pub fn stage_helpers(dir: &std::path::Path) -> Result<(), ExecutorError> {
    crate::detached::stage_tee(dir)?;
    crate::detached::stage_agent(dir)?;
    compressing::stage_gz(dir)
}

/// The environment's main process. It only keeps the container alive:
/// every step is an exec beside it, so a step that exits, fails or kills
/// its own shell never ends the environment.
pub const KEEP_ALIVE: [&str; 3] = ["sh", "-c", "while :; do sleep 3600; done"];

/// The name of a run's environment, `knotless-NAME-SUFFIX`: a DNS-1123
/// label short enough for a Job, whose pods add six characters.
pub fn environment_name(run: &RunSpec, suffix: &str) -> String {
    format!("knotless-{}-{suffix}", dns_name(&[&run.name], 40))
}

/// A fresh suffix for [`environment_name`].
pub fn name_suffix() -> String {
    random_hex(6)
}

/// The marks that tie an environment to its runner and run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marks {
    /// The runner and the run, sanitised ([`label_value`]): what a list
    /// selects by.
    pub labels: Vec<(String, String)>,
    /// The runner's DID and the run's name as they are (the sanitised
    /// values could in principle be shared), the expiry in seconds since
    /// the Unix epoch, and the plan's digest, which resume checks the
    /// plan against: no step can change a mark.
    pub notes: Vec<(String, String)>,
}

impl Marks {
    /// The marks of `run`'s environment, made at `now` (seconds since the
    /// Unix epoch). It expires once every phase the driver may still use it
    /// for is over ([`RunSpec::lifetime`]) and `grace` has passed, so a
    /// cleanup never takes an environment a live runner still needs.
    pub fn of(run: &RunSpec, now: u64, grace: Duration, plan_digest: &str) -> Self {
        let expires = now.saturating_add(run.lifetime().saturating_add(grace).as_secs());
        Marks {
            labels: vec![
                (RUNNER_LABEL.to_string(), label_value(&run.runner)),
                (RUN_LABEL.to_string(), label_value(&run.name)),
            ],
            notes: vec![
                (RUNNER_RAW_KEY.to_string(), run.runner.clone()),
                (RUN_RAW_KEY.to_string(), run.name.clone()),
                (EXPIRES_KEY.to_string(), expires.to_string()),
                (PLAN_DIGEST_KEY.to_string(), plan_digest.to_string()),
            ],
        }
    }
}

/// Labels or annotations as an engine returns them.
pub trait NoteMap {
    /// The value under `key`, if there is one.
    fn note(&self, key: &str) -> Option<&str>;
}

impl<S: BuildHasher> NoteMap for HashMap<String, String, S> {
    fn note(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl NoteMap for BTreeMap<String, String> {
    fn note(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

/// Whether an environment with these notes is `runner`'s: by the raw
/// DID, never by the sanitised label alone.
pub fn is_runners(notes: &impl NoteMap, runner: &str) -> bool {
    notes.note(RUNNER_RAW_KEY) == Some(runner)
}

/// Whether an environment with these notes has outlived its expiry at
/// `now`. One without a readable expiry has: nothing says it is needed.
pub fn expired(notes: &impl NoteMap, now: u64) -> bool {
    notes
        .note(EXPIRES_KEY)
        .and_then(|e| e.parse::<u64>().ok())
        .is_none_or(|e| e <= now)
}

/// Where [`the_live_run`] looked, for its errors.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    /// What one environment is: `container`, `Job`.
    pub kind: &'a str,
    /// Where they were listed: `on the engine`, `in namespace ci`.
    pub place: &'a str,
}

/// Of the environments `found` for `runner`, the one of run `name`, with
/// the digest its plan must have.
///
/// # Errors
/// `InvalidInput` when there is none (the run finished and was stopped,
/// or never started), more than one (stale ones for cleanup to remove),
/// or the one has no plan digest (a runner without resume started it).
///
/// ```
/// use executor_container::container::{the_live_run, Marks, Place};
/// use executor_core::RunSpec;
/// use std::collections::HashMap;
/// use std::time::Duration;
///
/// let run = RunSpec::new("b1", "did:plc:r", ".", "./out");
/// let notes: HashMap<_, _> = Marks::of(&run, 0, Duration::ZERO, "ab12").notes.into_iter().collect();
/// let place = Place { kind: "container", place: "on the engine" };
/// let found = vec![("c1", notes)];
/// let ((id, _), digest) = the_live_run(found.clone(), |(_, n)| Some(n), "did:plc:r", "b1", place).unwrap();
/// assert_eq!((id, digest.as_str()), ("c1", "ab12"));
/// assert!(the_live_run(found, |(_, n)| Some(n), "did:plc:r", "b2", place).is_err());
/// ```
pub fn the_live_run<T, N: NoteMap>(
    found: Vec<T>,
    notes_of: impl Fn(&T) -> Option<&N>,
    runner: &str,
    name: &str,
    place: Place<'_>,
) -> Result<(T, String), ExecutorError> {
    let mut found: Vec<T> = found
        .into_iter()
        .filter(|env| {
            notes_of(env)
                .is_some_and(|n| is_runners(n, runner) && n.note(RUN_RAW_KEY) == Some(name))
        })
        .collect();
    let Place { kind, place } = place;
    let env = match (found.pop(), found.len()) {
        (Some(one), 0) => one,
        (None, _) => {
            return Err(ExecutorError::InvalidInput(format!(
                "no live run {name:?} of runner {runner} {place}: it finished and was stopped, or never started"
            )))
        }
        (Some(_), more) => {
            return Err(ExecutorError::InvalidInput(format!(
                "{} {kind}s of run {name:?} of runner {runner} {place}; remove the stale ones with cleanup",
                more + 1
            )))
        }
    };
    let digest = notes_of(&env)
        .and_then(|n| n.note(PLAN_DIGEST_KEY))
        .map(str::to_string)
        .ok_or_else(|| {
            ExecutorError::InvalidInput(format!(
                "the {kind} of run {name:?} has no {PLAN_DIGEST_KEY} mark: a runner without resume started it"
            ))
        })?;
    Ok((env, digest))
}

/// A container environment as a step sees it: execs in it, and the
/// environment's own word on how a step ended.
#[async_trait]
pub trait StepEnvironment: StepExec {
    /// What the environment says of a step that exited with `code` (not
    /// 0), or whose status was lost (`None`). `Ok(None)`: it is fine and
    /// the code stands (a lost status stays lost). `Ok(Some(outcome))`: it
    /// explains the ending, as an OOM kill does. `files` are the step's
    /// own ([`StepFiles::oom_file`] holds the OOM kills counted before it).
    ///
    /// # Errors
    /// [`ExecutorError::EnvironmentLost`] (or the backend's words for it)
    /// when the environment itself is gone or was killed: the step's code,
    /// if any, was that kill's.
    async fn explain(
        &self,
        code: Option<i32>,
        files: &StepFiles,
    ) -> Result<Option<CommandOutcome>, ExecutorError>;
}

/// How a step starts in its environment.
#[derive(Debug, Clone, Copy)]
pub struct StepStart<'a> {
    /// The scripts the environment holds as files; a script the run was
    /// not started with goes inline.
    pub scripts: &'a ScriptFiles,
    /// Shell text run before the step's shell (variables, `cd`).
    pub prelude: &'a str,
    /// How long a broken stream may take to be followed again.
    pub reconnect: Duration,
}

/// A step's start opened ahead of its time ([`StepCommand::upcoming`]):
/// its argv, from [`gated_start_argv`], and the exec waiting at its gate.
pub struct Prepared {
    /// The argv the exec was opened with.
    pub argv: Vec<String>,
    /// The exec, waiting for its release.
    pub gate: Box<dyn GatedStart>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared").finish_non_exhaustive()
    }
}

/// The argv of `step`'s start opened ahead, waiting for its release
/// ([`StepFiles::gated_start_argv`]); [`run_command`] releases it.
///
/// # Errors
/// `InvalidInput` for an id that cannot name files.
pub fn gated_start_argv(
    step: &StepCommand,
    start: StepStart<'_>,
) -> Result<Vec<String>, ExecutorError> {
    let files = StepFiles::of(step, STATE_DIR)?;
    let file = start.scripts.path_of(&step.script);
    let script = match &file {
        Some(path) => Script::File(path),
        None => Script::Inline(&step.script),
    };
    Ok(files.gated_start_argv(start.prelude, script))
}

/// Runs `step` in `env` to its outcome: detached, followed through broken
/// streams ([`run_step`](crate::detached::run_step)), and any ending the
/// code cannot explain put to the environment. A start opened ahead
/// (`prepared`) is released instead of opened.
///
/// # Errors
/// As [`run_step`](crate::detached::run_step), unless the environment
/// explains it; the environment's own loss;
/// [`ExecutorError::LostExitStatus`] when the status was lost with the
/// streams that carry it (retryable); an `internal` error (not retryable:
/// the step's own processes can cause it) when the environment answered
/// but holds no status to trust: never a success.
pub async fn run_command(
    env: &dyn StepEnvironment,
    step: &StepCommand,
    start: StepStart<'_>,
    prepared: Option<Prepared>,
    log: &RunLog,
    interrupt: &CancellationToken,
) -> Result<CommandOutcome, ExecutorError> {
    let files = StepFiles::of(step, STATE_DIR)?;
    let (argv, gate) = match prepared {
        Some(Prepared { argv, gate }) => (argv, Some(gate)),
        None => {
            let file = start.scripts.path_of(&step.script);
            let script = match &file {
                Some(path) => Script::File(path),
                None => Script::Inline(&step.script),
            };
            (files.start_argv(start.prelude, script), None)
        }
    };
    let follow = Follow {
        reconnect: start.reconnect,
        from: step.follow_from,
        signed: step
            .follow_from
            .and_then(|_| Signing::followed(log, &step.id)),
    };
    let ended = match run_step_released(env, &files, &argv, gate, log, interrupt, follow).await {
        Ok(ended) => ended,
        // An environment gone under the step is lost, not a refused call.
        Err(err) => return env.explain(None, &files).await?.ok_or(err),
    };
    match ended {
        StepEnd::Exited(0) => Ok(CommandOutcome::exited(0)),
        // Any failure may be an OOM kill the shell passed on as its own
        // code, or the environment dying under the step: it says, not the code.
        StepEnd::Exited(code) => Ok(env
            .explain(Some(code), &files)
            .await?
            .unwrap_or(CommandOutcome::exited(code))),
        StepEnd::Interrupted => Ok(CommandOutcome::Interrupted),
        // The environment answered, yet holds no status to trust: its
        // supervisor gone without one, a status file refused. The step's
        // own processes can do that (they run as its user), so it is
        // never retried: `internal`, not the `unreachable` of a stream
        // that broke.
        StepEnd::Lost(detail) => match env.explain(None, &files).await? {
            Some(outcome) => Ok(outcome),
            None => Err(ExecutorError::backend(
                format!("exit status of step {} was lost", step.name),
                detail,
            )),
        },
    }
}
