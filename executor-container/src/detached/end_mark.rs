//! The mark that ends each stream of a step's exec, and the writer that
//! takes it off.
//!
//! A stream can end early without an error: Docker's attached stream ends
//! as a normal one when a connection is cut, and an exec that finished in
//! the meantime then has a real exit code. So the supervisor (and every
//! follow) writes an end mark ([`end_mark`]) as the last bytes of both
//! streams, once everything before it is in them; an exec whose streams
//! do not both end with it was cut, whatever its code says.
//!
//! The mark carries the status the exec exits with, so an engine that
//! would need a call of its own for the code (Docker's exec inspect) is
//! not asked: the marks are the end and the status together. Once both
//! streams hold their mark, the exec has ended for the runner: it does
//! not wait for the engine to close the stream, which took another 3 to
//! 6 ms a step through Docker (the exec's shell exiting, the runtime
//! reaping it, the engine closing the connection).
//!
//! Each exec's marks carry a key of its own, the last word of its argv,
//! made when the argv is: output that holds a mark (a step printing this
//! very format, a log of another run) has another key or none, and stays
//! output. The key keeps accidents out, not the step: one that reads it
//! from the wrapper's command line in `/proc` can end itself early with a
//! status of its choice, which is no more than `exit` after leaving a
//! process behind lets it do.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Notify;

use executor_core::usage::{StepUsage, MARKED_MAX};

/// What every end mark begins with: a NUL first, which text output
/// seldom has, so nothing is held back for it.
pub(super) const PREFIX: &[u8] = b"\0knotless-step-end ";

/// The last bytes of both streams of an exec whose marks carry `key`
/// ([`end_key`] of its argv) when it ran to its end and exits with
/// `status`: `\0knotless-step-end NNN KEY\n`, the status in three digits
/// (the wrapper's `printf '%03d'`). A fake or a dry-run answers a start
/// or a follow with it, as the environment would.
///
/// ```
/// use executor_container::detached::end_mark;
/// assert_eq!(end_mark("00ff", 7), b"\0knotless-step-end 007 00ff\n");
/// ```
pub fn end_mark(key: &str, status: u8) -> Vec<u8> {
    format!("\0knotless-step-end {status:03} {key}\n").into_bytes()
}

