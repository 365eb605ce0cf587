//! The [`Executor`] trait: the six operations every backend implements.

use std::path::Path;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::tar::{UnpackLimits, UnpackSummary};
use crate::{ExecutorError, RunLog, RunSpec};

/// A started run's environment, as returned by [`Executor::start`].
///
/// `id` is the backend's name for the environment (a container id, a Job
/// name, a run root); the three folders are where the run's files live
/// *inside* that environment. Backends may keep more state of their own
/// keyed by `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunHandle {
    /// The backend's identifier of the environment.
    pub id: String,
    /// Where the checkout is, and where every step starts (`WORK_DIR`).
    pub work_dir: String,
    /// Where the shared steps are (`STEPS_DIR`).
    pub steps_dir: String,
    /// Where steps write their outputs (`OUTPUTS_DIR`).
    pub outputs_dir: String,
}

impl RunHandle {
    /// A handle for a container-like environment with the standard folders
    /// `/work`, `/steps` and `/outputs`.
    ///
    /// ```
    /// let h = executor_core::RunHandle::in_container("c0ffee");
    /// assert_eq!(h.work_dir, "/work");
    /// ```
    pub fn in_container(id: impl Into<String>) -> Self {
        RunHandle {
            id: id.into(),
            work_dir: "/work".into(),
            steps_dir: "/steps".into(),
            outputs_dir: "/outputs".into(),
        }
    }

    /// The variables every step sees: `WORK_DIR`, `STEPS_DIR`, `OUTPUTS_DIR`.
    pub fn standard_env(&self) -> Vec<(String, String)> {
        vec![
            ("WORK_DIR".into(), self.work_dir.clone()),
            ("STEPS_DIR".into(), self.steps_dir.clone()),
            ("OUTPUTS_DIR".into(), self.outputs_dir.clone()),
        ]
    }
}

/// One step as the driver hands it to [`Executor::command`].
///
/// ```
/// let step = executor_core::StepCommand::new("build", "make", vec![]);
/// assert_eq!(step.argv(), ["sh", "-ec", "make"]);
/// assert!(step.follow_from.is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepCommand {
    /// Names the step's files in the environment (see
    /// `executor_container::detached::StepFiles`), so unique within the
    /// run's environment: the driver gives [`RunLog::step_id`], which no
    /// step can know beforehand and a resumed run ([`crate::resume`])
    /// finds again.
    pub id: String,
    /// The step's name, for logs and process bookkeeping.
    pub name: String,
    /// The script, run as `sh -ec <script>` in [`RunHandle::work_dir`].
    pub script: String,
    /// The full environment in order: standard folders, run variables, step variables.
    pub env: Vec<(String, String)>,
    /// Set when an earlier runner process started this step and died: the
    /// step's output is followed on from these offsets (what that runner's
    /// log had) instead of starting it again. A backend that cannot
    /// follow refuses resume before any step ([`Executor::reattach`]).
    pub follow_from: Option<Offsets>,
    /// The steps that come next if this one succeeds (the driver gives
    /// up to two), so a backend can open their starts while this one
    /// runs and release each with one message: a step then costs about
    /// one round trip to a remote environment instead of an exec's
    /// set-up. A backend may ignore it; an opened start that is never
    /// released runs nothing.
    pub upcoming: Vec<StepCommand>,
}

impl StepCommand {
    /// A step to start, with a fresh random [`StepCommand::id`].
    pub fn new(
        name: impl Into<String>,
        script: impl Into<String>,
        env: Vec<(String, String)>,
    ) -> Self {
        StepCommand {
            id: crate::labels::random_hex(8),
            name: name.into(),
            script: script.into(),
            env,
            follow_from: None,
            upcoming: Vec::new(),
        }
    }

