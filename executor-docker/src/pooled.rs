//! Connections kept for a remote engine.
//!
//! bollard's own clients keep no idle connection: every call opens one,
//! so across a long link each call also waits for TCP's handshake, two
//! round trips where one would do (a step, an exec's create and start,
//! took five over a 50 ms link). For a `tcp://` engine reached without
//! TLS, this transport keeps connections in a pool, and
//! [`BollardEngine`](crate::BollardEngine) keeps one warm for the next
//! exec's start, whose upgrade takes its connection out of the pool.

use std::sync::Arc;
use std::time::Duration;

use bollard::{BollardRequest, Docker};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// How long an idle connection is kept: longer than most steps, shorter
/// than the idle timeouts of the proxies and load balancers on the way.
const IDLE: Duration = Duration::from_secs(50);

/// A client for the plain-HTTP engine at `host` (`tcp://HOST:PORT`) that
/// keeps its connections.
pub(crate) fn plain_http(host: &str, timeout_secs: u64) -> Result<Docker, bollard::errors::Error> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client = Arc::new(
        Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE)
            .build(connector),
    );
    let addr = format!(
        "http://{}",
        host.trim_start_matches("tcp://")
            .trim_start_matches("http://")
    );
    Docker::connect_with_custom_transport(
        move |req: BollardRequest| {
            let client = Arc::clone(&client);
            Box::pin(async move {
                client
                    .request(req)
                    .await
                    .map_err(bollard::errors::Error::from)
            })
        },
        Some(addr),
        timeout_secs,
        bollard::API_DEFAULT_VERSION,
    )
}
