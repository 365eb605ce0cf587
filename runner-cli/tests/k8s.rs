//! runner-cli on the Kubernetes executor against the test cluster: the
//! README's example, bad credentials, a runner killed mid-run, the dry-run.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use executor_conformance::fixture::assert_valid_result;
use executor_core::RunResult;
use kube_testcluster::{ClusterOptions, KubeconfigAuth, TestCluster};
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

fn image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE").unwrap_or_else(|_| "knotless-busybox:local".into())
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples")
}

fn cli(kubeconfig: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_runner-cli"));
    cmd.env("KUBECONFIG", kubeconfig);
    cmd
}

/// `run` of examples/ on the k8s executor as `name`, its outputs in
/// `dir/out` and its result in `dir/out.json`.
fn example_run(kubeconfig: &Path, name: &str, dir: &Path, out: &str) -> Command {
    let mut cmd = cli(kubeconfig);
    cmd.args(["run", "--executor", "k8s", "--image", &image()])
        .args(["--name", name, "--runner", &format!("did:plc:{name}")])
        .arg("--workdir")
        .arg(examples())
        .arg("--steps-file")
        .arg(examples().join("steps.tsv"))
        .arg("--outputs")
        .arg(dir.join(out))
        .arg("--result")
        .arg(dir.join(format!("{out}.json")));
    cmd
}

/// The README's Kubernetes example, run as written: it starts the test
/// cluster's binary, points `KUBECONFIG` at it, runs the example and stops
/// the cluster (the binaries built by this test run stand in for
/// `cargo build` and `cargo run`), in a folder where `examples` is the
/// project's.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_runs_on_k8s_as_the_readme_shows() {
    let block = common::example("target/debug/kube-testcluster");
    let bin = Path::new(env!("CARGO_BIN_EXE_runner-cli"));
    let testcluster = bin.with_file_name("kube-testcluster");
    assert!(
        testcluster.is_file(),
        "{} is built by `cargo test --workspace --all-targets`",
        testcluster.display()
    );
    let command = block
        .replace("cargo build -q -p kube-testcluster\n", "")
        .replace(
            "target/debug/kube-testcluster",
            &testcluster.display().to_string(),
        )
        .replace("cargo run -q -p runner-cli --", &bin.display().to_string());
    assert!(!command.contains("cargo"), "{command}");
    let dir = common::beside_examples();
    let out = Command::new("timeout")
        .args(["300", "sh", "-ec", &command])
        .current_dir(dir.path())
        .env_remove("KUBECONFIG")
        .env_remove("RUNNER_DID")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = read_result(&dir.path().join("result-k8s.json"));
    assert_eq!(r.executor, "k8s");
    assert!(r
        .outputs
        .iter()
        .any(|o| o.path == "badge.png" && o.media_type == "image/png"));
    assert!(
        stdout.contains("exec protocol: v5.channel.k8s.io"),
        "{stdout}"
    );
    assert!(stdout.contains("run example: success"), "{stdout}");
}

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

