//! The run log: one byte stream that every step's output goes to as it arrives.

use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;
use tokio_util::sync::PollSemaphore;

use crate::events::{Event, EventSink, OutputStream};
use crate::mask::{MaskStream, Masker};

mod guard;
mod limit;
mod open;
mod output;
mod signed;
mod stamps;
mod writer;

use guard::LineGuard;
pub use output::{LogOutput, MemoryLog};
use stamps::{stamped, Stamper};
use writer::Dest;

use limit::OutputLimit;
pub use limit::DEFAULT_OUTPUT_LIMIT;

/// How many bytes of step output may wait for a slow log destination
/// before the step's output is no longer read (and the step, writing to a
/// full pipe, waits too).
pub const LOG_BUDGET: usize = 1 << 20;

/// How a front end words the runner's texts; see [`RunLog::reword`].
pub type Reword = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// The single log of a run.
///
/// Step output is written through as it arrives, so a reader of the log
/// file (or the terminal, with `--log -`) sees it while the step runs.
/// The runner's own lines start with `==> ` and always begin on a fresh
/// line, so they are easy to tell apart from step output.
///
/// A log made with [`RunLog::new`] (and [`RunLog::create`],
/// [`RunLog::stdout`]) writes from its own thread: a destination that
/// stalls (a full pipe, a slow disk) never stalls the async runtime, so
/// timeouts and cancellation still fire on time. At most 1 MiB
/// bytes of step output wait for it; past that, [`RunLog::output`] waits,
/// which is back-pressure on the step, never an unbounded queue. Runner
/// lines never wait. [`RunLog::inline`] writes in the caller, for
/// destinations that never block (memory, a sink).
///
/// Once [`RunLog::mask`] is given a run's secrets (the driver does it
/// when a run has any), every byte of step output and every runner line
/// goes through one [`MaskStream`], so a value split across chunks is
/// still masked; see [`crate::mask`].
///
/// The log is also where a run's [`Event`]s go: the text is one view of
/// them, and every [`EventSink`] added with [`RunLog::add_sink`] gets
/// them all, masked, on the same thread and in the same order as the
/// text. [`RunLog::timestamps`] puts the time in front of every line.
///
/// Cloning is cheap: every clone writes to the same destination.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use executor_core::RunLog;
/// let (log, captured) = RunLog::memory();
/// log.line("step build: started");
/// log.output(b"compiling\n").await;
/// assert!(captured.text().contains("compiling"));
/// # }
/// ```
#[derive(Clone)]
pub struct RunLog {
    inner: Arc<Mutex<Inner>>,
    /// Permits for bytes of step output in flight to the writer thread.
    budget: Option<Arc<Semaphore>>,
}

struct Inner {
    dest: Dest,
    at_line_start: bool,
    failed: bool,
    /// One mask stream per output stream: a value a step writes to stdout
    /// in two pieces is masked even when stderr output comes between them.
    masks: Option<[MaskStream; 2]>,
    masked: Vec<u8>,
    guard: LineGuard,
    guarded: Vec<u8>,
    sinks: Sinks,
    /// The running step, for output events.
    step: Option<String>,
    stamps: Option<Stamper>,
    /// Whether the writer keeps a mark ([`crate::resume::Mark`]), which
    /// is told with each write how many bytes of each of the running
    /// step's streams the log then holds.
    marking: bool,
    /// Bytes of each stream of the running step taken so far.
    taken: [u64; 2],
    /// The stream whose bytes the line guard holds.
    guarded_stream: OutputStream,
    limit: OutputLimit,
    /// How a front end words the runner's texts ([`RunLog::reword`]).
    reword: Option<Reword>,
    /// The run's secret for naming its steps' files; see [`RunLog::step_id`].
    step_key: String,
    /// What the running step cost, once its backend measured it.
    usage: Option<crate::usage::StepUsage>,
    /// Whether the attempt's environment signs its steps' statuses; see
    /// [`RunLog::require_signed_status`].
    signing: bool,
}

type Sinks = Arc<[Arc<dyn EventSink>]>;

impl std::fmt::Debug for RunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLog").finish_non_exhaustive()
    }
}

impl RunLog {
    /// From now on, masks the values `masker` knows (as well as any it
    /// was given before) in everything written.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use executor_core::{mask::{Masker, Secret}, RunLog};
    /// let (log, captured) = RunLog::memory();
    /// log.mask(&Masker::new([&Secret::new("hunter22")]));
    /// log.output(b"pw=hun").await;
    /// log.output(b"ter22\n").await;
    /// log.line("done with hunter22");
    /// assert_eq!(captured.text(), "pw=[MASKED]\n==> done with [MASKED]\n");
    /// # }
    /// ```
    pub fn mask(&self, masker: &Masker) {
        if masker.is_empty() {
            return;
        }
        let mut inner = self.lock();
        inner.release_held();
        let combined = match &inner.masks {
            Some([stream, _]) => stream.masker().union(masker),
            None => masker.clone(),
        };
        inner.masks = Some([combined.stream(), combined.stream()]);
    }

