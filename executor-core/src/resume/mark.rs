//! The log's mark: how far a run got, as its log file shows it.
//!
//! Beside a log made with [`RunLog::create_resumable`](crate::RunLog::create_resumable)
//! lies `LOG.mark`, rewritten by the log's writer thread after what it
//! wrote (never before): the length of the log it describes, the steps
//! finished, and the running step with how many bytes of its stdout and
//! stderr that length holds. A runner killed at any byte leaves a mark
//! that describes a prefix of its log; [`RunLog::resume`](crate::RunLog::resume)
//! cuts the log back to it, and the new runner follows the step on from
//! exactly those bytes.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::events::Event;
use crate::Offsets;
use crate::{Attempt, CacheResult, StepResult, StepStatus};

/// How far a run got, as its log shows it; see the module docs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// Bytes of the log file this mark describes.
    pub log_len: u64,
    /// Whether those bytes end a line.
    pub at_line_start: bool,
    /// When the run started, once it did.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub run_started_at: Option<OffsetDateTime>,
    /// The attempt whose environment is the run's now.
    pub attempt: u32,
    /// The caches that attempt restored, as the result records them.
    #[serde(default)]
    pub caches: Vec<CacheResult>,
    /// The steps of that attempt that finished, in order.
    pub finished: Vec<StepResult>,
    /// The step running, if one is.
    pub running: Option<RunningStep>,
    /// Whether the run finished: there is nothing to resume.
    pub run_finished: bool,
    /// The attempts that ended, as [`Event::AttemptFinished`] told them:
    /// a resumed run's result lists them before the one it carries on.
    #[serde(default)]
    pub earlier: Vec<Attempt>,
    /// The run's secret for naming its steps' files in the environment
    /// (see [`RunLog::step_key`](crate::RunLog)): kept on the host only,
    /// so no step can know a later step's files beforehand; empty in a
    /// mark from before it was kept (its steps' ids are the old ones).
    #[serde(default)]
    pub step_key: String,
    /// Whether the attempt's environment was seen to sign its steps'
    /// statuses ([`RunLog::require_signed_status`](crate::RunLog::require_signed_status)):
    /// a resumed runner then takes only signed ones from it, of the step
    /// it follows on too.
    #[serde(default)]
    pub signing: bool,
}

/// The step a [`Mark`] saw running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunningStep {
    /// Its place in the run's steps.
    pub index: usize,
    /// Its name.
    pub name: String,
    /// When it started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// Bytes of its stdout the log holds.
    pub stdout: u64,
    /// Bytes of its stderr the log holds.
    pub stderr: u64,
}

impl RunningStep {
    /// The offsets to follow the step on from.
    pub fn offsets(&self) -> Offsets {
        Offsets {
            stdout: self.stdout,
            stderr: self.stderr,
        }
    }
}

/// The mark file of the log at `log`: `LOG.mark`.
///
/// ```
/// let p = executor_core::resume::mark_path("run.log".as_ref());
/// assert_eq!(p, std::path::PathBuf::from("run.log.mark"));
/// ```
pub fn mark_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_os_string();
    name.push(".mark");
    PathBuf::from(name)
}

