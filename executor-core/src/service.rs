//! Service containers: a database, a cache or a web server beside the
//! steps, started with the environment and ready before the first step.
//!
//! ```
//! use executor_core::{Readiness, RunSpec, Service, Step};
//! let spec = RunSpec::new("it", "did:plc:r", ".", "out")
//!     .image("busybox:local")
//!     .service(
//!         Service::new("web", "busybox:local")
//!             .command("httpd -f -p 8080 -h /srv")
//!             .ready(Readiness::Tcp(8080)),
//!     )
//!     .step(Step::new("get", "wget -qO- http://web:8080/"));
//! spec.validate().unwrap();
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// When a service counts as ready.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Readiness {
    /// Something listens on this TCP port in the service's network
    /// namespace (read from the kernel's socket table, no tool needed).
    Tcp(u16),
    /// This script, run as `sh -ec` in the service's container, exits 0.
    Exec(String),
}

/// One service container of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Service {
    /// Its name: the host name steps reach it by, a DNS label
    /// (lower-case letters, digits and `-`, at most 63).
    pub name: String,
    /// Its image.
    pub image: String,
    /// A script run as `sh -ec` in place of the image's own command.
    pub command: Option<String>,
    /// Its variables.
    pub env: Vec<(String, String)>,
    /// When it is ready; `None`: as soon as it runs.
    pub ready: Option<Readiness>,
}

/// Default limit of a service's start and readiness: two minutes, long
/// enough for a database to initialise its files.
pub const DEFAULT_SERVICE_TIMEOUT: Duration = Duration::from_secs(120);

/// How many of a service's last lines a failure names.
pub const SERVICE_TAIL_LINES: usize = 20;

impl Service {
    /// A service running `image`'s own command, ready once it runs.
    pub fn new(name: impl Into<String>, image: impl Into<String>) -> Self {
        Service {
            name: name.into(),
            image: image.into(),
            command: None,
            env: Vec::new(),
            ready: None,
        }
    }

    /// Sets [`Service::command`].
    pub fn command(mut self, script: impl Into<String>) -> Self {
        self.command = Some(script.into());
        self
    }

    /// Adds one variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Sets [`Service::ready`].
    pub fn ready(mut self, ready: Readiness) -> Self {
        self.ready = Some(ready);
        self
    }

    /// Checks the name, the image, the variables and the readiness.
    ///
    /// # Errors
    /// A sentence naming the service and what is wrong.
    pub fn check(&self) -> Result<(), String> {
        let name = &self.name;
        let dns_label = !name.is_empty()
            && name.len() <= 63
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !name.starts_with('-')
            && !name.ends_with('-');
        if !dns_label || name == "localhost" {
            return Err(format!(
                "service name {name:?} is not a host name steps can reach it by: use lower-case \
                 letters, digits and '-' (at most 63), not localhost"
            ));
        }
        if self.image.trim().is_empty() || self.image.chars().any(char::is_whitespace) {
            return Err(format!(
                "service {name}: image {:?} is not an image reference",
                self.image
            ));
        }
        for (key, _) in &self.env {
            crate::validate_env_key(key).map_err(|e| format!("service {name}: {e}"))?;
        }
        let scripts = self.command.iter().chain(match &self.ready {
            Some(Readiness::Exec(script)) => Some(script),
            _ => None,
        });
        for script in scripts {
            if script.contains('\0') {
                return Err(format!("service {name}: a script has a NUL byte"));
            }
        }
        if self.ready == Some(Readiness::Tcp(0)) {
            return Err(format!("service {name}: tcp port 0 is no port"));
        }
        Ok(())
    }
}

/// `outcome` of a step, a failed step's reason followed by what `stopped`
/// says of the services that ended during it. `stopped` is awaited only
/// for a failed step: a dead database is why a test step fails, and a
/// step that succeeded costs no look at the services.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use executor_core::CommandOutcome;
/// use executor_core::service::naming_stopped;
/// let failed = Ok(CommandOutcome::Exited { code: 1, reason: None });
/// let named = naming_stopped(failed, async { Some("service db exited 137 during the step".into()) }).await;
/// assert!(matches!(named, Ok(CommandOutcome::Exited { code: 1, reason: Some(r) }) if r.contains("db")));
/// # }
/// ```
///
/// # Errors
/// None of its own: an `outcome` that is an error is returned as it is.
pub async fn naming_stopped(
    outcome: Result<crate::CommandOutcome, crate::ExecutorError>,
    stopped: impl std::future::Future<Output = Option<String>>,
) -> Result<crate::CommandOutcome, crate::ExecutorError> {
    match outcome {
        Ok(crate::CommandOutcome::Exited { code, reason }) if code != 0 => {
            let reason = match (reason, stopped.await) {
                (Some(r), Some(s)) => Some(format!("{r}; {s}")),
                (r, s) => r.or(s),
            };
            Ok(crate::CommandOutcome::Exited { code, reason })
        }
        other => other,
    }
}

/// What one look at a service that is not ready yet found
/// ([`until_ready`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// Its check passed, or it has none and runs.
    Ready,
    /// It ended: why, as its failure names it (`exited 1 before it was
    /// ready`).
    Ended(String),
    /// Not yet: what its check said.
    NotYet(String),
}

/// Looks at a service with `look` until it is ready (`Ok(None)`), it
/// ended, or `limit` passed (`Ok(Some(why))`, naming what the last check
/// said). Nothing tells when a port opens, so it looks again, less often
/// the longer it takes: after 20 ms, doubling to one second.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::time::Duration;
/// use executor_core::service::{until_ready, Look};
/// let mut looks = 0;
/// let ready = until_ready(Duration::from_secs(5), || {
///     looks += 1;
///     let look = if looks < 3 { Look::NotYet("exited 1".into()) } else { Look::Ready };
///     async move { Ok(look) }
/// })
/// .await;
/// assert_eq!(ready.unwrap(), None);
/// let never = until_ready(Duration::ZERO, || async { Ok(Look::NotYet("exited 1".into())) }).await;
/// assert_eq!(never.unwrap().unwrap(), "not ready within 0ns (exited 1)");
/// # }
/// ```
///
/// # Errors
/// The first error `look` returns.
pub async fn until_ready<F, Fut>(
    limit: Duration,
    mut look: F,
) -> Result<Option<String>, crate::ExecutorError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Look, crate::ExecutorError>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    let mut pause = Duration::from_millis(20);
    loop {
        match look().await? {
            Look::Ready => return Ok(None),
            Look::Ended(why) => return Ok(Some(why)),
            Look::NotYet(last) => {
                if tokio::time::Instant::now() + pause > deadline {
                    return Ok(Some(format!("not ready within {limit:?} ({last})")));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// The shell test, with only `sh`'s own builtins, that something listens
/// on TCP `port` in the namespace it runs in: a `LISTEN` (state `0A`) row
/// for the port in `/proc/net/tcp` or `/proc/net/tcp6`.
///
/// ```
/// let probe = executor_core::service::listening_probe(5432);
/// assert!(probe.contains(":1538")); // 5432 in hex
/// ```
pub fn listening_probe(port: u16) -> String {
    format!(
        "for t in /proc/net/tcp /proc/net/tcp6; do [ -r \"$t\" ] || continue; \
         while read -r _ l _ s _; do case \"$l $s\" in *:{port:04X}\\ 0A) exit 0;; esac; done < \"$t\"; done; exit 1"
    )
}
