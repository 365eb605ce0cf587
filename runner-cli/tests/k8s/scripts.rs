//! The tenant kubeconfig and live proof scripts

use super::*;

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_kubeconfig_script_writes_a_working_kubeconfig_and_names_bad_files() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let (ca, cert, key) = cluster.credential_files().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tenant.kubeconfig");
    let run = |ca: &Path, cert: &Path| {
        let mut cmd = Command::new("bash");
        cmd.arg(script("tenant-kubeconfig.sh"))
            .args(["--server", cluster.url(), "--namespace", "default"])
            .arg("--ca")
            .arg(ca)
            .arg("--cert")
            .arg(cert)
            .arg("--key")
            .arg(&key)
            .arg("--out")
            .arg(&out);
        cmd
    };
    let made = run(&ca, &cert).output().await.unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let pods = Command::new("kubectl")
        .env("KUBECONFIG", &out)
        .env("HOME", dir.path())
        .args(["get", "pods"])
        .output()
        .await
        .unwrap();
    assert!(
        pods.status.success(),
        "{}",
        String::from_utf8_lossy(&pods.stderr)
    );

    let missing = run(&ca, &dir.path().join("nope.crt"))
        .output()
        .await
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("--cert")
            && String::from_utf8_lossy(&missing.stderr).contains("does not exist")
    );
    let not_pem = dir.path().join("garbage.crt");
    std::fs::write(&not_pem, "garbage").unwrap();
    let garbage = run(&not_pem, &cert).output().await.unwrap();
    assert!(String::from_utf8_lossy(&garbage.stderr).contains("is not a PEM certificate"));

    // What the runner's TLS library would refuse later, refused up front.
    let issued = dir.path().join("issued");
    std::fs::create_dir(&issued).unwrap();
    let (v1_cert, v1_key) = issue_with_openssl(&issued, "v1", false, false).await;
    let (old_cert, old_key) = issue_with_openssl(&issued, "old", true, true).await;
    let (v3_cert, _) = issue_with_openssl(&issued, "v3", true, false).await;
    for (cert, key, said) in [
        (
            &v1_cert,
            &v1_key,
            "is X.509 v1; the runner accepts only X.509 v3",
        ),
        (&old_cert, &old_key, "expired"),
        (&v3_cert, &v1_key, "is not the key of --cert"),
    ] {
        let refused = Command::new("bash")
            .arg(script("tenant-kubeconfig.sh"))
            .args(["--server", cluster.url()])
            .arg("--ca")
            .arg(&ca)
            .arg("--cert")
            .arg(cert)
            .arg("--key")
            .arg(key)
            .arg("--out")
            .arg(dir.path().join("refused.kubeconfig"))
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{said}: {stderr}");
        assert!(stderr.contains(said), "{said}: {stderr}");
        if said != "is not the key of --cert" {
            assert!(stderr.contains("reissue it as X.509 v3"), "{stderr}");
        }
    }
    assert!(!dir.path().join("refused.kubeconfig").exists());
    cluster.shutdown().await;
}

