//! Pulling an image, with the credentials of its registry.

use bollard::query_parameters::CreateImageOptions;
use bollard::Docker;
use executor_core::ExecutorError;
use futures_util::StreamExt;

use crate::RegistryAuth;

/// Pulls `image`, sending the credentials `auth` has for its registry.
pub(super) async fn pull(
    docker: &Docker,
    auth: &RegistryAuth,
    image: &str,
) -> Result<(), ExecutorError> {
    let (repo, tag) = pull_reference(image);
    let options = CreateImageOptions {
        from_image: Some(repo.to_string()),
        tag: Some(tag.to_string()),
        ..Default::default()
    };
    let credentials = auth.credentials_for(image).await?;
    let sent = credentials.is_some();
    let mut progress = docker.create_image(
        Some(options),
        None,
        credentials.as_ref().map(|c| c.to_bollard()),
    );
    while let Some(item) = progress.next().await {
        item.map_err(pull_failed(image, sent))?;
    }
    Ok(())
}

/// Whether a registry refused a pull for want of (valid) credentials, in
/// the words engines and registries use.
fn refused_for_credentials(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    [
        "unauthorized",
        "authentication required",
        "no basic auth credentials",
        "pull access denied",
        "denied: requested access",
    ]
    .iter()
    .any(|words| message.contains(words))
}

/// An image pull's failure: transient when the registry did not answer or
/// was overloaded, not when it answered that the image is missing or refused.
fn pull_failed(image: &str, sent: bool) -> impl Fn(bollard::errors::Error) -> ExecutorError + '_ {
    move |err| {
        let context = format!("pulling image {image}");
        let message = match &err {
            bollard::errors::Error::DockerResponseServerError {
                message,
                status_code,
            } => format!("{message} (HTTP {status_code})"),
            bollard::errors::Error::DockerStreamError { error } => error.clone(),
            // No answer from the engine itself.
            _ => return super::fail(context)(err),
        };
        let transient = executor_core::failure::transient_pull_error(&message);
        let message = if refused_for_credentials(&message) {
            let registry = crate::registry_auth::registry_of(image);
            let login = if registry == "docker.io" {
                "docker login".to_string()
            } else {
                format!("docker login {registry}")
            };
            if sent {
                format!("{message}; the credentials sent for {registry} were refused: log in again with `{login}`")
            } else {
                format!("{message}; no credentials were sent for {registry}: log in with `{login}` (they are read as the docker CLI reads them, from config.json in DOCKER_CONFIG or ~/.docker)")
            }
        } else {
            message
        };
        ExecutorError::image(context, &message, transient).with_source(err)
    }
}

/// What the engine's pull takes for `image`: the repository, and the tag
/// or, for a reference pinned by digest (`repo[:tag]@sha256:...`), the
/// digest, as the docker CLI sends them.
fn pull_reference(image: &str) -> (&str, &str) {
    match image.split_once('@') {
        Some((name, digest)) => (split_tag(name).0, digest),
        None => split_tag(image),
    }
}

/// `repo[:tag]`, where a `:` inside a registry host's port is not a tag.
fn split_tag(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, tag),
        _ => (image, "latest"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tags() {
        assert_eq!(super::split_tag("busybox"), ("busybox", "latest"));
        assert_eq!(
            super::split_tag("r:5000/busybox:1"),
            ("r:5000/busybox", "1")
        );
        assert_eq!(
            super::split_tag("r:5000/busybox"),
            ("r:5000/busybox", "latest")
        );
    }

    #[test]
    fn digests() {
        let digest = "sha256:0f0b1e5a3ea1a1a6c6ec1d3aa8d5e0e4e5f5e1f0e6e9c8f7b6a5d4c3b2a1f0e9";
        for (image, repo) in [
            (format!("busybox@{digest}"), "busybox"),
            (format!("busybox:1.36@{digest}"), "busybox"),
            (
                format!("r:5000/team/busybox@{digest}"),
                "r:5000/team/busybox",
            ),
        ] {
            assert_eq!(super::pull_reference(&image), (repo, digest), "{image}");
        }
        assert_eq!(super::pull_reference("busybox:1"), ("busybox", "1"));
    }

    #[test]
    fn refusals_for_credentials_are_told_from_other_failures() {
        for refused in [
            "Head \"http://127.0.0.1:5000/v2/private/manifests/1\": no basic auth credentials",
            "unauthorized: authentication required",
            "pull access denied for private/x, repository does not exist or may require 'docker login'",
        ] {
            assert!(super::refused_for_credentials(refused), "{refused}");
        }
        assert!(!super::refused_for_credentials("manifest unknown"));
    }

    #[test]
    fn pull_errors_are_transient_only_when_the_registry_did_not_answer() {
        for transient in [
            "Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io on 127.0.0.53:53: server misbehaving",
            "Get \"https://r.example/v2/\": net/http: TLS handshake timeout",
            "toomanyrequests: You have reached your pull rate limit.",
            "received unexpected HTTP status: 503 Service Unavailable",
        ] {
            assert!(executor_core::failure::transient_pull_error(transient), "{transient}");
        }
        for permanent in [
            "manifest for busybox:nope not found: manifest unknown: manifest unknown",
            "pull access denied for private/x, repository does not exist or may require 'docker login'",
            "invalid reference format",
            "something nobody has seen before",
        ] {
            assert!(!executor_core::failure::transient_pull_error(permanent), "{permanent}");
        }
    }
}
