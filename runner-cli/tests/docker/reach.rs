//! Reaching the engine, or not, over TLS, and one that never answers

use super::*;

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[test]
fn an_unreachable_engine_is_exit_3_naming_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "a\ttrue\n").unwrap();
    let sock = dir.path().join("no-engine.sock");
    let out = cli()
        .env("DOCKER_HOST", format!("unix://{}", sock.display()))
        .args([
            "run",
            "--executor",
            "docker",
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
        .arg(dir.path().join("result.json"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "no Docker engine answers at unix://{}",
            sock.display()
        )),
        "{stderr}"
    );
    let result = result(&dir.path().join("result.json"));
    assert_eq!(result.status, executor_core::RunStatus::Error);
    let failure = result.failure.unwrap();
    assert_eq!(failure.kind, executor_core::FailureKind::Unreachable);
    assert!(failure.retryable);
}

/// A TLS front for the test engine that, like `dockerd --tlsverify`,
/// serves only clients with a certificate from its CA; counts them.
async fn tls_engine(
    creds: &kube_testcluster::tls::Credentials,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let socket = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
        .unwrap_or_else(|| "/var/run/docker.sock".into());
    let acceptor = tokio_rustls::TlsAcceptor::from(creds.server_config().unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = std::sync::Arc::new(AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let socket = socket.clone();
            let count = count.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if tls.get_ref().1.peer_certificates().is_none() {
                    return;
                }
                count.fetch_add(1, Ordering::SeqCst);
                if let Ok(mut engine) = tokio::net::UnixStream::connect(&socket).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut engine).await;
                }
            });
        }
    });
    (port, served)
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_engine_is_reached_with_docker_cert_path_as_the_docker_cli_does() {
    use std::sync::atomic::Ordering;
    let creds = kube_testcluster::tls::Credentials::generate().unwrap();
    let (port, served) = tls_engine(&creds).await;
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    std::fs::write(certs.join("ca.pem"), &creds.ca.cert).unwrap();
    std::fs::write(certs.join("cert.pem"), &creds.client.cert).unwrap();
    std::fs::write(certs.join("key.pem"), &creds.client.key).unwrap();
    let run = |out: &str| {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_runner-cli"));
        cmd.env("DOCKER_HOST", format!("tcp://127.0.0.1:{port}"))
            .env("DOCKER_TLS_VERIFY", "1")
            .env("DOCKER_CERT_PATH", &certs)
            .args(["run", "--executor", "docker", "--image", &image()])
            .args(["--pull", "never", "--network", "none", "--no-cleanup"])
            .args(["--name", "tls", "--runner", "did:plc:tls"])
            .arg("--workdir")
            .arg(examples())
            .arg("--steps-file")
            .arg(examples().join("steps.tsv"))
            .arg("--outputs")
            .arg(dir.path().join(out))
            .arg("--result")
            .arg(dir.path().join(format!("{out}.json")));
        cmd
    };
    let out = run("ok").output().await.unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        served.load(Ordering::SeqCst) > 0,
        "no TLS client reached the engine"
    );
    assert_eq!(
        result(&dir.path().join("ok.json")).status,
        executor_core::RunStatus::Success
    );

    std::fs::remove_file(certs.join("key.pem")).unwrap();
    let out = run("nokey").output().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("key.pem") && stderr.contains("DOCKER_CERT_PATH"),
        "{stderr}"
    );
}

/// An engine that accepts the connection and never answers gets progress
/// lines while the runner waits, and a signal still ends the run with a
/// result.
#[test]
fn an_engine_that_never_answers_gets_progress_lines_while_the_runner_waits() {
    use std::io::BufRead;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts, and holds each connection open without a word.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "a\ttrue\n").unwrap();
    let mut child = cli()
        .env("DOCKER_HOST", format!("tcp://{addr}"))
        .env_remove("DOCKER_TLS_VERIFY")
        .args(["run", "--executor", "docker", "--image", "x"])
        .args(["--name", "silent", "--runner", "did:plc:silent"])
        .arg("--workdir")
        .arg(dir.path())
        .arg("--steps-file")
        .arg(&steps)
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .arg("--outputs")
        .arg(dir.path().join("outputs"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    let waiting = format!("still waiting for the Docker engine at tcp://{addr} to answer");
    while !said.contains(&waiting) {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "{said}");
        said.push_str(&line);
    }
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{said}");
    let r = result(&dir.path().join("result.json"));
    assert_eq!(r.status, executor_core::RunStatus::Cancelled);
}
