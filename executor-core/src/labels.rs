//! Label values and names derived from runner DIDs and run names.
//!
//! Docker labels accept anything, but Kubernetes label values are at most
//! 63 characters of `[A-Za-z0-9._-]`, starting and ending alphanumeric.
//! Both backends use the same sanitised values, so a filter written for one
//! works on the other; the raw values go in labels or annotations of their own.

use sha2::{Digest, Sha256};

/// Label key of the runner's sanitised DID.
pub const RUNNER_LABEL: &str = "dev.knotless.runner";
/// Label key of the run's sanitised name.
pub const RUN_LABEL: &str = "dev.knotless.run";
/// Key holding the raw runner DID.
pub const RUNNER_RAW_KEY: &str = "dev.knotless.runner-did";
/// Key holding the raw run name.
pub const RUN_RAW_KEY: &str = "dev.knotless.run-name";
/// Key holding the expiry, seconds since the Unix epoch.
pub const EXPIRES_KEY: &str = "dev.knotless.expires";

/// A Kubernetes-valid label value for any string.
///
/// Characters outside `[A-Za-z0-9._-]` become `-`; a value that had to be
/// changed or shortened gets a short hash suffix so two different inputs
/// never share a value.
///
/// ```
/// use executor_core::labels::label_value;
/// assert_eq!(label_value("build-42"), "build-42");
/// let v = label_value("did:plc:runner");
/// assert!(v.starts_with("did-plc-runner-"));
/// assert!(v.len() <= 63);
/// ```
pub fn label_value(raw: &str) -> String {
    let mapped: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = mapped.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed == raw && !raw.is_empty() && raw.len() <= 63 {
        return raw.to_string();
    }
    let hash = hex::encode(&Sha256::digest(raw.as_bytes())[..4]);
    let head: String = trimmed.chars().take(63 - 9).collect();
    let head = head.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if head.is_empty() {
        format!("x-{hash}")
    } else {
        format!("{head}-{hash}")
    }
}

/// A DNS-1123 label (lower-case, at most `max` characters) built from parts,
/// for container and Job names.
///
/// ```
/// use executor_core::labels::dns_name;
/// assert_eq!(dns_name(&["Run", "My_Build"], 63), "run-my-build");
/// ```
pub fn dns_name(parts: &[&str], max: usize) -> String {
    let joined = parts.join("-").to_ascii_lowercase();
    let mut out = String::with_capacity(joined.len());
    for c in joined.chars() {
        let c = if c.is_ascii_alphanumeric() { c } else { '-' };
        if !(c == '-' && out.ends_with('-')) {
            out.push(c);
        }
    }
    let out: String = out.trim_matches('-').chars().take(max).collect();
    let out = out.trim_end_matches('-').to_string();
    if out.is_empty() {
        "run".into()
    } else {
        out
    }
}

/// Seconds since the Unix epoch, as expiry labels hold them.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// `digits` hex digits, different on every call in a process and unlikely
/// to repeat across processes: suffixes that keep names unique.
///
/// Not a secret: the digits come from the process's hasher.
///
/// ```
/// let a = executor_core::labels::random_hex(8);
/// assert_eq!(a.len(), 8);
/// assert_ne!(a, executor_core::labels::random_hex(8));
/// assert_eq!(executor_core::labels::random_hex(40).len(), 40);
/// ```
pub fn random_hex(digits: usize) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hex = String::with_capacity(digits.saturating_add(16));
    while hex.len() < digits {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        hex.push_str(&format!("{:016x}", h.finish()));
    }
    hex.truncate(digits);
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_valid_and_distinct() {
        let long = "did:web:".to_string() + &"a".repeat(100);
        for raw in ["did:plc:a", "did:plc:b", "-x-", "", &long, "ünïcode"] {
            let v = label_value(raw);
            assert!(v.len() <= 63, "{v}");
            assert!(
                v.chars().next().is_some_and(|c| c.is_ascii_alphanumeric()),
                "{v}"
            );
            assert!(
                v.chars().last().is_some_and(|c| c.is_ascii_alphanumeric()),
                "{v}"
            );
        }
        assert_ne!(label_value("did:plc:a"), label_value("did-plc-a"));
    }
}
