//! A loud step's output read in fewer, larger pieces.
//!
//! An engine frames an exec's output as it reads it from the step's pipe:
//! Docker in pieces of 4 to 32 KiB, a Kubernetes exec in one WebSocket
//! message each. Taken one at a time, a loud step costs the runner a
//! wake-up, a socket read and a log write for each piece, on the same
//! cores the engine and the step run on: 512 MiB of output through Docker
//! was about 47,000 log writes and 39,000 thread wake-ups. So a piece is
//! joined with the later pieces of its stream that have already arrived,
//! and once a large piece has emptied the connection (the step is loud)
//! the next read waits [`PAUSE`], in which the output gathers to be taken
//! in one go. A quiet step's lines are passed on the moment they arrive;
//! a loud one's at most a millisecond later.
//!
//! Measured on Docker, a step printing 512 MiB: the runner's CPU time fell
//! from 1.9 s to 0.6–1.0 s, and its throughput went from 0.76–0.89× to
//! about 1× that of `docker exec` into `/dev/null` (BENCHMARKS.md).
//! Joining alone saved nothing there (a piece seldom finds another one
//! waiting), and waiting without joining let one piece through per pause.
//!
//! A Kubernetes exec joins without the pause ([`Gathered::without_pause`]):
//! its messages come over TCP, often in bursts, and on the test cluster
//! the pause made the same 512 MiB step slower (a median of 5.7 s against
//! 5.3, and three runs in thirteen of 7 to 10 s) though it cut the
//! runner's CPU by two fifths. Joining alone took it from 5.75 s to 5.2 s
//! and the runner's CPU from 1.3–1.5 s to 1.1–1.3 s.
//!
//! ```
//! use bytes::Bytes;
//! use executor_container::container::gather::{Frame, Gathered};
//! use executor_core::events::OutputStream::Stdout;
//! use futures_util::stream;
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let arrived = vec![
//!     Ok::<_, String>(Frame::<()>::Output(Stdout, Bytes::from("one\n"))),
//!     Ok(Frame::Output(Stdout, Bytes::from("two\n"))),
//!     Ok(Frame::Other(())),
//! ];
//! let mut frames = stream::iter(arrived);
//! let mut gathered = Gathered::new();
//! let first = gathered.next(&mut frames).await;
//! assert!(matches!(first, Some(Ok(Frame::Output(_, b))) if b == "one\ntwo\n"));
//! assert!(matches!(gathered.next(&mut frames).await, Some(Ok(Frame::Other(())))));
//! assert!(gathered.next(&mut frames).await.is_none());
//! # }
//! ```

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::stream::{Stream, StreamExt};

use executor_core::events::OutputStream;

/// A piece at least this large, after which the connection was empty,
/// shows a loud step: the next read waits [`PAUSE`].
pub const LOUD: usize = 16 << 10;

/// How long the read after a loud piece waits for output to gather.
pub const PAUSE: Duration = Duration::from_millis(1);

/// The most one joined piece holds: what is already there beyond it comes
/// next, without a pause.
pub const MOST: usize = 256 << 10;

/// What an exec's connection carries: a piece of one of the step's
/// streams, or anything else the backend reads from it (a status, a
/// close), which is passed on as it is and never joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<T> {
    /// Bytes of the step's stdout or stderr.
    Output(OutputStream, Bytes),
    /// Anything else.
    Other(T),
}

type Item<T, E> = Option<Result<Frame<T>, E>>;

/// Reads frames with the output pieces that are already there joined, and
/// a pause after a loud one; see the module docs. It keeps its state
/// itself, so the stream can be borrowed anew for each read, and a read
/// dropped part-way (a `select!` that took another branch) loses nothing.
#[derive(Debug)]
pub struct Gathered<T, E> {
    /// What ended the last join: a frame that is not of the joined stream,
    /// an error, or the end (`Some(None)`).
    next: Option<Item<T, E>>,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether a loud piece is followed by a pause.
    pausing: bool,
}

impl<T, E> Default for Gathered<T, E> {
    fn default() -> Self {
        Gathered {
            next: None,
            pause: None,
            pausing: true,
        }
    }
}

impl<T, E> Gathered<T, E> {
    /// Nothing read yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Joins what is already there but never pauses: for a connection
    /// whose sender a paused reader slows down more than the pause saves.
    pub fn without_pause() -> Self {
        Gathered {
            pausing: false,
            ..Self::default()
        }
    }

    /// The next frame of `frames` (a stream, or `&mut` one), pieces of
    /// one stream that are already there joined; `None` once `frames`
    /// ended.
    pub async fn next<S>(&mut self, mut frames: S) -> Item<T, E>
    where
        S: Stream<Item = Result<Frame<T>, E>> + Unpin,
    {
        std::future::poll_fn(|cx| self.poll_next(&mut frames, cx)).await
    }

