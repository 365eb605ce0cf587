use super::*;

#[test]
fn the_registry_is_the_first_part_only_when_it_is_a_host() {
    for (image, registry) in [
        ("busybox", "docker.io"),
        ("library/busybox:1", "docker.io"),
        ("team/app@sha256:abc", "docker.io"),
        ("localhost/app", "localhost"),
        ("127.0.0.1:5000/team/app:1", "127.0.0.1:5000"),
        ("ghcr.io/team/app", "ghcr.io"),
    ] {
        assert_eq!(registry_of(image), registry, "{image}");
    }
}

#[tokio::test]
async fn auths_are_found_by_host_whatever_the_key_looks_like() {
    let config = r#"{"auths": {
        "https://index.docker.io/v1/": {"auth": "aHViOmh1YnBhc3M="},
        "http://127.0.0.1:5000/v2/": {"auth": "dTpwOnc="},
        "ghcr.io": {"identitytoken": "tok"},
        "quay.io": {"username": "q", "password": "qp"}
    }}"#;
    let auth = RegistryAuth::from_json(config, "c.json").unwrap();
    let hub = auth.credentials_for("busybox").await.unwrap().unwrap();
    assert_eq!(hub.server, DOCKER_HUB_KEY);
    assert!(
        matches!(hub.secret, Secret::Password { ref username, ref password } if username == "hub" && password == "hubpass")
    );
    let local = auth
        .credentials_for("127.0.0.1:5000/x:1")
        .await
        .unwrap()
        .unwrap();
    // A password may hold a colon: only the first one splits.
    assert!(
        matches!(local.secret, Secret::Password { ref username, ref password } if username == "u" && password == "p:w")
    );
    assert_eq!(local.server, "127.0.0.1:5000");
    let token = auth.credentials_for("ghcr.io/a/b").await.unwrap().unwrap();
    assert_eq!(token.secret, Secret::IdentityToken("tok".into()));
    let quay = auth.credentials_for("quay.io/a/b").await.unwrap().unwrap();
    assert!(matches!(quay.secret, Secret::Password { ref username, .. } if username == "q"));
    assert!(auth
        .credentials_for("other.example/a")
        .await
        .unwrap()
        .is_none());
}

#[tokio::test]
async fn nothing_secret_is_in_debug_or_in_errors() {
    let config = r#"{"auths": {"r.example": {"auth": "not base64 s3cret"}}}"#;
    let auth = RegistryAuth::from_json(config, "c.json").unwrap();
    let err = auth
        .credentials_for("r.example/a")
        .await
        .unwrap_err()
        .to_string();
    assert!(!err.contains("s3cret"), "{err}");
    assert!(err.contains("docker login r.example"), "{err}");
    let good = RegistryAuth::from_json(
        r#"{"auths": {"r.example": {"auth": "dXNlcjpzM2NyZXQ="}}}"#,
        "c.json",
    )
    .unwrap();
    let creds = good.credentials_for("r.example/a").await.unwrap().unwrap();
    assert!(!format!("{creds:?} {good:?}").contains("s3cret"));
    let bad = RegistryAuth::from_json(
        r#"{"auths": {"r": {"auth": "s3cret"}"#,
        "/home/u/.docker/config.json",
    )
    .unwrap_err()
    .to_string();
    assert!(
        bad.contains("/home/u/.docker/config.json") && !bad.contains("s3cret"),
        "{bad}"
    );
}

#[tokio::test]
async fn a_missing_helper_is_named_with_what_to_do() {
    let auth = RegistryAuth::from_json(
        r#"{"credHelpers": {"r.example": "knotless-absent"}}"#,
        "c.json",
    )
    .unwrap();
    let err = auth
        .credentials_for("r.example/a")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("docker-credential-knotless-absent") && err.contains("PATH"),
        "{err}"
    );
    // A helper for another registry is not asked.
    assert!(auth.credentials_for("busybox").await.unwrap().is_none());
}

#[tokio::test]
async fn an_auth_without_a_colon_is_not_echoed() {
    use base64::Engine as _;
    let value = "s3cret-without-a-colon";
    let encoded = base64::engine::general_purpose::STANDARD.encode(value);
    let config = format!(r#"{{"auths": {{"r.example": {{"auth": "{encoded}"}}}}}}"#);
    let auth = RegistryAuth::from_json(&config, "c.json").unwrap();
    let err = auth
        .credentials_for("r.example/a")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("docker login r.example"), "{err}");
    assert!(!err.contains(value) && !err.contains(&encoded), "{err}");
}

/// What a credential helper prints, when it fails or answers with
/// something other than its JSON, is never in the error: it may be the
/// secret. Helpers of the test's own, on a PATH that starts with them.
#[tokio::test]
async fn a_helpers_answer_is_never_echoed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    for (name, script) in [
        (
            "knotless-leaky-fails",
            "echo s3cret-leaked; echo s3cret-leaked >&2; exit 1",
        ),
        ("knotless-leaky-text", "echo 'user s3cret-leaked'"),
        (
            "knotless-leaky-json",
            r#"echo '{"Username": "u", "Secret": 7, "s3cret-leaked": 1}'"#,
        ),
    ] {
        let path = dir.path().join(format!("docker-credential-{name}"));
        std::fs::write(&path, format!("#!/bin/sh\n{script}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Only this test runs helpers; a PATH with one folder more is still
    // every other test's PATH.
    std::env::set_var("PATH", path);
    for name in [
        "knotless-leaky-fails",
        "knotless-leaky-text",
        "knotless-leaky-json",
    ] {
        let config = format!(r#"{{"credHelpers": {{"r.example": "{name}"}}}}"#);
        let auth = RegistryAuth::from_json(&config, "c.json").unwrap();
        let err = auth
            .credentials_for("r.example/a")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("docker-credential-{name}")), "{err}");
        assert!(!err.contains("s3cret"), "{name}: {err}");
    }
}

#[tokio::test]
async fn a_helper_name_with_a_slash_runs_nothing() {
    // A name that leads from the current folder to a program that is
    // not a helper: refused before anything is run.
    let auth = RegistryAuth::from_json(
        r#"{"credHelpers": {"r.example": "../../../../../../bin/true"}}"#,
        "c.json",
    )
    .unwrap();
    let err = auth
        .credentials_for("r.example/a")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not a helper's name"), "{err}");
}
