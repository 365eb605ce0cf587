//! Live events of a run: what a runner publishing a check record needs to
//! know as it happens (a step started, what it printed, how it ended).
//!
//! The driver and the backends write to a [`RunLog`](crate::RunLog); every
//! [`EventSink`] added with [`RunLog::add_sink`](crate::RunLog::add_sink)
//! gets the run's [`Event`]s, in order, with output already masked. The text
//! log is one consumer of the same events, [`JsonLines`] (`--events FILE`)
//! another, and a closure an embedder passes is a third.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::sync::{Arc, Mutex};
//! use executor_core::events::Event;
//! use executor_core::RunLog;
//!
//! let seen = Arc::new(Mutex::new(Vec::new()));
//! let log = RunLog::discard();
//! let record = seen.clone();
//! log.add_sink(Arc::new(move |event: &Event| {
//!     if let Event::Output { text, .. } = event {
//!         record.lock().unwrap().push(text.clone());
//!     }
//! }));
//! log.output(b"hello\n").await;
//! log.end_output();
//! assert_eq!(seen.lock().unwrap().concat(), "hello\n");
//! # }
//! ```

use serde::Serialize;
use time::OffsetDateTime;

use crate::mask::Masker;
use crate::{CacheResult, Failure, RunResult, StepStatus};

mod json_lines;
mod line;

pub use json_lines::JsonLines;

/// Which of a step's streams a piece of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One thing that happened in a run. Serialized (by [`JsonLines`]) as one
/// JSON object with an `event` field naming the variant in camelCase and
/// an `at` field in RFC 3339.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "camelCase")]
#[non_exhaustive]
pub enum Event {
    /// The run began: its input was accepted. A retry is told by the
    /// `attempt` of the events that follow.
    #[serde(rename_all = "camelCase")]
    RunStarted {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// `RunSpec::name`.
        name: String,
        /// `RunSpec::runner`.
        runner: String,
        /// The executor's kind (`shell`, `docker`, `k8s`).
        executor: String,
    },
    /// The environment is up and the checkout is in it.
    #[serde(rename_all = "camelCase")]
    EnvironmentReady {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// The attempt it belongs to.
        attempt: u32,
        /// How long `Executor::start` took.
        start_ms: u64,
        /// The backend's id of the environment ([`RunHandle::id`](crate::RunHandle::id)):
        /// what a runner that must exit at once names as left behind.
        #[serde(default)]
        environment: String,
    },
    /// A cache was restored, or not (see its `hit` and `note`).
    #[serde(rename_all = "camelCase")]
    CacheRestored {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// What happened, as the result records it.
        cache: CacheResult,
    },
    /// A step began.
    #[serde(rename_all = "camelCase")]
    StepStarted {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// The attempt it belongs to.
        attempt: u32,
        /// The step's name.
        step: String,
        /// Its place in `RunSpec::steps`, from 0.
        index: usize,
    },
    /// A step an earlier runner process started, carried on by
    /// [`resume_with`](crate::resume::resume_with) after that process
    /// stopped: announced once by [`Event::StepStarted`], and its output
    /// goes on after the bytes the log already holds of it.
    #[serde(rename_all = "camelCase")]
    StepResumed {
        /// When it was carried on.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// The attempt it belongs to.
        attempt: u32,
        /// The step's name.
        step: String,
        /// Its place in `RunSpec::steps`, from 0.
        index: usize,
        /// Bytes of its stdout the log held.
        stdout: u64,
        /// Bytes of its stderr the log held.
        stderr: u64,
    },
    /// A step that did not run: an earlier step failed and this one is not
    /// [`always`](crate::Step::always). Steps left when a run ends early
    /// (a cancel, a timeout, a lost environment) get no event: the result
    /// records them as skipped.
    #[serde(rename_all = "camelCase")]
    StepSkipped {
        /// When it was passed over.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// The attempt it belongs to.
        attempt: u32,
        /// The step's name.
        step: String,
        /// Its place in `RunSpec::steps`, from 0.
        index: usize,
    },
    /// A piece of a step's output, masked, as it arrived. Pieces may end
    /// anywhere, even inside a UTF-8 sequence; [`JsonLines`] joins them.
    #[serde(rename_all = "camelCase")]
    Output {
        /// When it arrived.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// The step that printed it, if a step was running.
        step: Option<String>,
        /// Which stream.
        stream: OutputStream,
        /// The bytes, decoded lossily; [`Event::output_bytes`] has them as
        /// they came.
        text: String,
        /// The bytes as they came.
        #[serde(skip)]
        bytes: Vec<u8>,
    },
    /// A step ended.
    #[serde(rename_all = "camelCase")]
    StepFinished {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// The attempt it belongs to.
        attempt: u32,
        /// The step's name.
        step: String,
        /// How it ended.
        status: StepStatus,
        /// Its exit code, when it has one.
        exit_code: Option<i32>,
        /// How long it ran.
        duration_ms: u64,
        /// Why it did not succeed.
        failure: Option<Failure>,
        /// Bytes of its output dropped past the log's limit
        /// ([`crate::RunLog::limit_output`]); absent when none were.
        #[serde(default, skip_serializing_if = "crate::result::is_zero")]
        output_dropped_bytes: u64,
        /// What it cost, when its backend measured it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<crate::usage::StepUsage>,
        /// What a step with an id wrote to `$STEP_OUTPUT`; absent when
        /// nothing.
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        outputs: std::collections::BTreeMap<String, String>,
    },
    /// An attempt ended: its record, as the result's `attempts` will hold
    /// it. The run's last attempt is told too, before
    /// [`Event::RunFinished`].
    #[serde(rename_all = "camelCase")]
    AttemptFinished {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// The attempt's record.
        record: Box<crate::Attempt>,
    },
    /// A cache was saved, or not (see its `saved` and `note`).
    #[serde(rename_all = "camelCase")]
    CacheSaved {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// What happened, as the result records it.
        cache: CacheResult,
    },
    /// The outputs folder was brought back (or bringing it back failed;
    /// then `failure` says why).
    #[serde(rename_all = "camelCase")]
    OutputsCollected {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// How long it took.
        ms: u64,
        /// Entries refused as unsafe or over the limits.
        refused: u64,
        /// Why nothing or not everything came back.
        failure: Option<Failure>,
    },
    /// A line of the runner's own (`==> ...` in the text log) that no
    /// other event stands for: pulls, waits, warnings.
    #[serde(rename_all = "camelCase")]
    Message {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// The line, masked.
        text: String,
    },
    /// The run ended; the result is the one the driver returns, masked.
    #[serde(rename_all = "camelCase")]
    RunFinished {
        /// When.
        #[serde(with = "time::serde::rfc3339")]
        at: OffsetDateTime,
        /// The whole result.
        result: Box<RunResult>,
    },
}