    /// Caps the step output this log holds (`None`: no cap); the default
    /// is [`DEFAULT_OUTPUT_LIMIT`]. Past it, output is dropped and
    /// counted ([`RunLog::output_dropped`]), one runner line says so, and
    /// the steps go on: a step that prints without end fills no disk.
    /// Runner lines are always written.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (log, captured) = executor_core::RunLog::memory();
    /// log.limit_output(Some(4));
    /// log.output(b"abcdefgh\n").await;
    /// log.line("next");
    /// assert_eq!(log.output_dropped(), 5);
    /// assert_eq!(
    ///     captured.text(),
    ///     "abcd\n==> the log holds 4 bytes of step output, its limit: more output is dropped (and counted), the steps go on\n==> next\n"
    /// );
    /// # }
    /// ```
    pub fn limit_output(&self, limit: Option<u64>) {
        self.lock().limit.set(limit);
    }

    /// The id of the step at `index` of `attempt` in the environment
    /// ([`StepCommand::id`](crate::StepCommand::id)), which names its
    /// files there: `a1s0-` and 16 hex digits of a digest keyed with a
    /// secret of the run's that only the runner holds (kept in the log's
    /// mark, so a resumed run names its steps the same). No step can name
    /// a later step's files beforehand, so none can make files a later
    /// step's start would trust.
    ///
    /// ```
    /// let (log, _) = executor_core::RunLog::memory();
    /// let id = log.step_id(1, 0);
    /// assert!(id.starts_with("a1s0-") && id.len() == 21);
    /// assert_eq!(log.step_id(1, 0), id);
    /// assert_ne!(executor_core::RunLog::memory().0.step_id(1, 0), id);
    /// ```
    pub fn step_id(&self, attempt: u32, index: usize) -> String {
        use sha2::Digest;
        let key = self.lock().step_key.clone();
        if key.is_empty() {
            // A run whose mark is older than step keys named them so.
            return format!("a{attempt}s{index}");
        }
        let digest = sha2::Sha256::digest(format!("{key}/{attempt}/{index}"));
        format!("a{attempt}s{index}-{}", hex::encode(&digest[..8]))
    }

    /// Tells the run what the running step cost, as its backend measured
    /// it: the driver puts it in the step's result, its `stepFinished`
    /// event and its end line. The last one told before the step ends
    /// counts.
    ///
    /// ```
    /// use executor_core::usage::StepUsage;
    /// let (log, _) = executor_core::RunLog::memory();
    /// log.record_usage(StepUsage { cpu_user_ms: 5, ..Default::default() });
    /// ```
    pub fn record_usage(&self, usage: crate::usage::StepUsage) {
        self.lock().usage = Some(usage);
    }

    /// What the step that just ended cost, taken once: the driver takes
    /// it as the step ends, and a backend's test to see what it told.
    ///
    /// ```
    /// use executor_core::usage::StepUsage;
    /// let (log, _) = executor_core::RunLog::memory();
    /// log.record_usage(StepUsage { cpu_user_ms: 5, ..Default::default() });
    /// assert_eq!(log.take_usage().map(|u| u.cpu_user_ms), Some(5));
    /// assert!(log.take_usage().is_none());
    /// ```
    pub fn take_usage(&self) -> Option<crate::usage::StepUsage> {
        self.lock().usage.take()
    }

    /// Bytes of step output dropped past the log's limit so far.
    pub fn output_dropped(&self) -> u64 {
        self.lock().limit.dropped()
    }

    /// Says once, after the bytes it kept, that the log is full.
    fn limit_reached(&self) {
        let limit = self.lock().limit.limit().unwrap_or_default();
        self.line(&format!(
            "the log holds {} of step output, its limit: more output is dropped (and counted), the steps go on",
            crate::text::size(limit)
        ));
    }

    /// An `AsyncWrite` into this log's step output, with the same
    /// back-pressure as [`RunLog::output`].
    pub fn writer(&self) -> LogOutput {
        self.writer_for(OutputStream::Stdout)
    }

    /// [`RunLog::writer`] for one of the step's streams.
    pub fn writer_for(&self, stream: OutputStream) -> LogOutput {
        LogOutput {
            log: self.clone(),
            budget: self.budget.clone().map(PollSemaphore::new),
            stream,
        }
    }

    /// From now on, gives every event to `sink` as well; see
    /// [`crate::events`]. A sink must not write to this log.
    pub fn add_sink(&self, sink: Arc<dyn EventSink>) {
        let mut inner = self.lock();
        let mut all: Vec<_> = inner.sinks.iter().cloned().collect();
        all.push(sink);
        inner.sinks = all.into();
    }

