//! Engine outages and cut streams, through a proxy in front of the
//! engine's socket.
//!
//! - When the container's removal passes through it, it stops listening
//!   (connections are refused), cuts every open connection, and listens
//!   again after a while. Calls ride an outage out within
//!   `DockerOptions::reconnect_timeout`; past it, the container goes to
//!   the journal, and the next sweep removes it.
//! - It cuts an exec's attached stream after a number of bytes, as a
//!   network would; the engine then kills the exec's own process. The
//!   step goes on, and is followed.

mod common;

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Docker;
use executor_conformance::fixture::{assert_nothing_left, Fixture};
use executor_core::journal::Journal;
use executor_core::{run_with, DriverOptions, RunLog, RunStatus, Step};
use executor_docker::{BollardEngine, DockerExecutor, DockerOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The engine's own socket, as the tests reach it.
fn engine_socket() -> PathBuf {
    match std::env::var("DOCKER_HOST") {
        Ok(host) if host.starts_with("unix://") => PathBuf::from(&host["unix://".len()..]),
        _ => PathBuf::from("/var/run/docker.sock"),
    }
}

/// Sizes at which the next exec streams are cut, in turn.
type Cuts = Arc<Mutex<VecDeque<u64>>>;

/// What the engine's side does while it is down.
#[derive(Clone, Copy)]
enum Down {
    /// Nothing listens: connections are refused.
    Refusing,
    /// A gateway in front of it answers every request with this status
    /// (502, 503, 504), as a load balancer or an SSH tunnel's far end does
    /// while the engine behind it restarts.
    Answering(u16),
}

/// A proxy that takes the engine down for `down` when a container's
/// removal (`DELETE .../containers/...`) comes through it, if `down` is
/// set, and cuts exec streams at the sizes in its [`Cuts`].
struct Proxy {
    cuts: Cuts,
    socket: PathBuf,
    over: watch::Receiver<u64>,
    _dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(down: Option<Duration>) -> Proxy {
        Proxy::start_as(down, Down::Refusing).await
    }

    async fn start_as(down: Option<Duration>, how: Down) -> Proxy {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("engine.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let (over_tx, over) = watch::channel(0u64);
        let cuts = Cuts::default();
        let task = tokio::spawn(serve(
            listener,
            socket.clone(),
            (down, how),
            over_tx,
            cuts.clone(),
        ));
        Proxy {
            cuts,
            socket,
            over,
            _dir: dir,
            task,
        }
    }

    fn host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    async fn outage_over(&mut self) {
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

async fn serve(
    mut listener: UnixListener,
    socket: PathBuf,
    (down, how): (Option<Duration>, Down),
    over: watch::Sender<u64>,
    cuts: Cuts,
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
                tokio::spawn(relay(client, cut, outage, cuts.clone()));
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
/// counted, and the connection is dropped where the next cut says.
async fn relay(
    mut client: UnixStream,
    mut cut: watch::Receiver<u64>,
    outage: Option<tokio::sync::mpsc::UnboundedSender<()>>,
    cuts: Cuts,
) {
    let Ok(mut engine) = UnixStream::connect(engine_socket()).await else {
        return;
    };
    let (mut from_client, mut to_client) = client.split();
    let (mut from_engine, mut to_engine) = engine.split();
    let exec_started = std::sync::atomic::AtomicBool::new(false);
    let dropped = tokio::sync::Notify::new();
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
            if let Some(outage) = &outage {
                if chunk.starts_with(b"DELETE ") && contains(chunk, b"/containers/") {
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
            if down.has_changed().unwrap_or(true) {
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
        loop {
            let n = from_engine.read(&mut buf).await?;
            if n == 0 {
                return to_client.shutdown().await;
            }
            let mut chunk = &buf[..n];
            if exec_started.load(std::sync::atomic::Ordering::SeqCst) {
                let at = cuts.lock().unwrap().front().copied();
                if let Some(at) = at.filter(|at| streamed + n as u64 >= *at) {
                    chunk = &chunk[..usize::try_from(at - streamed).unwrap_or(0).min(n)];
                    to_client.write_all(chunk).await?;
                    cuts.lock().unwrap().pop_front();
                    // Dropped mid-stream: no end, no exit code.
                    dropped.notify_one();
                    return std::future::pending().await;
                }
                streamed += n as u64;
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
async fn answer(mut client: UnixStream, status: u16) {
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

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

async fn executor_through(proxy: &Proxy, options: DockerOptions) -> DockerExecutor {
    let engine = BollardEngine::connect_to(&proxy.host())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .reconnect_timeout(options.reconnect_timeout);
    DockerExecutor::with_engine(Arc::new(engine), options)
}

/// The engine, reached directly: the probe for leftovers.
async fn direct() -> Docker {
    Docker(common::executor(common::options()).await)
}

fn spec_of(fx: &Fixture, backend: &Docker, name: &str) -> executor_core::RunSpec {
    fx.spec(backend, name)
        .step(Step::new("work", "echo working"))
}

async fn run(
    executor: &DockerExecutor,
    spec: &executor_core::RunSpec,
    options: &DriverOptions,
) -> (executor_core::RunResult, String) {
    let (log, text) = RunLog::memory();
    let result = run_with(executor, spec, &log, CancellationToken::new(), options).await;
    (result, text.text())
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_outage_as_the_container_is_removed_is_ridden_out() {
    let mut proxy = Proxy::start(Some(Duration::from_secs(3))).await;
    let executor = executor_through(&proxy, common::options()).await;
    let probe = direct().await;
    let fx = Fixture::new("engine-outage");
    let spec = spec_of(&fx, &probe, "engine-outage");
    let (result, text) = run(&executor, &spec, &DriverOptions::default()).await;
    assert_eq!(result.status, RunStatus::Success, "{text}");
    proxy.outage_over().await;
    assert_nothing_left(&probe, &fx.runner).await;
}

/// A gateway in front of the engine that answers 502, 503 or 504 while
/// the engine behind it is down is an outage too: each is ridden out.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_answering_5xx_as_the_container_is_removed_is_ridden_out() {
    let probe = direct().await;
    for status in [502, 503, 504] {
        let mut proxy =
            Proxy::start_as(Some(Duration::from_secs(2)), Down::Answering(status)).await;
        let executor = executor_through(&proxy, common::options()).await;
        let fx = Fixture::new("engine-gateway");
        let spec = spec_of(&fx, &probe, "engine-gateway");
        let (result, text) = run(&executor, &spec, &DriverOptions::default()).await;
        proxy.outage_over().await;
        assert_eq!(result.status, RunStatus::Success, "HTTP {status}: {text}");
        assert_nothing_left(&probe, &fx.runner).await;
    }
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_outage_past_the_reconnect_timeout_leaves_the_container_to_the_journal() {
    let mut proxy = Proxy::start(Some(Duration::from_secs(6))).await;
    let options = DockerOptions {
        reconnect_timeout: Duration::from_secs(1),
        ..common::options()
    };
    let executor = executor_through(&proxy, options).await;
    let probe = direct().await;
    let fx = Fixture::new("engine-journal");
    let journal_dir = tempfile::tempdir().unwrap();
    let journal = Journal::new(journal_dir.path());
    let spec = spec_of(&fx, &probe, "engine-journal");
    let driver = DriverOptions {
        journal: Some(journal.clone()),
        ..DriverOptions::default()
    };
    let (result, text) = run(&executor, &spec, &driver).await;
    assert_eq!(result.status, RunStatus::Error, "{text}");
    assert!(text.contains("is in the journal"), "{text}");
    assert_eq!(journal.entries("docker", &fx.runner).unwrap().len(), 1);
    proxy.outage_over().await;
    assert!(
        !probe.0.containers(&fx.runner).await.unwrap().is_empty(),
        "the container outlived the run"
    );
    let swept = journal.sweep(&executor, &fx.runner).await.unwrap();
    assert_eq!(swept.len(), 1);
    assert!(journal.entries("docker", &fx.runner).unwrap().is_empty());
    assert_nothing_left(&probe, &fx.runner).await;
}

/// The executor through a proxy that cuts exec streams, as a conformance
/// backend; leftovers are probed directly.
struct Cutting {
    executor: DockerExecutor,
    probe: Docker,
    proxy: Proxy,
}

#[async_trait::async_trait]
impl executor_conformance::Backend for Cutting {
    fn executor(&self) -> &dyn executor_core::Executor {
        &self.executor
    }
    fn image(&self) -> Option<String> {
        Some(common::image())
    }
    async fn leftovers(&self, runner: &str) -> Vec<String> {
        self.probe.leftovers(runner).await
    }
    async fn cut_streams_after(&self, bytes: &[u64]) -> bool {
        self.proxy
            .cuts
            .lock()
            .unwrap()
            .extend(bytes.iter().copied());
        true
    }
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_cut_twice_keeps_every_byte_and_its_code() {
    let proxy = Proxy::start(None).await;
    let executor = executor_through(&proxy, common::options()).await;
    let backend = Cutting {
        executor,
        probe: direct().await,
        proxy,
    };
    executor_conformance::a_step_cut_twice_keeps_every_byte_and_its_code(&backend).await;
}
