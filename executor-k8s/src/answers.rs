//! What the API server's answers (and the lack of one) mean for a call:
//! whether another try may pass, and the error the call becomes.

use std::future::Future;
use std::time::Duration;

use executor_core::outage::ride_out;
use executor_core::ExecutorError;

use crate::access::Permission;
use crate::settling::Settling;

/// The HTTP status the server answered with, for an API call or an
/// exec's upgrade.
fn status_of(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        kube::Error::UpgradeConnection(kube::client::UpgradeConnectionError::ProtocolSwitch(
            code,
        )) => Some(code.as_u16()),
        _ => None,
    }
}

/// Whether the server did not answer, or answered what a later try may
/// not get (429, 5xx).
pub(crate) fn retryable(err: &kube::Error) -> bool {
    if let Some(code) = status_of(err) {
        return code == 429 || code >= 500;
    }
    match err {
        // A dropped or refused connection may pass next time; a TLS
        // handshake the server refused for a certificate will not.
        kube::Error::HyperError(_) | kube::Error::Service(_) => {
            let said = describe(err).to_ascii_lowercase();
            !(said.contains("fatal alert") || said.contains("certificate"))
        }
        _ => false,
    }
}

pub(crate) fn describe(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) => format!("{} (HTTP {}, {})", s.message, s.code, s.reason),
        other => {
            let mut msg = other.to_string();
            let mut source = std::error::Error::source(other);
            while let Some(s) = source {
                msg.push_str(&format!(": {s}"));
                source = s.source();
            }
            msg
        }
    }
}

/// The namespace a 404 says does not exist, in a real server's words:
/// `namespaces "ci" not found`.
fn missing_namespace(err: &kube::Error) -> Option<String> {
    let kube::Error::Api(status) = err else {
        return None;
    };
    if status.code != 404 {
        return None;
    }
    let name = status
        .message
        .strip_prefix("namespaces \"")?
        .strip_suffix("\" not found")?;
    (!name.is_empty() && !name.contains('"')).then(|| name.to_string())
}

pub(crate) fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 404)
}

/// Whether the server said the object already exists: a create whose
/// first try was done though its answer was lost.
pub(crate) fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(s) if s.code == 409)
}

/// How one cluster's calls are judged: the window within which a call is
/// tried again, and what the server proved and when it last went
/// unanswered ([`Settling`]).
#[derive(Clone, Copy)]
pub(crate) struct Judge<'a> {
    pub(crate) within: Duration,
    pub(crate) settling: &'a Settling,
}

impl Judge<'_> {
    /// The error a failed call becomes: `unreachable` when a later call
    /// may succeed (no answer, 429, 5xx, or a 403 the settling server
    /// gives for one of `needs`), else the server's answer as it stands.
    pub(crate) fn failed(
        self,
        what: &str,
        needs: &[Permission],
        err: kube::Error,
    ) -> ExecutorError {
        let described = if retryable(&err) {
            self.settling.unanswered();
            ExecutorError::unreachable(what, describe(&err))
        } else if let Some(since) = (status_of(&err) == Some(403))
            .then(|| self.settling.forgives(needs, self.within))
            .flatten()
        {
            let said = format!(
                "the API server refuses what it granted at the run's preflight ({}), {:.1}s \
                 after a call to it went unanswered, as a restarted server does until its RBAC \
                 roles have loaded",
                describe(&err),
                since.as_secs_f64()
            );
            if self.settling.first_refusal() {
                tracing::warn!(what, %said, "riding out a restarted API server's refusals");
                executor_core::outage::notice(&format!(
                    "{what}: {said}; waiting up to {}s for it to grant it again",
                    self.within.as_secs()
                ));
            }
            ExecutorError::unreachable(what, said)
        } else if let Some(namespace) = missing_namespace(&err) {
            ExecutorError::InvalidInput(format!(
                "{what}: the namespace {namespace} does not exist on the cluster ({}); create it (kubectl create namespace {namespace}) or name another with KubeconfigSource::namespace",
                describe(&err)
            ))
        } else {
            ExecutorError::backend(what, describe(&err))
        };
        described.with_source(err)
    }

    /// Repeats `call` while the server does not answer (429, 5xx, refused
    /// or dropped connections, a settling server's 403 for one of
    /// `needs`) for up to the window: see [`ride_out`]; the error is the
    /// call's, classified by [`Judge::failed`].
    pub(crate) async fn retry<T, F, Fut>(
        self,
        what: &str,
        needs: &[Permission],
        mut call: F,
    ) -> Result<T, ExecutorError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        ride_out(what, self.within, || {
            let answer = call();
            async move { answer.await.map_err(|e| self.failed(what, needs, e)) }
        })
        .await
    }
}
