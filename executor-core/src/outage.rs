//! Riding out an engine or API server that does not answer for a while.

use std::future::Future;
use std::time::Duration;

use crate::{ExecutorError, FailureKind, RunLog};

tokio::task_local! {
    /// The run log of the run this task drives, for [`ride_out`] to say
    /// that it waits.
    static NOTICES: RunLog;
}

/// Runs `work` with `log` as the log [`ride_out`] tells when it waits for
/// an engine that does not answer, and when it answers again: the run's
/// log then says why a run stands still, not only the runner's tracing.
/// [`crate::run_with`] does this for the whole run.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use executor_core::{outage, ExecutorError, RunLog};
/// let (log, text) = RunLog::memory();
/// let mut tries = 0;
/// let answer = outage::telling(log.clone(), outage::ride_out("listing pods", Duration::from_secs(5), || {
///     tries += 1;
///     let now = tries;
///     async move {
///         if now < 2 {
///             Err(ExecutorError::unreachable("listing pods", "connection refused"))
///         } else {
///             Ok(())
///         }
///     }
/// }))
/// .await;
/// assert!(answer.is_ok());
/// log.flush(Duration::from_secs(5)).await;
/// assert!(text.text().contains("waiting up to 5s"), "{}", text.text());
/// # }
/// ```
pub async fn telling<F: Future>(log: RunLog, work: F) -> F::Output {
    NOTICES.scope(log, work).await
}

/// Says `text` in the run log of [`telling`], if there is one: for a
/// backend to say why a call it rides out waits, where [`ride_out`]'s own
/// words (no answer) would not tell it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use executor_core::{outage, RunLog};
/// let (log, text) = RunLog::memory();
/// outage::telling(log.clone(), async { outage::notice("the server refuses; waiting") }).await;
/// outage::notice("said nowhere: no run is being told");
/// log.flush(Duration::from_secs(5)).await;
/// assert_eq!(text.text(), "==> the server refuses; waiting\n");
/// # }
/// ```
pub fn notice(text: &str) {
    let _ = NOTICES.try_with(|log| log.line(text));
}

/// The longest pause between two tries.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// Calls `call` until it succeeds, fails with an error that is not of kind
/// [`FailureKind::Unreachable`] (refused or dropped connections, timeouts,
/// 429 and the 5xx a proxy or busy server gives), or `within` has passed;
/// pauses 100 ms between the first tries, doubling up to 5 s. Only for
/// calls that are safe to repeat.
///
/// # Errors
/// The last error of `call`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use executor_core::{outage::ride_out, ExecutorError};
/// let mut tries = 0;
/// let answer = ride_out("listing containers", Duration::from_secs(5), || {
///     tries += 1;
///     let now = tries;
///     async move {
///         if now < 3 {
///             Err(ExecutorError::unreachable("listing containers", "connection refused"))
///         } else {
///             Ok(now)
///         }
///     }
/// })
/// .await;
/// assert_eq!(answer.unwrap(), 3);
/// # }
/// ```
pub async fn ride_out<T, F, Fut>(
    what: &str,
    within: Duration,
    mut call: F,
) -> Result<T, ExecutorError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ExecutorError>>,
{
    let mut backoff = Backoff::new(within);
    let mut tries = 0u32;
    loop {
        tries = tries.saturating_add(1);
        match call().await {
            Ok(v) => {
                if tries > 1 {
                    tracing::warn!(what, tries, "the engine answered again");
                    notice(&format!("answered again while {what}, after {tries} tries"));
                }
                return Ok(v);
            }
            Err(err) if err.kind() == FailureKind::Unreachable => {
                if tries == 1 {
                    tracing::warn!(what, %err, within_s = within.as_secs(), "the engine did not answer; trying again");
                    notice(&format!(
                        "no answer while {what} ({err}); waiting up to {}s for it to answer again",
                        within.as_secs()
                    ));
                }
                if !backoff.pause().await {
                    return Err(err);
                }
            }
            Err(err) => return Err(err),
        }
    }
}

/// The pauses between tries of a call the engine did not answer: 100 ms,
/// doubling up to 5 s, while a deadline allows, each cut by a random part
/// of up to half (so many runs that met one outage do not all call again
/// at the same instant when it ends). For a caller that cannot hand
/// [`ride_out`] a closure (one that lends its call a writer).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// let mut backoff = executor_core::outage::Backoff::new(Duration::from_millis(250));
/// assert!(backoff.pause().await); // 100 ms
/// assert!(!backoff.pause().await); // 200 ms more would pass the deadline
/// # }
/// ```
#[derive(Debug)]
pub struct Backoff {
    deadline: tokio::time::Instant,
    pause: Duration,
}

impl Backoff {
    /// Pauses that end within `within` from now.
    pub fn new(within: Duration) -> Self {
        Backoff {
            deadline: tokio::time::Instant::now() + within,
            pause: Duration::from_millis(100),
        }
    }

    /// Waits the next pause and returns `true`, or returns `false` at once
    /// when that pause would end past the deadline: time to give up.
    pub async fn pause(&mut self) -> bool {
        if tokio::time::Instant::now() + self.pause >= self.deadline {
            return false;
        }
        // Backoff between tries of a call the engine did not answer.
        tokio::time::sleep(jittered(self.pause)).await;
        self.pause = self.pause.saturating_mul(2).min(MAX_PAUSE);
        true
    }
}

/// `pause` less a random part of up to half of it: the tries of many
/// callers spread over the second half of each pause.
fn jittered(pause: Duration) -> Duration {
    let mut bytes = [0u8; 8];
    // Without randomness the pause stands whole: spread, not safety.
    if getrandom::getrandom(&mut bytes).is_err() {
        return pause;
    }
    let half = pause / 2;
    let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX).max(1);
    pause.saturating_sub(Duration::from_nanos(u64::from_le_bytes(bytes) % nanos))
}

#[cfg(test)]
mod jitter_tests {
    use std::time::Duration;

    #[test]
    fn pauses_spread_over_their_second_half() {
        let pause = Duration::from_millis(400);
        let taken: std::collections::BTreeSet<Duration> =
            (0..64).map(|_| super::jittered(pause)).collect();
        assert!(
            taken.iter().all(|p| *p > pause / 2 && *p <= pause),
            "{taken:?}"
        );
        // 64 draws of a nanosecond-grained part: all alike would be no spread.
        assert!(taken.len() > 32, "{taken:?}");
    }
}
