//! A TCP relay that behaves like a long link, for tests and benchmarks of
//! a runner that sits far from its engine or cluster.
//!
//! Each direction of every connection through a [`Link`] has a one-way
//! delay and, if asked, a bandwidth cap: a chunk read at `t` leaves once
//! the chunks before it have (at the cap's rate) and arrives the delay
//! later, in order. A connection's first bytes also wait one round trip,
//! as TCP's handshake makes them. What is in flight in one direction is
//! bounded like a TCP window: past it the relay stops reading, so a slow
//! reader at the far end holds the sender back, as it would over a real
//! link.
//!
//! ```no_run
//! # async fn demo() -> Result<(), knotless_link::Error> {
//! use std::time::Duration;
//! use knotless_link::{Link, Shape, Upstream};
//! // The Docker engine, 25 ms away each way at 100 Mbit/s.
//! let link = Link::start(
//!     Upstream::Unix("/var/run/docker.sock".into()),
//!     Shape { one_way_delay: Duration::from_millis(25), bytes_per_second: Some(12_500_000) },
//! )
//! .await?;
//! println!("DOCKER_HOST=tcp://{}", link.addr());
//! # Ok(()) }
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{mpsc, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Where a link's connections go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// A TCP address, `host:port`.
    Tcp(String),
    /// A Unix socket, such as the Docker engine's.
    Unix(PathBuf),
}

impl std::str::FromStr for Upstream {
    type Err = Error;

    /// `tcp:HOST:PORT` (or `HOST:PORT`) and `unix:PATH`.
    ///
    /// ```
    /// use knotless_link::Upstream;
    /// assert_eq!("unix:/run/d.sock".parse::<Upstream>().unwrap(), Upstream::Unix("/run/d.sock".into()));
    /// assert_eq!("tcp:127.0.0.1:6443".parse::<Upstream>().unwrap(), Upstream::Tcp("127.0.0.1:6443".into()));
    /// assert!("unix:".parse::<Upstream>().is_err());
    /// ```
    fn from_str(text: &str) -> Result<Self, Error> {
        let bad = || Error::Upstream(text.to_string());
        if let Some(path) = text.strip_prefix("unix:") {
            return (!path.is_empty())
                .then(|| Upstream::Unix(path.into()))
                .ok_or_else(bad);
        }
        let addr = text.strip_prefix("tcp:").unwrap_or(text);
        match addr.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(Upstream::Tcp(addr.to_string()))
            }
            _ => Err(bad()),
        }
    }
}

/// How the link behaves in each direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    /// How long a byte takes from one end to the other: half the round trip.
    pub one_way_delay: Duration,
    /// The bandwidth cap of each direction; `None` for none.
    pub bytes_per_second: Option<u64>,
}

impl Shape {
    /// What may be in flight in one direction before the relay stops
    /// reading: twice the bandwidth-delay product, at least 256 KiB and
    /// at most 16 MiB; 4 MiB without a cap.
    pub fn window(&self) -> usize {
        let bdp = match self.bytes_per_second {
            Some(rate) => {
                let round_trip = self.one_way_delay.saturating_mul(2);
                (rate as f64 * round_trip.as_secs_f64() * 2.0) as u64
            }
            None => 4 << 20,
        };
        usize::try_from(bdp.clamp(256 << 10, 16 << 20)).unwrap_or(16 << 20)
    }

    /// How long `bytes` take to leave at the cap's rate.
    fn serialization(&self, bytes: usize) -> Duration {
        match self.bytes_per_second {
            Some(rate) if rate > 0 => Duration::from_secs_f64(bytes as f64 / rate as f64),
            _ => Duration::ZERO,
        }
    }
}

/// What went wrong setting a link up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The upstream is not `tcp:HOST:PORT` or `unix:PATH`.
    #[error("upstream {0:?} is neither tcp:HOST:PORT nor unix:PATH")]
    Upstream(String),
    /// The listening socket could not be made.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// Where.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// Counters of a link, for a test to check what went through it.
#[derive(Debug, Default)]
pub struct Stats {
    connections: AtomicU64,
    upstream_bytes: AtomicU64,
    downstream_bytes: AtomicU64,
    max_in_flight: AtomicU64,
}

impl Stats {
    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
    /// Bytes carried towards the upstream, and back from it.
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.upstream_bytes.load(Ordering::Relaxed),
            self.downstream_bytes.load(Ordering::Relaxed),
        )
    }
    /// The most bytes that were in flight in one direction of one
    /// connection at once: never more than the [`Shape::window`].
    pub fn max_in_flight(&self) -> u64 {
        self.max_in_flight.load(Ordering::Relaxed)
    }
}

/// A running link: connections to [`Link::addr`] reach the upstream
/// through it. Dropping it stops it and cuts its connections.
pub struct Link {
    addr: SocketAddr,
    stats: Arc<Stats>,
    task: JoinHandle<()>,
}

impl Link {
    /// Listens on a free loopback port.
    ///
    /// # Errors
    /// [`Error::Listen`] when no port could be had.
    pub async fn start(upstream: Upstream, shape: Shape) -> Result<Link, Error> {
        Link::start_on("127.0.0.1:0", upstream, shape).await
    }

    /// Listens on `listen` (`host:port`, port 0 for any).
    ///
    /// # Errors
    /// [`Error::Listen`] when it cannot.
    pub async fn start_on(listen: &str, upstream: Upstream, shape: Shape) -> Result<Link, Error> {
        let failed = |source| Error::Listen {
            addr: listen.to_string(),
            source,
        };
        let listener = TcpListener::bind(listen).await.map_err(failed)?;
        let addr = listener.local_addr().map_err(failed)?;
        let stats = Arc::new(Stats::default());
        let task = tokio::spawn(serve(listener, upstream, shape, stats.clone()));
        Ok(Link { addr, stats, task })
    }

