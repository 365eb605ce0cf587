//! The test cluster driven by the real kubectl, a client nobody here wrote.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{image, kubectl, kubectl_bin, kubectl_with};
use kube_testcluster::{ClusterOptions, KubeconfigAuth, TestCluster};
use tokio::io::AsyncBufReadExt;
use tokio::process::Command;

fn job_manifest(name: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  labels:
    app: kubectl-proof
spec:
  backoffLimit: 0
  template:
    metadata:
      labels:
        app: kubectl-proof
    spec:
      restartPolicy: Never
      # Its shell ignores SIGTERM as PID 1: without this, deleting it
      # waits out the default 30 s grace, as on a real cluster.
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: {image}
        command: ["sh", "-c", "while :; do sleep 3600; done"]
        volumeMounts:
        - name: work
          mountPath: /work
      volumes:
      - name: work
        emptyDir: {{}}
"#,
        image = image()
    )
}

/// A tar with one file, `hello.txt`.
fn tar_with_hello() -> Vec<u8> {
    let mut h = [0u8; 512];
    let data = b"hello through kubectl\n";
    h[..9].copy_from_slice(b"hello.txt");
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    h[124..135].copy_from_slice(format!("{:011o}", data.len()).as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(1024, 0);
    out.extend_from_slice(&[0u8; 1024]);
    out
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drives_the_cluster_end_to_end() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();

    let empty = kubectl(
        &cluster,
        &["get", "jobs,pods", "-l", "app=kubectl-proof"],
        None,
    )
    .await;
    assert_eq!(empty.code, 0, "{}", empty.stderr);
    assert!(
        empty.stderr.contains("No resources found"),
        "{}{}",
        empty.stdout,
        empty.stderr
    );

    let manifest = std::env::temp_dir().join(format!("kubectl-proof-{}.yaml", std::process::id()));
    std::fs::write(&manifest, job_manifest("proof")).unwrap();
    let created = kubectl(
        &cluster,
        &["create", "-f", manifest.to_str().unwrap()],
        None,
    )
    .await;
    assert_eq!(created.code, 0, "{}", created.stderr);
    assert!(
        created.stdout.contains("job.batch/proof created"),
        "{}",
        created.stdout
    );

    let again = kubectl(
        &cluster,
        &["create", "-f", manifest.to_str().unwrap()],
        None,
    )
    .await;
    assert_ne!(again.code, 0);
    assert!(
        again.stderr.contains("AlreadyExists") || again.stderr.contains("already exists"),
        "{}",
        again.stderr
    );

    let ready = kubectl(
        &cluster,
        &[
            "wait",
            "--for=condition=Ready",
            "pod",
            "-l",
            "job-name=proof",
            "--timeout=60s",
        ],
        None,
    )
    .await;
    assert_eq!(ready.code, 0, "{}{}", ready.stdout, ready.stderr);
    let pods = cluster.pods("default");
    assert_eq!(pods.len(), 1);
    let pod = pods[0].clone();

    let listed = kubectl(
        &cluster,
        &["get", "jobs,pods", "-l", "app=kubectl-proof", "-o", "name"],
        None,
    )
    .await;
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    assert!(
        listed.stdout.contains("job.batch/proof"),
        "{}",
        listed.stdout
    );
    assert!(
        listed.stdout.contains(&format!("pod/{pod}")),
        "{}",
        listed.stdout
    );

    let exec = kubectl(
        &cluster,
        &["exec", &pod, "--", "sh", "-c", "echo hi; exit 3"],
        None,
    )
    .await;
    assert_eq!(exec.code, 3, "{}{}", exec.stdout, exec.stderr);
    assert_eq!(exec.stdout, "hi\n");

    let untar = kubectl(
        &cluster,
        &["exec", "-i", &pod, "--", "tar", "x", "-C", "/work"],
        Some(tar_with_hello()),
    )
    .await;
    assert_eq!(untar.code, 0, "{}{}", untar.stdout, untar.stderr);
    let cat = kubectl(
        &cluster,
        &["exec", &pod, "--", "cat", "/work/hello.txt"],
        None,
    )
    .await;
    assert_eq!(cat.stdout, "hello through kubectl\n", "{}", cat.stderr);

    // Refused before any upgrade, as a real server refuses: a container
    // the pod does not have.
    let wrong = kubectl(&cluster, &["exec", &pod, "-c", "nope", "--", "true"], None).await;
    assert_ne!(wrong.code, 0);
    assert!(
        wrong.stderr.contains("container nope is not valid for pod"),
        "{}",
        wrong.stderr
    );
    // An exec whose streams close long before it ends still ends with its
    // own code: the server waits for the exit, it does not invent one.
    let closed = kubectl(
        &cluster,
        &[
            "exec",
            &pod,
            "--",
            "sh",
            "-c",
            "exec >&- 2>&-; sleep 3; exit 7",
        ],
        None,
    )
    .await;
    assert_eq!(closed.code, 7, "{}{}", closed.stdout, closed.stderr);
    // Creating in a namespace that does not exist is NotFound.
    let nowhere = kubectl(
        &cluster,
        &[
            "-n",
            "no-such-ns",
            "create",
            "-f",
            manifest.to_str().unwrap(),
        ],
        None,
    )
    .await;
    assert_ne!(nowhere.code, 0);
    assert!(
        nowhere
            .stderr
            .contains("namespaces \"no-such-ns\" not found"),
        "{}",
        nowhere.stderr
    );

    // Watch the pods while the Job is deleted in the foreground.
    let mut watch = Command::new(kubectl_bin())
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("HOME", std::env::temp_dir())
        .args([
            "get",
            "pods",
            "--watch",
            "--output-watch-events",
            "-o",
            "jsonpath={.type} {.object.metadata.name}{\"\\n\"}",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(watch.stdout.take().unwrap()).lines();
    // The watch has started once it lists the pod.
    let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap_or_default();
    assert!(first.contains(&pod), "{first}");
    let deleted = kubectl(
        &cluster,
        &["delete", "job", "proof", "--cascade=foreground"],
        None,
    )
    .await;
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    let mut seen = vec![first.clone()];
    let saw_delete = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push(line.clone());
            if line.contains("DELETED") && line.contains(&pod) {
                return true;
            }
        }
        false
    })
    .await
    .unwrap_or(false);
    let _ = watch.kill().await;
    assert!(
        saw_delete,
        "kubectl get pods --watch never saw the pod go: {seen:?}"
    );
    assert!(cluster.pods("default").is_empty());
    assert!(cluster.jobs("default").is_empty());
    cluster.shutdown().await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_without_the_client_certificate_is_refused() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    for auth in [KubeconfigAuth::BadToken, KubeconfigAuth::StrangerCert] {
        let kubeconfig = cluster.kubeconfig_with(auth).unwrap();
        let out = kubectl_with(&kubeconfig, &["get", "pods"], None).await;
        assert_ne!(out.code, 0, "{auth:?} was let in");
        assert!(
            out.stderr.contains("must be logged in")
                || out.stderr.contains("certificate")
                || out.stderr.contains("tls"),
            "{auth:?}: {}",
            out.stderr
        );
    }
    assert!(cluster.requests().iter().all(|r| !r.authenticated));
    cluster.shutdown().await;
}

