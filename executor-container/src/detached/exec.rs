//! The exec a backend gives the step protocol, and how an exec and a
//! step end.

use async_trait::async_trait;
use executor_core::ExecutorError;
#[cfg(doc)]
use executor_core::FailureKind;
use tokio::io::AsyncWrite;
use tokio_util::sync::CancellationToken;

#[cfg(doc)]
use super::{marks_its_end, run_step};

/// How one exec ended, as a backend reports it to [`run_step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEnd {
    /// Its command exited with this code.
    Exited(i32),
    /// Its stream ended without an error, and the backend did not ask the
    /// engine for its code: it may answer so only for an exec that marks
    /// its end ([`marks_its_end`]), whose status the end marks carry.
    /// Anything else takes it for a cut.
    Ended,
    /// Its stream broke, or it ended without a status; the command itself
    /// may still run.
    Cut(String),
    /// The interrupt fired first.
    Interrupted,
}

/// The exec a backend gives the step protocol: a command in the run's
/// environment, as the step's own user.
#[async_trait]
pub trait StepExec: Send + Sync {
    /// Runs `argv`, its stdout and stderr into the writers as they arrive,
    /// until it ends or `interrupt` fires.
    ///
    /// # Errors
    /// When the exec could not be started: of kind
    /// [`FailureKind::Unreachable`] when another try may pass.
    async fn exec(
        &self,
        argv: &[String],
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError>;

    /// Runs the kill script, as root where the backend can.
    ///
    /// # Errors
    /// When it could not be run or failed.
    async fn kill(&self, script: &str) -> Result<(), ExecutorError>;
}

/// How a step ended, as far as the protocol can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepEnd {
    /// The step exited with this code.
    Exited(i32),
    /// The interrupt fired; the step's processes were killed.
    Interrupted,
    /// No status will come: the supervisor is gone without one, or the
    /// status file holds something else. The backend asks its
    /// environment why.
    Lost(String),
}

/// Longest word of an argv a dry run shows whole.
const SHOWN_WORD: usize = 200;

/// `argv` as a dry run shows it: each word quoted as `Debug` writes it,
/// and a longer word (the runner's own scripts, sent whole: the step
/// channel's is about 8 KB) as its first line and its length, so that a
/// dry run reads as the calls it makes.
///
/// ```
/// use executor_container::detached::shown_argv;
/// let script = format!("_kd=$0\n{}", "x".repeat(300));
/// assert_eq!(
///     shown_argv(&["sh".into(), "-c".into(), script]),
///     r#"["sh", "-c", "_kd=$0 … (307 bytes)"]"#
/// );
/// assert_eq!(shown_argv(&["true".into()]), r#"["true"]"#);
/// let quoted = format!("_k='x'\n{}", "y".repeat(300));
/// assert_eq!(shown_argv(&[quoted]), r#"["_k='x' … (307 bytes)"]"#);
/// ```
pub fn shown_argv(argv: &[String]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|word| {
            if word.len() <= SHOWN_WORD {
                return format!("{word:?}");
            }
            let first: String = word
                .lines()
                .next()
                .unwrap_or_default()
                .chars()
                .take(60)
                .collect();
            // Quoted as the short words are, the closing quote after the length.
            let quoted = format!("{first:?}");
            let open = quoted.strip_suffix('"').unwrap_or(&quoted);
            format!("{open} … ({} bytes)\"", word.len())
        })
        .collect();
    format!("[{}]", words.join(", "))
}
