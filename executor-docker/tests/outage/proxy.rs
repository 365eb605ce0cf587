//! A proxy in front of the engine's socket: outages, gateways that
//! answer for a down engine, and exec streams cut at a byte or inside a
//! frame's header.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;

/// The engine's own socket, as the tests reach it.
pub fn engine_socket() -> PathBuf {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if host.starts_with("unix://") => PathBuf::from(&host["unix://".len()..]),
        _ => PathBuf::from("/var/run/docker.sock"),
    }
}

/// Where the next exec streams are cut, in turn.
pub type Cuts = Arc<Mutex<VecDeque<Cut>>>;

/// Requests whose connection is cut partway, in turn.
pub type RequestCuts = Arc<Mutex<VecDeque<RequestCut>>>;

/// The first request that starts with `request` (`"PUT "`) and names
/// `path` (`"/archive"`) is cut once `after` more bytes have passed the
/// way `up` says (up: its body half sent; down: its answer half read,
/// `after: 0` its answer lost).
#[derive(Debug, Clone, Copy)]
pub struct RequestCut {
    pub request: &'static str,
    pub path: &'static str,
    pub up: bool,
    pub after: u64,
}

/// Where an exec's stream coming down is cut.
#[derive(Debug, Clone, Copy)]
pub enum Cut {
    /// After this many bytes, the answer's HTTP head among them.
    At(u64),
    /// `into` bytes into the 8-byte header of the first frame of the
    /// multiplexed stream after the one whose payload holds the end of
    /// `after`: a stream that ends there leaves a reader with part of a
    /// header.
    InFrameHeader { after: &'static [u8], into: usize },
}

/// Where a stream coming down is, for [`Cut::InFrameHeader`]: in the
/// answer's HTTP head, then in a frame's header or payload.
#[derive(Default)]
struct Frames {
    /// The head so far, until it ended (`\r\n\r\n`).
    head: Vec<u8>,
    in_body: bool,
    /// Bytes of the current frame's header seen.
    header: [u8; 8],
    header_at: usize,
    payload_left: u64,
    /// The last payload bytes, to find `after` in.
    seen: Vec<u8>,
    /// Whether `after` came: the next header is cut.
    armed: bool,
}

impl Frames {
    /// Where in `chunk`, if anywhere, `cut` falls; takes in the bytes
    /// before it.
    fn cut_in(&mut self, chunk: &[u8], cut: Option<Cut>) -> Option<usize> {
        let Some(Cut::InFrameHeader { after, into }) = cut else {
            return None;
        };
        for (i, &b) in chunk.iter().enumerate() {
            if !self.in_body {
                self.head.push(b);
                self.in_body = self.head.ends_with(b"\r\n\r\n");
                continue;
            }
            if self.payload_left > 0 {
                self.payload_left -= 1;
                self.seen.push(b);
                if self.seen.len() > after.len() {
                    self.seen.remove(0);
                }
                self.armed |= self.seen == after;
                continue;
            }
            if self.armed && into == self.header_at {
                return Some(i);
            }
            self.header[self.header_at] = b;
            self.header_at += 1;
            if self.header_at == 8 {
                let [_, _, _, _, a, b, c, d] = self.header;
                self.payload_left = u64::from(u32::from_be_bytes([a, b, c, d]));
                self.header_at = 0;
            }
        }
        None
    }
}

/// What the engine's side does while it is down.
#[derive(Clone, Copy)]
pub enum Down {
    /// Nothing listens: connections are refused.
    Refusing,
    /// A gateway in front of it answers every request with this status
    /// (502, 503, 504), as a load balancer or an SSH tunnel's far end does
    /// while the engine behind it restarts.
    Answering(u16),
}

/// The methods of the requests a proxy read, in order.
pub type Requests = Arc<Mutex<Vec<String>>>;

/// Which request takes the engine down.
#[derive(Debug, Clone, Copy)]
pub enum Trigger {
    /// The first removal of a container (`DELETE .../containers/...`).
    Removal,
    /// The request with this number, counting from 1 in the order the
    /// proxy reads their heads.
    Request(u64),
    /// As `Request`, but the request goes to the engine, and the engine
    /// goes down as its answer begins: done, its answer lost.
    Answer(u64),
}

/// A proxy that takes the engine down for `down` when a container's
/// removal (`DELETE .../containers/...`) comes through it, if `down` is
/// set, and cuts exec streams at the sizes in its [`Cuts`].
pub struct Proxy {
    pub cuts: Cuts,
    pub request_cuts: RequestCuts,
    /// The methods of the requests read so far, in order.
    pub requests: Requests,
    socket: PathBuf,
    over: watch::Receiver<u64>,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(down: Option<Duration>) -> Proxy {
        Proxy::start_as(down, Down::Refusing).await
    }

