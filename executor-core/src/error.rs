//! Typed errors shared by every backend.

use std::path::PathBuf;

use crate::tar::UnpackError;
use crate::{Failure, FailureKind};

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
        /// What kind of failure the engine's answer shows.
        kind: FailureKind,
        /// Whether a fresh attempt could fix it (an image pull that failed
        /// for a transient reason is, a missing image is not).
        retryable: bool,
        /// The client's own error, when there is one, for callers that
        /// look into it (`std::error::Error::source`).
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
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
        Self::classified(FailureKind::Internal, context, message)
    }

    /// Builds a [`ExecutorError::Backend`] of a known kind, retryable as
    /// the kind is.
    ///
    /// ```
    /// use executor_core::{ExecutorError, FailureKind};
    /// let err = ExecutorError::classified(FailureKind::Evicted, "step build", "pod p was evicted");
    /// assert_eq!(err.kind(), FailureKind::Evicted);
    /// assert!(err.retryable());
    /// ```
    pub fn classified(
        kind: FailureKind,
        context: impl Into<String>,
        message: impl std::fmt::Display,
    ) -> Self {
        ExecutorError::Backend {
            context: context.into(),
            message: message.to_string(),
            kind,
            retryable: kind.retryable(),
            source: None,
        }
    }

    /// Keeps `source`, the engine client's own error, under a
    /// [`ExecutorError::Backend`] (other variants are returned as they are).
    ///
    /// ```
    /// use std::error::Error as _;
    /// use executor_core::ExecutorError;
    /// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    /// let err = ExecutorError::unreachable("listing pods", &io).with_source(io);
    /// assert_eq!(err.source().map(|s| s.to_string()).as_deref(), Some("refused"));
    /// ```
    pub fn with_source(self, cause: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        match self {
            ExecutorError::Backend {
                context,
                message,
                kind,
                retryable,
                source: _,
            } => ExecutorError::Backend {
                context,
                message,
                kind,
                retryable,
                source: Some(cause.into()),
            },
            other => other,
        }
    }

    /// The engine or API server did not answer, or failed in a way a later
    /// call may not (refused, reset, timed out, 429, 5xx).
    pub fn unreachable(context: impl Into<String>, message: impl std::fmt::Display) -> Self {
        Self::classified(FailureKind::Unreachable, context, message)
    }

    /// The image could not be had; `transient` when the pull failed for a
    /// reason a later pull may not meet (a registry that did not answer).
    ///
    /// ```
    /// use executor_core::ExecutorError;
    /// assert!(!ExecutorError::image("pulling x", "manifest unknown", false).retryable());
    /// assert!(ExecutorError::image("pulling x", "i/o timeout", true).retryable());
    /// ```
    pub fn image(
        context: impl Into<String>,
        message: impl std::fmt::Display,
        transient: bool,
    ) -> Self {
        ExecutorError::Backend {
            context: context.into(),
            message: message.to_string(),
            kind: FailureKind::Image,
            retryable: transient,
            source: None,
        }
    }

    /// What kind of failure this error is, for the result's `failure`.
    ///
    /// A lost exit status is `unreachable`: the stream carrying it broke,
    /// never a success. An interrupt is `cancelled`.
    pub fn kind(&self) -> FailureKind {
        match self {
            ExecutorError::InvalidInput(_) => FailureKind::Input,
            ExecutorError::Io { .. } | ExecutorError::Unpack(_) => FailureKind::Internal,
            ExecutorError::Backend { kind, .. } => *kind,
            ExecutorError::LostExitStatus { .. } => FailureKind::Unreachable,
            ExecutorError::EnvironmentLost(_) => FailureKind::EnvironmentLost,
            ExecutorError::Interrupted => FailureKind::Cancelled,
        }
    }

    /// Whether a fresh attempt in a new environment could fix it.
    pub fn retryable(&self) -> bool {
        match self {
            ExecutorError::Backend { retryable, .. } => *retryable,
            other => other.kind().retryable(),
        }
    }

    /// The result's `failure` for this error, with `message` as its text.
    pub fn failure(&self, message: impl Into<String>) -> Failure {
        Failure {
            retryable: self.retryable(),
            ..Failure::new(self.kind(), message)
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
