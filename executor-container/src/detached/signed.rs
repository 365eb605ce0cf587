//! Signed status files: what a follow reads back after a cut is checked
//! against the step's key, which the runner derives from the run's
//! secret ([`RunLog::status_key`]).
//!
//! The status file sits in the state folder, where any process of the
//! step's user can write it: a process an earlier step left behind could
//! write `0` there before the step ends, and a runner that lost the
//! step's stream would take it. Where the channel's agent starts the
//! step, its supervisor (not dumpable: no process of the step's user can
//! read its memory) signs the status line with SipHash-2-4 under a key
//! sent to it in the channel message alone, and writes the signature on
//! a second line (`m HEX`). From the moment a channel's agent has said
//! it runs (its first words on the channel's stdout), or the run's log
//! has seen the environment sign (a runner that resumed the run), the
//! runner refuses a status without a valid signature: a forged one is a
//! lost status, an infrastructure error, never the step's code.

use std::sync::Arc;

use executor_core::RunLog;
use tokio::sync::watch;

#[path = "../../helper/siphash.rs"]
mod siphash;

/// Whether a channel's agent said it runs: set once, watched by the
/// starts through it.
pub(super) type AgentSaid = Arc<watch::Sender<bool>>;

/// A step's status key as the run's log gives it
/// ([`RunLog::status_key`]): a resumed runner derives the same. Never
/// printed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct StepKey([u8; 16]);

impl std::fmt::Debug for StepKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StepKey(..)")
    }
}

/// What a start's [`StatusKey`] is made of, from the run's log: the
/// step's key, and whether the log has seen the attempt's environment
/// sign a status ([`RunLog::signs_statuses`]; then a start whose agent
/// signs must be signed even before its channel says the agent runs).
///
/// ```
/// let (log, _) = executor_core::RunLog::memory();
/// let signing = executor_container::detached::Signing::of(&log, "a1s0-00");
/// assert!(!signing.environment_signs());
/// assert!(!format!("{signing:?}").contains(&format!("{:?}", log.status_key("a1s0-00").unwrap())));
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Signing {
    key: Option<StepKey>,
    environment: bool,
}

impl Signing {
    /// The signing of the step whose id is `step_id`, as `log` has it.
    pub fn of(log: &RunLog, step_id: &str) -> Self {
        Signing {
            key: log.status_key(step_id).map(StepKey),
            environment: log.signs_statuses(),
        }
    }

    /// The key a followed step's status must be signed with, where the
    /// run's log says its environment signs ([`RunLog::signs_statuses`]).
    pub fn followed(log: &RunLog, step_id: &str) -> Option<StepKey> {
        log.signs_statuses()
            .then(|| log.status_key(step_id).map(StepKey))
            .flatten()
    }

    /// Whether the log has seen the attempt's environment sign.
    pub fn environment_signs(&self) -> bool {
        self.environment
    }
}

/// The key one start's status file is signed with, and whether its
/// status must be signed: the channel it went through said its agent
/// runs, or the run's log had seen the environment sign.
#[derive(Clone)]
pub struct StatusKey {
    key: [u8; 16],
    agent: AgentSaid,
    /// Required whatever the channel says.
    known: bool,
}

impl std::fmt::Debug for StatusKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key itself is never printed.
        f.debug_struct("StatusKey")
            .field("required", &self.required())
            .finish_non_exhaustive()
    }
}

impl StatusKey {
    /// The key of a start through a channel whose agent flag is `agent`:
    /// the step's from `signing`, or a fresh one from the system's random
    /// source for a run whose log has none.
    pub(super) fn new(agent: AgentSaid, signing: Signing) -> Self {
        let key = signing.key.map_or_else(fresh_key, |k| k.0);
        StatusKey {
            key,
            agent,
            known: signing.environment,
        }
    }

    /// The key of a step an earlier runner started in an environment the
    /// log records as signing: its status must be signed.
    pub(super) fn followed(key: StepKey) -> Self {
        StatusKey {
            key: key.0,
            agent: Arc::new(watch::Sender::new(false)),
            known: true,
        }
    }

    /// Resolves once the status must be signed.
    pub(super) async fn required_now(&self) {
        if self.known {
            return;
        }
        let mut said = self.agent.subscribe();
        if said.wait_for(|said| *said).await.is_err() {
            // Never, then.
            std::future::pending::<()>().await;
        }
    }

    /// The key as the native line's `m` record carries it.
    pub(super) fn hex(&self) -> String {
        self.key.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether the status must be signed: the channel's agent said it
    /// runs, or the log had seen the environment sign.
    pub fn required(&self) -> bool {
        self.known || *self.agent.borrow()
    }

    /// The status line of `text`, a status file's content for the step
    /// whose files' prefix is `prefix`, when its signature is good or
    /// none is required; otherwise why it is refused.
    pub(super) fn checked<'a>(&self, prefix: &str, text: &'a str) -> Result<&'a str, String> {
        let (line, rest) = text.split_once('\n').unwrap_or((text, ""));
        if !self.required() {
            return Ok(line);
        }
        let signature = rest.strip_suffix('\n').unwrap_or(rest);
        let want = siphash::mac_hex(siphash::status_mac(
            &self.key,
            prefix.as_bytes(),
            line.as_bytes(),
        ));
        match signature.strip_prefix("m ") {
            Some(got) if constant_time_eq(got.as_bytes(), &want) => Ok(line),
            Some(_) => Err("its signature is not the start's".into()),
            None => Err("it is not signed".into()),
        }
    }
}

