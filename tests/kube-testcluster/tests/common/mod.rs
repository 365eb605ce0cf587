//! The real kubectl against a test cluster: the helpers every kubectl
//! test file shares.

#![allow(dead_code)]

use std::process::Stdio;
use std::time::Duration;

use kube_testcluster::TestCluster;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

pub fn image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE").unwrap_or_else(|_| "knotless-busybox:local".into())
}

pub fn kubectl_bin() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

pub async fn kubectl(cluster: &TestCluster, args: &[&str], stdin: Option<Vec<u8>>) -> Out {
    kubectl_with(cluster.kubeconfig(), args, stdin).await
}

pub async fn kubectl_with(
    kubeconfig: &std::path::Path,
    args: &[&str],
    stdin: Option<Vec<u8>>,
) -> Out {
    let mut cmd = Command::new(kubectl_bin());
    cmd.env("KUBECONFIG", kubeconfig)
        .env("HOME", std::env::temp_dir())
        .arg("--request-timeout=60s")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run kubectl: {e}"));
    if let Some(data) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        tokio::spawn(async move {
            let _ = pipe.write_all(&data).await;
            let _ = pipe.shutdown().await;
        });
    }
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("kubectl hung")
        .unwrap();
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
