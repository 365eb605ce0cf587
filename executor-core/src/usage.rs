//! What one step cost: its CPU time and its peak memory.
//!
//! A backend measures a step where it runs and tells the run's log
//! ([`RunLog::record_usage`](crate::RunLog::record_usage)); the driver puts
//! it in the step's result ([`StepResult::usage`](crate::StepResult::usage)),
//! its `stepFinished` event and its end line, and warns when the peak came
//! within a tenth of the environment's memory limit.
//!
//! ```
//! use executor_core::usage::StepUsage;
//! let usage = StepUsage {
//!     cpu_user_ms: 20_000,
//!     cpu_system_ms: 100,
//!     max_rss_bytes: Some(812 << 20),
//!     memory_limit_bytes: Some(1 << 30),
//!     environment_peak_bytes: None,
//! };
//! assert_eq!(usage.summary(), "cpu 20.1s, peak 812 MiB");
//! assert_eq!(usage.near_limit(), None);
//! ```

use serde::{Deserialize, Serialize};

/// The most bytes of usage an end mark or status file carries after the
/// status: five numbers of at most 20 digits and the spaces between them.
pub const MARKED_MAX: usize = 104;

/// What one step cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepUsage {
    /// CPU time in user mode of the step's whole process tree (children
    /// it waited for included), in milliseconds.
    pub cpu_user_ms: u64,
    /// CPU time in the kernel on the tree's behalf, in milliseconds.
    pub cpu_system_ms: u64,
    /// The largest resident set of any one process of the step, in bytes;
    /// absent when the backend saw none (a step over before its first
    /// sample).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rss_bytes: Option<u64>,
    /// The environment's memory limit as the step ended, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<u64>,
    /// The environment's peak memory (its cgroup's, page cache included)
    /// when it was reached while the step ran; absent when the
    /// environment's peak came before the step, or its cgroup cannot be
    /// read. A cgroup's peak only grows, so a step that did not raise it
    /// cannot be told from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_peak_bytes: Option<u64>,
}

/// A limit this large is none: cgroup v1 says "no limit" with the
/// largest page-aligned 63-bit number.
const NO_LIMIT: u64 = 1 << 62;

impl StepUsage {
    /// The usage an environment's wrapper reports after a step's status:
    /// `USER_MS SYSTEM_MS PEAK_KIB LIMIT_BYTES [ENV_PEAK_BYTES]`, decimal
    /// numbers split by one space (0 for a peak, limit or environment
    /// peak is none). Anything else is `None`: the words come from the
    /// step's reach.
    ///
    /// ```
    /// use executor_core::usage::StepUsage;
    /// let usage = StepUsage::from_marked("1200 30 61440 67108864").unwrap();
    /// assert_eq!(usage.cpu_user_ms, 1200);
    /// assert_eq!(usage.max_rss_bytes, Some(60 << 20));
    /// assert_eq!(usage.memory_limit_bytes, Some(64 << 20));
    /// assert_eq!(StepUsage::from_marked("1 2 0 0").unwrap().max_rss_bytes, None);
    /// assert!(StepUsage::from_marked("1 2 3").is_none());
    /// assert!(StepUsage::from_marked("1 2 3 x").is_none());
    /// assert_eq!(StepUsage::from_marked("1 2 3 0 9000").unwrap().environment_peak_bytes, Some(9000));
    /// ```
    pub fn from_marked(words: &str) -> Option<Self> {
        if words.len() > MARKED_MAX {
            return None;
        }
        let mut numbers = words.split(' ').map(|w| {
            (!w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()))
                .then(|| w.parse::<u64>().ok())
                .flatten()
        });
        let mut next = || numbers.next().flatten();
        let (user, system, peak_kib, limit) = (next()?, next()?, next()?, next()?);
        let environment_peak = match numbers.next() {
            None => 0,
            Some(peak) => peak?,
        };
        if numbers.next().is_some() {
            return None;
        }
        Some(StepUsage {
            cpu_user_ms: user,
            cpu_system_ms: system,
            max_rss_bytes: (peak_kib > 0).then(|| peak_kib.saturating_mul(1024)),
            memory_limit_bytes: (limit > 0 && limit < NO_LIMIT).then_some(limit),
            environment_peak_bytes: (environment_peak > 0).then_some(environment_peak),
        })
    }

    /// CPU time in user mode and in the kernel together.
    pub fn cpu_ms(&self) -> u64 {
        self.cpu_user_ms.saturating_add(self.cpu_system_ms)
    }

    /// The end line's words: `cpu 20.1s, peak 812 MiB` (no peak when none
    /// was seen).
    pub fn summary(&self) -> String {
        let cpu = self.cpu_ms();
        let mut text = format!("cpu {}.{}s", cpu / 1000, (cpu % 1000) / 100);
        if let Some(peak) = self.max_rss_bytes {
            text.push_str(&format!(", peak {}", crate::text::size(peak)));
        }
        text
    }

    /// The peak and the limit when the peak came within a tenth of the
    /// environment's memory limit: an OOM kill was near.
    ///
    /// ```
    /// use executor_core::usage::StepUsage;
    /// let near = StepUsage { max_rss_bytes: Some(60 << 20), memory_limit_bytes: Some(64 << 20), ..Default::default() };
    /// assert_eq!(near.near_limit(), Some((60 << 20, 64 << 20)));
    /// let far = StepUsage { max_rss_bytes: Some(50 << 20), ..near };
    /// assert_eq!(far.near_limit(), None);
    /// ```
    pub fn near_limit(&self) -> Option<(u64, u64)> {
        let (peak, limit) = (self.max_rss_bytes?, self.memory_limit_bytes?);
        (u128::from(peak) * 10 >= u128::from(limit) * 9).then_some((peak, limit))
    }
}