/// `first`, a step's first exec, run while waiting for its status to be
/// required: the moment it is (its channel's agent said it runs), the
/// log's mark records it and `recorded` is set; `first` goes on all the
/// while.
pub(super) async fn recorded_when_required<T>(
    first: impl std::future::Future<Output = T>,
    key: &StatusKey,
    log: &RunLog,
    recorded: &mut bool,
) -> T {
    tokio::pin!(first);
    tokio::select! {
        biased;
        ended = &mut first => ended,
        () = key.required_now() => {
            log.require_signed_status().await;
            *recorded = true;
            first.await
        }
    }
}

/// 128 bits from the system's random source.
fn fresh_key() -> [u8; 16] {
    let mut key = [0u8; 16];
    if getrandom::getrandom(&mut key).is_err() {
        // No random source: a key from the process's hasher, which the
        // standard library seeds from it when it can.
        let hex = executor_core::labels::random_hex(32);
        key = siphash::key_of_hex(hex.as_bytes()).unwrap_or_default();
    }
    key
}

/// Whether `a` and `b` are equal, in a time that does not depend on
/// where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The signed status file content the agent writes for `line`: for
/// fakes and tests of the protocol.
#[cfg(test)]
pub(super) fn signed_text(key: &StatusKey, prefix: &str, line: &str) -> String {
    let mac = siphash::status_mac(&key.key, prefix.as_bytes(), line.as_bytes());
    format!(
        "{line}\nm {}\n",
        String::from_utf8_lossy(&siphash::mac_hex(mac))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_matches_the_reference_vectors() {
        // The paper's key 00..0f; messages 00..(n-1) (its Appendix A
        // and the reference implementation's vectors).
        let key: [u8; 16] = std::array::from_fn(|i| i as u8);
        let message: Vec<u8> = (0..15).collect();
        assert_eq!(siphash::siphash24(&key, &[&message]), 0xa129_ca61_49be_45e5);
        assert_eq!(siphash::siphash24(&key, &[]), 0x726f_db47_dd0e_0e31);
        // In pieces, as a whole.
        let (a, b) = message.split_at(5);
        assert_eq!(siphash::siphash24(&key, &[a, b]), 0xa129_ca61_49be_45e5);
        #[allow(deprecated)]
        for n in 0..64u8 {
            use std::hash::Hasher;
            let bytes: Vec<u8> = (0..n).collect();
            let mut std_hash = std::hash::SipHasher::new_with_keys(
                u64::from_le_bytes(key[..8].try_into().unwrap()),
                u64::from_le_bytes(key[8..].try_into().unwrap()),
            );
            std_hash.write(&bytes);
            assert_eq!(
                siphash::siphash24(&key, &[&bytes]),
                std_hash.finish(),
                "{n} bytes"
            );
        }
    }

    #[test]
    fn a_required_status_needs_the_starts_signature() {
        let agent: AgentSaid = Arc::new(watch::Sender::new(true));
        let key = StatusKey::new(Arc::clone(&agent), Signing::default());
        let other = StatusKey::new(Arc::clone(&agent), Signing::default());
        let good = signed_text(&key, "/k/stepio-a", "1 2 3 4 5 0");
        assert_eq!(key.checked("/k/stepio-a", &good), Ok("1 2 3 4 5 0"));
        // Another start's key, another step's file, a changed status,
        // none at all.
        assert!(other.checked("/k/stepio-a", &good).is_err());
        assert!(key.checked("/k/stepio-b", &good).is_err());
        let changed = good.replacen('1', "0", 1);
        assert!(key.checked("/k/stepio-a", &changed).is_err());
        assert!(key.checked("/k/stepio-a", "0\n").is_err());
        // A channel whose agent never said it runs: the shell's start,
        // which cannot sign.
        agent.send_replace(false);
        assert_eq!(key.checked("/k/stepio-a", "0\n"), Ok("0"));
        assert!(!format!("{key:?}").contains(&key.hex()));
        assert_eq!(key.hex().len(), 32);
    }

    #[tokio::test]
    async fn a_steps_key_is_the_logs_and_a_followed_one_is_required() {
        let (log, _) = executor_core::RunLog::memory();
        let agent: AgentSaid = Arc::new(watch::Sender::new(false));
        let key = StatusKey::new(Arc::clone(&agent), Signing::of(&log, "a1s0-00"));
        let again = StatusKey::new(Arc::clone(&agent), Signing::of(&log, "a1s0-00"));
        assert_eq!(key.hex(), again.hex());
        let good = signed_text(&key, "/k/stepio-a1s0-00", "0");
        assert!(!key.required());
        // A runner that follows the step on takes only its signature.
        assert!(Signing::followed(&log, "a1s0-00").is_none());
        log.require_signed_status().await;
        let followed = StatusKey::followed(
            Signing::followed(&log, "a1s0-00").unwrap_or_else(|| panic!("not recorded")),
        );
        assert!(followed.required());
        assert_eq!(followed.checked("/k/stepio-a1s0-00", &good), Ok("0"));
        assert!(followed.checked("/k/stepio-a1s0-00", "0\n").is_err());
        // Once the log has seen the environment sign, a new channel's
        // starts must be signed before their agent speaks.
        let fresh: AgentSaid = Arc::new(watch::Sender::new(false));
        assert!(StatusKey::new(fresh, Signing::of(&log, "a1s1-00")).required());
        // The agent speaking wakes a start waiting to know.
        let waiting = tokio::spawn({
            let key = key.clone();
            async move { key.required_now().await }
        });
        agent.send_replace(true);
        waiting.await.unwrap_or_else(|e| panic!("{e}"));
        assert!(key.required());
    }
}
