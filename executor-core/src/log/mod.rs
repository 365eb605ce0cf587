//! The run log: one byte stream that every step's output goes to as it arrives.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::AsyncWrite;
use tokio::sync::Semaphore;
use tokio_util::sync::PollSemaphore;

use crate::events::{Event, EventSink, OutputStream};
use crate::mask::{MaskStream, Masker};
use crate::resume::mark::{Mark, MarkFile};

mod limit;

pub(crate) use limit::size;
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
}

type Sinks = Arc<[Arc<dyn EventSink>]>;

enum Dest {
    Inline(Box<dyn Write + Send>),
    Thread {
        to_writer: mpsc::Sender<Message>,
        written: Arc<AtomicU64>,
    },
}

enum Message {
    /// Bytes to write, the budget permits they release once written, and
    /// the running step's bytes of stdout and stderr the log holds with them.
    Write(Vec<u8>, u32, Option<[u64; 2]>),
    /// An event for the sinks, and the budget permits it releases.
    Event(Box<Event>, Sinks, u32),
    /// Answered once everything before it is written (or failed).
    Flushed(tokio::sync::oneshot::Sender<()>),
}

impl std::fmt::Debug for RunLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunLog").finish_non_exhaustive()
    }
}

impl RunLog {
    /// A log writing to any writer from its own thread; see the type docs.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        Self::threaded(out, None)
    }

    fn threaded(out: impl Write + Send + 'static, mark: Option<MarkFile>) -> Self {
        let marking = mark.is_some();
        let budget = Arc::new(Semaphore::new(LOG_BUDGET));
        let (to_writer, from_runner) = mpsc::channel();
        let written = Arc::new(AtomicU64::new(0));
        let counter = written.clone();
        let permits = budget.clone();
        let mut out: Box<dyn Write + Send> = Box::new(out);
        let spawned = std::thread::Builder::new()
            .name("run-log".into())
            .spawn(move || write_all_sent(&mut out, &from_runner, &counter, &permits, mark));
        match spawned {
            Ok(_) => {
                let mut inner = Inner::new(Dest::Thread { to_writer, written });
                inner.marking = marking;
                RunLog {
                    inner: Arc::new(Mutex::new(inner)),
                    budget: Some(budget),
                }
            }
            Err(err) => {
                // No thread to spare: write in the caller rather than not at all.
                tracing::warn!(%err, "no thread for the run log; writing it inline");
                RunLog::inline(io::sink())
            }
        }
    }

    /// A log writing in the caller, for destinations that never block.
    pub fn inline(out: impl Write + Send + 'static) -> Self {
        RunLog {
            inner: Arc::new(Mutex::new(Inner::new(Dest::Inline(Box::new(out))))),
            budget: None,
        }
    }

    /// A log written to `path`, created or truncated.
    ///
    /// # Errors
    /// The error of creating `path`.
    pub fn create(path: &Path) -> io::Result<Self> {
        Ok(Self::new(File::create(path)?))
    }

    /// A log written to `path`, created or truncated, with a mark beside
    /// it (`PATH.mark`, see [`crate::resume`]) from which a new runner
    /// process can carry the run on if this one is killed. A `path` that
    /// is not a regular file (`/dev/null`, a pipe, a terminal) gets no
    /// mark: such a log cannot be cut back and carried on, and a mark
    /// beside it would land in `/dev`.
    ///
    /// # Errors
    /// The error of creating `path` or its mark; `WouldBlock` naming the
    /// process that owns the log now ([`lock_path`](crate::resume::lock_path)),
    /// whose run it is.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("run.log");
    /// let log = executor_core::RunLog::create_resumable(&path).unwrap();
    /// // One process owns a run's log at a time.
    /// assert!(executor_core::RunLog::resume(&path).is_err());
    /// log.line("hello");
    /// assert!(log.flush(std::time::Duration::from_secs(5)).await);
    /// let mark = executor_core::resume::Mark::read(&path).unwrap();
    /// assert_eq!(mark.log_len, "==> hello\n".len() as u64);
    /// # }
    /// ```
    pub fn create_resumable(path: &Path) -> io::Result<Self> {
        // Not cut before it is this process's: another runner may own it.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        if !file.metadata()?.is_file() {
            return Ok(Self::new(file));
        }
        let owner = crate::resume::owner::Owner::take(path)?;
        file.set_len(0)?;
        let step_key = crate::labels::random_hex(32);
        let mark = MarkFile::create(
            path,
            Mark {
                at_line_start: true,
                step_key: step_key.clone(),
                ..Mark::default()
            },
            owner,
        )?;
        let log = Self::threaded(file, Some(mark));
        log.lock().step_key = step_key;
        Ok(log)
    }

    /// Opens the log of a run whose runner was killed, to carry it on: its
    /// mark is read, the log is cut back to the bytes the mark describes
    /// (a write the mark did not yet count is written again), and what is
    /// written goes after them, marked as before.
    ///
    /// # Errors
    /// `NotFound` for a log without a mark (not made by
    /// [`RunLog::create_resumable`]); `InvalidData` for a mark that
    /// cannot be read or a log shorter than its mark says; `WouldBlock`
    /// naming the process that owns the log, while it lives (a runner that
    /// is only stopped still does); the error of opening the log.
    pub fn resume(path: &Path) -> io::Result<(Self, Mark)> {
        let mark = Mark::read(path)?;
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        // Refused while the runner that wrote it lives, stopped or not:
        // its next write would tear the log this one carries on.
        let owner = crate::resume::owner::Owner::take(path)?;
        let len = file.metadata()?.len();
        if len < mark.log_len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the log {} has {len} bytes and its mark says {}: it was cut after the run wrote it",
                    path.display(),
                    mark.log_len
                ),
            ));
        }
        file.set_len(mark.log_len)?;
        let mut file = file;
        io::Seek::seek(&mut file, io::SeekFrom::End(0))?;
        let marked = MarkFile::create(path, mark.clone(), owner)?;
        let log = Self::threaded(file, Some(marked));
        {
            let mut inner = log.lock();
            inner.at_line_start = mark.at_line_start;
            // The limit is the run's: what the log holds counts.
            inner.limit.already_logged(mark.log_len);
            inner.step_key = mark.step_key.clone();
            if let Some(running) = &mark.running {
                inner.taken = [running.stdout, running.stderr];
            }
        }
        Ok((log, mark))
    }

    /// The running step's output goes on from `from`: what an earlier
    /// runner's log already holds of it.
    pub(crate) fn step_goes_on_from(&self, from: crate::detached::Offsets) {
        let mut inner = self.lock();
        inner.taken = [from.stdout, from.stderr];
        if inner.marking {
            let taken = Some(inner.taken);
            let Inner { dest, failed, .. } = &mut *inner;
            dest.write_marked(Vec::new(), 0, taken, failed);
        }
    }

    /// A log written to standard output (`--log -`). On a terminal,
    /// control bytes in output are shown in caret notation
    /// ([`TerminalSafe`](crate::text::TerminalSafe)), so a step cannot
    /// draw over the runner's lines; piped, the bytes go as they are.
    pub fn stdout() -> Self {
        use std::io::IsTerminal;
        if io::stdout().is_terminal() {
            Self::new(crate::text::TerminalSafe::new(io::stdout()))
        } else {
            Self::new(io::stdout())
        }
    }

    /// A log that discards everything.
    pub fn discard() -> Self {
        Self::inline(io::sink())
    }

    /// A log kept in memory, for tests and examples; the second value reads it.
    pub fn memory() -> (Self, MemoryLog) {
        let buf = MemoryLog::default();
        (Self::inline(buf.clone()), buf)
    }

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

    /// Writes step output as it came, but for masked secrets; a tail that
    /// could still be a secret is held until the next chunk, line or end.
    /// Waits while 1 MiB of output is already on its way to a slow
    /// destination.
    pub async fn output(&self, bytes: &[u8]) {
        self.output_from(OutputStream::Stdout, bytes).await;
    }

    /// [`RunLog::output`] from one of the step's streams: the text log
    /// shows both alike, events say which.
    pub async fn output_from(&self, stream: OutputStream, bytes: &[u8]) {
        for piece in bytes.chunks(LOG_BUDGET) {
            let permits = budget_permits(piece);
            if let Some(budget) = &self.budget {
                // Never closed; if it were, writing on would still be right.
                if let Ok(taken) = budget.acquire_many(permits).await {
                    taken.forget();
                }
            }
            self.write_output(stream, piece, permits);
        }
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

    /// What the step that just ended cost, taken once.
    pub(crate) fn take_usage(&self) -> Option<crate::usage::StepUsage> {
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
            limit::size(limit)
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

    fn write_output(&self, stream: OutputStream, bytes: &[u8], permits: u32) {
        let reached = self.write_admitted(stream, bytes, permits);
        if reached {
            self.limit_reached();
        }
    }

    /// Writes what the limit admits of `bytes`; whether the limit was
    /// reached just now.
    fn write_admitted(&self, stream: OutputStream, bytes: &[u8], permits: u32) -> bool {
        let mut inner = self.lock();
        // Dropped bytes still count as taken: a resumed run carries on
        // after them, not from them.
        let taken_len = bytes.len();
        let (keep, reached) = inner.limit.admit(bytes.len());
        let bytes = &bytes[..keep];
        let Inner {
            dest,
            masks,
            masked,
            guard,
            guarded,
            at_line_start,
            failed,
            sinks,
            step,
            stamps,
            marking,
            taken,
            guarded_stream,
            limit: _,
            reword: _,
            step_key: _,
            usage: _,
        } = &mut *inner;
        let unmasked = match masks.as_mut().map(|m| &mut m[stream as usize]) {
            Some(mask) => {
                masked.clear();
                mask.push(bytes, masked);
                masked.as_slice()
            }
            None => bytes,
        };
        let event = (!sinks.is_empty() && !unmasked.is_empty())
            .then(|| Event::output(step.clone(), stream, unmasked));
        guarded.clear();
        guard.push(unmasked, guarded);
        if guard.is_holding() {
            *guarded_stream = stream;
        }
        let holding = guard.is_holding()
            || masks
                .as_ref()
                .is_some_and(|m| m.iter().any(MaskStream::is_holding));
        if holding {
            *at_line_start = false;
        } else if !guarded.is_empty() {
            *at_line_start = guarded.ends_with(b"\n");
        }
        let text = stamped(stamps, guarded, time::OffsetDateTime::now_utc);
        let i = stream as usize;
        taken[i] = taken[i].saturating_add(taken_len as u64);
        // What the log holds of each stream: all taken but what the
        // masker and the line guard still hold (bytes as they came).
        let committed = marking.then(|| {
            let mut held = [0u64; 2];
            if let Some(masks) = masks.as_ref() {
                for (h, m) in held.iter_mut().zip(masks.iter()) {
                    *h = m.held_len() as u64;
                }
            }
            let g = *guarded_stream as usize;
            held[g] = held[g].saturating_add(guard.held_len() as u64);
            [
                taken[0].saturating_sub(held[0]),
                taken[1].saturating_sub(held[1]),
            ]
        });
        match event {
            // The event releases the budget: it is handled after the text,
            // so a slow sink holds output back as a slow log does.
            Some(event) => {
                dest.write_marked(text, 0, committed, failed);
                inner.send_event(event, permits);
            }
            None => dest.write_marked(text, permits, committed, failed),
        }
        reached
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

    /// Waits until everything logged so far is written. Gives up, returning
    /// `false`, when the destination takes no byte for `patience` (a
    /// reader that stopped reading); a slow one that keeps taking bytes is
    /// waited for.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let path = std::env::temp_dir().join(format!("flush-demo-{}.log", std::process::id()));
    /// let log = executor_core::RunLog::create(&path).unwrap();
    /// log.line("hello");
    /// assert!(log.flush(std::time::Duration::from_secs(5)).await);
    /// assert_eq!(std::fs::read_to_string(&path).unwrap(), "==> hello\n");
    /// # std::fs::remove_file(&path).unwrap();
    /// # }
    /// ```
    pub async fn flush(&self, patience: Duration) -> bool {
        let (done, mut flushed) = tokio::sync::oneshot::channel();
        let written = {
            let mut inner = self.lock();
            inner.release_held();
            match &mut inner.dest {
                Dest::Inline(out) => return out.flush().is_ok(),
                Dest::Thread { to_writer, written } => {
                    if to_writer.send(Message::Flushed(done)).is_err() {
                        return false;
                    }
                    written.clone()
                }
            }
        };
        let mut seen = written.load(Ordering::Relaxed);
        loop {
            match tokio::time::timeout(patience, &mut flushed).await {
                Ok(answer) => return answer.is_ok(),
                Err(_) => {
                    let now = written.load(Ordering::Relaxed);
                    if now == seen {
                        return false;
                    }
                    seen = now;
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A poisoned lock only means another writer panicked mid-write;
        // the log is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn budget_permits(piece: &[u8]) -> u32 {
    // A piece is at most LOG_BUDGET bytes, far below u32::MAX.
    u32::try_from(piece.len()).unwrap_or(u32::MAX)
}

/// The writer thread: writes what it is sent, in order, and gives the
/// budget back as bytes leave. After a failed write it discards the rest
/// (still giving the budget back, so no step waits on a dead log).
fn write_all_sent(
    out: &mut Box<dyn Write + Send>,
    from_runner: &mpsc::Receiver<Message>,
    written: &AtomicU64,
    budget: &Semaphore,
    mut mark: Option<MarkFile>,
) {
    let mut failed = false;
    loop {
        let message = match from_runner.try_recv() {
            Ok(message) => message,
            Err(mpsc::TryRecvError::Empty) => {
                // Nothing waiting: the mark catches up with the log once
                // per burst of writes, not once per write.
                save_mark(&mut mark);
                match from_runner.recv() {
                    Ok(message) => message,
                    Err(_) => break,
                }
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
        };
        match message {
            Message::Event(event, sinks, permits) => {
                tell(&sinks, &event);
                if let Some(mark) = mark.as_mut() {
                    mark.event(&event);
                }
                if permits > 0 {
                    budget.add_permits(permits as usize);
                }
            }
            Message::Write(bytes, permits, committed) => {
                if !failed {
                    if let Err(err) = out.write_all(&bytes).and_then(|()| out.flush()) {
                        failed = true;
                        // The mark stays at the last byte surely written.
                        mark = None;
                        tracing::warn!(%err, "run log write failed; further log output is lost");
                    } else if let Some(mark) = mark.as_mut() {
                        mark.wrote(&bytes, committed);
                    }
                }
                let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
                written.fetch_add(len.max(1), Ordering::Relaxed);
                if permits > 0 {
                    budget.add_permits(permits as usize);
                }
            }
            Message::Flushed(answer) => {
                save_mark(&mut mark);
                let _ = answer.send(());
            }
        }
    }
    save_mark(&mut mark);
}

fn save_mark(mark: &mut Option<MarkFile>) {
    if let Some(file) = mark.as_mut() {
        if let Err(err) = file.save() {
            tracing::warn!(%err, "the run log's mark could not be written; the run cannot be resumed from here on");
            *mark = None;
        }
    }
}

/// Gives `event` to every sink; a sink that panics loses that event, not
/// the log (a dead writer thread would hold every step's output back).
fn tell(sinks: &[Arc<dyn EventSink>], event: &Event) {
    for sink in sinks {
        let told = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sink.event(event)));
        if told.is_err() {
            tracing::warn!("an event sink panicked; it missed one event");
        }
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
            step_key: crate::labels::random_hex(32),
            usage: None,
        }
    }

    /// Hands `event` to the sinks (through the writer thread when there is
    /// one), and with it `permits` of the output budget.
    fn send_event(&self, event: Event, permits: u32) {
        match &self.dest {
            // An inline log has no budget to give back.
            Dest::Inline(_) => tell(&self.sinks, &event),
            Dest::Thread { to_writer, .. } => {
                let sinks = self.sinks.clone();
                // The thread only ends when every sender is gone.
                let _ = to_writer.send(Message::Event(Box::new(event), sinks, permits));
            }
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

/// The runner's lines start with `==> `; a step's line that starts the
/// same way gets one space in front, so a reader of the log (a person or
/// `grep '^==> '`) can trust every runner line. Holds back at most the
/// three bytes of a line start that may still become `==> `.
#[derive(Debug)]
struct LineGuard {
    at_line_start: bool,
    held: usize,
}

impl Default for LineGuard {
    fn default() -> Self {
        LineGuard {
            at_line_start: true,
            held: 0,
        }
    }
}

const RUNNER_MARK: &[u8] = b"==> ";

impl LineGuard {
    fn line_starts(&mut self) {
        self.at_line_start = true;
        self.held = 0;
    }

    fn is_holding(&self) -> bool {
        self.held > 0
    }

    /// Bytes held: the start of the mark, as they came.
    fn held_len(&self) -> usize {
        self.held
    }

    fn push(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.at_line_start {
                // Compare what is held plus what came against the mark.
                let want = &RUNNER_MARK[self.held..];
                let n = want.len().min(rest.len());
                if rest[..n] != want[..n] {
                    out.extend_from_slice(&RUNNER_MARK[..self.held]);
                    self.held = 0;
                    self.at_line_start = false;
                    continue;
                }
                if self.held + n < RUNNER_MARK.len() {
                    self.held += n;
                    return;
                }
                out.push(b' ');
                out.extend_from_slice(RUNNER_MARK);
                self.held = 0;
                self.at_line_start = false;
                rest = &rest[n..];
                continue;
            }
            match memchr::memchr(b'\n', rest) {
                Some(end) => {
                    out.extend_from_slice(&rest[..=end]);
                    rest = &rest[end + 1..];
                    self.at_line_start = true;
                }
                None => {
                    out.extend_from_slice(rest);
                    return;
                }
            }
        }
    }

    /// The output was interrupted (a runner line, the end): what is held
    /// cannot become a forged mark any more.
    fn release(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&RUNNER_MARK[..self.held]);
        if self.held > 0 {
            self.at_line_start = false;
        }
        self.held = 0;
    }
}

impl Dest {
    fn write(&mut self, bytes: Vec<u8>, permits: u32, failed: &mut bool) {
        self.write_marked(bytes, permits, None, failed);
    }

    fn write_marked(
        &mut self,
        bytes: Vec<u8>,
        permits: u32,
        committed: Option<[u64; 2]>,
        failed: &mut bool,
    ) {
        match self {
            Dest::Inline(out) => {
                if let Err(err) = out.write_all(&bytes).and_then(|()| out.flush()) {
                    if !*failed {
                        *failed = true;
                        tracing::warn!(%err, "run log write failed; further log output may be lost");
                    }
                }
            }
            Dest::Thread { to_writer, .. } => {
                // The thread only ends when every sender is gone.
                let _ = to_writer.send(Message::Write(bytes, permits, committed));
            }
        }
    }
}

/// `bytes` as the text log gets them: with the time in front of every line
/// when it is stamped (the clock is read only then).
fn stamped(
    stamps: &mut Option<Stamper>,
    bytes: &[u8],
    at: impl FnOnce() -> time::OffsetDateTime,
) -> Vec<u8> {
    match stamps {
        Some(stamper) => stamper.stamp(bytes, at()),
        None => bytes.to_vec(),
    }
}

/// Puts the time in front of every line of the text log.
#[derive(Debug)]
struct Stamper {
    at_line_start: bool,
}

impl Default for Stamper {
    fn default() -> Self {
        Stamper {
            at_line_start: true,
        }
    }
}

impl Stamper {
    /// `bytes` with `at` in front of every line that starts in them.
    fn stamp(&mut self, bytes: &[u8], at: time::OffsetDateTime) -> Vec<u8> {
        let stamp = format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z ",
            at.year(),
            u8::from(at.month()),
            at.day(),
            at.hour(),
            at.minute(),
            at.second(),
            at.millisecond()
        );
        let mut out = Vec::with_capacity(bytes.len() + stamp.len());
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            if self.at_line_start {
                out.extend_from_slice(stamp.as_bytes());
            }
            out.extend_from_slice(line);
            self.at_line_start = line.ends_with(b"\n");
        }
        out
    }
}

/// An `AsyncWrite` into a run log's step output; see [`RunLog::writer`].
pub struct LogOutput {
    log: RunLog,
    budget: Option<PollSemaphore>,
    stream: OutputStream,
}

impl AsyncWrite for LogOutput {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let piece = &buf[..buf.len().min(LOG_BUDGET)];
        let permits = budget_permits(piece);
        if let Some(budget) = self.budget.as_mut() {
            if let Some(taken) = ready!(budget.poll_acquire_many(cx, permits)) {
                taken.forget();
            }
        }
        self.log.write_output(self.stream, piece, permits);
        Poll::Ready(Ok(piece.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// An in-memory log destination; see [`RunLog::memory`].
#[derive(Clone, Default)]
pub struct MemoryLog(Arc<Mutex<Vec<u8>>>);

impl MemoryLog {
    /// Everything written so far, lossily decoded.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

impl Write for MemoryLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn step_output_cannot_forge_a_runner_line() {
        let forged = b"==> step build: success (exit 0, 0.001s)\n==> run x: success\n";
        let want = " ==> step build: success (exit 0, 0.001s)\n ==> run x: success\n";
        for cut in 0..forged.len() {
            let (log, mem) = RunLog::memory();
            log.output(&forged[..cut]).await;
            log.output(&forged[cut..]).await;
            assert_eq!(mem.text(), want, "cut at {cut}");
        }
        let (log, mem) = RunLog::memory();
        for byte in b"=== RUN TestX\n==>x\n==\nok ==> fine\n" {
            log.output(&[*byte]).await;
        }
        log.output(b"==").await;
        log.line("runner");
        log.output(b"==> after a runner line\n").await;
        assert_eq!(
            mem.text(),
            "=== RUN TestX\n==>x\n==\nok ==> fine\n==\n==> runner\n ==> after a runner line\n"
        );
    }

    #[tokio::test]
    async fn a_panicking_sink_loses_its_event_not_the_log() {
        let text = MemoryLog::default();
        let log = RunLog::new(text.clone());
        let told = Arc::new(AtomicU64::new(0));
        let counter = told.clone();
        log.add_sink(Arc::new(move |event: &Event| {
            if matches!(event, Event::Message { text, .. } if text == "boom") {
                panic!("a sink's own bug");
            }
            counter.fetch_add(1, Ordering::Relaxed);
        }));
        log.line("boom");
        log.output(b"after\n").await;
        log.line("done");
        assert!(log.flush(Duration::from_secs(5)).await);
        assert_eq!(text.text(), "==> boom\nafter\n==> done\n");
        assert_eq!(
            told.load(Ordering::Relaxed),
            2,
            "the output and the last line"
        );
    }

    #[tokio::test]
    async fn output_events_carry_the_step_the_stream_and_masked_bytes() {
        let (log, captured) = RunLog::memory();
        let events = Arc::new(Mutex::new(Vec::new()));
        let seen = events.clone();
        log.add_sink(Arc::new(move |event: &Event| {
            seen.lock().unwrap().push(event.clone());
        }));
        log.mask(&Masker::new([&crate::mask::Secret::new("hunter22")]));
        log.emit(Event::StepStarted {
            at: time::OffsetDateTime::now_utc(),
            attempt: 1,
            step: "build".into(),
            index: 0,
        });
        log.output_from(OutputStream::Stdout, b"pw=hun").await;
        log.output_from(OutputStream::Stderr, b"warn\n").await;
        log.output_from(OutputStream::Stdout, b"ter22\n").await;
        log.end_output();
        let outputs: Vec<(Option<String>, OutputStream, String)> = events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Event::Output {
                    step, stream, text, ..
                } => Some((step.clone(), *stream, text.clone())),
                _ => None,
            })
            .collect();
        let all: String = outputs.iter().map(|o| o.2.as_str()).collect();
        assert!(
            !all.contains("hunter22") && !all.contains("hun"),
            "{outputs:?}"
        );
        assert!(
            outputs.iter().all(|o| o.0.as_deref() == Some("build")),
            "{outputs:?}"
        );
        let stdout: String = outputs
            .iter()
            .filter(|o| o.1 == OutputStream::Stdout)
            .map(|o| o.2.as_str())
            .collect();
        assert_eq!(stdout, "pw=[MASKED]\n", "{outputs:?}");
        assert!(outputs
            .iter()
            .any(|o| o.1 == OutputStream::Stderr && o.2 == "warn\n"));
        // One mask per stream: stderr output between the two halves of a
        // secret on stdout does not release the first half.
        let text = captured.text();
        assert!(!text.contains("hun") && !text.contains("ter22"), "{text}");
        assert_eq!(text, "==> step build: started\npw=warn\n[MASKED]\n");
    }

    #[tokio::test]
    async fn runner_lines_start_on_a_fresh_line() {
        let (log, mem) = RunLog::memory();
        log.output(b"no newline").await;
        log.emit(Event::StepFinished {
            at: time::OffsetDateTime::now_utc(),
            attempt: 1,
            step: "a".into(),
            status: crate::StepStatus::Success,
            exit_code: Some(0),
            duration_ms: 1500,
            failure: None,
            output_dropped_bytes: 0,
            usage: None,
        });
        assert_eq!(
            mem.text(),
            "no newline\n==> step a: success (exit 0, 1.500s)\n"
        );
    }

    /// A destination that takes nothing until it is opened (or, so a
    /// runner that blocks on it cannot hang the test, ten seconds pass).
    #[derive(Clone)]
    struct Gate {
        open: Arc<(Mutex<bool>, std::sync::Condvar)>,
        got: MemoryLog,
    }

    impl Gate {
        fn open(&self) {
            let (lock, opened) = &*self.open;
            *lock.lock().unwrap() = true;
            opened.notify_all();
        }
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let (lock, opened) = &*self.open;
            let open = lock.lock().unwrap();
            let _open = opened
                .wait_timeout_while(open, Duration::from_secs(10), |open| !*open)
                .unwrap();
            self.got.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_stalled_destination_holds_back_output_but_never_the_runtime() {
        let gate = Gate {
            open: Arc::new((Mutex::new(false), std::sync::Condvar::new())),
            got: MemoryLog::default(),
        };
        let log = RunLog::new(gate.clone());
        let chunk = vec![b'x'; 64 * 1024];
        let writer = log.clone();
        let flood = tokio::spawn(async move {
            for _ in 0..64 {
                writer.output(&chunk).await;
            }
        });
        // A timer on the same single thread fires while the log is stalled
        // (a log that wrote inline would hold the thread until the gate's
        // own ten seconds, and the flood would be done by then).
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !flood.is_finished(),
            "4 MiB went into a stalled log: it blocked the runtime or queued without bound"
        );
        log.line("runner lines never wait");
        assert!(
            !log.flush(Duration::from_millis(100)).await,
            "a stalled log is not flushed"
        );

        gate.open();
        flood.await.unwrap();
        assert!(log.flush(Duration::from_secs(5)).await);
        let text = gate.got.text();
        assert_eq!(
            text.len(),
            64 * 64 * 1024 + "\n==> runner lines never wait\n".len()
        );
        assert!(
            text.contains("x\n==> runner lines never wait\nx"),
            "in order"
        );
    }
}
