//! runner-cli on the Kubernetes executor against the test cluster: the
//! README's example, bad credentials, a runner killed mid-run, the dry-run.

#[path = "../common/mod.rs"]
mod common;
use executor_conformance::fixture::assert_valid_result;
use executor_core::RunResult;
use kube_testcluster::{ClusterOptions, KubeconfigAuth, TestCluster};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

mod connection;
mod runs;
mod scripts;
mod template;
mod tenant;

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

fn read_result(path: &Path) -> RunResult {
    let result = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_valid_result(&result);
    result
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name)
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
