//! The values flags take: sizes, durations, capabilities, variables.

use std::time::Duration;

/// The run log's limit of step output: bytes, or none.
#[derive(Debug, Clone, Copy)]
pub struct LogLimit(pub Option<u64>);

pub(crate) fn parse_log_limit(text: &str) -> Result<LogLimit, String> {
    if text.trim().eq_ignore_ascii_case("none") {
        return Ok(LogLimit(None));
    }
    let bytes = parse_bytes(text)?;
    Ok(LogLimit(u64::try_from(bytes).ok()))
}

/// `1048576`, `512k`, `512m`, `2g`.
pub fn parse_bytes(text: &str) -> Result<i64, String> {
    let bad = || format!("{text:?} is not a size: use bytes or a number with k, m or g (512m, 2g)");
    let lower = text.trim().to_ascii_lowercase();
    let lower = lower.strip_suffix('b').unwrap_or(&lower);
    let (digits, scale) = match lower.chars().last() {
        Some('k') => (&lower[..lower.len() - 1], 1i64 << 10),
        Some('m') => (&lower[..lower.len() - 1], 1 << 20),
        Some('g') => (&lower[..lower.len() - 1], 1 << 30),
        _ => (lower, 1),
    };
    let n: i64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(scale).filter(|v| *v > 0).ok_or_else(bad)
}

/// `90`, `90s`, `15m`, `2h`, `1h30m`; at most [`executor_core::MAX_TIMEOUT`] (30 days).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!("{text:?} is not a duration: use seconds (90) or units like 90s, 15m, 2h, 1h30m")
    };
    let too_long = || {
        format!(
            "{text:?} is longer than the most allowed, {} days",
            executor_core::MAX_TIMEOUT.as_secs() / 86400
        )
    };
    let max = executor_core::MAX_TIMEOUT.as_secs();
    let total = if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
        text.parse::<u64>().map_err(|_| too_long())?
    } else {
        let mut total = 0u64;
        let mut number = String::new();
        for c in text.chars() {
            if c.is_ascii_digit() {
                number.push(c);
                continue;
            }
            let n: u64 = match number.parse() {
                Ok(n) => n,
                Err(_) if !number.is_empty() => return Err(too_long()),
                Err(_) => return Err(bad()),
            };
            number.clear();
            let unit = match c {
                's' => 1,
                'm' => 60,
                'h' => 3600,
                'd' => 86400,
                _ => return Err(bad()),
            };
            total = n
                .checked_mul(unit)
                .and_then(|secs| total.checked_add(secs))
                .ok_or_else(too_long)?;
        }
        if !number.is_empty() {
            return Err(bad());
        }
        total
    };
    if total == 0 {
        return Err(bad());
    }
    if total > max {
        return Err(too_long());
    }
    Ok(Duration::from_secs(total))
}

pub(crate) fn parse_cache(text: &str) -> Result<executor_core::CacheSpec, String> {
    executor_core::CacheSpec::parse(text).map_err(|e| e.to_string())
}

pub(crate) fn parse_env(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    executor_core::validate_env_key(key).map_err(|e| e.to_string())?;
    Ok((key.to_string(), value.to_string()))
}

/// `CHOWN`, `cap_chown`: the name without `CAP_`, upper case, as both
/// Docker and Kubernetes take it.
pub(crate) fn parse_capability(text: &str) -> Result<String, String> {
    let upper = text.trim().to_ascii_uppercase();
    let name = upper.strip_prefix("CAP_").unwrap_or(&upper);
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(format!(
            "{text:?} is not a capability name such as CHOWN or NET_ADMIN"
        ));
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::super::backend::parse_toleration;
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("m").is_err());
        for huge in [
            "99999999999999999999",
            "99999999999999999999s",
            "999999999999d",
            "31d",
        ] {
            let err = parse_duration(huge).unwrap_err();
            assert!(err.contains("30 days"), "{huge}: {err}");
        }
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86400)));
        assert_eq!(parse_bytes("512m"), Ok(512 << 20));
        assert_eq!(parse_bytes("2G"), Ok(2 << 30));
        assert_eq!(parse_bytes("100"), Ok(100));
        assert!(parse_bytes("lots").is_err());
        assert_eq!(
            parse_toleration("dedicated=ci:NoSchedule").unwrap()["operator"],
            "Equal"
        );
        assert_eq!(
            parse_toleration("gpu:NoExecute").unwrap()["operator"],
            "Exists"
        );
        assert!(parse_toleration("gpu:Sometimes").is_err());
    }
}
