//! `pods/exec` over WebSocket, with the `v5.channel.k8s.io` and
//! `v4.channel.k8s.io` subprotocols, backed by an exec in the pod's container.

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecOptions, StartExecResults};
use futures_util::{SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use serde_json::json;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::faults::Faults;
use crate::kubelet::Kubelet;

/// The exec subprotocols the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `v4.channel.k8s.io`: no way to close stdin alone.
    V4,
    /// `v5.channel.k8s.io`: channel 255 closes a stream.
    V5,
}

impl Protocol {
    /// The header value.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::V4 => "v4.channel.k8s.io",
            Protocol::V5 => "v5.channel.k8s.io",
        }
    }
}

/// Picks the subprotocol as a real server does: the first in the client's
/// offer that it speaks (v5 only unless `v4_only`). `Err` carries the 403
/// message.
pub fn negotiate(offer: &str, v4_only: bool) -> Result<Protocol, String> {
    let speaks = |p: &str| {
        (p == Protocol::V5.as_str() && !v4_only)
            .then_some(Protocol::V5)
            .or((p == Protocol::V4.as_str()).then_some(Protocol::V4))
    };
    if let Some(p) = offer.split(',').map(str::trim).find_map(speaks) {
        return Ok(p);
    }
    Err(format!(
        "unable to upgrade: no supported subprotocol in {offer:?}; this server speaks {}",
        if v4_only {
            "v4.channel.k8s.io"
        } else {
            "v5.channel.k8s.io, v4.channel.k8s.io"
        }
    ))
}

/// What the exec request asked for.
#[derive(Debug, Clone, Default)]
pub struct ExecParams {
    /// argv.
    pub command: Vec<String>,
    /// Attach stdin.
    pub stdin: bool,
    /// Attach stdout.
    pub stdout: bool,
    /// Attach stderr.
    pub stderr: bool,
    /// The container named, if any.
    pub container: Option<String>,
}

impl ExecParams {
    /// From the query string.
    pub fn parse(query: &str) -> Self {
        let mut p = ExecParams::default();
        for (k, v) in form_pairs(query) {
            match k.as_str() {
                "command" => p.command.push(v),
                "stdin" => p.stdin = v == "true" || v == "1",
                "stdout" => p.stdout = v == "true" || v == "1",
                "stderr" => p.stderr = v == "true" || v == "1",
                "container" => p.container = Some(v),
                _ => {}
            }
        }
        p
    }
}

/// Decodes `a=1&b=x%20y` pairs.
pub fn form_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(
                    std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("zz"),
                    16,
                ) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn status_success() -> Vec<u8> {
    json!({"metadata": {}, "status": "Success"})
        .to_string()
        .into_bytes()
}

fn status_failure(command: &[String], code: i64) -> Vec<u8> {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {code}", command.join(" ")),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
    })
    .to_string()
    .into_bytes()
}

