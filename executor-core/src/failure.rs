//! What failed in a run, and whether a fresh attempt could fix it.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The cause of a failed run or step, as the engine reported it.
///
/// A runner decides on the kind: retry, blame the cluster, or tell the
/// author their test failed. Only [`FailureKind::retryable`] kinds are worth
/// a fresh attempt.
///
/// ```
/// use executor_core::FailureKind;
/// assert!(FailureKind::Evicted.retryable());
/// assert!(!FailureKind::Oom.retryable());
/// assert_eq!(serde_json::to_string(&FailureKind::EnvironmentLost).unwrap(), "\"environmentLost\"");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub enum FailureKind {
    /// A step exited non-zero.
    Step,
    /// The step or run timeout ran out.
    Timeout,
    /// The run was cancelled.
    Cancelled,
    /// The kernel's OOM killer struck in the environment.
    Oom,
    /// The image is missing, refused, invalid, or its pull failed.
    Image,
    /// A service container (a database beside the steps) could not be
    /// had, exited, or was not ready within its timeout.
    Service,
    /// The environment could not be placed (no node fits, none came).
    Unschedulable,
    /// The environment was evicted or preempted, or its node was lost.
    Evicted,
    /// The environment was deleted or killed from outside.
    EnvironmentLost,
    /// The engine or API server could not be reached, or failed transiently.
    Unreachable,
    /// The run's description, files or names are wrong.
    Input,
    /// Anything else: a host file that could not be written, a refused stream.
    Internal,
}

impl FailureKind {
    /// Whether a fresh attempt in a new environment can fix this kind:
    /// `environmentLost`, `evicted` and `unreachable`. An image failure is
    /// retryable only when its pull failed for a transient reason, which
    /// [`Failure::retryable`] carries.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            FailureKind::EnvironmentLost | FailureKind::Evicted | FailureKind::Unreachable
        )
    }

    /// The run status a failure of this kind gives the run.
    pub fn run_status(self) -> crate::RunStatus {
        use crate::RunStatus;
        match self {
            FailureKind::Step | FailureKind::Oom => RunStatus::Failed,
            FailureKind::Timeout => RunStatus::Timeout,
            FailureKind::Cancelled => RunStatus::Cancelled,
            _ => RunStatus::Error,
        }
    }

    /// The documented `runner-cli` exit code: 1 for `step` and `oom`, 2 for
    /// `input`, 124 for `timeout`, 130 for `cancelled`, 3 for the rest.
    ///
    /// ```
    /// use executor_core::FailureKind;
    /// assert_eq!(FailureKind::Input.exit_code(), 2);
    /// assert_eq!(FailureKind::Unreachable.exit_code(), 3);
    /// ```
    pub fn exit_code(self) -> i32 {
        match self {
            FailureKind::Input => 2,
            other => other.run_status().exit_code(),
        }
    }

    /// The name as in the JSON, e.g. `environmentLost`.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Step => "step",
            FailureKind::Timeout => "timeout",
            FailureKind::Cancelled => "cancelled",
            FailureKind::Oom => "oom",
            FailureKind::Image => "image",
            FailureKind::Service => "service",
            FailureKind::Unschedulable => "unschedulable",
            FailureKind::Evicted => "evicted",
            FailureKind::EnvironmentLost => "environmentLost",
            FailureKind::Unreachable => "unreachable",
            FailureKind::Input => "input",
            FailureKind::Internal => "internal",
        }
    }
}

impl std::fmt::Display for FailureKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run or a step did not succeed: the `failure` object of the result.
///
/// ```
/// use executor_core::{Failure, FailureKind};
/// let f = Failure::new(FailureKind::Evicted, "pod p was evicted").in_step("build");
/// assert!(f.retryable);
/// assert_eq!(f.step.as_deref(), Some("build"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// What kind of failure it was.
    pub kind: FailureKind,
    /// What happened, in words.
    pub message: String,
    /// Whether a fresh attempt in a new environment could fix it.
    pub retryable: bool,
    /// The step it happened in; `null` before, between or after steps.
    pub step: Option<String>,
}

impl Failure {
    /// A failure of `kind`, retryable as the kind is.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
            retryable: kind.retryable(),
            step: None,
        }
    }

    /// The same failure, placed in the step `name`.
    pub fn in_step(mut self, name: impl Into<String>) -> Self {
        self.step = Some(name.into());
        self
    }
}

/// When the driver runs a failed run again: only for a retryable
/// [`Failure`], from the start, in a fresh environment, at most
/// `max_retries` more times, waiting `backoff` before the first retry and
/// twice as long before each next one, up to `max_backoff`.
///
/// ```
/// use std::time::Duration;
/// use executor_core::RetryPolicy;
/// let policy = RetryPolicy::retries(2);
/// assert_eq!(policy.pause_before(1), Duration::from_secs(1));
/// assert_eq!(policy.pause_before(2), Duration::from_secs(2));
/// assert!(RetryPolicy::default().max_retries == 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// How many more attempts a retryable failure may have; 0 never retries.
    pub max_retries: u32,
    /// The pause before the first retry.
    pub backoff: Duration,
    /// The longest pause between attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 0,
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Up to `n` retries with the default backoff.
    pub fn retries(n: u32) -> Self {
        RetryPolicy {
            max_retries: n,
            ..RetryPolicy::default()
        }
    }

    /// The pause before retry number `retry` (1 for the first).
    pub fn pause_before(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(16);
        self.backoff
            .saturating_mul(1u32 << doublings)
            .min(self.max_backoff)
    }

    /// Whether `failure`, ending attempt `attempt` (1 for the first), earns
    /// another attempt.
    pub fn retries_after(&self, failure: &Failure, attempt: u32) -> bool {
        failure.retryable && attempt <= self.max_retries
    }
}

/// Whether an image pull's error (Docker's, containerd's, a kubelet's
/// `ErrImagePull` message) names a network or registry hiccup rather than
/// an image that is missing, refused or misnamed: what makes an `image`
/// failure retryable.
///
/// ```
/// use executor_core::failure::transient_pull_error;
/// assert!(transient_pull_error("dial tcp: lookup registry-1.docker.io: i/o timeout"));
/// assert!(!transient_pull_error("manifest unknown: manifest unknown"));
/// ```
pub fn transient_pull_error(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    const PERMANENT: &[&str] = &[
        "manifest unknown",
        "not found",
        "pull access denied",
        "unauthorized",
        "denied",
        "invalid reference",
        "repository name must",
    ];
    const TRANSIENT: &[&str] = &[
        "dial tcp",
        "i/o timeout",
        "timeout",
        "connection refused",
        "connection reset",
        "no such host",
        "temporary failure",
        "server misbehaving",
        "network is unreachable",
        "tls handshake",
        "toomanyrequests",
        "too many requests",
        "service unavailable",
        "bad gateway",
        "unexpected eof",
        "eof",
        "(http 5",
    ];
    !PERMANENT.iter().any(|p| message.contains(p)) && TRANSIENT.iter().any(|t| message.contains(t))
}