    /// [`Gathered::next`] as a poll.
    pub fn poll_next<S>(&mut self, frames: &mut S, cx: &mut Context<'_>) -> Poll<Item<T, E>>
    where
        S: Stream<Item = Result<Frame<T>, E>> + Unpin,
    {
        if let Some(pause) = self.pause.as_mut() {
            ready!(pause.as_mut().poll(cx));
            self.pause = None;
        }
        let first = match self.next.take() {
            Some(item) => item,
            None => ready!(frames.poll_next_unpin(cx)),
        };
        let (stream, first) = match first {
            Some(Ok(Frame::Output(stream, bytes))) => (stream, bytes),
            other => return Poll::Ready(other),
        };
        let mut joined: Option<BytesMut> = None;
        let mut emptied = false;
        while joined.as_ref().map_or(first.len(), BytesMut::len) < MOST {
            match frames.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(Frame::Output(more_of, more)))) if more_of == stream => {
                    joined
                        .get_or_insert_with(|| BytesMut::from(&first[..]))
                        .extend_from_slice(&more);
                }
                Poll::Ready(other) => {
                    self.next = Some(other);
                    break;
                }
                Poll::Pending => {
                    emptied = true;
                    break;
                }
            }
        }
        let piece = joined.map_or(first, BytesMut::freeze);
        if self.pausing && emptied && piece.len() >= LOUD {
            self.pause = Some(Box::pin(tokio::time::sleep(PAUSE)));
        }
        Poll::Ready(Some(Ok(Frame::Output(stream, piece))))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    type Piece = Result<Frame<&'static str>, String>;

    /// Frames in turn, where `None` is a moment with nothing there yet.
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
        Some(Ok(Frame::Output(
            OutputStream::Stdout,
            Bytes::copy_from_slice(bytes),
        )))
    }

    fn err(bytes: &[u8]) -> Option<Piece> {
        Some(Ok(Frame::Output(
            OutputStream::Stderr,
            Bytes::copy_from_slice(bytes),
        )))
    }

    fn arrivals(frames: Vec<Option<Piece>>) -> Arrivals {
        Arrivals(frames.into())
    }

    async fn all(frames: Vec<Option<Piece>>) -> Vec<Piece> {
        let mut frames = arrivals(frames);
        let mut gathered = Gathered::new();
        let mut got = Vec::new();
        while let Some(piece) = gathered.next(&mut frames).await {
            got.push(piece);
        }
        got
    }

    fn len(piece: Option<Piece>) -> usize {
        match piece {
            Some(Ok(Frame::Output(_, bytes))) => bytes.len(),
            other => panic!("not output: {other:?}"),
        }
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
            Some(Ok(Frame::Other("status"))),
            out(b"d"),
            Some(Err("cut".into())),
            out(b"never joined past the error"),
        ])
        .await;
        let o = |b: &'static [u8]| Ok(Frame::Output(OutputStream::Stdout, Bytes::from(b)));
        let e = |b: &'static [u8]| Ok(Frame::Output(OutputStream::Stderr, Bytes::from(b)));
        assert_eq!(
            got,
            vec![
                o(b"ab"),
                e(b"xy"),
                o(b"c"),
                Ok(Frame::Other("status")),
                o(b"d"),
                Err("cut".to_string()),
                o(b"never joined past the error"),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_step_waits_for_nothing_and_a_loud_one_a_pause() {
        let mut quiet = arrivals(vec![out(b"line\n"), None, out(b"line\n")]);
        let mut gathered = Gathered::new();
        let start = tokio::time::Instant::now();
        while gathered.next(&mut quiet).await.is_some() {}
        assert_eq!(start.elapsed(), Duration::ZERO);

        let loud = vec![b'x'; LOUD];
        let mut frames = arrivals(vec![out(&loud), None, out(b"more"), out(&loud)]);
        let mut gathered = Gathered::new();
        let start = tokio::time::Instant::now();
        assert_eq!(len(gathered.next(&mut frames).await), LOUD);
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(len(gathered.next(&mut frames).await), LOUD + 4);
        assert_eq!(start.elapsed(), PAUSE);
        // The stream ended with nothing to wait for: no pause after it.
        assert!(gathered.next(&mut frames).await.is_none());
        assert_eq!(start.elapsed(), PAUSE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_join_stops_at_its_size_and_what_is_left_comes_at_once() {
        let big = vec![b'x'; MOST / 2];
        let mut frames = arrivals(vec![out(&big), out(&big), out(&big), out(b"tail")]);
        let mut gathered = Gathered::new();
        let start = tokio::time::Instant::now();
        assert_eq!(len(gathered.next(&mut frames).await), MOST);
        assert_eq!(len(gathered.next(&mut frames).await), MOST / 2 + 4);
        assert!(gathered.next(&mut frames).await.is_none());
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn without_pause_a_loud_piece_is_followed_at_once() {
        let loud = vec![b'x'; LOUD];
        let mut frames = arrivals(vec![out(&loud), None, out(b"more"), out(b"!")]);
        let mut gathered = Gathered::without_pause();
        let start = tokio::time::Instant::now();
        assert_eq!(len(gathered.next(&mut frames).await), LOUD);
        assert_eq!(len(gathered.next(&mut frames).await), 5);
        assert_eq!(start.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_read_dropped_during_its_pause_loses_nothing() {
        let loud = vec![b'x'; LOUD];
        let mut frames = arrivals(vec![out(&loud), None, out(b"after")]);
        let mut gathered = Gathered::new();
        assert_eq!(len(gathered.next(&mut frames).await), LOUD);
        let start = tokio::time::Instant::now();
        // Another branch of a select wins while the read pauses.
        tokio::select! {
            biased;
            _ = gathered.next(&mut frames) => panic!("the read did not pause"),
            () = std::future::ready(()) => {}
        }
        assert_eq!(len(gathered.next(&mut frames).await), 5);
        assert_eq!(start.elapsed(), PAUSE);
        assert!(gathered.next(&mut frames).await.is_none());
    }
}