impl Mark {
    /// Reads the mark of the log at `log`.
    ///
    /// # Errors
    /// `NotFound` when there is none (the log was not made resumable);
    /// `InvalidData` when it cannot be read as a mark.
    pub fn read(log: &Path) -> io::Result<Mark> {
        let bytes = std::fs::read(mark_path(log))?;
        // The file is rewritten in place: a shorter mark leaves the tail
        // of a longer one after it, which the first value ends before.
        serde_json::Deserializer::from_slice(&bytes)
            .into_iter::<Mark>()
            .next()
            .unwrap_or_else(|| Err(serde::de::Error::custom("the mark file is empty")))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Follows one event of the run.
    pub(crate) fn apply(&mut self, event: &Event) {
        match event {
            Event::RunStarted { at, .. } => self.run_started_at = Some(*at),
            Event::EnvironmentReady { attempt, .. } => {
                self.attempt = *attempt;
                self.signing = false;
                self.caches.clear();
                self.finished.clear();
                self.running = None;
            }
            Event::CacheRestored { cache, .. } => self.caches.push(cache.clone()),
            Event::StepStarted {
                at, step, index, ..
            } => {
                self.running = Some(RunningStep {
                    index: *index,
                    name: step.clone(),
                    started_at: *at,
                    stdout: 0,
                    stderr: 0,
                });
            }
            Event::StepFinished {
                at,
                step,
                status,
                exit_code,
                duration_ms,
                failure,
                output_dropped_bytes,
                usage,
                outputs,
                ..
            } => {
                let started_at = self.running.take().map(|r| r.started_at);
                self.finished.push(StepResult {
                    name: step.clone(),
                    status: *status,
                    exit_code: *exit_code,
                    error: (*status != StepStatus::Success)
                        .then(|| failure.as_ref().map(|f| f.message.clone()))
                        .flatten(),
                    started_at,
                    finished_at: Some(*at),
                    duration_ms: *duration_ms,
                    failure: failure.clone(),
                    output_dropped_bytes: *output_dropped_bytes,
                    usage: *usage,
                    outputs: outputs.clone(),
                });
            }
            Event::StepSkipped { step, .. } => self.finished.push(StepResult::skipped(step)),
            Event::AttemptFinished { record, .. } => self.earlier.push((**record).clone()),
            Event::RunFinished { .. } => {
                self.run_finished = true;
                self.running = None;
            }
            _ => {}
        }
    }
}

/// The writer thread's side: the mark it keeps and the file it keeps it in.
pub(crate) struct MarkFile {
    file: File,
    pub(crate) mark: Mark,
    dirty: bool,
    buf: Vec<u8>,
    /// This process's hold on the run, for as long as the mark is kept.
    _owner: super::owner::Owner,
}

impl MarkFile {
    /// The mark file of the log at `log`, holding `mark` from now on, kept
    /// by `owner`.
    pub(crate) fn create(log: &Path, mark: Mark, owner: super::owner::Owner) -> io::Result<Self> {
        // Never cut: a runner killed between a cut and the first write
        // would leave no mark at all. An older, longer mark's tail after
        // the new one is never read.
        // It holds the run's step key: its owner's alone, also when an
        // earlier mark was made readable by others.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(mark_path(log))?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        let mut made = MarkFile {
            file,
            mark,
            dirty: true,
            buf: Vec::new(),
            _owner: owner,
        };
        made.save()?;
        Ok(made)
    }

    /// Bytes written to the log.
    pub(crate) fn wrote(&mut self, bytes: &[u8], committed: Option<[u64; 2]>) {
        if !bytes.is_empty() {
            self.mark.log_len = self
                .mark
                .log_len
                .saturating_add(u64::try_from(bytes.len()).unwrap_or(u64::MAX));
            self.mark.at_line_start = bytes.ends_with(b"\n");
        }
        if let (Some([stdout, stderr]), Some(running)) = (committed, self.mark.running.as_mut()) {
            running.stdout = stdout;
            running.stderr = stderr;
        }
        self.dirty = true;
    }

    /// Every status of the attempt's environment must be signed.
    pub(crate) fn signed(&mut self) {
        self.mark.signing = true;
        self.dirty = true;
    }

    pub(crate) fn event(&mut self, event: &Event) {
        self.mark.apply(event);
        self.dirty = true;
    }

