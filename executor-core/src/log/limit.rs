//! The cap on how much step output one run's log holds.

/// Step output a log holds by default: 64 MiB. GitLab Runner's 4 MiB is
/// often raised by its users for real builds (a verbose compile or test
/// run passes it), while a step in a loop writes gigabytes in a minute; 64
/// MiB keeps every ordinary log whole, and a runner with a hundred runs
/// on its disk at most a few GiB of logs and their events.
pub const DEFAULT_OUTPUT_LIMIT: u64 = 64 << 20;

/// Counts step output against a limit.
#[derive(Debug, Clone, Copy)]
pub(super) struct OutputLimit {
    limit: Option<u64>,
    logged: u64,
    dropped: u64,
}

impl Default for OutputLimit {
    fn default() -> Self {
        OutputLimit {
            limit: Some(DEFAULT_OUTPUT_LIMIT),
            logged: 0,
            dropped: 0,
        }
    }
}

impl OutputLimit {
    pub(super) fn set(&mut self, limit: Option<u64>) {
        self.limit = limit;
    }

    pub(super) fn limit(&self) -> Option<u64> {
        self.limit
    }

    /// Counts bytes already in the log (a resumed run's), so the limit
    /// is the run's, not each runner's.
    pub(super) fn already_logged(&mut self, bytes: u64) {
        self.logged = self.logged.saturating_add(bytes);
    }

    /// How many of `len` new bytes the log takes, and whether this is the
    /// first time bytes are dropped.
    pub(super) fn admit(&mut self, len: usize) -> (usize, bool) {
        let Some(limit) = self.limit else {
            return (len, false);
        };
        let room = limit.saturating_sub(self.logged);
        let keep = usize::try_from(room).map_or(len, |room| room.min(len));
        self.logged = self.logged.saturating_add(keep as u64);
        let dropped = (len - keep) as u64;
        let first = dropped > 0 && self.dropped == 0;
        self.dropped = self.dropped.saturating_add(dropped);
        (keep, first)
    }

    pub(super) fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_past_the_limit_is_dropped_and_counted_once_reached() {
        let mut limit = OutputLimit::default();
        limit.set(Some(10));
        assert_eq!(limit.admit(6), (6, false));
        assert_eq!(limit.admit(6), (4, true));
        assert_eq!(limit.admit(3), (0, false));
        assert_eq!(limit.dropped(), 5);
        limit.set(None);
        assert_eq!(limit.admit(3), (3, false));
    }
}
