//! Typed errors shared by every backend.

use std::path::PathBuf;

use crate::tar::UnpackError;

/// Why an [`Executor`](crate::Executor) operation failed.
///
/// Every variant is an *infrastructure* failure: a step that ran and exited
/// non-zero is not an error, it is a [`CommandOutcome::Exited`](crate::CommandOutcome)
/// with that code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecutorError {
    /// The run description or a flag is wrong; the message says which and how to fix it.
    #[error("invalid input: {0}")]
    InvalidInput(String),

    /// A host file or folder could not be read or written.
    #[error("{context} ({}): {source}", path.display())]
    Io {
        /// What the executor was doing.
        context: &'static str,
        /// The host path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A tar stream coming back from the environment was refused or broken.
    #[error(transparent)]
    Unpack(#[from] UnpackError),

    /// The engine or cluster answered with an error or could not be reached.
    #[error("{context}: {message}")]
    Backend {
        /// The call that failed, for example `create container`.
        context: String,
        /// What the engine said.
        message: String,
    },

    /// A command ended but its exit status never arrived. Never treated as success.
    #[error("exit status of {what} was lost: {detail}")]
    LostExitStatus {
        /// The command whose status is missing.
        what: String,
        /// What was observed instead.
        detail: String,
    },

    /// The environment went away under a running command (killed, evicted, deleted).
    #[error("environment lost: {0}")]
    EnvironmentLost(String),

    /// The operation was interrupted by the run driver (timeout or cancellation)
    /// before it produced a result.
    #[error("interrupted")]
    Interrupted,
}

impl ExecutorError {
    /// Builds a [`ExecutorError::Backend`] from any displayable engine error.
    ///
    /// ```
    /// use executor_core::ExecutorError;
    /// let err = ExecutorError::backend("create container", "no such image: busybox");
    /// assert_eq!(err.to_string(), "create container: no such image: busybox");
    /// ```
    pub fn backend(context: impl Into<String>, message: impl std::fmt::Display) -> Self {
        ExecutorError::Backend {
            context: context.into(),
            message: message.to_string(),
        }
    }

    /// Builds an [`ExecutorError::Io`] for `path`.
    pub fn io(context: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ExecutorError::Io {
            context,
            path: path.into(),
            source,
        }
    }
}
