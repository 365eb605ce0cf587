//! Missing permissions, kubeconfig mistakes and a missing namespace

use super::*;

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
