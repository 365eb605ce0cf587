//! What one attempt did: its steps, phases, caches and failures, as the
//! result records them.

use time::OffsetDateTime;

use crate::cache::CacheResult;
use crate::events::Event;
use crate::tar::RefusedEntry;
use crate::{Attempt, Failure, Phases, RunLog, RunSpec, RunStatus, StepResult};

/// What one attempt did.
pub(super) struct AttemptRecord {
    /// The first failure: its kind, step and words.
    pub(super) failure: Option<Failure>,
    /// Every failure's words: the first, then what failed after it
    /// (outputs, stop), for the result's `error`.
    pub(super) error: Option<String>,
    pub(super) started_at: OffsetDateTime,
    pub(super) finished_at: OffsetDateTime,
    pub(super) steps: Vec<StepResult>,
    pub(super) phases: Phases,
    pub(super) caches: Vec<CacheResult>,
    pub(super) refused: Vec<RefusedEntry>,
    pub(super) environment: Option<crate::EnvironmentFacts>,
}

impl AttemptRecord {
    pub(super) fn new(spec: &RunSpec) -> Self {
        let now = OffsetDateTime::now_utc();
        AttemptRecord {
            failure: None,
            error: None,
            started_at: now,
            finished_at: now,
            steps: Vec::new(),
            phases: Phases::default(),
            caches: Vec::new(),
            refused: Vec::new(),
            environment: None,
        }
        .with_steps_skipped(spec, 0)
    }

    /// Every step from `from` on recorded as skipped.
    pub(super) fn with_steps_skipped(mut self, spec: &RunSpec, from: usize) -> Self {
        self.steps.truncate(from);
        self.steps.extend(
            spec.steps
                .iter()
                .skip(from)
                .map(|s| StepResult::skipped(&s.name)),
        );
        self
    }

    /// Adds a failure: the first one is the attempt's (the same object as
    /// its step's), later ones (outputs, stop) add their words to `error`.
    pub(super) fn note(&mut self, failure: Failure) {
        self.error = Some(match self.error.take() {
            Some(first) => format!("{first}; {}", failure.message),
            None => failure.message.clone(),
        });
        self.failure.get_or_insert(failure);
    }

    pub(super) fn ended(mut self) -> Self {
        self.finished_at = OffsetDateTime::now_utc();
        self
    }

    /// The result's record of this attempt, numbered `number`.
    pub(super) fn attempt(&self, number: u32) -> Attempt {
        Attempt {
            number,
            status: self
                .failure
                .as_ref()
                .map_or(RunStatus::Success, |f| f.kind.run_status()),
            failure: self.failure.clone(),
            started_at: self.started_at,
            finished_at: self.finished_at,
            steps: self.steps.clone(),
            phases: self.phases,
            environment: self.environment.clone(),
        }
    }

    /// Tells `log` that this attempt, numbered `number`, ended: a runner
    /// process that carries the run on after this one keeps it
    /// ([`Mark::earlier`](crate::resume::Mark::earlier)).
    pub(super) fn tell(&self, log: &RunLog, number: u32) {
        log.emit(Event::AttemptFinished {
            at: self.finished_at,
            record: Box::new(self.attempt(number)),
        });
    }
}
