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
mod tests;
