//! A loud step's output read in fewer, larger pieces.
//!
//! The engine frames an attached exec's output as it reads it from the
//! step's pipe, in pieces of 4 to 32 KiB. Taken one at a time, a loud step
//! costs the runner a wake-up, a socket read and a log write for each
//! piece, on the same cores the engine and the step run on: 512 MiB of
//! output was about 47,000 log writes and 39,000 thread wake-ups. So a
//! piece is joined with the later pieces of its stream that have already
//! arrived, and once a large piece has emptied the socket (the step is
//! loud) the next read waits [`PAUSE`], in which the engine's output
//! gathers in the socket to be taken in one go. A quiet step's lines are
//! passed on the moment they arrive; a loud one's at most a millisecond
//! later.
//!
//! Measured on one machine, a step printing 512 MiB: the runner's CPU
//! time fell from 1.9 s to 0.6 s, and its throughput went from 0.76× to
//! 1.05× that of `docker exec` into `/dev/null` (BENCHMARKS.md). Joining
//! alone saved nothing (a piece seldom finds another one waiting), and
//! waiting without joining let one piece through per pause.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{Fuse, Stream, StreamExt};

use crate::engine::StepStream;
use executor_core::ExecutorError;

/// A piece at least this large, after which the stream was empty, shows a
/// loud step: the next read waits [`PAUSE`].
const LOUD: usize = 16 << 10;

/// How long the read after a loud piece waits for output to gather.
pub(super) const PAUSE: Duration = Duration::from_millis(1);

/// The most one joined piece holds: what is already there beyond it comes
/// next, without a pause.
const MOST: usize = 256 << 10;

type Piece = Result<(StepStream, Bytes), ExecutorError>;

/// An exec's output with the pieces that are already there joined, and a
/// pause after a loud one; see the module docs.
pub(super) struct Gathered<S: Stream> {
    inner: Fuse<S>,
    /// What ended the last join: a piece of the other stream, or an error.
    next: Option<Piece>,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S: Stream<Item = Piece> + Unpin> Gathered<S> {
    pub(super) fn new(inner: S) -> Self {
        Gathered {
            inner: inner.fuse(),
            next: None,
            pause: None,
        }
    }
}

impl<S: Stream<Item = Piece> + Unpin> Stream for Gathered<S> {
    type Item = Piece;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Piece>> {
        let this = &mut *self;
        if let Some(pause) = this.pause.as_mut() {
            ready!(pause.as_mut().poll(cx));
            this.pause = None;
        }
        let (stream, first) = match this.next.take() {
            Some(piece) => piece?,
            None => match ready!(this.inner.poll_next_unpin(cx)) {
                Some(piece) => piece?,
                None => return Poll::Ready(None),
            },
        };
        let mut joined: Option<BytesMut> = None;
        let mut emptied = false;
        while joined.as_ref().map_or(first.len(), BytesMut::len) < MOST {
            match this.inner.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok((more_of, more)))) if more_of == stream => {
                    joined
                        .get_or_insert_with(|| BytesMut::from(&first[..]))
                        .extend_from_slice(&more);
                }
                Poll::Ready(Some(other)) => {
                    this.next = Some(other);
                    break;
                }
                Poll::Ready(None) => break,
                Poll::Pending => {
                    emptied = true;
                    break;
                }
            }
        }
        let piece = joined.map_or(first, BytesMut::freeze);
        if emptied && piece.len() >= LOUD {
            this.pause = Some(Box::pin(tokio::time::sleep(PAUSE)));
        }
        Poll::Ready(Some(Ok((stream, piece))))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// Pieces in turn, where `None` is a moment with nothing there yet.
    struct Arrivals(VecDeque<Option<Piece>>);

    impl Stream for Arrivals {
        type Item = Piece;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Piece>> {
            match self.0.pop_front() {
                Some(Some(piece)) => Poll::Ready(Some(piece)),
                Some(None) => {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                None => Poll::Ready(None),
            }
        }
    }

    fn out(bytes: &[u8]) -> Option<Piece> {
        Some(Ok((StepStream::Stdout, Bytes::copy_from_slice(bytes))))
    }

    fn err(bytes: &[u8]) -> Option<Piece> {
        Some(Ok((StepStream::Stderr, Bytes::copy_from_slice(bytes))))
    }

    async fn all(arrivals: Vec<Option<Piece>>) -> Vec<Result<(StepStream, Vec<u8>), String>> {
        Gathered::new(Arrivals(arrivals.into()))
            .map(|p| p.map(|(s, b)| (s, b.to_vec())).map_err(|e| e.to_string()))
            .collect()
            .await
    }

    #[tokio::test(start_paused = true)]
    async fn pieces_already_there_come_as_one_and_each_stream_keeps_its_order() {
        let got = all(vec![
            out(b"a"),
            out(b"b"),
            err(b"x"),
            err(b"y"),
            None,
            out(b"c"),
            Some(Err(ExecutorError::backend("reading", "cut"))),
            out(b"never joined past the error"),
        ])
        .await;
        assert_eq!(
            got,
            vec![
                Ok((StepStream::Stdout, b"ab".to_vec())),
                Ok((StepStream::Stderr, b"xy".to_vec())),
                Ok((StepStream::Stdout, b"c".to_vec())),
                Err(ExecutorError::backend("reading", "cut").to_string()),
                Ok((StepStream::Stdout, b"never joined past the error".to_vec())),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_step_waits_for_nothing_and_a_loud_one_a_pause() {
        let loud = vec![b'x'; LOUD];
        let mut quiet = Gathered::new(Arrivals(vec![out(b"line\n"), None, out(b"line\n")].into()));
        let start = tokio::time::Instant::now();
        while quiet.next().await.is_some() {}
        assert_eq!(start.elapsed(), Duration::ZERO);

        let mut gathered = Gathered::new(Arrivals(
            vec![out(&loud), None, out(b"more"), out(&loud)].into(),
        ));
        let start = tokio::time::Instant::now();
        let first = gathered.next().await;
        assert!(matches!(first, Some(Ok((_, ref b))) if b.len() == LOUD));
        assert_eq!(start.elapsed(), Duration::ZERO);
        let second = gathered.next().await;
        assert!(matches!(second, Some(Ok((_, ref b))) if b.len() == LOUD + 4));
        assert_eq!(start.elapsed(), PAUSE);
        // The stream ended with nothing to wait for: no pause after it.
        assert!(gathered.next().await.is_none());
        assert_eq!(start.elapsed(), PAUSE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_join_stops_at_its_size_and_what_is_left_comes_at_once() {
        let big = vec![b'x'; MOST / 2];
        let got = Gathered::new(Arrivals(
            vec![out(&big), out(&big), out(&big), out(b"tail")].into(),
        ));
        let start = tokio::time::Instant::now();
        let sizes: Vec<usize> = got.map(|p| p.map_or(0, |(_, b)| b.len())).collect().await;
        assert_eq!(sizes, vec![MOST, MOST / 2 + 4]);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
