//! Connecting as the docker CLI does: `DOCKER_HOST`, TLS from
//! `DOCKER_CERT_PATH`, the API version negotiated, the round trip timed.

use bollard::Docker;
use executor_core::ExecutorError;

use super::BollardEngine;

/// Where the docker CLI looks when `DOCKER_HOST` is not set.
const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

impl BollardEngine {
    /// Connects as the docker CLI does (`DOCKER_HOST`, else the default
    /// socket) and negotiates the API version, which is also the check
    /// that the engine answers.
    ///
    /// # Errors
    /// `Backend` of kind `unreachable` naming `DOCKER_HOST` or the socket when
    /// the engine does not answer; `InvalidInput` for a `DOCKER_HOST` it cannot
    /// use.
    pub async fn connect() -> Result<Self, ExecutorError> {
        Self::connect_to(&docker_host()).await
    }

    /// Connects to the engine at `host` (as `DOCKER_HOST` would name it:
    /// `unix:///path`, `tcp://host:port`), TLS as the docker CLI decides.
    ///
    /// # Errors
    /// As [`BollardEngine::connect`].
    pub async fn connect_to(host: &str) -> Result<Self, ExecutorError> {
        let mut engine = Self::open(host).await?;
        // On the connection the version call left open: the link's round
        // trip, which decides whether transfers are compressed.
        let pinged = std::time::Instant::now();
        engine
            .docker
            .ping()
            .await
            .map_err(|e| unreachable(host, &e))?;
        let first = pinged.elapsed();
        // One slow answer is not yet a slow link: the least of a few is.
        engine.round_trip = if first < executor_core::tar::AUTO_ROUND_TRIP {
            first
        } else {
            let more = engine.timing().await.unwrap_or(first);
            first.min(if more.is_zero() { first } else { more })
        };
        tracing::debug!(round_trip = ?engine.round_trip, %host, "the engine's round trip");
        Ok(engine)
    }

    /// [`BollardEngine::connect_to`] without timing the round trip: the
    /// API version negotiated, which is the check that the engine answers.
    ///
    /// # Errors
    /// As [`BollardEngine::connect`].
    pub(crate) async fn open(host: &str) -> Result<Self, ExecutorError> {
        let schemes = ["unix://", "tcp://", "http://", "https://"];
        if !schemes.iter().any(|s| host.starts_with(s)) {
            let hint = if host.starts_with("ssh://") {
                "ssh:// is not spoken here; forward the engine's socket (ssh -L) and use unix:// or tcp://"
            } else {
                "write it as the docker CLI takes it: unix:///var/run/docker.sock or tcp://HOST:2375"
            };
            return Err(ExecutorError::InvalidInput(format!(
                "DOCKER_HOST {host:?} names no engine it can reach: {hint}"
            )));
        }
        let mut pooled = false;
        let docker = match tls_files(host)? {
            Some(tls) => Docker::connect_with_ssl(
                host,
                &tls.key,
                &tls.cert,
                &tls.ca,
                CONNECT_TIMEOUT_SECS,
                bollard::API_DEFAULT_VERSION,
            ),
            None if host.starts_with("tcp://") || host.starts_with("http://") => {
                tracing::warn!(%host, "the engine is reached over plain HTTP (no DOCKER_TLS_VERIFY)");
                pooled = true;
                crate::pooled::plain_http(host, CONNECT_TIMEOUT_SECS)
            }
            None => Docker::connect_with_host(host),
        }
        .map_err(|e| unreachable(host, &e))?;
        let docker = docker
            .negotiate_version()
            .await
            .map_err(|e| unreachable(host, &e))?;
        Ok(BollardEngine {
            docker,
            reconnect_timeout: crate::DockerOptions::default().reconnect_timeout,
            round_trip: std::time::Duration::ZERO,
            pooled,
            registry_auth: crate::RegistryAuth::default(),
        })
    }

