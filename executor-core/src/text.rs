//! Text from untrusted places (a tool's stderr, an archive's entry names)
//! made safe to put in a log line or an error: one line, no terminal
//! control sequences, bounded length.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

/// `text` on one line: control characters (newlines, escape sequences,
/// carriage returns) are shown escaped, so they can neither forge a log
/// line nor move a terminal's cursor, and at most `max_chars` characters
/// are kept.
///
/// ```
/// use executor_core::text::one_line;
/// assert_eq!(one_line("a\nb\x1b[2J", 100), "a\\nb\\u{1b}[2J");
/// assert_eq!(one_line("abcdef", 3), "abc…");
/// ```
pub fn one_line(text: &str, max_chars: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max_chars));
    for (i, c) in text.chars().enumerate() {
        if i == max_chars {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `bytes` as a person reads a size: `64 MiB`, `1.5 KiB`, `12 bytes`.
pub(crate) fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A writer that keeps the first `cap` bytes written to it and counts the
/// rest, for the stderr of a runner's own commands: only the start is
/// ever shown, and a hostile tool may print without end.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use tokio::io::AsyncWriteExt;
/// let mut head = executor_core::text::HeadBuffer::new(4);
/// head.write_all(b"tar: \x1b[31mbad\n").await?;
/// assert_eq!(head.dropped(), 10);
/// assert_eq!(head.text(), "tar: (10 more bytes)");
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct HeadBuffer {
    kept: Vec<u8>,
    cap: usize,
    dropped: u64,
}

impl HeadBuffer {
    /// Keeps at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        HeadBuffer {
            kept: Vec::new(),
            cap,
            dropped: 0,
        }
    }

    /// Bytes written past the cap and dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// What was kept, as it came: for a program to read, not a person
    /// ([`HeadBuffer::text`] is for them).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// use tokio::io::AsyncWriteExt;
    /// let mut head = executor_core::text::HeadBuffer::new(8);
    /// head.write_all(b"a 1\nb 2\nc 3\n").await?;
    /// assert_eq!(head.kept(), b"a 1\nb 2\n");
    /// # Ok(()) }
    /// ```
    pub fn kept(&self) -> &[u8] {
        &self.kept
    }

    /// What was kept, trimmed and on one line, with a note of what was
    /// dropped: safe for a log line or an error message.
    pub fn text(&self) -> String {
        let kept = String::from_utf8_lossy(&self.kept);
        let mut text = one_line(kept.trim(), self.cap);
        if self.dropped > 0 {
            text.push_str(&format!(" ({} more bytes)", self.dropped));
        }
        text
    }

    /// Keeps what fits of `buf` and counts the rest.
    ///
    /// ```
    /// let mut head = executor_core::text::HeadBuffer::new(3);
    /// head.keep(b"abcdef");
    /// assert_eq!((head.kept(), head.dropped()), (&b"abc"[..], 3));
    /// ```
    pub fn keep(&mut self, buf: &[u8]) {
        let room = self.cap.saturating_sub(self.kept.len());
        let take = room.min(buf.len());
        self.kept.extend_from_slice(&buf[..take]);
        self.dropped = self.dropped.saturating_add((buf.len() - take) as u64);
    }
}

impl AsyncWrite for HeadBuffer {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.keep(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A writer for a person's terminal: control bytes other than newline and
/// tab are shown in caret notation (`ESC` as `^[`, a carriage return not
/// before a newline as `^M`), so output cannot move the cursor, clear the
/// screen or draw over a line, such as a fake runner line over a real
/// one. Only what a terminal shows changes; a log file keeps the bytes.
///
/// ```
/// use std::io::Write;
/// let mut shown = executor_core::text::TerminalSafe::new(Vec::new());
/// shown.write_all(b"ok\r\n\x1b[2J\r==> step build: success\n").unwrap();
/// assert_eq!(shown.into_inner(), b"ok\r\n^[[2J^M==> step build: success\n");
/// ```
#[derive(Debug)]
pub struct TerminalSafe<W> {
    inner: W,
    /// A carriage return at the end of the last write, held to see
    /// whether a newline follows it.
    pending_cr: bool,
}

impl<W: std::io::Write> TerminalSafe<W> {
    /// Shows what is written to `inner` safely.
    pub fn new(inner: W) -> Self {
        TerminalSafe {
            inner,
            pending_cr: false,
        }
    }

    /// The writer, with a held carriage return shown.
    pub fn into_inner(mut self) -> W {
        if self.pending_cr {
            let _ = self.inner.write_all(b"^M");
        }
        self.inner
    }
}

impl<W: std::io::Write> std::io::Write for TerminalSafe<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut out = Vec::with_capacity(buf.len() + 8);
        if std::mem::take(&mut self.pending_cr) {
            out.extend_from_slice(if buf.first() == Some(&b'\n') {
                b"\r"
            } else {
                b"^M"
            });
        }
        for (i, &b) in buf.iter().enumerate() {
            match b {
                b'\r' if i + 1 == buf.len() => self.pending_cr = true,
                b'\r' if buf.get(i + 1) == Some(&b'\n') => out.push(b),
                b'\n' | b'\t' => out.push(b),
                0x7f => out.extend_from_slice(b"^?"),
                b if b < 0x20 => out.extend_from_slice(&[b'^', b + 0x40]),
                b => out.push(b),
            }
        }
        self.inner.write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod terminal_tests {
    use std::io::Write;

    use super::TerminalSafe;

    #[test]
    fn a_line_end_split_across_writes_stays_a_line_end_and_a_lone_return_is_shown() {
        let mut shown = TerminalSafe::new(Vec::new());
        shown.write_all(b"a\r").unwrap();
        shown.write_all(b"\nb\r").unwrap();
        shown.write_all(b"c\x07\x7f").unwrap();
        assert_eq!(shown.into_inner(), b"a\r\nb^Mc^G^?");
    }
}

#[cfg(test)]
mod size_tests {
    use super::size;

    #[test]
    fn sizes_read_as_a_person_says_them() {
        assert_eq!(size(12), "12 bytes");
        assert_eq!(size(64 << 20), "64 MiB");
        assert_eq!(size(1536), "1.5 KiB");
    }
}
