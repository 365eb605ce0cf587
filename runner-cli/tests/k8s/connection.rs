//! Certificates, TLS verification and plain http

use super::*;

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_certificate_or_an_unreachable_server_is_exit_3() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "a\ttrue\n").unwrap();
    let bad = cluster
        .kubeconfig_with(KubeconfigAuth::StrangerCert)
        .unwrap();
    let run = |kubeconfig: PathBuf| {
        let mut cmd = cli(&kubeconfig);
        cmd.args([
            "run",
            "--executor",
            "k8s",
            "--image",
            "x",
            "--name",
            "n",
            "--runner",
            "did:plc:n",
        ])
        .arg("--workdir")
        .arg(dir.path())
        .arg("--steps-file")
        .arg(&steps)
        .arg("--result")
        .arg(dir.path().join("result.json"));
        cmd
    };
    let out = run(bad).output().await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains(cluster.url()));
    let refused = read_result(&dir.path().join("result.json"))
        .failure
        .unwrap();
    // A certificate the server does not know will not be known next time.
    assert_eq!(
        refused.kind,
        executor_core::FailureKind::Internal,
        "{refused:?}"
    );
    assert!(!refused.retryable);
    let kubeconfig_text = std::fs::read_to_string(cluster.kubeconfig()).unwrap();
    let url = cluster.url().to_string();
    cluster.shutdown().await;
    let gone = dir.path().join("kubeconfig");
    std::fs::write(&gone, kubeconfig_text).unwrap();
    let out = run(gone).output().await.unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&url));
    let unreachable = read_result(&dir.path().join("result.json"))
        .failure
        .unwrap();
    assert_eq!(unreachable.kind, executor_core::FailureKind::Unreachable);
    assert!(unreachable.retryable);
}

/// A kubeconfig that turns certificate checks off is refused unless the
/// user says so, and then the log says so too.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_skip_tls_verify_needs_the_flag_and_is_logged() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(cluster.kubeconfig()).unwrap();
    let insecure: String = text
        .lines()
        .map(|line| {
            if line.trim_start().starts_with("certificate-authority-data:") {
                "    insecure-skip-tls-verify: true".to_string()
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert_ne!(
        insecure, text,
        "the test cluster's kubeconfig has a CA to remove"
    );
    let kubeconfig = dir.path().join("insecure-kubeconfig");
    std::fs::write(&kubeconfig, insecure).unwrap();
    let run = |extra: &[&str], out: &str| {
        let mut cmd = example_run(&kubeconfig, "insecure", dir.path(), out);
        cmd.args(extra);
        cmd
    };
    let refused = run(&[], "refused").output().await.unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("insecure-skip-tls-verify")
            && stderr.contains("--insecure-skip-tls-verify"),
        "{stderr}"
    );
    assert!(cluster.jobs("default").is_empty());

    let accepted = run(&["--insecure-skip-tls-verify"], "accepted")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&accepted.stdout);
    assert_eq!(
        accepted.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    assert!(
        stdout.contains("==> warning: the API server's certificate is not verified"),
        "{stdout}"
    );
    cluster.shutdown().await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_x509_v1_client_certificate_is_named_with_how_to_reissue_it() {
    use base64::Engine as _;
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = issue_with_openssl(dir.path(), "v1user", false, false).await;
    let b64 =
        |p: &Path| base64::engine::general_purpose::STANDARD.encode(std::fs::read(p).unwrap());
    let kubeconfig: String = std::fs::read_to_string(cluster.kubeconfig())
        .unwrap()
        .lines()
        .map(|line| {
            let indent = &line[..line.len() - line.trim_start().len()];
            if line.trim_start().starts_with("client-certificate-data:") {
                format!("{indent}client-certificate-data: {}", b64(&cert))
            } else if line.trim_start().starts_with("client-key-data:") {
                format!("{indent}client-key-data: {}", b64(&key))
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = dir.path().join("v1-kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    let out = example_run(&path, "v1", dir.path(), "out")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for said in [
        "X.509 v1",
        "only X.509 v3",
        "client-certificate-data of user",
        "openssl x509 -req",
        "CertificateSigningRequest",
    ] {
        assert!(stderr.contains(said), "{said}: {stderr}");
    }
    cluster.shutdown().await;
}

/// A kubeconfig whose server is plain http is refused before anything is
/// sent (its token would cross the network in plain text), naming the
/// flag that accepts it; with the flag, the server is tried.
#[tokio::test]
async fn a_plain_http_server_needs_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens on port 9 (discard): nothing would answer anyway.
    let kubeconfig = dir.path().join("plain-http");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\n\
         clusters: [{name: c, cluster: {server: \"http://127.0.0.1:9\"}}]\n\
         users: [{name: u, user: {token: plain-text-token}}]\n\
         contexts: [{name: x, context: {cluster: c, user: u}}]\n\
         current-context: x\n",
    )
    .unwrap();
    let refused = example_run(&kubeconfig, "plainhttp", dir.path(), "refused")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("plain http") && stderr.contains("--insecure-plain-http"),
        "{stderr}"
    );
    assert!(!stderr.contains("plain-text-token"), "{stderr}");
    let tried = example_run(&kubeconfig, "plainhttp", dir.path(), "tried")
        .arg("--insecure-plain-http")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&tried.stderr);
    assert_eq!(tried.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("did not answer"), "{stderr}");
}
