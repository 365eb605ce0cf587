//! Timeouts and cancellation around each operation of a run.

use std::future::Future;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::{FailureKind, RunSpec, StepStatus};

/// Why the driver interrupted an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Why {
    StepTimeout,
    RunTimeout,
    Cancelled,
}

impl Why {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Why::StepTimeout => "step timeout",
            Why::RunTimeout => "run timeout",
            Why::Cancelled => "cancelled",
        }
    }
    /// What ended a step whose own limit was `step_limit`.
    pub(super) fn describe_for(self, spec: &RunSpec, step_limit: Duration) -> String {
        match self {
            Why::StepTimeout => format!("timed out after {step_limit:?} (step timeout)"),
            Why::RunTimeout => format!("timed out after {:?} (run timeout)", spec.run_timeout),
            Why::Cancelled => "cancelled".into(),
        }
    }
    pub(super) fn step_status(self) -> StepStatus {
        match self {
            Why::StepTimeout | Why::RunTimeout => StepStatus::Timeout,
            Why::Cancelled => StepStatus::Cancelled,
        }
    }
    pub(super) fn kind(self) -> FailureKind {
        match self {
            Why::StepTimeout | Why::RunTimeout => FailureKind::Timeout,
            Why::Cancelled => FailureKind::Cancelled,
        }
    }
}

/// How a supervised operation ended.
pub(super) enum Supervised<T> {
    /// The operation's own result.
    Done(T),
    /// Interrupted; the operation's own result if it wound down within the grace.
    Interrupted(Why, Option<T>),
}

/// The run's cancellation and deadline, watched around each operation.
pub(super) struct Watch<'a> {
    pub(super) cancel: &'a CancellationToken,
    pub(super) run_deadline: Instant,
    pub(super) grace: Duration,
}

impl Watch<'_> {
    /// Whether the run is already over before an operation begins.
    pub(super) fn already(&self) -> Option<Why> {
        if self.cancel.is_cancelled() {
            Some(Why::Cancelled)
        } else if Instant::now() >= self.run_deadline {
            Some(Why::RunTimeout)
        } else {
            None
        }
    }

    /// Waits out `pause` unless the run is cancelled or runs out of time
    /// first, which it returns.
    pub(super) async fn wait(&self, pause: Duration) -> Option<Why> {
        let until = (Instant::now() + pause).min(self.run_deadline);
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Some(Why::Cancelled),
            _ = tokio::time::sleep_until(until.into()) => {}
        }
        self.already()
    }

    /// Awaits `op`; on a deadline or cancellation fires `token` and gives
    /// `op` the grace period to return.
    pub(super) async fn supervise<T>(
        &self,
        op: impl Future<Output = T>,
        token: &CancellationToken,
        step_deadline: Option<Instant>,
    ) -> Supervised<T> {
        tokio::pin!(op);
        let far = self.run_deadline;
        let step_deadline = step_deadline.unwrap_or(far);
        let why = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Why::Cancelled,
            out = &mut op => return Supervised::Done(out),
            _ = tokio::time::sleep_until(self.run_deadline.into()) => Why::RunTimeout,
            _ = tokio::time::sleep_until(step_deadline.into()), if step_deadline < far => Why::StepTimeout,
        };
        token.cancel();
        let finished = tokio::time::timeout(self.grace, op).await.ok();
        Supervised::Interrupted(why, finished)
    }
}