    /// The argv of the step as a command line: `["sh", "-ec", script]`.
    /// Backends run a script that was written to a file at start as
    /// `sh -e FILE` instead ([`ScriptFiles`](crate::script::ScriptFiles)),
    /// since one argument holds at most 128 KiB.
    pub fn argv(&self) -> [&str; 3] {
        ["sh", "-ec", &self.script]
    }
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandOutcome {
    /// The shell exited with this code.
    Exited {
        /// The exit code; 0 is success.
        code: i32,
        /// What the backend knows beyond the code, e.g. `OOMKilled`.
        reason: Option<String>,
    },
    /// The kernel's OOM killer struck in the environment while the command
    /// ran: a step failure of kind [`FailureKind::Oom`](crate::FailureKind::Oom),
    /// whatever the exit code says.
    OutOfMemory {
        /// The exit code, when one came (137 for a SIGKILL).
        code: Option<i32>,
        /// What the backend knows, e.g. the memory limit.
        detail: String,
    },
    /// The interrupt token fired and the command's processes were killed.
    Interrupted,
}

impl CommandOutcome {
    /// A plain exit with no extra reason.
    pub fn exited(code: i32) -> Self {
        CommandOutcome::Exited { code, reason: None }
    }
}

/// Which leftovers [`Executor::cleanup`] may remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CleanupScope {
    /// Only environments whose expiry has passed or whose owner is gone.
    #[default]
    Expired,
    /// Every environment of this runner that is not provably live.
    All,
}

/// What [`Executor::cleanup`] removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanupReport {
    /// Backend identifiers of what was removed.
    pub removed: Vec<String>,
}

/// A backend that gives a run one long-lived environment.
///
/// The trait is the six operations backends really differ in: `start`,
/// `command`, `copy_in`, `copy_out`, `stop` and `cleanup` (with `kind`
/// naming the backend and `check` refusing what it cannot run). The
/// driver, [`run`](crate::run), calls them in this order: `start` once;
/// `copy_in` for each cache found; `command` once per step; `copy_out`
/// for each cache to save and then once for the outputs folder, even
/// after a failed step; `stop` exactly once, on every path, if `start`
/// succeeded. `cleanup` is independent of any run.
///
/// Backends must honour the `interrupt` token passed to `start` and
/// `command`: when it fires they kill what they started for that operation
/// and return promptly. If `start` fails it must remove whatever it had
/// created, because the driver has no handle to stop.
///
/// The trait is object safe and used as `&dyn Executor` / `Box<dyn Executor>`:
///
/// ```
/// use executor_core::Executor;
/// fn takes_any(_e: &dyn Executor) {}
/// ```
#[cfg_attr(feature = "mock", mockall::automock)]
#[async_trait]
pub trait Executor: Send + Sync {
    /// Short backend name written to the result, e.g. `shell`.
    fn kind(&self) -> &str;

    /// Checks, before anything is created, that this backend can run
    /// `run` at all: the one home of input checks. The driver calls it
    /// first; a refusal is the run's `input` failure and nothing starts.
    ///
    /// The default is [`RunSpec::validate`]; a backend adds what it needs
    /// (the container backends need `RunSpec::image`).
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`], naming the `RunSpec` field.
    ///
    /// ```
    /// # struct Nothing;
    /// # #[async_trait::async_trait]
    /// # impl executor_core::Executor for Nothing {
    /// #   fn kind(&self) -> &str { "nothing" }
    /// #   async fn start(&self, _: &executor_core::RunSpec, _: &executor_core::RunLog, _: tokio_util::sync::CancellationToken) -> Result<executor_core::RunHandle, executor_core::ExecutorError> { unimplemented!() }
    /// #   async fn command(&self, _: &executor_core::RunHandle, _: &executor_core::StepCommand, _: &executor_core::RunLog, _: tokio_util::sync::CancellationToken) -> Result<executor_core::CommandOutcome, executor_core::ExecutorError> { unimplemented!() }
    /// #   async fn copy_in(&self, _: &executor_core::RunHandle, _: &std::path::Path, _: &str) -> Result<(), executor_core::ExecutorError> { unimplemented!() }
    /// #   async fn copy_out(&self, _: &executor_core::RunHandle, _: &str, _: &std::path::Path, _: executor_core::tar::UnpackLimits) -> Result<executor_core::tar::UnpackSummary, executor_core::ExecutorError> { unimplemented!() }
    /// #   async fn stop(&self, _: &executor_core::RunHandle) -> Result<(), executor_core::ExecutorError> { unimplemented!() }
    /// #   async fn cleanup(&self, _: &str, _: executor_core::CleanupScope) -> Result<executor_core::CleanupReport, executor_core::ExecutorError> { unimplemented!() }
    /// # }
    /// use executor_core::{Executor, RunSpec};
    /// let bad = RunSpec::new("", "did:plc:r", ".", "out");
    /// let err = Nothing.check(&bad).unwrap_err();
    /// assert!(err.to_string().contains("RunSpec::name"), "{err}");
    /// ```
    fn check(&self, run: &RunSpec) -> Result<(), ExecutorError> {
        run.validate()
    }