/// The live proof with its outage check, as a tenant bound to exactly
/// scripts/runner-role.yaml: `OUTAGE_CMD` asks this test, through a
/// FIFO, to take the cluster's API server down for 5 s (every connection
/// cut, new ones refused), and returns once it is back, as
/// `ssh cp sudo systemctl restart kube-apiserver` would. Back, the server
/// refuses the tenant for 2 s more, as a real v1.24 server does until its
/// RBAC roles have loaded.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_proof_script_passes_on_the_test_cluster_with_its_outage_check() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let role = std::fs::read_to_string(script("runner-role.yaml")).unwrap();
    cluster.grant_tenant(kube_testcluster::rbac::Role {
        namespace: "proof".into(),
        rules: kube_testcluster::rbac::rules_from_role_yaml(&role),
    });
    cluster
        .faults()
        // Longer than the runner's longest pause between tries (5 s, less
        // up to half at random): a try is sure to land in it.
        .rbac_lag_after_outage(Some(std::time::Duration::from_secs(6)));
    let dir = tempfile::tempdir().unwrap();
    let (down, back) = (dir.path().join("down"), dir.path().join("back"));
    for fifo in [&down, &back] {
        let made = std::process::Command::new("mkfifo")
            .arg(fifo)
            .status()
            .unwrap();
        assert!(made.success(), "mkfifo {}", fifo.display());
    }
    // Opened for reading and writing, neither end waits for the other,
    // and the script's `read` of `back` waits for the line.
    let mut asked = tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_receiver(&down)
        .unwrap();
    let mut told = tokio::net::unix::pipe::OpenOptions::new()
        .read_write(true)
        .open_sender(&back)
        .unwrap();
    let outage_cmd = format!(
        "echo down > '{}' && read _ < '{}'",
        down.display(),
        back.display()
    );
    let proof = Command::new("bash")
        .arg(script("live-proof.sh"))
        .env("KUBECONFIG", cluster.tenant_kubeconfig("proof").unwrap())
        .env("IMAGE", image())
        .env("RUNNER_CLI", env!("CARGO_BIN_EXE_runner-cli"))
        .env("OUTAGE_CMD", &outage_cmd)
        .env("HOME", std::env::temp_dir())
        .output();
    let outage = async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut line = [0u8; 5];
        asked.read_exact(&mut line).await.unwrap();
        let mut over = cluster.faults().outages_over();
        let before = *over.borrow_and_update();
        cluster.outage_now(std::time::Duration::from_secs(5));
        over.wait_for(|n| *n > before).await.unwrap();
        told.write_all(b"back\n").await.unwrap();
        std::future::pending::<()>().await;
    };
    let out = tokio::select! {
        out = proof => out.unwrap(),
        () = outage => unreachable!(),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for said in [
        "result: success",
        "nodes are not visible to this user",
        // The outage cut the step's stream, and the runner followed it.
        "the step's stream broke",
        // Back, the server refused the tenant, and the runner waited.
        "refuses what it granted at the run's preflight",
        "outage ridden out: exit 5 kept, 60 ticks once each, in order",
        "nothing left after the outage",
    ] {
        assert!(stdout.contains(said), "{said}: {stdout}");
    }
    assert_eq!(*cluster.faults().outages_over().borrow(), 1, "{stdout}");
    assert!(cluster.faults().rbac_lag_refusals() > 0, "{stdout}");
    assert!(cluster.jobs("proof").is_empty() && cluster.secrets("proof").is_empty());
    cluster.shutdown().await;
}

/// The live proof as a tenant bound to exactly scripts/runner-role.yaml,
/// in a namespace of its own: it passes, with its resume check (the role
/// is enough to carry a run on), and says the user may not list nodes.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_live_proof_passes_as_a_tenant_with_the_documented_role() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let role = std::fs::read_to_string(script("runner-role.yaml")).unwrap();
    cluster.grant_tenant(kube_testcluster::rbac::Role {
        namespace: "proof".into(),
        rules: kube_testcluster::rbac::rules_from_role_yaml(&role),
    });
    let out = Command::new("bash")
        .arg(script("live-proof.sh"))
        .env("KUBECONFIG", cluster.tenant_kubeconfig("proof").unwrap())
        .env("IMAGE", image())
        .env("RUNNER_CLI", env!("CARGO_BIN_EXE_runner-cli"))
        .env("RESUME_CHECK", "1")
        .env("HOME", std::env::temp_dir())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for said in [
        "create pods/exec: yes",
        "list jobs (batch): yes",
        "result: success",
        "resumed: exit 5 kept, 30 ticks once each, in order",
        "nothing left after the resume",
        "nodes are not visible to this user",
    ] {
        assert!(stdout.contains(said), "{said}: {stdout}");
    }
    assert!(cluster.jobs("proof").is_empty() && cluster.secrets("proof").is_empty());
    cluster.shutdown().await;
}
