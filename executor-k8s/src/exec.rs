//! One exec's life on its WebSocket: stdin in, stdout and stderr out, the
//! status from the error channel, pings to keep a silent exec alive.

use std::time::Duration;

use executor_core::ExecutorError;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::cluster::ExecConnection;

/// Channel numbers of the `channel.k8s.io` protocols.
const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
/// v5 only: close the stream named in the next byte.
const CLOSE: u8 = 255;

/// How an exec ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The command exited with this code.
    Exited(i32),
    /// The server reported a failure that is not an exit code.
    Failed(String),
    /// The stream ended without a status.
    Closed(String),
    /// The interrupt token fired first.
    Interrupted,
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

/// Drives an exec to its end. `stdin` is streamed in (and, on v5, closed
/// at its end; on v4 left open, since closing would close the whole
/// socket and lose the status); stdout and stderr go to their writers.
pub async fn drive(
    mut conn: ExecConnection,
    mut stdin: Option<&mut (dyn AsyncRead + Send + Unpin)>,
    stdout: &mut (dyn AsyncWrite + Send + Unpin),
    stderr: &mut (dyn AsyncWrite + Send + Unpin),
    interrupt: &CancellationToken,
    keepalive: Duration,
) -> Result<Ended, ExecutorError> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + keepalive, keepalive);
    let write_err = |e: std::io::Error| ExecutorError::backend("writing exec output", e);
    loop {
        tokio::select! {
            biased;
            _ = interrupt.cancelled() => return Ok(Ended::Interrupted),
            msg = conn.socket.next() => match msg {
                Some(Ok(Message::Binary(data))) => match data.first() {
                    // A slow log holds the output back; an interrupt still ends it.
                    Some(&STDOUT) => tokio::select! {
                        written = stdout.write_all(&data[1..]) => written.map_err(write_err)?,
                        _ = interrupt.cancelled() => return Ok(Ended::Interrupted),
                    },
                    Some(&STDERR) => tokio::select! {
                        written = stderr.write_all(&data[1..]) => written.map_err(write_err)?,
                        _ = interrupt.cancelled() => return Ok(Ended::Interrupted),
                    },
                    Some(&ERROR) => return Ok(parse_status(&data[1..])),
                    _ => {}
                },
                Some(Ok(Message::Close(frame))) => {
                    let why = frame.map(|f| f.reason.to_string()).filter(|r| !r.is_empty());
                    return Ok(Ended::Closed(why.unwrap_or_else(|| "the server closed the exec".into())));
                }
                Some(Ok(_)) => {}
                Some(Err(err)) => return Ok(Ended::Closed(format!("the exec connection broke: {err}"))),
                None => return Ok(Ended::Closed("the exec connection ended".into())),
            },
            n = read_some(&mut stdin, &mut buf), if stdin.is_some() => match n {
                Ok(0) => {
                    stdin = None;
                    if conn.v5 {
                        send(&mut conn, vec![CLOSE, STDIN]).await?;
                    }
                }
                Ok(n) => {
                    let mut frame = Vec::with_capacity(n + 1);
                    frame.push(STDIN);
                    frame.extend_from_slice(&buf[..n]);
                    send(&mut conn, frame).await?;
                }
                Err(err) => return Err(ExecutorError::backend("streaming into the exec", err)),
            },
            _ = ping.tick() => {
                // Keeps proxies and load balancers from dropping a silent step.
                conn.socket.send(Message::Ping(Vec::new().into())).await
                    .map_err(|e| ExecutorError::backend("keeping the exec alive", e))?;
            }
        }
    }
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

async fn send(conn: &mut ExecConnection, frame: Vec<u8>) -> Result<(), ExecutorError> {
    conn.socket
        .send(Message::binary(frame))
        .await
        .map_err(|e| ExecutorError::backend("writing to the exec", e))
}

#[cfg(test)]
mod tests {
    use super::*;

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