/// The tenant's Role as kubectl sees it: `auth can-i` through
/// SelfSubjectAccessReview, and a 403 Status kubectl prints as a real
/// server's.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_the_tenants_role() {
    use kube_testcluster::rbac::{Role, Rule};
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    cluster.grant_tenant(Role {
        namespace: "ci".into(),
        rules: vec![
            Rule::new("batch", &["jobs"], &["create", "list"]),
            Rule::new("", &["pods/exec"], &["create", "get"]),
        ],
    });
    let tenant = cluster.tenant_kubeconfig("ci").unwrap();
    for (args, answer) in [
        (vec!["auth", "can-i", "create", "jobs.batch"], "yes"),
        (vec!["auth", "can-i", "delete", "jobs.batch"], "no"),
        (
            vec!["auth", "can-i", "create", "pods", "--subresource=exec"],
            "yes",
        ),
        (
            vec!["auth", "can-i", "create", "jobs.batch", "-n", "default"],
            "no",
        ),
    ] {
        let out = kubectl_with(&tenant, &args, None).await;
        assert_eq!(out.stdout.trim(), answer, "{args:?}: {}", out.stderr);
    }
    let out = kubectl_with(&tenant, &["get", "pods"], None).await;
    assert_ne!(out.code, 0);
    assert!(
        out.stderr.contains(
            "Error from server (Forbidden): pods is forbidden: User \"knotless-tenant\" cannot list resource \"pods\" in API group \"\" in the namespace \"ci\""
        ),
        "{}",
        out.stderr
    );
    let out = kubectl_with(&tenant, &["get", "jobs"], None).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    cluster.shutdown().await;
}

