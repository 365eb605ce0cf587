//! The shell backend of [`executor_core`]: each run gets a private run
//! folder on the host (`work/`, `steps/`, `outputs/` under a temp folder),
//! and each step runs there as `sh -ec <script>` in its own process group.
//!
//! It runs steps directly on the host, so it is for trusted code only;
//! `runner-cli` refuses it for pull-request and queue triggers.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use executor_core::{run, RunLog, RunSpec, RunStatus, Step};
//! use executor_shell::ShellExecutor;
//! use tokio_util::sync::CancellationToken;
//!
//! let (checkout, outputs, base) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
//! let executor = ShellExecutor::new(base.path());
//! let spec = RunSpec::new("hello", "did:plc:runner", checkout.path(), outputs.path())
//!     .step(Step::new("greet", "echo hello > \"$OUTPUTS_DIR/greeting.txt\""));
//! let result = run(&executor, &spec, &RunLog::discard(), CancellationToken::new()).await;
//! assert_eq!(result.status, RunStatus::Success);
//! assert_eq!(result.outputs[0].path, "greeting.txt");
//! # }
//! ```
#![warn(missing_docs)]
// Every public function that can fail says how: embedders match on it.
#![warn(clippy::missing_errors_doc)]

mod executor;
mod host;
mod marked;
mod pidfd;
mod plan;
mod process;
mod root;
mod usage;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use executor_core::ExecutorError;
use tokio::task::JoinHandle;

use crate::host::{Host, LocalHost};
pub use plan::Plan;

/// The shell executor; one value serves any number of runs at once.
pub struct ShellExecutor {
    base: PathBuf,
    runs: Mutex<HashMap<String, LiveRun>>,
    /// Where every call goes: this machine, or a dry-run's plan.
    host: Arc<dyn Host>,
}

struct LiveRun {
    root: root::RunRoot,
    /// The run's secret variables: they reach each step's process
    /// environment and nothing else (no argv, no file).
    secrets: Vec<(String, executor_core::Secret)>,
    groups: host::Groups,
    /// The step scripts the run folder holds as files.
    scripts: executor_core::script::ScriptFiles,
    lingering: Vec<JoinHandle<()>>,
}

impl ShellExecutor {
    /// An executor keeping its run folders under `base`.
    pub fn new(base: impl Into<PathBuf>) -> Self {
        Self::with_host(base, Arc::new(LocalHost))
    }

    fn with_host(base: impl Into<PathBuf>, host: Arc<dyn Host>) -> Self {
        ShellExecutor {
            base: base.into(),
            runs: Mutex::new(HashMap::new()),
            host,
        }
    }

    /// The default base folder: `knotless-runner/shell` in
    /// `$XDG_RUNTIME_DIR` (the user's own 0700 runtime folder), else in
    /// `knotless-runner-UID` in the system temp folder. Either way the
    /// executor creates it 0700 and checks, before each run, that no other
    /// user can change anything on its path.
    pub fn default_base() -> PathBuf {
        default_base_from(
            std::env::var_os("XDG_RUNTIME_DIR"),
            &std::env::temp_dir(),
            nix::unistd::geteuid().as_raw(),
        )
    }

    /// Creates the base folder if it is missing and checks that it is
    /// private (see [`ShellExecutor::default_base`]); `start` does the same,
    /// this lets a caller refuse a bad base before anything else.
    ///
    /// ```
    /// let dir = tempfile::tempdir().unwrap();
    /// let executor = executor_shell::ShellExecutor::new(dir.path().join("runs"));
    /// executor.prepare_base().unwrap();
    /// ```
    ///
    /// # Errors
    /// `Io` when a folder on the way cannot be made;
    /// [`ExecutorError::InvalidInput`] when one of them could be changed by
    /// another user (naming it and its owner).
    pub fn prepare_base(&self) -> Result<(), ExecutorError> {
        root::prepare_private(&self.base)
    }

    /// An executor that prints every call it would make to `plan` and does
    /// nothing else: no folder is created and no process started.
    pub fn dry_run(base: impl Into<PathBuf>, plan: Plan) -> Self {
        Self::with_host(base, Arc::new(plan))
    }

    /// Every run folder of `runner` that exists now, live or not: the
    /// conformance suite's probe for leftovers.
    pub fn leftovers(&self, runner: &str) -> Vec<PathBuf> {
        root::list(&self.base, runner)
    }

    fn runs(&self) -> std::sync::MutexGuard<'_, HashMap<String, LiveRun>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn default_base_from(
    xdg_runtime_dir: Option<std::ffi::OsString>,
    temp: &Path,
    uid: u32,
) -> PathBuf {
    match xdg_runtime_dir.map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("knotless-runner").join("shell"),
        _ => temp.join(format!("knotless-runner-{uid}")).join("shell"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_base_is_private_to_the_user() {
        let tmp = Path::new("/tmp");
        assert_eq!(
            default_base_from(Some("/run/user/1000".into()), tmp, 1000),
            Path::new("/run/user/1000/knotless-runner/shell")
        );
        for unset in [None, Some("".into()), Some("relative".into())] {
            assert_eq!(
                default_base_from(unset, tmp, 1000),
                Path::new("/tmp/knotless-runner-1000/shell")
            );
        }
    }
}