fn read_result(path: &Path) -> RunResult {
    let result = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_valid_result(&result);
    result
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_killed_mid_run_leaves_a_job_the_next_cleanup_removes() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let runner = format!("did:plc:killed-k8s-{}", std::process::id());
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "wait\techo runner-is-busy; exec sleep 600\n").unwrap();
    let mut child = cli(cluster.kubeconfig())
        .args([
            "run",
            "--executor",
            "k8s",
            "--image",
            &image(),
            "--name",
            "killed",
            "--runner",
            &runner,
            "--env",
            "K=V",
        ])
        .arg("--workdir")
        .arg(dir.path())
        .arg("--steps-file")
        .arg(&steps)
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        if line.contains("runner-is-busy") {
            break;
        }
    }
    child.kill().await.unwrap();
    assert_eq!(cluster.jobs("default").len(), 1);
    let cleanup = |force: bool| {
        let mut cmd = cli(cluster.kubeconfig());
        cmd.args(["cleanup", "--executor", "k8s", "--runner", &runner]);
        if force {
            cmd.arg("--force");
        }
        cmd
    };
    let out = cleanup(false).output().await.unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("0 removed"),
        "not expired yet"
    );
    let out = cleanup(true).output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 removed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        cluster.jobs("default").is_empty()
            && cluster.pods("default").is_empty()
            && cluster.secrets("default").is_empty()
    );
    cluster.shutdown().await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn dry_run_prints_the_job_and_every_call_and_contacts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(&dir.path().join("no-such-kubeconfig"))
        .args([
            "run",
            "--executor",
            "k8s",
            "--image",
            "busybox:1.36",
            "--name",
            "example",
            "--runner",
            "did:plc:example",
        ])
        .args([
            "--dry-run",
            "--env",
            "TOKEN=hunter2",
            "--trigger",
            "pull",
            "--memory-limit",
            "1Gi",
            "--cache",
            "deps=/deps",
            "--secret",
            "DEPLOY_TOKEN",
            "--cap-add",
            "NET_BIND_SERVICE",
            "--run-as-user",
            "1000",
            "--run-as-non-root",
        ])
        .env("DEPLOY_TOKEN", "dry-run-secret-value")
        .arg("--cache-dir")
        .arg(dir.path().join("caches"))
        .arg("--outputs")
        .arg(dir.path().join("outputs"))
        .arg("--workdir")
        .arg(examples())
        .arg("--steps-file")
        .arg(examples().join("steps.tsv"))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for expected in [
        "POST /apis/batch/v1/namespaces/default/jobs",
        "kind: Job",
        "backoffLimit: 0",
        "podAntiAffinity",
        "automountServiceAccountToken: false",
        "memory: 1Gi",
        "TOKEN",
        "DEPLOY_TOKEN",
        "- ALL",
        "- NET_BIND_SERVICE",
        "type: RuntimeDefault",
        "runAsUser: 1000",
        "runAsNonRoot: true",
        "DELETE /apis/batch/v1/namespaces/default/jobs/",
    ] {
        assert!(stdout.contains(expected), "{expected} missing:\n{stdout}");
    }
    assert!(!stdout.contains("hunter2"));
    assert!(!stdout.contains("dry-run-secret-value"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("dry-run-secret-value") && !stderr.contains("hunter2"),
        "{stderr}"
    );
    for never in ["caches", "outputs"] {
        assert!(!dir.path().join(never).exists(), "the dry-run made {never}");
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name)
}

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
        .rbac_lag_after_outage(Some(std::time::Duration::from_secs(2)));
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

/// A tenant whose Role lacks exec is refused before anything exists, with
/// every missing permission and the namespace named; so is a cleanup
/// without its own verbs.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_permissions_are_exit_2_before_anything_is_created() {
    use kube_testcluster::rbac::{Role, Rule};
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    cluster.grant_tenant(Role {
        namespace: "builds".into(),
        rules: vec![
            Rule::new("", &["secrets"], &["create", "patch", "delete", "list"]),
            Rule::new("batch", &["jobs"], &["create", "delete"]),
            Rule::new("", &["pods"], &["get", "list", "watch"]),
            Rule::new("", &["events"], &["list"]),
        ],
    });
    let tenant = cluster.tenant_kubeconfig("builds").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = example_run(&tenant, "tenant", dir.path(), "out")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    for named in [
        "list jobs (batch)",
        "create pods/exec",
        "get pods/exec",
        "namespace builds",
    ] {
        assert!(stderr.contains(named), "{named} is not named: {stderr}");
    }
    assert!(dir.path().join("out.json").exists());
    assert!(cluster.jobs("builds").is_empty() && cluster.secrets("builds").is_empty());

    let out = cli(&tenant)
        .args(["cleanup", "--executor", "k8s", "--runner", "did:plc:tenant"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("list jobs (batch)"), "{stderr}");
    cluster.shutdown().await;
}