/// An outage as kubectl meets it: the request that starts it gets no
/// answer, new connections are refused while it lasts, and afterwards
/// the same address answers again.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_meets_an_outage_then_the_server_again() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let mut over = cluster.faults().outages_over();
    cluster
        .faults()
        .outage_on("GET", "/secrets", Duration::from_secs(3));
    let cut = kubectl(&cluster, &["get", "secrets", "--request-timeout=2s"], None).await;
    assert_ne!(cut.code, 0, "{}", cut.stdout);
    // While it lasts, nothing listens.
    let refused = kubectl(&cluster, &["get", "pods", "--request-timeout=2s"], None).await;
    assert_ne!(refused.code, 0);
    assert!(refused.stderr.contains("refused"), "{}", refused.stderr);
    tokio::time::timeout(Duration::from_secs(30), over.wait_for(|n| *n == 1))
        .await
        .expect("the outage never ended")
        .unwrap();
    let back = kubectl(&cluster, &["get", "secrets"], None).await;
    assert_eq!(back.code, 0, "{}", back.stderr);
    cluster.shutdown().await;
}

/// A restarted server refuses the tenant before its roles have loaded,
/// with a real server's words, while it serves the admin; then the
/// tenant's Role holds again.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_a_restarted_server_refuse_the_tenant_until_its_roles_load() {
    use kube_testcluster::rbac::{Role, Rule};
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    cluster.grant_tenant(Role {
        namespace: "ci".into(),
        rules: vec![Rule::new("batch", &["jobs"], &["list"])],
    });
    let tenant = cluster.tenant_kubeconfig("ci").unwrap();
    assert_eq!(kubectl_with(&tenant, &["get", "jobs"], None).await.code, 0);
    cluster
        .faults()
        .rbac_lag_after_outage(Some(Duration::from_secs(5)));
    let mut over = cluster.faults().outages_over();
    cluster.outage_now(Duration::from_millis(500));
    tokio::time::timeout(Duration::from_secs(30), over.wait_for(|n| *n == 1))
        .await
        .expect("the outage never ended")
        .unwrap();
    let refused = kubectl_with(&tenant, &["get", "jobs"], None).await;
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains(
            "Error from server (Forbidden): jobs.batch is forbidden: User \"knotless-tenant\" cannot list resource \"jobs\" in API group \"batch\" in the namespace \"ci\""
        ),
        "{}",
        refused.stderr
    );
    let admin = kubectl(&cluster, &["get", "jobs", "-n", "ci"], None).await;
    assert_eq!(admin.code, 0, "{}", admin.stderr);
    assert!(cluster.faults().rbac_lag_refusals() > 0);
    // The roles load: the tenant is served again.
    let back = async {
        loop {
            if kubectl_with(&tenant, &["get", "jobs"], None).await.code == 0 {
                return;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), back)
        .await
        .expect("the tenant's Role never came back");
    cluster.shutdown().await;
}
