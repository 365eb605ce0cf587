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