/// Issues, with openssl as a cluster admin would, a client certificate
/// for `cn` in `dir`: X.509 v1 unless `v3`, already expired if `expired`.
/// Returns (certificate, key) paths.
async fn issue_with_openssl(dir: &Path, cn: &str, v3: bool, expired: bool) -> (PathBuf, PathBuf) {
    let sh = |script: String| async move {
        let out = Command::new("bash")
            .arg("-ec")
            .arg(&script)
            .current_dir(dir)
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "{script}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    if !dir.join("issuer.crt").exists() {
        sh("openssl req -x509 -newkey rsa:2048 -nodes -keyout issuer.key -out issuer.crt -subj /CN=issuer -days 2 2>/dev/null".into()).await;
    }
    let days = if expired { -1 } else { 2 };
    let ext = if v3 {
        " -extfile <(printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth')"
    } else {
        ""
    };
    sh(format!(
        "openssl req -newkey rsa:2048 -nodes -keyout {cn}.key -out {cn}.csr -subj /CN={cn} 2>/dev/null; \
         openssl x509 -req -in {cn}.csr -CA issuer.crt -CAkey issuer.key -set_serial $RANDOM -days {days} -out {cn}.crt{ext} 2>/dev/null"
    ))
    .await;
    (dir.join(format!("{cn}.crt")), dir.join(format!("{cn}.key")))
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

/// A second signal exits at once, but not silently: the Job is named and
/// put in the journal, the command that removes it is printed, and the
/// result is written as it stands; the printed `cleanup` removes the Job.
/// The first signal's stop is held up by an outage that its Job's DELETE
/// begins, so the second lands while the Job is still there.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_names_the_job_left_and_the_command_that_removes_it() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let steps = dir.path().join("steps.tsv");
    std::fs::write(
        &steps,
        "first\techo one\nspin\techo ready; while :; do sleep 0.1; done\nlast\ttrue\n",
    )
    .unwrap();
    let caches = dir.path().join("caches");
    let runner = "did:plc:second-signal";
    let mut child = cli(cluster.kubeconfig())
        .args(["run", "--executor", "k8s", "--image", &image()])
        .args(["--name", "twice", "--runner", runner])
        .arg("--workdir")
        .arg(examples())
        .arg("--steps-file")
        .arg(&steps)
        .arg("--log")
        .arg(dir.path().join("run.log"))
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .arg("--outputs")
        .arg(dir.path().join("outputs"))
        .arg("--cache-dir")
        .arg(&caches)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = tokio::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    async fn read_until(
        err: &mut (impl tokio::io::AsyncBufRead + Unpin),
        what: &str,
        said: &mut String,
    ) {
        while !said.contains(what) {
            let mut line = String::new();
            assert!(
                err.read_line(&mut line).await.unwrap() > 0,
                "no {what:?} in {said}"
            );
            said.push_str(&line);
        }
    }
    read_until(&mut err, "==> step spin: started", &mut said).await;
    let jobs = cluster.jobs("default");
    assert_eq!(jobs.len(), 1, "{said}");
    cluster
        .faults()
        .outage_on("DELETE", "/jobs/", std::time::Duration::from_secs(3));
    let mut begun = cluster.faults().outages_begun();
    let signal = |pid: u32| {
        assert!(std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .unwrap()
            .success());
    };
    let pid = child.id().unwrap();
    signal(pid);
    read_until(&mut err, "cancelling the run", &mut said).await;
    begun.wait_for(|n| *n > 0).await.unwrap();
    signal(pid);
    let status = child.wait().await.unwrap();
    let mut rest = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut err, &mut rest)
        .await
        .unwrap();
    said.push_str(&rest);
    assert_eq!(status.code(), Some(130), "{said}");
    let command = format!(
        "runner-cli cleanup --executor k8s --runner {runner} --cache-dir {}",
        caches.display()
    );
    assert!(
        said.contains("second signal (SIGINT)")
            && said.contains(&format!("environment {} is left", jobs[0]))
            && said.contains(&command),
        "{said}"
    );
    assert_eq!(cluster.jobs("default"), jobs, "the Job went after all");
    // The outage the runner rode out is its to word, not the client library's.
    assert!(!said.contains("kube_client"), "{said}");
    let result = read_result(&dir.path().join("result.json"));
    assert_eq!(result.status, executor_core::RunStatus::Cancelled);
    assert!(
        result
            .error
            .as_deref()
            .unwrap_or("")
            .contains("second signal"),
        "{:?}",
        result.error
    );
    let statuses: Vec<_> = result
        .steps
        .iter()
        .map(|s| (s.name.as_str(), s.status))
        .collect();
    assert_eq!(
        statuses,
        [
            ("first", executor_core::StepStatus::Success),
            ("spin", executor_core::StepStatus::Cancelled),
            ("last", executor_core::StepStatus::Skipped)
        ],
        "{said}"
    );
    // The command as printed, the binary for `runner-cli`, once the
    // server is back.
    cluster
        .faults()
        .outages_over()
        .wait_for(|n| *n > 0)
        .await
        .unwrap();
    let out = Command::new("sh")
        .arg("-ec")
        .arg(command.replacen("runner-cli", env!("CARGO_BIN_EXE_runner-cli"), 1))
        .env("KUBECONFIG", cluster.kubeconfig())
        .env_remove("RUNNER_DID")
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        cluster.jobs("default").is_empty()
            && cluster.pods("default").is_empty()
            && cluster.secrets("default").is_empty(),
        "cleanup left the run"
    );
    cluster.shutdown().await;
}

