//! Whether a step was OOM-killed in an environment that outlived it.
//!
//! An engine reports an OOM kill only when the environment's own main
//! process dies of it; the kernel's OOM killer picks the step (its
//! `oom_score_adj` is 1000), so the environment lives on and only the
//! memory cgroup's `oom_kill` counter tells. The step's wrapper writes
//! that counter as the step starts ([`StepFiles::oom_file`]); a count
//! above it after the step ended is the step's.

use crate::detached::StepFiles;
use executor_core::script::quote;

pub use crate::detached::OOM_COUNTERS as COUNTERS;

/// The shell text that prints the environment's `oom_kill` counters and
/// the step's baseline, for [`killed_since_start`] to read. Run it in
/// the environment with `sh -c`; it always exits 0.
///
/// ```
/// use executor_container::container::oom;
/// use executor_container::detached::StepFiles;
/// let probe = oom::probe(&StepFiles::new("/knotless", "s1"));
/// assert!(probe.contains("/knotless/stepio-s1.oom"));
/// ```
pub fn probe(files: &StepFiles) -> String {
    format!(
        "cat {COUNTERS} 2>/dev/null; printf 'baseline %s\\n' \"$(cat {} 2>/dev/null)\"; true",
        quote(&files.oom_file())
    )
}

/// Whether `said` (what [`probe`] printed) counts more OOM kills than the
/// step's baseline: none, or one that is not a number, is 0.
///
/// ```
/// use executor_container::container::oom::killed_since_start;
/// assert!(killed_since_start("oom 1\noom_kill 1\nbaseline \n"));
/// assert!(!killed_since_start("oom 1\noom_kill 1\nbaseline 1\n"));
/// assert!(!killed_since_start("no counters here\n"));
/// ```
pub fn killed_since_start(said: &str) -> bool {
    let number = |prefix: &str| {
        said.lines()
            .filter_map(|l| l.strip_prefix(prefix))
            .filter_map(|n| n.trim().parse::<u64>().ok())
            .max()
            .unwrap_or(0)
    };
    number("oom_kill ") > number("baseline ")
}

/// What a step's failure says of an OOM kill, with the environment's
/// memory limit as its backend writes it, if it has one.
///
/// ```
/// use executor_container::container::oom::words;
/// assert_eq!(
///     words(Some("32Mi")),
///     "OOMKilled: the step ran out of memory (the container's limit of 32Mi)"
/// );
/// ```
pub fn words(limit: Option<&str>) -> String {
    let limit = limit.map(|l| format!(" of {l}")).unwrap_or_default();
    format!("OOMKilled: the step ran out of memory (the container's limit{limit})")
}