/// The key the end marks of the exec `argv` carry: its last word, for an
/// exec that marks its end ([`super::marks_its_end`]).
///
/// ```
/// use executor_container::detached::{end_key, Offsets, StepFiles};
/// use executor_core::script::Script;
/// let files = StepFiles::new("/.knotless", "a1s0");
/// let start = files.start_argv("", Script::Inline("true"));
/// let follow = files.follow_argv(Offsets::default());
/// assert_eq!(end_key(&start).map(str::len), Some(16));
/// assert_ne!(end_key(&start), end_key(&follow));
/// assert_eq!(end_key(&files.status_argv()), None);
/// ```
pub fn end_key(argv: &[String]) -> Option<&str> {
    if !super::marks_its_end(argv) {
        return None;
    }
    argv.last()
        .map(String::as_str)
        .filter(|key| !key.is_empty() && key.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// How long a mark with `key` is at most: the prefix, three digits, a
/// space, the key, a space and the usage, and a newline.
pub(super) fn mark_len(key: &[u8]) -> usize {
    PREFIX.len() + 3 + 1 + key.len() + 1 + MARKED_MAX + 1
}

/// Whether `tail` is the start of an end mark with `key`, or all of one:
/// `PREFIX NNN KEY\n`, or `PREFIX NNN KEY USAGE\n` with a usage of
/// digits and spaces ([`StepUsage::from_marked`] reads it).
fn starts_a_mark(tail: &[u8], key: &[u8]) -> bool {
    let digits = PREFIX.len()..PREFIX.len() + 3;
    let after_key = digits.end + 1 + key.len();
    if tail.len() > mark_len(key) {
        return false;
    }
    let last = tail.len().saturating_sub(1);
    tail.iter().enumerate().all(|(i, &b)| match i {
        i if i < PREFIX.len() => PREFIX[i] == b,
        i if digits.contains(&i) => b.is_ascii_digit(),
        i if i == digits.end => b == b' ',
        i if i < after_key => key.get(i - digits.end - 1) == Some(&b),
        // The end of a mark without usage, or the space before it.
        i if i == after_key => (b == b'\n' && i == last) || b == b' ',
        i => (b == b'\n' && i == last) || b == b' ' || b.is_ascii_digit(),
    })
}

/// The status a whole end mark with `key` carries, and the usage after
/// it when there is one.
pub(super) fn status_of(mark: &[u8], key: &[u8]) -> Option<(u8, Option<StepUsage>)> {
    if mark.last() != Some(&b'\n') || !starts_a_mark(mark, key) {
        return None;
    }
    let after_key = PREFIX.len() + 3 + 1 + key.len();
    if mark.len() <= after_key {
        return None;
    }
    let status = std::str::from_utf8(&mark[PREFIX.len()..PREFIX.len() + 3])
        .ok()?
        .parse()
        .ok()?;
    let usage = match mark.get(after_key + 1..mark.len() - 1) {
        Some(words) if !words.is_empty() => std::str::from_utf8(words)
            .ok()
            .and_then(StepUsage::from_marked),
        _ => None,
    };
    Some((status, usage))
}

/// Which of an exec's two streams end with a whole mark so far: once both
/// do, the exec has ended, and [`Ends::both`] returns.
#[derive(Debug, Default)]
pub(super) struct Ends {
    marked: [AtomicBool; 2],
    changed: Notify,
}

impl Ends {
    fn set(&self, stream: usize, marked: bool) {
        let Some(flag) = self.marked.get(stream) else {
            return;
        };
        if flag.swap(marked, Ordering::SeqCst) != marked {
            // A permit is kept if no one waits yet: no change is missed.
            self.changed.notify_one();
        }
    }

    /// Returns once both streams end with their mark.
    pub(super) async fn both(&self) {
        while !self.marked.iter().all(|m| m.load(Ordering::SeqCst)) {
            self.changed.notified().await;
        }
    }
}

/// Passes a stream on to `inner` except a tail that may be an end mark,
/// held until more bytes show it is not, or the end shows it is.
pub(super) struct EndMarked<'a, W: ?Sized> {
    inner: &'a mut W,
    /// The key of this exec's marks.
    key: &'a [u8],
    /// Where this stream says whether it ends with its mark, and which
    /// stream it is there.
    ends: &'a Ends,
    stream: usize,
    /// Output taken but not yet written to `inner`.
    pending: Vec<u8>,
    /// A tail that is a start of the mark (or all of it).
    held: Vec<u8>,
}

impl<'a, W: AsyncWrite + Unpin + ?Sized> EndMarked<'a, W> {
    /// The writer of stream `stream` (0 or 1) of an exec whose marks carry
    /// `key`, telling `ends` when it ends with one.
    pub(super) fn new(inner: &'a mut W, key: &'a str, ends: &'a Ends, stream: usize) -> Self {
        EndMarked {
            inner,
            key: key.as_bytes(),
            ends,
            stream,
            pending: Vec::new(),
            held: Vec::new(),
        }
    }

    /// The stream has ended: the status its end mark carries (and the
    /// step's usage after it), if it ended with one. Anything held that
    /// was not a mark is written on as output.
    pub(super) async fn finish(mut self) -> std::io::Result<Option<(u8, Option<StepUsage>)>> {
        let status = status_of(&self.held, self.key);
        let mut rest = std::mem::take(&mut self.pending);
        if status.is_none() {
            rest.append(&mut self.held);
        }
        self.inner.write_all(&rest).await?;
        Ok(status)
    }

    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        poll_pending(&mut *self.inner, &mut self.pending, cx)
    }
}

/// Writes `pending` to `inner` until it is empty: output a marked writer
/// took from its caller and owes its inner writer before anything else.
pub(super) fn poll_pending<W: AsyncWrite + Unpin + ?Sized>(
    inner: &mut W,
    pending: &mut Vec<u8>,
    cx: &mut Context<'_>,
) -> Poll<std::io::Result<()>> {
    while !pending.is_empty() {
        match Pin::new(&mut *inner).poll_write(cx, pending) {
            Poll::Ready(Ok(0)) => return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into())),
            Poll::Ready(Ok(n)) => {
                pending.drain(..n.min(pending.len()));
            }
            Poll::Ready(Err(err)) => return Poll::Ready(Err(err)),
            Poll::Pending => return Poll::Pending,
        }
    }
    Poll::Ready(Ok(()))
}

