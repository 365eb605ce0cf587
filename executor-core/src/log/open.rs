//! Opening a run log: to a writer, a file (resumable or not), standard
//! output, memory, or nowhere; and a resumed run's log.

use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

use super::writer::{write_all_sent, Dest};
use super::{Inner, MemoryLog, RunLog, LOG_BUDGET};
use crate::destination::Destination;
use crate::resume::mark::{Mark, MarkFile};

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

    /// A log written to `path`: a regular file created or truncated;
    /// anything else (a device, a FIFO, `/dev/stdout`) written into as it is.
    ///
    /// # Errors
    /// The error of creating or opening `path`.
    pub fn create(path: &Path) -> io::Result<Self> {
        Ok(Self::new(Destination::of(path)?.open()?))
    }

    /// A log written to `path`, created or truncated, with a mark beside
    /// it (`PATH.mark`, see [`crate::resume`]) from which a new runner
    /// process can carry the run on if this one is killed. A `path` that
    /// is not a regular file (a device, a FIFO, `/dev/stdout`; see
    /// [`Destination`]) is written into and gets no mark, lock or anything
    /// else beside it: such a log cannot be cut back and carried on, and
    /// files beside it would land in `/dev`.
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
        let dest = Destination::of(path)?;
        if !dest.is_file() {
            return Ok(Self::new(dest.open()?));
        }
        // The mark, lock and record go beside the path as given (a link's
        // too), where `resume` with the same path looks for them.
        // Not cut before it is this process's: another runner may own it.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let owner = crate::resume::owner::Owner::take(path)?;
        file.set_len(0)?;
        let step_key = super::signed::run_secret();
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
            inner.signing = mark.signing;
            if let Some(running) = &mark.running {
                inner.taken = [running.stdout, running.stderr];
            }
        }
        Ok((log, mark))
    }

    /// The running step's output goes on from `from`: what an earlier
    /// runner's log already holds of it.
    pub(crate) fn step_goes_on_from(&self, from: crate::Offsets) {
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
}
