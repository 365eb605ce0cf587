//! An exec over the `channel.k8s.io` WebSocket protocols: stdin in,
//! stdout and stderr out, the status from the error channel, pings to
//! keep a silent exec alive. The executor sees only [`ExecSession`].

use std::pin::Pin;
use std::time::Duration;

use async_trait::async_trait;
use executor_container::container::gather::{Frame, Gathered};
use executor_core::events::OutputStream;
use executor_core::ExecutorError;
use futures_util::{Sink, SinkExt, Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_util::sync::CancellationToken;

use crate::cluster::{Ended, ExecIo, ExecSession};

/// Channel numbers of the `channel.k8s.io` protocols.
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
/// v5 only: close the stream named in the next byte.
const CLOSE: u8 = 255;

/// A WebSocket, as an exec's channel.
pub(crate) trait WebSocket:
    Stream<Item = Result<Message, WsError>> + Sink<Message, Error = WsError> + Send + Unpin
{
}
impl<T> WebSocket for T where
    T: Stream<Item = Result<Message, WsError>> + Sink<Message, Error = WsError> + Send + Unpin
{
}

/// An open exec on its WebSocket.
pub(crate) struct WsExec {
    socket: Pin<Box<dyn WebSocket>>,
    /// Whether the server chose `v5.channel.k8s.io`, which can close stdin alone.
    v5: bool,
    /// How often a silent exec is pinged.
    keepalive: Duration,
}

impl WsExec {
    pub(crate) fn new(socket: Pin<Box<dyn WebSocket>>, v5: bool, keepalive: Duration) -> Self {
        WsExec {
            socket,
            v5,
            keepalive,
        }
    }

    /// Sends `frame`; a send that fails is a connection that broke, whose
    /// end says so (the status is lost, as when a read breaks).
    async fn send(&mut self, frame: Message) -> Option<Ended> {
        let sent = self.socket.send(frame).await;
        sent.err()
            .map(|err| Ended::Closed(format!("the exec connection broke while sending: {err}")))
    }
}

/// Parses the `Status` on the error channel.
pub fn parse_status(body: &[u8]) -> Ended {
    let Ok(status) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Ended::Failed(format!(
            "unreadable exec status: {}",
            String::from_utf8_lossy(body)
        ));
    };
    if status["status"] == "Success" {
        return Ended::Exited(0);
    }
    let code = status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["reason"] == "ExitCode")
        .and_then(|c| c["message"].as_str())
        .and_then(|m| m.parse::<i32>().ok());
    match code {
        Some(code) => Ended::Exited(code),
        None => Ended::Failed(
            status["message"]
                .as_str()
                .unwrap_or("exec failed")
                .to_string(),
        ),
    }
}

#[async_trait]
impl ExecSession for WsExec {
    fn closes_stdin(&self) -> bool {
        self.v5
    }

    /// `stdin` is streamed in and, on v5, closed at its end; on v4 it is
    /// left open, since closing would close the whole socket and lose the
    /// status.
    async fn finish(
        mut self: Box<Self>,
        io: ExecIo<'_>,
        interrupt: &CancellationToken,
    ) -> Result<Ended, ExecutorError> {
        let ExecIo {
            mut stdin,
            stdout,
            stderr,
        } = io;
        let mut buf = vec![0u8; 64 * 1024];
        let mut ping =
            tokio::time::interval_at(tokio::time::Instant::now() + self.keepalive, self.keepalive);
        let write_err = |e: std::io::Error| ExecutorError::backend("writing exec output", e);
        // A loud step's messages that are already there reach the log as
        // one write; a pause after a loud one slowed a TCP exec down (see
        // `gather`).
        let mut gathered = Gathered::without_pause();
        loop {
            tokio::select! {
                biased;
                _ = interrupt.cancelled() => return Ok(Ended::Interrupted),
                msg = gathered.next((&mut self.socket).map(frame_of)) => match msg {
                    // A slow log holds the output back; an interrupt still ends it.
                    Some(Ok(Frame::Output(OutputStream::Stdout, data))) => tokio::select! {
                        written = tokio::io::AsyncWriteExt::write_all(stdout, &data) => written.map_err(write_err)?,
                        _ = interrupt.cancelled() => return Ok(Ended::Interrupted),
                    },
                    Some(Ok(Frame::Output(OutputStream::Stderr, data))) => tokio::select! {
                        written = tokio::io::AsyncWriteExt::write_all(stderr, &data) => written.map_err(write_err)?,
                        _ = interrupt.cancelled() => return Ok(Ended::Interrupted),
                    },
                    Some(Ok(Frame::Other(Message::Binary(data)))) => {
                        if data.first() == Some(&ERROR) {
                            return Ok(parse_status(&data[1..]));
                        }
                    }
                    Some(Ok(Frame::Other(Message::Close(frame)))) => {
                        let why = frame.map(|f| f.reason.to_string()).filter(|r| !r.is_empty());
                        return Ok(Ended::Closed(why.unwrap_or_else(|| "the server closed the exec".into())));
                    }
                    Some(Ok(Frame::Other(_))) => {}
                    Some(Err(err)) => return Ok(Ended::Closed(format!("the exec connection broke: {err}"))),
                    None => return Ok(Ended::Closed("the exec connection ended".into())),
                },
                n = read_some(&mut stdin, &mut buf), if stdin.is_some() => match n {
                    Ok(0) => {
                        stdin = None;
                        if self.v5 {
                            if let Some(broke) = self.send(Message::binary(vec![CLOSE, STDIN])).await {
                                return Ok(broke);
                            }
                        }
                    }
                    Ok(n) => {
                        let mut frame = Vec::with_capacity(n + 1);
                        frame.push(STDIN);
                        frame.extend_from_slice(&buf[..n]);
                        if let Some(broke) = self.send(Message::binary(frame)).await {
                            return Ok(broke);
                        }
                    }
                    Err(err) => return Err(ExecutorError::backend("streaming into the exec", err)),
                },
                _ = ping.tick() => {
                    // Keeps proxies and load balancers from dropping a silent step.
                    if let Some(broke) = self.send(Message::Ping(Vec::new().into())).await {
                        return Ok(broke);
                    }
                }
            }
        }
    }
}