/// How many bytes at the end of `bytes` may be a mark with `key` or its
/// start.
fn mark_tail(bytes: &[u8], key: &[u8]) -> usize {
    tail_starting(bytes, mark_len(key), |tail| {
        tail[0] == 0 && starts_a_mark(tail, key)
    })
}

/// The length of the longest tail of `bytes`, at most `longest` bytes,
/// that `starts` says may begin a mark: what a marked writer holds back.
pub(super) fn tail_starting(bytes: &[u8], longest: usize, starts: impl Fn(&[u8]) -> bool) -> usize {
    let from = bytes.len().saturating_sub(longest);
    (from..bytes.len())
        .find(|&i| starts(&bytes[i..]))
        .map_or(0, |i| bytes.len() - i)
}

impl<W: AsyncWrite + Unpin + ?Sized> AsyncWrite for EndMarked<'_, W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        std::task::ready!(this.poll_pending(cx))?;
        // Most output has no NUL near its end: it goes on as it is.
        if this.held.is_empty() && mark_tail(buf, this.key) == 0 {
            return Pin::new(&mut *this.inner).poll_write(cx, buf);
        }
        let mut all = std::mem::take(&mut this.held);
        all.extend_from_slice(buf);
        let keep = mark_tail(&all, this.key);
        this.held = all.split_off(all.len() - keep);
        this.pending = all;
        this.ends
            .set(this.stream, status_of(&this.held, this.key).is_some());
        // Taken: what is pending is written before anything after it.
        if let Poll::Ready(Err(err)) = this.poll_pending(cx) {
            return Poll::Ready(Err(err));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match this.poll_pending(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut *this.inner).poll_flush(cx),
            other => other,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        match this.poll_pending(cx) {
            Poll::Ready(Ok(())) => Pin::new(&mut *this.inner).poll_shutdown(cx),
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "0123456789abcdef";

    fn mark(status: u8) -> Vec<u8> {
        end_mark(KEY, status)
    }

    /// What comes through one stream's writer, the status it ended with,
    /// and whether it said it ended with a mark.
    async fn through(pieces: &[&[u8]]) -> (Vec<u8>, Option<u8>, bool) {
        let mut out = Vec::new();
        let ends = Ends::default();
        let mut marked = EndMarked::new(&mut out, KEY, &ends, 0);
        for piece in pieces {
            marked
                .write_all(piece)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let said = ends.marked[0].load(Ordering::SeqCst);
        let ended = marked.finish().await.unwrap_or_else(|e| panic!("{e}"));
        (out, ended.map(|(status, _)| status), said)
    }

    #[tokio::test]
    async fn the_mark_at_the_end_is_taken_off_wherever_it_is_split() {
        for status in [0, 3, 137, 255] {
            let mut all = b"output\n".to_vec();
            all.extend_from_slice(&mark(status));
            for cut in 0..all.len() {
                let (out, ended, said) = through(&[&all[..cut], &all[cut..]]).await;
                assert_eq!(
                    (out.as_slice(), ended, said),
                    (&b"output\n"[..], Some(status), true),
                    "cut at {cut}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_stream_without_the_mark_loses_nothing_and_says_so() {
        let (out, ended, said) = through(&[b"abc\0knotless-st"]).await;
        assert_eq!(
            (out.as_slice(), ended, said),
            (&b"abc\0knotless-st"[..], None, false)
        );
        let (out, ended, said) = through(&[b"no mark at all\n"]).await;
        assert_eq!(
            (out.as_slice(), ended, said),
            (&b"no mark at all\n"[..], None, false)
        );
        let (out, ended, said) = through(&[]).await;
        assert_eq!((out.as_slice(), ended, said), (&b""[..], None, false));
    }

    #[tokio::test]
    async fn a_mark_whose_status_is_not_three_digits_is_output() {
        for bad in [
            format!("\0knotless-step-end 1 {KEY}\n"),
            format!("\0knotless-step-end 0001 {KEY}\n"),
            format!("\0knotless-step-end 256 {KEY}\n"),
            format!("\0knotless-step-end -01 {KEY}\n"),
            format!("\0knotless-step-end {KEY}\n"),
        ] {
            let (out, ended, said) = through(&[bad.as_bytes()]).await;
            assert_eq!((out.as_slice(), ended, said), (bad.as_bytes(), None, false));
        }
    }

    /// A mark of another exec, or of the format before keys, ends
    /// nothing, even as the last bytes the step printed.
    #[tokio::test]
    async fn a_mark_without_this_execs_key_is_output() {
        for forged in [
            b"\0knotless-step-end 000\n".to_vec(),
            b"\0knotless-step-end 000 fedcba9876543210\n".to_vec(),
            b"\0knotless-step-end 000 0123456789abcde\n".to_vec(),
            b"\0knotless-step-end 000 0123456789abcdef0\n".to_vec(),
        ] {
            let (out, ended, said) = through(&[&forged]).await;
            assert_eq!((&out, ended, said), (&forged, None, false));
            let (out, ended, said) = through(&[&forged, &mark(1)]).await;
            assert_eq!((out, ended, said), (forged, Some(1), true));
        }
    }

    #[tokio::test]
    async fn a_mark_the_step_printed_before_its_end_is_output() {
        let mut forged = mark(0);
        forged.extend_from_slice(b"more\n");
        let (out, ended, said) = through(&[&forged]).await;
        assert_eq!((out, ended, said), (forged.clone(), None, false));
        let (out, ended, said) = through(&[&mark(0), b"more\n", &mark(1)]).await;
        assert_eq!((out, ended, said), (forged, Some(1), true));
    }

    #[tokio::test]
    async fn a_mark_carries_the_steps_usage_wherever_it_is_split() {
        let mut all = b"output\n".to_vec();
        all.extend_from_slice(
            format!("\0knotless-step-end 000 {KEY} 1200 30 61440 0\n").as_bytes(),
        );
        for cut in 0..all.len() {
            let mut out = Vec::new();
            let ends = Ends::default();
            let mut marked = EndMarked::new(&mut out, KEY, &ends, 0);
            for piece in [&all[..cut], &all[cut..]] {
                marked
                    .write_all(piece)
                    .await
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            let ended = marked.finish().await.unwrap_or_else(|e| panic!("{e}"));
            let usage = ended.and_then(|(_, usage)| usage);
            assert_eq!(out, b"output\n", "cut at {cut}");
            assert_eq!(
                usage.map(|u| (u.cpu_user_ms, u.max_rss_bytes)),
                Some((1200, Some(60 << 20))),
                "cut at {cut}"
            );
        }
        // Usage that is not four numbers leaves the status, without usage;
        // a mark with words that are not numbers is output.
        let (out, ended, _) =
            through(&[format!("\0knotless-step-end 003 {KEY} 1 2\n").as_bytes()]).await;
        assert_eq!((out.as_slice(), ended), (&b""[..], Some(3)));
        let forged = format!("\0knotless-step-end 003 {KEY} x\n");
        let (out, ended, _) = through(&[forged.as_bytes()]).await;
        assert_eq!((out, ended), (forged.into_bytes(), None));
    }

    #[tokio::test]
    async fn both_returns_once_both_streams_hold_their_mark_and_not_before() {
        let ends = Ends::default();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let mut out_w = EndMarked::new(&mut out, KEY, &ends, 0);
        let mut err_w = EndMarked::new(&mut err, KEY, &ends, 1);
        let mut both = Box::pin(ends.both());
        fn not_yet(both: &mut Pin<Box<impl std::future::Future<Output = ()>>>) -> bool {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            both.as_mut().poll(&mut cx).is_pending()
        }
        assert!(not_yet(&mut both));
        out_w
            .write_all(&mark(0))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(not_yet(&mut both), "one stream's mark");
        // More after a mark makes it output: that stream has not ended.
        out_w
            .write_all(b"more")
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        err_w
            .write_all(&mark(0))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(not_yet(&mut both), "a mark followed by output");
        out_w
            .write_all(&mark(0))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!not_yet(&mut both), "both marks");
    }
}
