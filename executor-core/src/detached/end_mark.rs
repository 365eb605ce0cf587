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
//! not asked: the marks are the end and the status together.
//!
//! A step can print a mark itself; only the last bytes of a stream
//! count, and the real mark always comes after the step's own output. At
//! worst a step that ends with a forged mark hides a cut of nothing.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncWrite, AsyncWriteExt};

/// What every end mark begins with: a NUL first, which text output
/// seldom has, so nothing is held back for it.
const PREFIX: &[u8] = b"\0knotless-step-end ";

/// How long an end mark is: the prefix, three digits and a newline.
const LEN: usize = PREFIX.len() + 4;

/// The last bytes of both streams of an exec that ran to its end and
/// exits with `status`: `\0knotless-step-end NNN\n`, the status in three
/// digits (the wrapper's `printf '%03d'`).
///
/// ```
/// use executor_core::detached::end_mark;
/// assert_eq!(end_mark(7), b"\0knotless-step-end 007\n");
/// ```
pub fn end_mark(status: u8) -> Vec<u8> {
    format!("\0knotless-step-end {status:03}\n").into_bytes()
}

/// Whether `tail` is the start of an end mark, or all of one.
fn starts_a_mark(tail: &[u8]) -> bool {
    tail.len() <= LEN
        && tail.iter().enumerate().all(|(i, &b)| match i {
            i if i < PREFIX.len() => PREFIX[i] == b,
            i if i < LEN - 1 => b.is_ascii_digit(),
            _ => b == b'\n',
        })
}

/// The status a whole end mark carries.
fn status_of(mark: &[u8]) -> Option<u8> {
    if mark.len() != LEN || !starts_a_mark(mark) {
        return None;
    }
    std::str::from_utf8(&mark[PREFIX.len()..LEN - 1])
        .ok()?
        .parse()
        .ok()
}

/// Passes a stream on to `inner` except a tail that may be an end mark,
/// held until more bytes show it is not, or the end shows it is.
pub(super) struct EndMarked<'a, W: ?Sized> {
    inner: &'a mut W,
    /// Output taken but not yet written to `inner`.
    pending: Vec<u8>,
    /// A tail that is a start of the mark (or all of it).
    held: Vec<u8>,
}

impl<'a, W: AsyncWrite + Unpin + ?Sized> EndMarked<'a, W> {
    pub(super) fn new(inner: &'a mut W) -> Self {
        EndMarked {
            inner,
            pending: Vec::new(),
            held: Vec::new(),
        }
    }

    /// The stream has ended: the status its end mark carries, if it ended
    /// with one. Anything held that was not a mark is written on as output.
    pub(super) async fn finish(mut self) -> std::io::Result<Option<u8>> {
        let status = status_of(&self.held);
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

/// How many bytes at the end of `bytes` may be a mark or its start.
fn mark_tail(bytes: &[u8]) -> usize {
    tail_starting(bytes, LEN, |tail| tail[0] == 0 && starts_a_mark(tail))
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
        if this.held.is_empty() && mark_tail(buf) == 0 {
            return Pin::new(&mut *this.inner).poll_write(cx, buf);
        }
        let mut all = std::mem::take(&mut this.held);
        all.extend_from_slice(buf);
        let keep = mark_tail(&all);
        this.held = all.split_off(all.len() - keep);
        this.pending = all;
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

    async fn through(pieces: &[&[u8]]) -> (Vec<u8>, Option<u8>) {
        let mut out = Vec::new();
        let mut marked = EndMarked::new(&mut out);
        for piece in pieces {
            marked
                .write_all(piece)
                .await
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let ended = marked.finish().await.unwrap_or_else(|e| panic!("{e}"));
        (out, ended)
    }

    #[tokio::test]
    async fn the_mark_at_the_end_is_taken_off_wherever_it_is_split() {
        for status in [0, 3, 137, 255] {
            let mut all = b"output\n".to_vec();
            all.extend_from_slice(&end_mark(status));
            for cut in 0..all.len() {
                let (out, ended) = through(&[&all[..cut], &all[cut..]]).await;
                assert_eq!(
                    (out.as_slice(), ended),
                    (&b"output\n"[..], Some(status)),
                    "cut at {cut}"
                );
            }
        }
    }

    #[tokio::test]
    async fn a_stream_without_the_mark_loses_nothing_and_says_so() {
        let (out, ended) = through(&[b"abc\0knotless-st"]).await;
        assert_eq!((out.as_slice(), ended), (&b"abc\0knotless-st"[..], None));
        let (out, ended) = through(&[b"no mark at all\n"]).await;
        assert_eq!((out.as_slice(), ended), (&b"no mark at all\n"[..], None));
        let (out, ended) = through(&[]).await;
        assert_eq!((out.as_slice(), ended), (&b""[..], None));
    }

    #[tokio::test]
    async fn a_mark_whose_status_is_not_three_digits_is_output() {
        for bad in [
            &b"\0knotless-step-end 1\n"[..],
            b"\0knotless-step-end 0001\n",
            b"\0knotless-step-end 256\n",
            b"\0knotless-step-end -01\n",
            b"\0knotless-step-end\n",
        ] {
            let (out, ended) = through(&[bad]).await;
            assert_eq!((out.as_slice(), ended), (bad, None));
        }
    }

    #[tokio::test]
    async fn a_mark_the_step_printed_before_its_end_is_output() {
        let mut forged = end_mark(0);
        forged.extend_from_slice(b"more\n");
        let (out, ended) = through(&[&forged]).await;
        assert_eq!((out, ended), (forged.clone(), None));
        let (out, ended) = through(&[&end_mark(0), b"more\n", &end_mark(1)]).await;
        assert_eq!((out, ended), (forged, Some(1)));
    }
}
