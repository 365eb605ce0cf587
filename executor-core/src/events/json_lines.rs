//! The events as JSON lines (`--events FILE`).

use std::io::{self, Write};
use std::path::Path;
use std::sync::Mutex;

use super::{lossy, Event, EventSink};

/// Writes events as JSON lines, one object per line (`--events FILE`).
///
/// Output pieces are joined where one ended inside a UTF-8 sequence, so
/// each line's `text` is exactly the characters the step printed. A failed
/// write is reported once through `tracing` and the rest is dropped: the
/// run goes on, as it does when its text log fails.
///
/// ```
/// use executor_core::events::{Event, EventSink, JsonLines};
/// let lines = JsonLines::new(Vec::new());
/// lines.event(&Event::message("pulling busybox"));
/// let text = String::from_utf8(lines.into_inner()).unwrap();
/// assert!(text.starts_with(r#"{"event":"message","at":""#));
/// assert!(text.ends_with("\"text\":\"pulling busybox\"}\n"));
/// ```
pub struct JsonLines<W: Write + Send> {
    state: Mutex<JsonState<W>>,
}

struct JsonState<W> {
    out: W,
    /// The start of a UTF-8 sequence a piece of output ended in, per
    /// stream, waiting for its next piece.
    tails: [Vec<u8>; 2],
    failed: bool,
}

impl<W: Write + Send> JsonLines<W> {
    /// Writes to `out`.
    pub fn new(out: W) -> Self {
        JsonLines {
            state: Mutex::new(JsonState {
                out,
                tails: [Vec::new(), Vec::new()],
                failed: false,
            }),
        }
    }

    /// The writer back, with everything written.
    pub fn into_inner(self) -> W {
        self.state
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .out
    }
}

impl JsonLines<io::BufWriter<std::fs::File>> {
    /// Writes to `path`: a regular file created or truncated; anything
    /// else (a device, a FIFO, `/dev/stdout`) written into as it is
    /// ([`Destination`](crate::destination::Destination)).
    ///
    /// # Errors
    /// The file cannot be created or opened.
    pub fn create(path: &Path) -> io::Result<Self> {
        let file = crate::destination::Destination::of(path)?.open()?;
        Ok(Self::new(io::BufWriter::new(file)))
    }

    /// Writes after what `path` holds (created if missing): the events of
    /// a resumed run go after those of the runner before it. A last line
    /// that runner was killed in the middle of is ended first, so the
    /// next event starts a line of its own.
    ///
    /// # Errors
    /// The file cannot be opened or read.
    ///
    /// ```
    /// use executor_core::events::{Event, EventSink, JsonLines};
    /// let dir = tempfile::tempdir().unwrap();
    /// let path = dir.path().join("events.jsonl");
    /// std::fs::write(&path, "{\"event\":\"runSt").unwrap();
    /// let sink = JsonLines::append(&path).unwrap();
    /// sink.event(&Event::message("resumed"));
    /// drop(sink);
    /// let text = std::fs::read_to_string(&path).unwrap();
    /// assert!(text.lines().nth(1).unwrap().contains("resumed"));
    /// ```
    pub fn append(path: &Path) -> io::Result<Self> {
        use std::io::{Read, Seek, SeekFrom};
        let dest = crate::destination::Destination::of(path)?;
        if !dest.is_file() {
            return Ok(Self::new(io::BufWriter::new(dest.open()?)));
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        if file.metadata()?.len() > 0 {
            let mut last = [0u8];
            file.seek(SeekFrom::End(-1))?;
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
            }
        }
        Ok(Self::new(io::BufWriter::new(file)))
    }
}

impl<W: Write + Send> EventSink for JsonLines<W> {
    fn event(&self, event: &Event) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.failed {
            return;
        }
        let joined;
        let event = match event {
            Event::Output { stream, bytes, .. }
                if state.tails[*stream as usize].is_empty()
                    && complete_utf8(bytes) == bytes.len() =>
            {
                // Whole characters with nothing held before them: the
                // event's text is already the line's.
                event
            }
            Event::Output {
                at,
                step,
                stream,
                bytes,
                ..
            } => {
                let tail = &mut state.tails[*stream as usize];
                tail.extend_from_slice(bytes);
                let whole = complete_utf8(tail);
                let rest = tail.split_off(whole);
                let piece = std::mem::replace(tail, rest);
                if piece.is_empty() {
                    return;
                }
                joined = Event::Output {
                    at: *at,
                    step: step.clone(),
                    stream: *stream,
                    text: lossy(&piece),
                    bytes: Vec::new(),
                };
                &joined
            }
            other => other,
        };
        let written = serde_json::to_writer(&mut state.out, event)
            .map_err(io::Error::from)
            .and_then(|()| state.out.write_all(b"\n"))
            // A reader follows the file as the run goes, as it does the log.
            .and_then(|()| state.out.flush());
        if let Err(err) = written {
            state.failed = true;
            tracing::warn!(%err, "writing run events failed; further events are lost");
        }
    }
}

/// How much of `bytes` ends on a character boundary: everything but an
/// unfinished UTF-8 sequence at the end (invalid bytes count as whole, to
/// be shown as U+FFFD).
pub(super) fn complete_utf8(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(e) => {
            // An invalid sequence in the middle: whole up to it and past it,
            // then look at what follows.
            let past = e.valid_up_to().saturating_add(e.error_len().unwrap_or(1));
            past.saturating_add(complete_utf8(bytes.get(past..).unwrap_or_default()))
        }
    }
}
