//! A restarted API server accepts connections before its RBAC roles have
//! loaded (`/readyz` still fails `poststarthook/rbac/bootstrap-roles`),
//! and for about a second it answers a tenant `403 Forbidden` for what it
//! granted before. Such a 403 is ridden out as an outage is, but only
//! when both hold: the run's preflight proved the permission, and a call
//! to the server went unanswered (a refused or dropped connection, a cut
//! stream, 429, 5xx) within the reconnect window. Any other 403 is final.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::access::Permission;

/// What the server granted, and when it last did not answer.
#[derive(Debug, Default)]
pub(crate) struct Settling {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    proven: HashSet<Permission>,
    unanswered_at: Option<Instant>,
    /// The `unanswered_at` whose refusals the run's log was told of.
    told: Option<Instant>,
}

impl Settling {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server said (to a `SelfSubjectAccessReview`) that `permission`
    /// is granted.
    pub(crate) fn proven(&self, permission: Permission) {
        self.lock().proven.insert(permission);
    }

    /// A call went unanswered now.
    pub(crate) fn unanswered(&self) {
        self.lock().unanswered_at = Some(Instant::now());
    }

    /// How long ago a call went unanswered, if one did within `window`,
    /// when one of `needs` (any of them serves the call) was proven: a
    /// 403 for the call is then the settling server's, not a refusal.
    pub(crate) fn forgives(&self, needs: &[Permission], window: Duration) -> Option<Duration> {
        self.forgives_at(needs, window, Instant::now())
    }

    /// Whether the refusals after the latest unanswered call are yet to
    /// be told; once `true`, `false` until a call goes unanswered again.
    pub(crate) fn first_refusal(&self) -> bool {
        let mut state = self.lock();
        let first = state.told != state.unanswered_at;
        state.told = state.unanswered_at;
        first
    }

    fn forgives_at(
        &self,
        needs: &[Permission],
        window: Duration,
        now: Instant,
    ) -> Option<Duration> {
        let state = self.lock();
        let since = now.saturating_duration_since(state.unanswered_at?);
        (since <= window && needs.iter().any(|p| state.proven.contains(p))).then_some(since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::RUN;

    const WINDOW: Duration = Duration::from_secs(300);

    #[test]
    fn a_403_is_forgiven_only_for_a_proven_permission_after_a_call_went_unanswered() {
        let settling = Settling::default();
        let delete_jobs = RUN
            .iter()
            .copied()
            .find(|p| p.verb == "delete" && p.resource == "jobs")
            .unwrap();
        let list_events = RUN
            .iter()
            .copied()
            .find(|p| p.resource == "events")
            .unwrap();
        // Nothing unanswered yet, nothing proven.
        assert_eq!(settling.forgives(&[delete_jobs], WINDOW), None);
        settling.proven(delete_jobs);
        assert_eq!(settling.forgives(&[delete_jobs], WINDOW), None);
        settling.unanswered();
        assert!(settling.forgives(&[delete_jobs], WINDOW).is_some());
        // Never proven, or past the window: final.
        assert_eq!(settling.forgives(&[list_events], WINDOW), None);
        assert_eq!(settling.forgives(&[], WINDOW), None);
        let later = Instant::now() + WINDOW + Duration::from_secs(1);
        assert_eq!(settling.forgives_at(&[delete_jobs], WINDOW, later), None);
        // One of several that serve the call is enough (exec: create or get).
        assert!(settling
            .forgives(&[list_events, delete_jobs], WINDOW)
            .is_some());
    }
}