    /// Times the engine's round trip (the least of a few `/_ping`s,
    /// [`least_round_trip`](executor_core::tar::least_round_trip)) in the
    /// background, for a caller that need not wait for it; zero when no
    /// ping was answered.
    pub(crate) fn timing(&self) -> tokio::task::JoinHandle<std::time::Duration> {
        let docker = self.docker.clone();
        tokio::spawn(async move {
            executor_core::tar::least_round_trip("the engine's /_ping", || docker.ping()).await
        })
    }

    /// The engine's round trip, as timed at connect (one `/_ping`).
    pub fn round_trip(&self) -> std::time::Duration {
        self.round_trip
    }

    /// How long a call the engine does not answer (refused or dropped
    /// connections, 429, 502-504) is tried again before it fails
    /// ([`DockerOptions::reconnect_timeout`](crate::DockerOptions::reconnect_timeout)).
    /// Calls that are safe to repeat are: inspections, lists, removals,
    /// creating an exec.
    pub fn reconnect_timeout(mut self, within: std::time::Duration) -> Self {
        self.reconnect_timeout = within;
        self
    }

    /// The credentials pulls send to each registry (none by default: every
    /// pull is anonymous), e.g. [`RegistryAuth::from_docker_config`](crate::RegistryAuth::from_docker_config).
    pub fn registry_auth(mut self, auth: crate::RegistryAuth) -> Self {
        self.registry_auth = auth;
        self
    }
}

/// The read and write timeout of the engine connection, as bollard's default.
const CONNECT_TIMEOUT_SECS: u64 = 120;

/// The client certificate, its key and the CA of a TLS engine.
struct TlsFiles {
    ca: std::path::PathBuf,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
}

/// As the docker CLI: a `tcp://` (or `https://`) engine is reached over
/// TLS when `DOCKER_TLS_VERIFY` is set to anything but the empty string,
/// with `ca.pem`, `cert.pem` and `key.pem` from `DOCKER_CERT_PATH` (else
/// `~/.docker`); the server's certificate is verified against `ca.pem`.
fn tls_files(host: &str) -> Result<Option<TlsFiles>, ExecutorError> {
    let verify = std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty());
    let remote = host.starts_with("tcp://") || host.starts_with("https://");
    if !remote || !(verify || host.starts_with("https://")) {
        return Ok(None);
    }
    let dir = match std::env::var_os("DOCKER_CERT_PATH").filter(|p| !p.is_empty()) {
        Some(dir) => std::path::PathBuf::from(dir),
        None => match std::env::var_os("HOME") {
            Some(home) => std::path::PathBuf::from(home).join(".docker"),
            None => {
                return Err(ExecutorError::InvalidInput(
                    "DOCKER_TLS_VERIFY is set but neither DOCKER_CERT_PATH nor HOME is, \
                     so there is no folder to take ca.pem, cert.pem and key.pem from"
                        .into(),
                ))
            }
        },
    };
    let files = TlsFiles {
        ca: dir.join("ca.pem"),
        cert: dir.join("cert.pem"),
        key: dir.join("key.pem"),
    };
    for file in [&files.ca, &files.cert, &files.key] {
        if let Err(err) = std::fs::metadata(file) {
            return Err(ExecutorError::InvalidInput(format!(
                "the TLS engine at {host} needs {}: {err}; DOCKER_CERT_PATH (default ~/.docker) \
                 must hold ca.pem, cert.pem and key.pem, as for the docker CLI",
                file.display()
            )));
        }
    }
    Ok(Some(files))
}

/// Where the engine is: `DOCKER_HOST`, else the default socket.
pub(crate) fn docker_host() -> String {
    std::env::var("DOCKER_HOST").unwrap_or_else(|_| DEFAULT_HOST.to_string())
}

/// An engine that did not answer at `host`, named with what to do.
fn unreachable(host: &str, err: &dyn std::fmt::Display) -> ExecutorError {
    ExecutorError::unreachable(
        "connecting to the container engine",
        format!("no Docker engine answers at {host} ({err}); start one or point DOCKER_HOST at it"),
    )
}