    /// Creates the environment and streams the checkout into `work_dir`
    /// and the shared steps into `steps_dir`.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] for a run this backend cannot take
    /// (see [`Executor::check`]) or host folders it cannot read;
    /// [`ExecutorError::Backend`] when the engine refuses or cannot be
    /// reached, its [`kind`](ExecutorError::kind) saying which (`image`,
    /// `unschedulable`, `unreachable`, ...); [`ExecutorError::Unpack`] for a
    /// checkout the environment refused. Whatever was created before the
    /// error is removed first: there is no handle to stop.
    ///
    /// # Cancellation
    /// When `interrupt` fires, what was created so far is removed and
    /// [`ExecutorError::Interrupted`] returned. A start that completes
    /// while being interrupted may still return the handle; the driver
    /// then stops it. Dropping the future instead leaves the environment to
    /// [`Executor::cleanup`] (it carries the runner's labels and expiry).
    async fn start(
        &self,
        run: &RunSpec,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<RunHandle, ExecutorError>;

    /// Runs one step as `sh -ec <script>` in the environment, writing its
    /// stdout and stderr to `log` as they arrive (with
    /// [`RunLog::output_from`], so events can tell the streams apart), and
    /// with `step.env` as the step's whole environment of variables.
    ///
    /// A step that exits non-zero is `Ok(`[`CommandOutcome::Exited`]`)`, not
    /// an error; one the kernel's OOM killer struck is
    /// [`CommandOutcome::OutOfMemory`].
    ///
    /// # Errors
    /// [`ExecutorError::LostExitStatus`] when the step's status never came
    /// (never a success); [`ExecutorError::EnvironmentLost`] or a
    /// `Backend` error of kind `environmentLost` / `evicted` when the
    /// environment went away under the step; `Backend` for a call the
    /// engine refused.
    ///
    /// # Cancellation
    /// When `interrupt` fires, the step's whole process tree is killed and
    /// `Ok(`[`CommandOutcome::Interrupted`]`)` returned. Dropping the future
    /// kills nothing: the processes end with [`Executor::stop`].
    async fn command(
        &self,
        run: &RunHandle,
        step: &StepCommand,
        log: &RunLog,
        interrupt: CancellationToken,
    ) -> Result<CommandOutcome, ExecutorError>;

    /// Streams the host folder `src` into `path` inside the environment,
    /// creating it: how caches are restored. `path` is absolute, as
    /// [`CacheSpec::resolve`](crate::CacheSpec::resolve) gives it.
    ///
    /// # Errors
    /// `Backend` when the environment refused the stream or could not be
    /// reached; [`ExecutorError::Io`] when `src` could not be read.
    ///
    /// # Cancellation
    /// Dropping the future stops the copy; the environment may hold part
    /// of it. The driver bounds it with the run's timeout.
    async fn copy_in(&self, run: &RunHandle, src: &Path, path: &str) -> Result<(), ExecutorError>;

    /// Streams `path` inside the environment into the host folder `dest`
    /// (creating it) through the untrusted unpacker with `limits`: how the
    /// outputs folder ([`RunHandle::outputs_dir`]) comes back and how
    /// caches are saved. Entries the unpacker refuses (links leading out,
    /// special files, ...) are skipped and named in the summary.
    ///
    /// # Errors
    /// [`ExecutorError::Unpack`] for a stream refused as a whole
    /// (`UnpackError::TooLarge` past `limits.max_bytes`, a broken
    /// archive); `Backend` for an environment that could not be read;
    /// `InvalidInput` for a `path` this backend will not read (the shell
    /// reads nothing outside the run folder).
    ///
    /// # Cancellation
    /// Dropping the future stops the copy; `dest` holds part of it, which
    /// is why the cache store fills a fresh folder and swaps it in whole.
    /// The driver bounds the outputs copy with `RunSpec::outputs_timeout`.
    async fn copy_out(
        &self,
        run: &RunHandle,
        path: &str,
        dest: &Path,
        limits: UnpackLimits,
    ) -> Result<UnpackSummary, ExecutorError>;

    /// Tears the environment down, killing anything still running in it.
    /// Called exactly once per started run; stopping a run that is already
    /// gone is `Ok`.
    ///
    /// # Errors
    /// `Backend` when the engine could not be told (unreachable, refused);
    /// the driver then writes the environment to its journal, if it has
    /// one ([`journal`](crate::journal)), and otherwise it is left to
    /// [`Executor::cleanup`] at its expiry. Stopping an environment by a
    /// handle of only its `id` (as a journal sweep does) must work too.
    ///
    /// # Cancellation
    /// Dropping the future may leave the environment; the driver bounds
    /// `stop` with `DriverOptions::stop_timeout`, records it if so, and
    /// writes the environment to `DriverOptions::journal`.
    async fn stop(&self, run: &RunHandle) -> Result<(), ExecutorError>;

    /// Finds the live environment of the run `name` of `runner`, started
    /// by another runner process (one that was killed), and its plan,
    /// to carry the run on ([`crate::resume`]). Afterwards this executor
    /// treats the environment as one it started: `command`, `copy_out`
    /// and `stop` take its handle, and `cleanup` spares it.
    ///
    /// The default refuses: a backend whose environments do not outlive
    /// the runner (the shell's processes are the runner's children) has
    /// nothing to find.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] when no live run of that name is
    /// there (unknown, or finished and stopped), when the backend cannot
    /// resume, or when the plan in the environment was changed; `Backend`
    /// when the engine could not be asked.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let dir = tempfile::tempdir().unwrap();
    /// let shell = executor_shell::ShellExecutor::new(dir.path());
    /// use executor_core::Executor;
    /// let err = shell.reattach("did:plc:r", "build-1").await.unwrap_err();
    /// assert!(err.to_string().contains("cannot resume"), "{err}");
    /// # }
    /// ```
    async fn reattach(
        &self,
        runner: &str,
        name: &str,
    ) -> Result<crate::resume::Reattached, ExecutorError> {
        let _ = (runner, name);
        Err(ExecutorError::InvalidInput(format!(
            "the {} executor cannot resume a run: its steps do not outlive the runner that started them",
            self.kind()
        )))
    }

    /// What held in `run`'s environment (its architecture, whether the
    /// step channel's agent ran, whether the steps ran apart from the
    /// runner's side), for the result; `None` (the default) where the
    /// backend has nothing to say, as the shell has not.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let dir = tempfile::tempdir().unwrap();
    /// let shell = executor_shell::ShellExecutor::new(dir.path());
    /// use executor_core::Executor;
    /// let handle = executor_core::RunHandle::in_container("none");
    /// assert!(shell.environment(&handle).await.is_none());
    /// # }
    /// ```
    async fn environment(&self, run: &RunHandle) -> Option<crate::EnvironmentFacts> {
        let _ = run;
        None
    }

    /// Removes environments that earlier runs of `runner` left behind,
    /// never one of a run this executor still has live.
    ///
    /// # Errors
    /// `Backend` when the engine could not be listed or asked; what was
    /// removed before the error stays removed.
    ///
    /// # Cancellation
    /// Dropping the future stops between removals; running it again picks
    /// up the rest.
    async fn cleanup(
        &self,
        runner: &str,
        scope: CleanupScope,
    ) -> Result<CleanupReport, ExecutorError>;
}

/// How many bytes of each of a step's streams the log already has: where
/// a step's output is followed on from after a cut, or by a resumed run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offsets {
    /// Bytes of stdout.
    pub stdout: u64,
    /// Bytes of stderr.
    pub stderr: u64,
}