    /// Writes the mark if it changed. One write at offset 0: a kill cannot
    /// tear it, and the mark is never ahead of the log.
    pub(crate) fn save(&mut self) -> io::Result<()> {
        if !self.dirty {
            return Ok(());
        }
        self.buf.clear();
        serde_json::to_writer(&mut self.buf, &self.mark).map_err(io::Error::other)?;
        self.buf.push(b'\n');
        self.file.write_all_at(&self.buf, 0)?;
        self.dirty = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::events::OutputStream;
    use crate::mask::{Masker, Secret};
    use crate::RunLog;

    fn started(log: &RunLog) {
        log.emit(Event::StepStarted {
            at: OffsetDateTime::now_utc(),
            attempt: 1,
            step: "s".into(),
            index: 0,
        });
    }

    async fn mark_now(log: &RunLog, path: &Path) -> Mark {
        assert!(log.flush(Duration::from_secs(10)).await);
        Mark::read(path).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The mark once the writer has caught up with the log's `len` bytes,
    /// without a flush (which writes out what is held).
    async fn mark_at(path: &Path, len: usize) -> Mark {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mark) = Mark::read(path) {
                if mark.log_len == len as u64 {
                    return mark;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the mark never reached {len} bytes"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn held(mark: &Mark) -> (u64, u64) {
        let r = mark
            .running
            .as_ref()
            .unwrap_or_else(|| panic!("no step running"));
        (r.stdout, r.stderr)
    }

    #[tokio::test]
    async fn bytes_the_masker_or_the_line_guard_hold_are_not_counted_as_in_the_log() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("run.log");
        let log = RunLog::create_resumable(&path).unwrap_or_else(|e| panic!("{e}"));
        log.mask(&Masker::new([&Secret::new("hunter22")]));
        started(&log);
        let line = "==> step s: started\n".len();
        log.output_from(OutputStream::Stdout, b"pw=hun").await;
        // "hun" may be a secret's start: held, so not yet in the log.
        assert_eq!(held(&mark_at(&path, line + 3).await), (3, 0));
        log.output_from(OutputStream::Stderr, b"oops\n==").await;
        // "==" may become a forged runner line: held too.
        assert_eq!(held(&mark_at(&path, line + 8).await), (3, 5));
        log.output_from(OutputStream::Stdout, b"ter22\n").await;
        log.output_from(OutputStream::Stderr, b"x\n").await;
        assert_eq!(held(&mark_now(&log, &path).await), (12, 9));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        let mark = mark_now(&log, &path).await;
        assert_eq!(mark.log_len, text.len() as u64);
        assert!(
            text.contains("[MASKED]\n") && !text.contains("hunter"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn the_caches_an_attempt_restored_are_marked_and_a_new_attempt_starts_afresh() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("run.log");
        let log = RunLog::create_resumable(&path).unwrap_or_else(|e| panic!("{e}"));
        let ready = |attempt| Event::EnvironmentReady {
            at: OffsetDateTime::now_utc(),
            attempt,
            start_ms: 1,
            environment: "env-1".into(),
        };
        let hit = CacheResult {
            key: "cargo".into(),
            path: "/work/target".into(),
            hit: true,
            size_in: 42,
            ..CacheResult::default()
        };
        log.emit(ready(1));
        log.emit(Event::CacheRestored {
            at: OffsetDateTime::now_utc(),
            cache: hit.clone(),
        });
        let mark = mark_now(&log, &path).await;
        assert_eq!((mark.attempt, mark.caches), (1, vec![hit]));
        log.emit(ready(2));
        let mark = mark_now(&log, &path).await;
        assert_eq!((mark.attempt, mark.caches), (2, Vec::new()));
    }

    #[tokio::test]
    async fn a_log_that_is_not_a_regular_file_gets_nothing_beside_it() {
        use std::os::unix::fs::OpenOptionsExt;
        // A FIFO of the test's own, being read: never the host's /dev/null.
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let fifo = dir.path().join("run.log");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap_or_else(|e| panic!("{e}"));
        let mut reader = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap_or_else(|e| panic!("{e}"));
        let log = RunLog::create_resumable(&fifo).unwrap_or_else(|e| panic!("{e}"));
        started(&log);
        log.output(b"one\n").await;
        assert!(log.flush(Duration::from_secs(10)).await);
        drop(log);
        let mut read = Vec::new();
        let _ = std::io::Read::read_to_end(&mut reader, &mut read);
        assert!(String::from_utf8_lossy(&read).contains("one"));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap_or_else(|e| panic!("{e}"))
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names, ["run.log"]);
    }

    #[tokio::test]
    async fn a_resumed_log_is_cut_back_to_its_mark_and_goes_on_after_it() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("run.log");
        let log = RunLog::create_resumable(&path).unwrap_or_else(|e| panic!("{e}"));
        started(&log);
        log.output(b"one\n").await;
        let mark = mark_now(&log, &path).await;
        drop(log);
        // It holds the run's step key: its owner's alone.
        let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode(&mark_path(&path)).ok(), Some(0o600));
        // A write the killed runner's mark never counted.
        let mut text = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
        text.extend_from_slice(b"two\npar");
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{e}"));

        let (log, again) = RunLog::resume(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, mark);
        // The step is carried on, not started again: what the log holds
        // of it stays counted.
        log.emit(Event::StepResumed {
            at: OffsetDateTime::now_utc(),
            attempt: 1,
            step: "s".into(),
            index: 0,
            stdout: 4,
            stderr: 0,
        });
        log.output(b"two\n").await;
        let now = mark_now(&log, &path).await;
        assert_eq!(held(&now), (8, 0));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            text,
            "==> step s: started\none\n\
             ==> step s: carried on by a new runner, after the 4 bytes of stdout and 0 of stderr above\n\
             two\n"
        );
        drop(log);

        // A log cut shorter than its mark was changed after the run wrote it.
        std::fs::write(&path, b"==> ").unwrap_or_else(|e| panic!("{e}"));
        let err = RunLog::resume(&path)
            .err()
            .unwrap_or_else(|| panic!("resumed"));
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
        let gone = RunLog::resume(&dir.path().join("other.log")).err();
        assert_eq!(gone.map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
    }
}
