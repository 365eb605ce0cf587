//! Signed statuses: the key a backend signs a step's status with, and the
//! record, in the log's mark, of which statuses must be signed.
//!
//! A backend whose environment can sign a step's status (so that a
//! process an earlier step left cannot forge it) signs it with
//! [`RunLog::status_key`], which only the runner holds and a resumed
//! runner derives again. What a resumed runner cannot derive is whether
//! a start was signed: [`RunLog::require_signed_status`] puts that in the
//! mark before the runner could lose the step, so the runner that follows
//! it on takes only a signed status, as the first one would have.

use super::{Dest, RunLog};
use crate::log::writer::Message;

/// Which statuses must be signed, as the log has recorded it.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Signing {
    /// The attempt's environment signed a step's status: every later
    /// one of it is signed.
    pub(super) environment: bool,
    /// The running step's status must be signed.
    pub(super) running_step: bool,
}

/// A fresh secret for a run: 256 bits from the system's random source,
/// in hex.
pub(super) fn run_secret() -> String {
    let mut bytes = [0u8; 32];
    match getrandom::getrandom(&mut bytes) {
        Ok(()) => hex::encode(bytes),
        // No random source: the process's hasher, which the standard
        // library seeds from it when it can.
        Err(_) => crate::labels::random_hex(64),
    }
}

impl RunLog {
    /// The key the status of the step whose id is `step_id`
    /// ([`RunLog::step_id`]) is signed with, where its environment signs
    /// one: 128 bits of a digest keyed with the run's secret, which only
    /// the runner holds (kept in the log's mark, so a resumed run derives
    /// the same key). `None` for a run whose mark is older than that
    /// secret.
    ///
    /// ```
    /// let (log, _) = executor_core::RunLog::memory();
    /// let key = log.status_key("a1s0-00").unwrap();
    /// assert_eq!(log.status_key("a1s0-00"), Some(key));
    /// assert_ne!(log.status_key("a1s1-00"), Some(key));
    /// assert_ne!(executor_core::RunLog::memory().0.status_key("a1s0-00"), Some(key));
    /// ```
    pub fn status_key(&self, step_id: &str) -> Option<[u8; 16]> {
        use sha2::Digest;
        let secret = self.lock().step_key.clone();
        if secret.is_empty() {
            return None;
        }
        let digest = sha2::Sha256::digest(format!("{secret}/status/{step_id}"));
        digest.get(..16)?.try_into().ok()
    }

    /// Whether the attempt's environment has signed a step's status
    /// ([`RunLog::require_signed_status`]), in this runner or in the one
    /// whose log this one carries on: a start through it is signed too.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (log, _) = executor_core::RunLog::memory();
    /// assert!(!log.signs_statuses());
    /// log.require_signed_status().await;
    /// assert!(log.signs_statuses());
    /// # }
    /// ```
    pub fn signs_statuses(&self) -> bool {
        self.lock().signing.environment
    }

    /// Whether the running step's status must be signed: recorded with
    /// [`RunLog::require_signed_status`] by this runner, or by the one
    /// whose log this one carries on ([`RunLog::resume`]), which started
    /// the step this one follows.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (log, _) = executor_core::RunLog::memory();
    /// assert!(!log.running_step_signed());
    /// log.require_signed_status().await;
    /// assert!(log.running_step_signed());
    /// # }
    /// ```
    pub fn running_step_signed(&self) -> bool {
        self.lock().signing.running_step
    }

    /// Records that the running step's status must be signed (its
    /// environment signs it with [`RunLog::status_key`]), and with it that
    /// the attempt's environment signs. Resolves once the log's mark says
    /// so (at once for a log without one): a runner killed after that
    /// leaves a mark from which a resumed runner refuses an unsigned
    /// status of the step. The record lasts until the next step starts
    /// (the environment's, until the next environment is ready).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use executor_core::{events::Event, resume::Mark, RunLog};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("run.log");
    /// let log = RunLog::create_resumable(&path).unwrap();
    /// log.emit(Event::StepStarted {
    ///     at: time::OffsetDateTime::now_utc(),
    ///     attempt: 1,
    ///     step: "build".into(),
    ///     index: 0,
    /// });
    /// log.require_signed_status().await;
    /// let mark = Mark::read(&path).unwrap();
    /// assert!(mark.signing && mark.running.unwrap().signed);
    /// # }
    /// ```
    pub async fn require_signed_status(&self) {
        let answer = {
            let mut inner = self.lock();
            inner.signing = Signing {
                environment: true,
                running_step: true,
            };
            match &inner.dest {
                Dest::Thread { to_writer, .. } => {
                    let (done, answer) = tokio::sync::oneshot::channel();
                    to_writer.send(Message::Signed(done)).ok().map(|()| answer)
                }
                Dest::Inline(_) => None,
            }
        };
        if let Some(answer) = answer {
            // A writer that is gone has no mark to keep.
            let _ = answer.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::events::Event;
    use crate::resume::Mark;
    use crate::RunLog;

    fn started(log: &RunLog, step: &str, index: usize) {
        log.emit(Event::StepStarted {
            at: time::OffsetDateTime::now_utc(),
            attempt: 1,
            step: step.into(),
            index,
        });
    }

    #[tokio::test]
    async fn a_signed_step_is_in_the_mark_a_resumed_runner_reads() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("run.log");
        let log = RunLog::create_resumable(&path).unwrap_or_else(|e| panic!("{e}"));
        started(&log, "one", 0);
        assert!(!Mark::read(&path).is_ok_and(|m| m.signing));
        log.require_signed_status().await;
        let key = log.status_key("a1s1-00");
        // The next step's own record starts unsigned; the environment's holds.
        started(&log, "two", 1);
        assert!(log.flush(std::time::Duration::from_secs(5)).await);
        assert!(log.signs_statuses() && !log.running_step_signed());
        drop(log);
        let (resumed, mark) = RunLog::resume(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(mark.signing);
        assert_eq!(mark.running.as_ref().map(|r| r.signed), Some(false));
        assert!(resumed.signs_statuses() && !resumed.running_step_signed());
        assert_eq!(resumed.status_key("a1s1-00"), key);
        resumed.require_signed_status().await;
        drop(resumed);
        let (resumed, mark) = RunLog::resume(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mark.running.as_ref().map(|r| r.signed), Some(true));
        assert!(resumed.running_step_signed());
        // A new environment signs nothing yet.
        resumed.emit(Event::EnvironmentReady {
            at: time::OffsetDateTime::now_utc(),
            attempt: 2,
            start_ms: 0,
            environment: "env".into(),
        });
        assert!(!resumed.signs_statuses() && !resumed.running_step_signed());
        assert!(resumed.flush(std::time::Duration::from_secs(5)).await);
        drop(resumed);
        assert!(!Mark::read(&path).is_ok_and(|m| m.signing));
    }
}