fn status_error(message: &str) -> Vec<u8> {
    json!({"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500})
        .to_string()
        .into_bytes()
}

fn frame(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::binary(v)
}

/// Serves one exec on an upgraded connection.
pub async fn serve(
    upgraded: Upgraded,
    protocol: Protocol,
    kubelet: &Kubelet,
    faults: &Faults,
    container: Option<String>,
    params: ExecParams,
) {
    let mut ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
    let Some(container) = container else {
        let _ = ws
            .send(frame(
                3,
                &status_error("container not found (the pod is not running)"),
            ))
            .await;
        let _ = ws.close(None).await;
        return;
    };
    let options = CreateExecOptions {
        cmd: Some(params.command.clone()),
        attach_stdin: Some(params.stdin),
        attach_stdout: Some(params.stdout),
        attach_stderr: Some(params.stderr),
        tty: Some(false),
        ..Default::default()
    };
    let started = match kubelet.docker.create_exec(&container, options).await {
        Ok(exec) => kubelet
            .docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await
            .map(|r| (exec.id, r)),
        Err(e) => Err(e),
    };
    let (exec_id, mut output, mut input) = match started {
        Ok((id, StartExecResults::Attached { output, input })) => (id, output, Some(input)),
        Ok((_, StartExecResults::Detached)) | Err(_) => {
            let msg = "container not running: cannot exec";
            let _ = ws.send(frame(3, &status_error(msg))).await;
            let _ = ws.close(None).await;
            return;
        }
    };
    if !params.stdin {
        if let Some(mut i) = input.take() {
            let _ = i.shutdown().await;
        }
    }
    let mut sent = 0u64;
    let mut received = 0u64;
    let idle = faults.idle_timeout();
    let mut idle_deadline = idle.map(|d| tokio::time::Instant::now() + d);
    loop {
        let idle_wait = async {
            match idle_deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            msg = ws.next() => {
                idle_deadline = idle.map(|d| tokio::time::Instant::now() + d);
                match msg {
                    Some(Ok(Message::Binary(data))) if !data.is_empty() => match data[0] {
                        0 => if let Some(i) = input.as_mut() {
                            match write_or_cut(i, faults, &mut received, &data[1..]).await {
                                Written::Cut => return,
                                Written::Failed => input = None,
                                Written::Whole => {}
                            }
                        },
                        255 if protocol == Protocol::V5 && data.get(1) == Some(&0) => {
                            if let Some(mut i) = input.take() { let _ = i.shutdown().await; }
                        }
                        _ => {}
                    },
                    Some(Ok(Message::Ping(p))) => {
                        faults.note_exec_ping();
                        let _ = ws.send(Message::Pong(p)).await;
                    }
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                        // The client went away: the exec's result has nowhere to go.
                        return;
                    }
                    Some(Ok(_)) => {}
                }
            }
            chunk = output.next() => {
                idle_deadline = idle.map(|d| tokio::time::Instant::now() + d);
                match chunk {
                    // A stream the client did not ask for is not sent.
                    Some(Ok(LogOutput::StdOut { message })) | Some(Ok(LogOutput::Console { message })) if params.stdout => {
                        if send_or_cut(&mut ws, faults, &mut sent, 1, &message).await.is_err() { return; }
                    }
                    Some(Ok(LogOutput::StdErr { message })) if params.stderr => {
                        if send_or_cut(&mut ws, faults, &mut sent, 2, &message).await.is_err() { return; }
                    }
                    Some(Ok(LogOutput::StdOut { .. } | LogOutput::Console { .. } | LogOutput::StdErr { .. })) => {}
                    Some(Ok(LogOutput::StdIn { .. })) => {}
                    Some(Err(_)) | None => break,
                }
            }
            _ = idle_wait => {
                // An idle connection dropped, as a load balancer would: no close frame.
                faults.note_idle_cut();
                return;
            }
        }
    }
    let status = exit_code_of(kubelet, &container, &exec_id).await;
    let body = match status {
        Some(0) => status_success(),
        Some(code) => status_failure(&params.command, code),
        None => status_error("exec ended without an exit code: the container is gone"),
    };
    let _ = ws.send(frame(3, &body)).await;
    let _ = ws
        .close(Some(CloseFrame {
            code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
            reason: "".into(),
        }))
        .await;
    // Finish the closing handshake before dropping the socket: a socket
    // closed with the client's frames unread is reset, and a reset can
    // discard output the client has not read yet.
    let _ = tokio::time::timeout(CLOSE_HANDSHAKE, async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}

/// Sends output on `channel`, or as much of it as reaches the size of a
/// cut the faults ask for; `Err` when the connection is gone (or cut).
async fn send_or_cut(
    ws: &mut WebSocketStream<TokioIo<Upgraded>>,
    faults: &Faults,
    sent: &mut u64,
    channel: u8,
    message: &[u8],
) -> Result<(), ()> {
    let len = message.len() as u64;
    let cut_at = faults
        .exec_cut()
        .filter(|at| sent.saturating_add(len) >= *at);
    let part = match cut_at {
        Some(at) => {
            &message[..usize::try_from(at.saturating_sub(*sent))
                .unwrap_or(0)
                .min(message.len())]
        }
        None => message,
    };
    if !part.is_empty() {
        ws.send(frame(channel, part)).await.map_err(|_| ())?;
        let _ = ws.flush().await;
    }
    *sent = sent.saturating_add(part.len() as u64);
    if cut_at.is_some() {
        faults.exec_cut_done();
        return Err(());
    }
    Ok(())
}

/// What became of stdin bytes sent on to the exec.
enum Written {
    Whole,
    /// The exec's stdin is closed: later bytes have nowhere to go.
    Failed,
    /// A cut the faults ask for came: the connection is to drop, no status.
    Cut,
}

/// Writes stdin bytes into the exec, or as many as reach the size of a
/// cut of its stdin the faults ask for ([`Faults::cut_exec_input_after`]),
/// as [`send_or_cut`] does for output.
async fn write_or_cut(
    input: &mut (impl AsyncWrite + Unpin + ?Sized),
    faults: &Faults,
    received: &mut u64,
    bytes: &[u8],
) -> Written {
    let len = bytes.len() as u64;
    let cut_at = faults
        .exec_input_cut()
        .filter(|at| received.saturating_add(len) >= *at);
    if let Some(at) = cut_at {
        let part = usize::try_from(at.saturating_sub(*received)).unwrap_or(0);
        let _ = input.write_all(&bytes[..part.min(bytes.len())]).await;
        faults.exec_input_cut_done();
        return Written::Cut;
    }
    *received = received.saturating_add(len);
    match input.write_all(bytes).await {
        Ok(()) => Written::Whole,
        Err(_) => Written::Failed,
    }
}

/// The exec's exit code once it has one, as a kubelet waits for it: for
/// as long as the exec runs, whatever its streams did. `None` only when the
/// container (and the exec with it) is gone.
async fn exit_code_of(kubelet: &Kubelet, container: &str, exec_id: &str) -> Option<i64> {
    // Events from a second back on, so an exit between a look and the
    // wait is replayed rather than missed.
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs().saturating_sub(1))
        .unwrap_or(0);
    let filters = std::collections::HashMap::from([
        ("container".to_string(), vec![container.to_string()]),
        (
            "event".to_string(),
            vec![
                "exec_die".to_string(),
                "die".to_string(),
                "destroy".to_string(),
            ],
        ),
    ]);
    let mut events = kubelet
        .docker
        .events(Some(bollard::query_parameters::EventsOptions {
            since: Some(since.to_string()),
            filters: Some(filters),
            ..Default::default()
        }));
    loop {
        match kubelet.docker.inspect_exec(exec_id).await {
            Ok(s) if s.running != Some(true) => return s.exit_code,
            Ok(_) => {}
            Err(_) => return None,
        }
        match events.next().await {
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return None,
        }
    }
}

/// How long a closed exec waits for the client's close frame.
const CLOSE_HANDSHAKE: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subprotocol_is_the_first_the_client_offers_that_the_server_speaks() {
        let both = "v5.channel.k8s.io, v4.channel.k8s.io";
        assert_eq!(negotiate(both, false), Ok(Protocol::V5));
        assert_eq!(negotiate(both, true), Ok(Protocol::V4));
        let v4_first = "v4.channel.k8s.io, v5.channel.k8s.io";
        assert_eq!(negotiate(v4_first, false), Ok(Protocol::V4));
        assert!(negotiate("channel.k8s.io", false).is_err());
    }
}