    /// Where to connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// What went through it so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: TcpListener, upstream: Upstream, shape: Shape, stats: Arc<Stats>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let _ = client.set_nodelay(true);
                stats.connections.fetch_add(1, Ordering::Relaxed);
                connections.spawn(connection(client, upstream.clone(), shape, stats.clone()));
            }
            // Reap the ended ones; dropping the set (the task aborted)
            // cuts the rest.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

async fn connection(client: TcpStream, upstream: Upstream, shape: Shape, stats: Arc<Stats>) {
    let accepted = Instant::now();
    let (client_in, client_out) = client.into_split();
    // The handshake: the client's first bytes leave a round trip after
    // its connect began.
    let first_departure = accepted + shape.one_way_delay.saturating_mul(2);
    match upstream {
        Upstream::Tcp(addr) => {
            let Ok(server) = TcpStream::connect(&addr).await else {
                tracing::debug!(%addr, "the link's upstream refused");
                return;
            };
            let _ = server.set_nodelay(true);
            let (server_in, server_out) = server.into_split();
            both(
                (client_in, server_out),
                (server_in, client_out),
                shape,
                first_departure,
                &stats,
            )
            .await;
        }
        Upstream::Unix(path) => {
            let Ok(server) = UnixStream::connect(&path).await else {
                tracing::debug!(path = %path.display(), "the link's upstream refused");
                return;
            };
            let (server_in, server_out) = server.into_split();
            both(
                (client_in, server_out),
                (server_in, client_out),
                shape,
                first_departure,
                &stats,
            )
            .await;
        }
    }
}

/// Carries both directions until each has ended; an error in one (a
/// reset) ends both, as it would end a TCP connection.
async fn both<R1, W1, R2, W2>(
    up: (R1, W1),
    down: (R2, W2),
    shape: Shape,
    first_departure: Instant,
    stats: &Stats,
) where
    R1: AsyncRead + Unpin,
    W1: AsyncWrite + Unpin,
    R2: AsyncRead + Unpin,
    W2: AsyncWrite + Unpin,
{
    let upstream = direction(up.0, up.1, shape, first_departure, stats, Towards::Upstream);
    let downstream = direction(
        down.0,
        down.1,
        shape,
        Instant::now(),
        stats,
        Towards::Downstream,
    );
    tokio::pin!(upstream, downstream);
    let (mut up_done, mut down_done) = (false, false);
    while !(up_done && down_done) {
        tokio::select! {
            ok = &mut upstream, if !up_done => { if !ok { return; } up_done = true; }
            ok = &mut downstream, if !down_done => { if !ok { return; } down_done = true; }
        }
    }
}

#[derive(Clone, Copy)]
enum Towards {
    Upstream,
    Downstream,
}

/// The largest piece read at once: small enough that the cap's pacing is
/// smooth, large enough to keep the relay's own cost low.
const CHUNK: usize = 16 << 10;

/// Carries one direction: `false` when it broke rather than ended.
async fn direction<R, W>(
    mut from: R,
    mut to: W,
    shape: Shape,
    first_departure: Instant,
    stats: &Stats,
    towards: Towards,
) -> bool
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let window = shape.window();
    let credit = Semaphore::new(window);
    let in_flight = AtomicU64::new(0);
    // Arrival time and bytes; an empty piece is the sender's end of file.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reading = async {
        let mut next_free = first_departure;
        let mut buf = vec![0u8; CHUNK];
        loop {
            let Ok(permit) = credit.acquire_many(CHUNK as u32).await else {
                return false;
            };
            let n = match from.read(&mut buf).await {
                Ok(n) => n,
                Err(_) => return false,
            };
            // Only what was read stays taken; the writer gives it back.
            permit.forget();
            credit.add_permits(CHUNK - n);
            let departure = next_free.max(Instant::now()) + shape.serialization(n);
            next_free = departure;
            let arrival = departure + shape.one_way_delay;
            if n == 0 {
                let _ = tx.send((arrival, Vec::new()));
                return true;
            }
            let now = in_flight.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
            stats.max_in_flight.fetch_max(now, Ordering::Relaxed);
            if tx.send((arrival, buf[..n].to_vec())).is_err() {
                return false;
            }
        }
    };
    let writing = async {
        while let Some((arrival, piece)) = rx.recv().await {
            // The link's delay is the fault this relay exists to make.
            tokio::time::sleep_until(arrival).await;
            if piece.is_empty() {
                let _ = to.shutdown().await;
                return true;
            }
            if to.write_all(&piece).await.is_err() {
                return false;
            }
            in_flight.fetch_sub(piece.len() as u64, Ordering::Relaxed);
            credit.add_permits(piece.len());
            let counter = match towards {
                Towards::Upstream => &stats.upstream_bytes,
                Towards::Downstream => &stats.downstream_bytes,
            };
            counter.fetch_add(piece.len() as u64, Ordering::Relaxed);
        }
        false
    };
    tokio::pin!(reading, writing);
    let mut read_ok = None;
    loop {
        tokio::select! {
            ok = &mut reading, if read_ok.is_none() => {
                if !ok {
                    return false;
                }
                read_ok = Some(true);
            }
            ok = &mut writing => return ok,
        }
    }
}
