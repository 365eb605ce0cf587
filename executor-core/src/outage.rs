//! Riding out an engine or API server that does not answer for a while.

use std::future::Future;
use std::time::Duration;

use crate::{ExecutorError, FailureKind};

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
    let deadline = tokio::time::Instant::now() + within;
    let mut pause = Duration::from_millis(100);
    let mut tries = 0u32;
    loop {
        tries = tries.saturating_add(1);
        match call().await {
            Ok(v) => {
                if tries > 1 {
                    tracing::warn!(what, tries, "the engine answered again");
                }
                return Ok(v);
            }
            Err(err)
                if err.kind() == FailureKind::Unreachable
                    && tokio::time::Instant::now() + pause < deadline =>
            {
                if tries == 1 {
                    tracing::warn!(what, %err, within_s = within.as_secs(), "the engine did not answer; trying again");
                }
                // Backoff between tries of a call the engine did not answer.
                tokio::time::sleep(pause).await;
                pause = pause.saturating_mul(2).min(MAX_PAUSE);
            }
            Err(err) => return Err(err),
        }
    }
}
