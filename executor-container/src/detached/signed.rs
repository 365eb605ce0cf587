//! Signed status files: what a follow reads back after a cut is checked
//! against a key the runner chose for the start.
//!
//! The status file sits in the state folder, where any process of the
//! step's user can write it: a process an earlier step left behind could
//! write `0` there before the step ends, and a runner that lost the
//! step's stream would take it. Where the channel's agent starts the
//! step, its supervisor (not dumpable: no process of the step's user can
//! read its memory) signs the status line with SipHash-2-4 under a key
//! sent to it in the channel message alone, and writes the signature on
//! a second line (`m HEX`). From the moment a channel's agent has said
//! it runs (its first words on the channel's stdout), the runner refuses
//! a status of that channel's starts without a valid signature: a forged
//! one is a lost status, an infrastructure error, never the step's code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[path = "../../helper/siphash.rs"]
mod siphash;

/// The key one start's status file is signed with, and whether the
/// channel it went through has said its agent runs (then its status
/// must be signed).
#[derive(Clone)]
pub struct StatusKey {
    key: [u8; 16],
    agent: Arc<AtomicBool>,
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
    /// A fresh key from the system's random source, for a start through
    /// a channel whose agent flag is `agent`.
    pub(super) fn new(agent: Arc<AtomicBool>) -> Self {
        let mut key = [0u8; 16];
        if getrandom::getrandom(&mut key).is_err() {
            // No random source: a key from the process's hasher, which
            // the standard library seeds from it when it can.
            let a = executor_core::labels::random_hex(16);
            let b = executor_core::labels::random_hex(16);
            key = siphash::key_of_hex(format!("{a}{b}").as_bytes()).unwrap_or_default();
        }
        StatusKey { key, agent }
    }

    /// The key as the native line's `m` record carries it.
    pub(super) fn hex(&self) -> String {
        self.key.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Whether the status must be signed: the channel's agent said it runs.
    pub fn required(&self) -> bool {
        self.agent.load(Ordering::Acquire)
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
        let agent = Arc::new(AtomicBool::new(true));
        let key = StatusKey::new(Arc::clone(&agent));
        let other = StatusKey::new(Arc::clone(&agent));
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
        agent.store(false, Ordering::Release);
        assert_eq!(key.checked("/k/stepio-a", "0\n"), Ok("0"));
        assert!(!format!("{key:?}").contains(&key.hex()));
        assert_eq!(key.hex().len(), 32);
    }
}
