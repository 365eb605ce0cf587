//! Signed statuses: the key a backend signs a step's status with, and the
//! record, in the log's mark, that the environment signs.
//!
//! A backend whose environment can sign a step's status (so that a
//! process an earlier step left cannot forge it) signs it with
//! [`RunLog::status_key`], which only the runner holds and a resumed
//! runner derives again. What a resumed runner cannot derive is whether
//! the environment signs: [`RunLog::require_signed_status`] puts that in
//! the mark before the runner could lose a step it matters for, so the
//! runner that follows a step on takes only a signed status, as the first
//! one would have.

use super::{Dest, RunLog};
use crate::log::writer::Message;

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

    /// Whether the attempt's environment signs its steps' statuses
    /// ([`RunLog::require_signed_status`]), as this runner saw it or the
    /// one whose log this one carries on ([`RunLog::resume`]): a status of
    /// it, of a step that runner started too, must be signed.
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
        self.lock().signing
    }

    /// Records that the attempt's environment signs its steps' statuses
    /// (with [`RunLog::status_key`]): from now on every one of them must be
    /// signed, also for a runner that resumes the run. Resolves once the
    /// log's mark says so (at once for a log without one, and when it
    /// already did: it is written once an environment), so a runner killed
    /// after that leaves a mark from which a resumed runner refuses an
    /// unsigned status. Lasts until the next environment is ready.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use executor_core::{resume::Mark, RunLog};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("run.log");
    /// let log = RunLog::create_resumable(&path).unwrap();
    /// log.require_signed_status().await;
    /// assert!(Mark::read(&path).unwrap().signing);
    /// # }
    /// ```
    pub async fn require_signed_status(&self) {
        let answer = {
            let mut inner = self.lock();
            if std::mem::replace(&mut inner.signing, true) {
                return;
            }
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

    #[tokio::test]
    async fn a_signing_environment_is_in_the_mark_a_resumed_runner_reads() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("run.log");
        let log = RunLog::create_resumable(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!Mark::read(&path).is_ok_and(|m| m.signing));
        log.require_signed_status().await;
        assert!(Mark::read(&path).is_ok_and(|m| m.signing));
        let key = log.status_key("a1s1-00");
        drop(log);
        let (resumed, mark) = RunLog::resume(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(mark.signing && resumed.signs_statuses());
        assert_eq!(resumed.status_key("a1s1-00"), key);
        // A new environment signs nothing yet.
        resumed.emit(Event::EnvironmentReady {
            at: time::OffsetDateTime::now_utc(),
            attempt: 2,
            start_ms: 0,
            environment: "env".into(),
        });
        assert!(!resumed.signs_statuses());
        assert!(resumed.flush(std::time::Duration::from_secs(5)).await);
        drop(resumed);
        assert!(!Mark::read(&path).is_ok_and(|m| m.signing));
    }
}