/// A message as a [`Frame`]: stdout and stderr as output (without their
/// channel byte), anything else as it is.
fn frame_of(msg: Result<Message, WsError>) -> Result<Frame<Message>, WsError> {
    Ok(match msg? {
        Message::Binary(data) if data.first() == Some(&STDOUT) => {
            Frame::Output(OutputStream::Stdout, data.slice(1..))
        }
        Message::Binary(data) if data.first() == Some(&STDERR) => {
            Frame::Output(OutputStream::Stderr, data.slice(1..))
        }
        other => Frame::Other(other),
    })
}

async fn read_some(
    stdin: &mut Option<&mut (dyn AsyncRead + Send + Unpin)>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match stdin {
        Some(r) => r.read(buf).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Waker};

    use super::*;

    type Sent = Arc<Mutex<Vec<Vec<u8>>>>;

    /// A WebSocket that answers from a script once what it was sent
    /// satisfies `until` (stdin fully in, say), and records what it was sent.
    struct ScriptedSocket {
        script: VecDeque<Message>,
        sent: Sent,
        until: fn(&[Vec<u8>]) -> bool,
        waker: Option<Waker>,
        /// Sends past this many fail, as on a connection reset.
        breaks_after: usize,
    }

    impl Stream for ScriptedSocket {
        type Item = Result<Message, WsError>;
        fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            let this = self.get_mut();
            if !(this.until)(&this.sent.lock().unwrap()) {
                this.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            Poll::Ready(this.script.pop_front().map(Ok))
        }
    }

    impl Sink<Message> for ScriptedSocket {
        type Error = WsError;
        fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), WsError>> {
            Poll::Ready(Ok(()))
        }
        fn start_send(self: Pin<&mut Self>, msg: Message) -> Result<(), WsError> {
            let this = self.get_mut();
            if this.sent.lock().unwrap().len() >= this.breaks_after {
                return Err(WsError::Io(std::io::ErrorKind::ConnectionReset.into()));
            }
            if let Message::Binary(data) = msg {
                this.sent.lock().unwrap().push(data.to_vec());
            }
            if let Some(waker) = this.waker.take() {
                waker.wake();
            }
            Ok(())
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), WsError>> {
            Poll::Ready(Ok(()))
        }
        fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), WsError>> {
            Poll::Ready(Ok(()))
        }
    }

    fn session(v5: bool, script: Vec<Message>, until: fn(&[Vec<u8>]) -> bool) -> (WsExec, Sent) {
        session_breaking(v5, script, until, usize::MAX)
    }

    fn session_breaking(
        v5: bool,
        script: Vec<Message>,
        until: fn(&[Vec<u8>]) -> bool,
        breaks_after: usize,
    ) -> (WsExec, Sent) {
        let sent = Sent::default();
        let socket = ScriptedSocket {
            script: script.into(),
            sent: sent.clone(),
            until,
            waker: None,
            breaks_after,
        };
        (
            WsExec::new(Box::pin(socket), v5, Duration::from_secs(60)),
            sent,
        )
    }

    fn frame(channel: u8, body: &[u8]) -> Message {
        Message::binary([&[channel][..], body].concat())
    }

    fn stdin_of(sent: &[Vec<u8>]) -> Vec<u8> {
        sent.iter()
            .filter(|f| f.first() == Some(&STDIN))
            .flat_map(|f| f[1..].iter().copied())
            .collect()
    }

    /// Drives a session with `stdin`; returns how it ended, stdout and stderr.
    async fn finish(exec: WsExec, stdin: &[u8]) -> (Ended, Vec<u8>, Vec<u8>) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let ended = drive(exec, stdin, &mut out, &mut err).await;
        (ended, out, err)
    }

    /// Drives a session with `stdin`, its output into `out` and `err`;
    /// returns how it ended.
    async fn drive(
        exec: WsExec,
        mut stdin: &[u8],
        out: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
        err: &mut (dyn tokio::io::AsyncWrite + Send + Unpin),
    ) -> Ended {
        let io = ExecIo {
            stdin: Some(&mut stdin),
            stdout: out,
            stderr: err,
        };
        Box::new(exec)
            .finish(io, &CancellationToken::new())
            .await
            .unwrap()
    }

    /// A connection that breaks while stdin goes in has lost the status:
    /// the copy's caller may send it again, as when a read breaks.
    #[tokio::test]
    async fn a_send_that_fails_is_a_connection_that_broke() {
        let (exec, _) = session_breaking(true, Vec::new(), |_| false, 0);
        let (ended, _, _) = finish(exec, b"archive").await;
        assert!(
            matches!(&ended, Ended::Closed(why) if why.contains("broke")),
            "{ended:?}"
        );
    }

    #[tokio::test]
    async fn on_v5_stdin_ends_with_its_close_frame_and_the_status_follows() {
        let script = vec![
            frame(STDOUT, b"out"),
            frame(STDERR, b"err"),
            frame(ERROR, br#"{"status":"Success"}"#),
        ];
        let (exec, sent) = session(true, script, |s| {
            s.iter().any(|f| f.as_slice() == [CLOSE, STDIN])
        });
        assert!(exec.closes_stdin());
        let (ended, out, err) = finish(exec, b"archive").await;
        assert_eq!(
            (ended, &out[..], &err[..]),
            (Ended::Exited(0), &b"out"[..], &b"err"[..])
        );
        assert_eq!(stdin_of(&sent.lock().unwrap()), b"archive");
    }

    #[tokio::test]
    async fn on_v4_stdin_is_never_closed_since_that_would_close_the_exec() {
        let status = frame(
            ERROR,
            br#"{"status":"Failure","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#,
        );
        let (exec, sent) = session(false, vec![status], |s| stdin_of(s) == b"all of it");
        assert!(!exec.closes_stdin());
        let (ended, _, _) = finish(exec, b"all of it").await;
        assert_eq!(ended, Ended::Exited(3));
        assert!(
            !sent
                .lock()
                .unwrap()
                .iter()
                .any(|f| f.first() == Some(&CLOSE)),
            "v4 has no CLOSE"
        );
    }

    /// Counts the writes it takes.
    #[derive(Default)]
    struct Writes {
        bytes: Vec<u8>,
        writes: usize,
    }

    impl tokio::io::AsyncWrite for Writes {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            let this = self.get_mut();
            this.writes += 1;
            this.bytes.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn messages_already_there_reach_the_log_in_one_write_per_stream_run() {
        let script = vec![
            frame(STDOUT, b"one "),
            frame(STDOUT, b"two "),
            frame(STDOUT, b"three\n"),
            frame(STDERR, b"warn\n"),
            frame(STDOUT, b"four\n"),
            frame(ERROR, br#"{"status":"Success"}"#),
        ];
        let (exec, _) = session(true, script, |_| true);
        let (mut out, mut err) = (Writes::default(), Writes::default());
        let ended = drive(exec, b"", &mut out, &mut err).await;
        assert_eq!(ended, Ended::Exited(0));
        assert_eq!(
            (&out.bytes[..], out.writes),
            (&b"one two three\nfour\n"[..], 2)
        );
        assert_eq!((&err.bytes[..], err.writes), (&b"warn\n"[..], 1));
    }

    #[tokio::test]
    async fn a_connection_that_ends_without_a_status_is_closed_not_a_success() {
        let (exec, _) = session(true, vec![frame(STDOUT, b"half")], |_| true);
        let (ended, out, _) = finish(exec, b"").await;
        assert!(matches!(ended, Ended::Closed(_)), "{ended:?}");
        assert_eq!(out, b"half");
    }

    #[tokio::test]
    async fn an_interrupt_ends_the_session_at_once() {
        let (exec, _) = session(true, Vec::new(), |_| false);
        let interrupt = CancellationToken::new();
        interrupt.cancel();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let io = ExecIo {
            stdin: None,
            stdout: &mut out,
            stderr: &mut err,
        };
        let ended = Box::new(exec).finish(io, &interrupt).await.unwrap();
        assert_eq!(ended, Ended::Interrupted);
    }

    #[test]
    fn statuses() {
        assert_eq!(
            parse_status(br#"{"metadata":{},"status":"Success"}"#),
            Ended::Exited(0)
        );
        let failure = br#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"42"}]}}"#;
        assert_eq!(parse_status(failure), Ended::Exited(42));
        assert!(
            matches!(parse_status(br#"{"status":"Failure","message":"container not found"}"#), Ended::Failed(m) if m == "container not found")
        );
    }
}