    pub async fn start_as(down: Option<Duration>, how: Down) -> Proxy {
        Proxy::start_on(down, how, Trigger::Removal).await
    }

    pub async fn start_on(down: Option<Duration>, how: Down, trigger: Trigger) -> Proxy {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("engine.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let (over_tx, over) = watch::channel(0u64);
        let cuts = Cuts::default();
        let request_cuts = RequestCuts::default();
        let requests = Requests::default();
        let task = tokio::spawn(serve(
            listener,
            socket.clone(),
            (down, how),
            over_tx,
            (cuts.clone(), request_cuts.clone()),
            (trigger, requests.clone()),
        ));
        Proxy {
            cuts,
            request_cuts,
            requests,
            socket,
            over,
            _dir: dir,
            task,
        }
    }

    pub fn host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    pub async fn outage_over(&mut self) {
        tokio::time::timeout(Duration::from_secs(60), self.over.wait_for(|n| *n >= 1))
            .await
            .expect("the outage never ended")
            .unwrap();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub async fn serve(
    mut listener: UnixListener,
    socket: PathBuf,
    (down, how): (Option<Duration>, Down),
    over: watch::Sender<u64>,
    (cuts, request_cuts): (Cuts, RequestCuts),
    (trigger, requests): (Trigger, Requests),
) {
    let (cut_tx, _) = watch::channel(0u64);
    let cut_tx = Arc::new(cut_tx);
    let (outage_tx, mut outage_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut done = down.is_none();
    let down = down.unwrap_or_default();
    // Set while a gateway answers for the engine.
    let (answering_tx, answering) = watch::channel(None::<u16>);
    let over = Arc::new(over);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                if let Some(status) = *answering.borrow() {
                    tokio::spawn(answer(client, status));
                    continue;
                }
                let cut = cut_tx.subscribe();
                let outage = (!done).then(|| outage_tx.clone());
                let outage = outage.map(|tx| (tx, trigger, requests.clone()));
                tokio::spawn(relay(client, cut, outage, (cuts.clone(), request_cuts.clone())));
            }
            Some(()) = outage_rx.recv() => {
                if done {
                    continue;
                }
                done = true;
                if let Down::Answering(status) = how {
                    answering_tx.send_replace(Some(status));
                    cut_tx.send_modify(|n| *n += 1);
                    let (answering_tx, over) = (answering_tx.clone(), over.clone());
                    tokio::spawn(async move {
                        // The outage's length is the fault itself, not a wait for anything.
                        tokio::time::sleep(down).await;
                        answering_tx.send_replace(None);
                        over.send_modify(|n| *n += 1);
                    });
                    continue;
                }
                // Nothing listens: the socket file stays, so a connect is refused.
                drop(listener);
                cut_tx.send_modify(|n| *n += 1);
                // The outage's length is the fault itself, not a wait for anything.
                tokio::time::sleep(down).await;
                let _ = std::fs::remove_file(&socket);
                listener = UnixListener::bind(&socket).unwrap();
                over.send_modify(|n| *n += 1);
            }
        }
    }
}

/// Copies both ways between a client and the engine; the first removal of
/// a container seen from the client starts the outage instead of passing.
/// Once an exec start has gone up, the bytes of its stream coming down are
/// counted, and the connection is dropped where the next cut says; a
/// request the next request cut names is dropped partway.
pub async fn relay(
    mut client: UnixStream,
    mut cut: watch::Receiver<u64>,
    outage: Option<(tokio::sync::mpsc::UnboundedSender<()>, Trigger, Requests)>,
    (cuts, request_cuts): (Cuts, RequestCuts),
) {
    let Ok(mut engine) = UnixStream::connect(engine_socket()).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.split();
    let (mut from_engine, mut to_engine) = engine.split();
    let exec_started = std::sync::atomic::AtomicBool::new(false);
    // Set once the request whose answer the outage takes has gone up.
    let answer_lost = std::sync::atomic::AtomicBool::new(false);
    let dropped = tokio::sync::Notify::new();
    // The cut armed on this connection: which way, bytes left.
    let armed = Mutex::new(None::<(bool, u64)>);
    let passed = |up: bool, n: usize| {
        let mut armed = armed.lock().unwrap();
        match armed.as_mut() {
            Some((way, _)) if *way != up => false,
            Some((_, left)) if *left <= n as u64 => {
                dropped.notify_one();
                true
            }
            Some((_, left)) => {
                *left -= n as u64;
                false
            }
            None => false,
        }
    };
    // The outage's cut reaches each relay in its own time: one that reads
    // a request meanwhile must not pass it on, as an engine that is down
    // answers nothing.
    let down = cut.clone();
    let upstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = from_client.read(&mut buf).await?;
            if n == 0 {
                return to_engine.shutdown().await;
            }
            let chunk = &buf[..n];
            if let Some((outage, trigger, requests)) = &outage {
                let method = ["GET", "POST", "PUT", "DELETE", "HEAD"]
                    .into_iter()
                    .find(|m| chunk.starts_with(m.as_bytes()) && chunk.get(m.len()) == Some(&b' '));
                let head = method.is_some() && contains(chunk, b" HTTP/1.1\r\n");
                let number = match method.filter(|_| head) {
                    Some(method) => {
                        let mut read = requests.lock().unwrap();
                        read.push(method.to_string());
                        read.len() as u64
                    }
                    None => 0,
                };
                let now = match trigger {
                    Trigger::Removal => {
                        chunk.starts_with(b"DELETE ") && contains(chunk, b"/containers/")
                    }
                    Trigger::Request(n) => head && number == *n,
                    Trigger::Answer(n) => {
                        if head && number == *n {
                            answer_lost.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        false
                    }
                };
                if now {
                    let _ = outage.send(());
                    // Never forwarded: the engine goes down under it.
                    std::future::pending::<()>().await;
                }
            }
            if chunk.starts_with(b"POST ")
                && contains(chunk, b"/exec/")
                && contains(chunk, b"/start")
            {
                exec_started.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            {
                let mut cuts = request_cuts.lock().unwrap();
                if let Some(&cut) = cuts.front() {
                    if chunk.starts_with(cut.request.as_bytes())
                        && contains(chunk, cut.path.as_bytes())
                    {
                        cuts.pop_front();
                        *armed.lock().unwrap() = Some((cut.up, cut.after));
                    }
                }
            }
            if down.has_changed().unwrap_or(true) || passed(true, n) {
                std::future::pending::<()>().await;
            }
            to_engine.write_all(chunk).await?;
        }
    };
    // An exec's attached stream ends with the engine closing its side:
    // the client must see that end too.
    let downstream = async {
        let mut buf = vec![0u8; 64 * 1024];
        let mut streamed = 0u64;
        let mut frames = Frames::default();
        loop {
            let n = from_engine.read(&mut buf).await?;
            if n == 0 {
                return to_client.shutdown().await;
            }
            let mut chunk = &buf[..n];
            if answer_lost.load(std::sync::atomic::Ordering::SeqCst) {
                if let Some((outage, _, _)) = &outage {
                    let _ = outage.send(());
                }
                // The engine goes down under its answer.
                return std::future::pending().await;
            }
            if exec_started.load(std::sync::atomic::Ordering::SeqCst) {
                let cut = cuts.lock().unwrap().front().copied();
                let at = match cut {
                    Some(Cut::At(at)) if streamed + n as u64 >= at => {
                        Some(usize::try_from(at - streamed).unwrap_or(0).min(n))
                    }
                    _ => frames.cut_in(chunk, cut),
                };
                if let Some(at) = at {
                    chunk = &chunk[..at];
                    to_client.write_all(chunk).await?;
                    cuts.lock().unwrap().pop_front();
                    // Dropped mid-stream: no end, no exit code.
                    dropped.notify_one();
                    return std::future::pending().await;
                }
                streamed += n as u64;
            }
            if passed(false, n) {
                return std::future::pending().await;
            }
            to_client.write_all(chunk).await?;
        }
    };
    tokio::select! {
        biased;
        _ = cut.changed() => {}
        _ = async { tokio::join!(upstream, downstream) } => {}
        () = dropped.notified() => {}
    }
}

/// Answers each request on `client` with `status`, as a gateway whose
/// engine is down: a JSON body as the engine's own errors have, and the
/// connection closed after it.
pub async fn answer(mut client: UnixStream, status: u16) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !contains(&head, b"\r\n\r\n") {
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let body = format!("{{\"message\":\"the engine behind this gateway is down ({status})\"}}");
    let reply = format!(
        "HTTP/1.1 {status} Gateway Says No\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = client.write_all(reply.as_bytes()).await;
    let _ = client.shutdown().await;
}

pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}