impl Event {
    /// An output event of `bytes` from `stream`, arriving now.
    pub(crate) fn output(step: Option<String>, stream: OutputStream, bytes: &[u8]) -> Self {
        Event::Output {
            at: OffsetDateTime::now_utc(),
            step,
            stream,
            text: lossy(bytes),
            bytes: bytes.to_vec(),
        }
    }

    /// The event with `masker`'s values masked in every text it holds.
    pub(crate) fn masked(mut self, masker: &Masker) -> Self {
        if !masker.is_empty() {
            self.edit_texts(|text| masker.mask_string(text));
        }
        self
    }

    /// Calls `edit` on every text the event holds but output (which is
    /// the step's, as it came): names, messages, failures, cache notes and
    /// a finished run's result.
    ///
    /// ```
    /// use executor_core::events::Event;
    /// let mut event = Event::message("DockerOptions::pull forbids it");
    /// event.edit_texts(|t| *t = t.replace("DockerOptions::pull", "--pull"));
    /// assert_eq!(event.line().as_deref(), Some("--pull forbids it"));
    /// ```
    pub fn edit_texts(&mut self, mut edit: impl FnMut(&mut String)) {
        match self {
            Event::RunStarted { name, runner, .. } => {
                edit(name);
                edit(runner);
            }
            Event::StepStarted { step, .. }
            | Event::StepResumed { step, .. }
            | Event::StepSkipped { step, .. } => edit(step),
            Event::StepFinished {
                step,
                failure,
                outputs,
                ..
            } => {
                edit(step);
                failure
                    .iter_mut()
                    .flat_map(Failure::texts)
                    .for_each(&mut edit);
                outputs.values_mut().for_each(edit);
            }
            Event::OutputsCollected {
                failure: Some(f), ..
            } => f.texts().for_each(edit),
            Event::CacheRestored { cache, .. } | Event::CacheSaved { cache, .. } => {
                edit(&mut cache.path);
                if let Some(note) = &mut cache.note {
                    edit(note);
                }
            }
            Event::Message { text, .. } => edit(text),
            Event::RunFinished { result, .. } => result.edit_texts(edit),
            Event::AttemptFinished { record, .. } => record.texts().for_each(edit),
            Event::Output { .. }
            | Event::EnvironmentReady { .. }
            | Event::OutputsCollected { .. } => {}
        }
    }

    /// The bytes of an [`Event::Output`], as they came.
    pub fn output_bytes(&self) -> Option<&[u8]> {
        match self {
            Event::Output { bytes, .. } => Some(bytes),
            _ => None,
        }
    }

    /// When it happened.
    pub fn at(&self) -> OffsetDateTime {
        match self {
            Event::RunStarted { at, .. }
            | Event::EnvironmentReady { at, .. }
            | Event::CacheRestored { at, .. }
            | Event::StepStarted { at, .. }
            | Event::StepResumed { at, .. }
            | Event::StepSkipped { at, .. }
            | Event::Output { at, .. }
            | Event::StepFinished { at, .. }
            | Event::AttemptFinished { at, .. }
            | Event::CacheSaved { at, .. }
            | Event::OutputsCollected { at, .. }
            | Event::Message { at, .. }
            | Event::RunFinished { at, .. } => *at,
        }
    }
}

/// A consumer of a run's events; see the [module docs](self).
///
/// Called once per event, in the order of the run, never concurrently.
/// For a log made with [`RunLog::new`](crate::RunLog::new) (and `create`,
/// `stdout`), calls come from the log's own writer thread: a sink may
/// block (write a file, send on a bounded channel), which holds back the
/// step's output as a slow log does, but never the async runtime. For an
/// inline log they come from the task that writes to it, and must not
/// block.
///
/// Any `Fn(&Event) + Send + Sync` is a sink.
pub trait EventSink: Send + Sync {
    /// Takes one event.
    fn event(&self, event: &Event);
}

impl<F: Fn(&Event) + Send + Sync> EventSink for F {
    fn event(&self, event: &Event) {
        self(event);
    }
}

impl Event {
    /// A runner line as an event, happening now.
    pub fn message(text: impl Into<String>) -> Self {
        Event::Message {
            at: OffsetDateTime::now_utc(),
            text: text.into(),
        }
    }
}

/// `bytes` as text, each invalid sequence shown as U+FFFD. Valid UTF-8,
/// a step's usual output, takes the standard library's faster check.
pub(crate) fn lossy(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

#[cfg(test)]
mod tests;