/// Kubeconfig mistakes and a namespace that does not exist are input
/// errors (exit 2) in kubectl's words, naming the flag to change; the log
/// names flags, never library fields.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_mistakes_and_a_missing_namespace_are_exit_2_in_kubectls_words() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "a\ttrue\n").unwrap();
    let missing = dir.path().join("no-such-kubeconfig");
    let run = |kubeconfig: &Path, extra: &[&str]| {
        let mut cmd = cli(kubeconfig);
        cmd.args(["run", "--executor", "k8s", "--image", &image()])
            .args(["--name", "mistake", "--runner", "did:plc:mistake"])
            .arg("--steps-file")
            .arg(&steps)
            .arg("--workdir")
            .arg(dir.path())
            .arg("--log")
            .arg(dir.path().join("run.log"))
            .arg("--result")
            .arg(dir.path().join("result.json"))
            .arg("--outputs")
            .arg(dir.path().join("outputs"))
            .args(extra);
        cmd
    };
    for (kubeconfig, extra, words) in [
        (
            cluster.kubeconfig(),
            &["--context", "nope"][..],
            "context was not found for specified context: nope (it has knotless-test); name one of its contexts with --context".to_string(),
        ),
        (
            missing.as_path(),
            &[][..],
            format!(
                "KUBECONFIG {}: stat {}: no such file or directory",
                missing.display(),
                missing.display()
            ),
        ),
        (
            cluster.kubeconfig(),
            &["--kubeconfig", missing.to_str().unwrap()][..],
            format!(
                "--kubeconfig {}: stat {}: no such file or directory",
                missing.display(),
                missing.display()
            ),
        ),
        (
            cluster.kubeconfig(),
            &["--namespace", "nope"][..],
            "the namespace nope does not exist on the cluster (namespaces \"nope\" not found".to_string(),
        ),
    ] {
        let out = run(kubeconfig, extra).output().await.unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {said}");
        assert!(said.contains(&words), "{extra:?}: {said}");
        let result = read_result(&dir.path().join("result.json"));
        assert_eq!(
            result.failure.as_ref().map(|f| f.kind),
            Some(executor_core::FailureKind::Input),
            "{extra:?}"
        );
        let log = std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default();
        assert!(!log.contains("::"), "a library field in the log: {log}");
    }
    let log = std::fs::read_to_string(dir.path().join("run.log")).unwrap();
    assert!(log.contains("name another with --namespace"), "{log}");
    assert!(cluster.jobs("default").is_empty() && cluster.secrets("default").is_empty());
    cluster.shutdown().await;
}

/// An image without `sh` on Kubernetes: its container cannot start (the
/// test cluster records it as a containerd node does, `StartError` 128),
/// and the run fails as the image's, named, not retried.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_without_sh_is_an_image_failure_not_retried() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tag = format!("knotless-nosh-k8s:{}", std::process::id());
    common::import_image_without_sh(dir.path(), &tag);
    let steps = dir.path().join("steps.tsv");
    std::fs::write(&steps, "a\ttrue\n").unwrap();
    let out = cli(cluster.kubeconfig())
        .args(["run", "--executor", "k8s", "--image", &tag])
        .args(["--name", "nosh", "--runner", "did:plc:nosh", "--retry", "2"])
        .arg("--workdir")
        .arg(dir.path())
        .arg("--steps-file")
        .arg(&steps)
        .arg("--outputs")
        .arg(dir.path().join("outputs"))
        .arg("--result")
        .arg(dir.path().join("result.json"))
        .arg("--log")
        .arg(dir.path().join("run.log"))
        .output()
        .await
        .unwrap();
    let _ = Command::new("docker")
        .args(["rmi", "-f", &tag])
        .output()
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let result = read_result(&dir.path().join("result.json"));
    let failure = result.failure.clone().expect("a failure");
    assert_eq!(failure.kind, executor_core::FailureKind::Image, "{stderr}");
    assert!(!failure.retryable, "{failure:?}");
    assert!(failure.message.contains("has no sh"), "{failure:?}");
    assert!(
        stderr.contains("--image"),
        "the flag, not the field: {stderr}"
    );
    assert_eq!(result.attempts.len(), 1, "{}", result.to_json());
    assert_eq!(
        out.status.code(),
        Some(executor_core::FailureKind::Image.exit_code())
    );
    assert!(cluster.jobs("default").is_empty() && cluster.pods("default").is_empty());
    cluster.shutdown().await;
}