    /// From now on, words every runner text (its lines, and the texts of
    /// the events sinks get) through `reword`, after masking: a front end
    /// names the fields of a run as its users know them
    /// (`RunSpec::checkout` as `--workdir`). Step output is never reworded.
    ///
    /// ```
    /// let (log, captured) = executor_core::RunLog::memory();
    /// log.reword(std::sync::Arc::new(|t: &str| t.replace("RunSpec::image", "--image")));
    /// log.line("RunSpec::image is missing");
    /// assert_eq!(captured.text(), "==> --image is missing\n");
    /// ```
    pub fn reword(&self, reword: Reword) {
        self.lock().reword = Some(reword);
    }

    /// From now on, starts every line of the text log with its time in
    /// UTC (`2026-12-03T20:37:15.123Z `), as GitLab's and GitHub's logs do.
    /// A line of step output gets the time its first byte arrived.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (log, captured) = executor_core::RunLog::memory();
    /// log.timestamps();
    /// log.output(b"one\ntwo\n").await;
    /// let text = captured.text();
    /// let lines: Vec<_> = text.lines().collect();
    /// assert_eq!(lines.len(), 2);
    /// assert!(lines.iter().all(|l| l.len() == 25 + 3 && l.as_bytes()[23] == b'Z'));
    /// # }
    /// ```
    pub fn timestamps(&self) {
        self.lock().stamps.get_or_insert_with(Stamper::default);
    }

    /// Tells every sink about `event`, and shows it in the text log as a
    /// runner line when it has one. Texts in it are masked first.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use executor_core::{events::Event, RunLog};
    /// let (log, captured) = RunLog::memory();
    /// log.emit(Event::message("pulling busybox"));
    /// assert_eq!(captured.text(), "==> pulling busybox\n");
    /// # }
    /// ```
    pub fn emit(&self, event: Event) {
        let mut inner = self.lock();
        inner.release_held();
        let mut event = match &inner.masks {
            Some([stream, _]) => event.masked(stream.masker()),
            None => event,
        };
        if let Some(reword) = &inner.reword {
            event.edit_texts(|text| *text = reword(text));
        }
        match &event {
            Event::StepStarted { step, .. } => {
                inner.step = Some(step.clone());
                inner.taken = [0, 0];
            }
            Event::EnvironmentReady { .. } => inner.signing = false,
            Event::StepResumed { step, .. } => inner.step = Some(step.clone()),
            Event::StepFinished { .. } => inner.step = None,
            _ => {}
        }
        if let Some(line) = event.line() {
            let lead = if inner.at_line_start { "" } else { "\n" };
            let text = format!("{lead}==> {line}\n").into_bytes();
            inner.at_line_start = true;
            inner.guard.line_starts();
            let at = event.at();
            let text = stamped(&mut inner.stamps, &text, || at);
            let Inner { dest, failed, .. } = &mut *inner;
            dest.write(text, 0, failed);
        }
        inner.send_event(event, 0);
    }

    /// Writes one runner line (`==> message`), starting on a fresh line,
    /// and gives sinks an [`Event::Message`]. Never waits: runner lines
    /// are few.
    pub fn line(&self, message: &str) {
        self.emit(Event::message(message));
    }

    /// Writes out what the masker held back: the output it belonged to is
    /// over (a step ended, or the runner speaks next).
    pub fn end_output(&self) {
        self.lock().release_held();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock only means another writer panicked mid-write;
        // the log is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    fn new(dest: Dest) -> Self {
        Inner {
            dest,
            at_line_start: true,
            failed: false,
            masks: None,
            masked: Vec::new(),
            guard: LineGuard::default(),
            guarded: Vec::new(),
            sinks: Arc::new([]),
            step: None,
            stamps: None,
            marking: false,
            taken: [0, 0],
            guarded_stream: OutputStream::Stdout,
            limit: OutputLimit::default(),
            reword: None,
            step_key: signed::run_secret(),
            usage: None,
            signing: false,
        }
    }

    /// Writes out what the masker and the line guard held back.
    fn release_held(&mut self) {
        self.guarded.clear();
        for stream in [OutputStream::Stdout, OutputStream::Stderr] {
            self.masked.clear();
            if let Some(masks) = self.masks.as_mut() {
                masks[stream as usize].flush(&mut self.masked);
            }
            if self.masked.is_empty() {
                continue;
            }
            if !self.sinks.is_empty() {
                let event = Event::output(self.step.clone(), stream, &self.masked);
                self.send_event(event, 0);
            }
            self.guard.push(&self.masked, &mut self.guarded);
        }
        self.guard.release(&mut self.guarded);
        if self.guarded.is_empty() {
            return;
        }
        self.at_line_start = self.guarded.ends_with(b"\n");
        let bytes = stamped(
            &mut self.stamps,
            &self.guarded,
            time::OffsetDateTime::now_utc,
        );
        let committed = self.marking.then_some(self.taken);
        self.dest
            .write_marked(bytes, 0, committed, &mut self.failed);
    }
}

#[cfg(test)]
mod tests;
