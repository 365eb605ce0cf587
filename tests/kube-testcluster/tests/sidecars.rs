//! Pods of several containers, as a kubelet runs them, checked with the
//! real kubectl: each container has its own status, they share one
//! network namespace and the pod's host aliases, `exec -c` and `logs -c`
//! reach the one named, and one container that exits leaves the pod
//! running but not ready.

mod common;

use common::{image, kubectl};
use kube_testcluster::{ClusterOptions, TestCluster};

fn pod_manifest() -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: duo
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  hostAliases:
  - ip: 127.0.0.1
    hostnames: [web, side]
  initContainers:
  - name: side
    image: {image}
    restartPolicy: Always
    command: ["sh", "-ec", "echo side-car-up; mkdir -p /tmp/s; echo from-the-sidecar > /tmp/s/x; exec httpd -f -p 9090 -h /tmp/s"]
  containers:
  - name: main
    image: {image}
    command: ["sh", "-c", "while :; do sleep 3600; done"]
  - name: web
    image: {image}
    command: ["sh", "-ec", "echo web-says-hello; mkdir -p /tmp/srv; echo page > /tmp/srv/index.html; exec httpd -f -p 8080 -h /tmp/srv"]
  - name: brief
    image: {image}
    command: ["sh", "-c", "echo brief-was-here; while [ ! -e /tmp/stop ]; do sleep 0.1; done; exit 4"]
"#,
        image = image()
    )
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_of_three_containers_as_kubectl_sees_it() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let manifest = std::env::temp_dir().join(format!("duo-{}.yaml", std::process::id()));
    std::fs::write(&manifest, pod_manifest()).unwrap();
    let created = kubectl(
        &cluster,
        &["create", "-f", manifest.to_str().unwrap()],
        None,
    )
    .await;
    assert_eq!(created.code, 0, "{}", created.stderr);
    let ready = kubectl(
        &cluster,
        &["wait", "--for=condition=Ready", "pod/duo", "--timeout=60s"],
        None,
    )
    .await;
    assert_eq!(ready.code, 0, "{}{}", ready.stdout, ready.stderr);

    // The step container reaches the web container by its alias, as
    // containers of one pod reach each other on localhost.
    let fetched = kubectl(
        &cluster,
        &[
            "exec",
            "duo",
            "-c",
            "main",
            "--",
            "sh",
            "-c",
            "printf 'GET /index.html HTTP/1.0\\n\\n' | nc web 8080",
        ],
        None,
    )
    .await;
    assert_eq!(fetched.code, 0, "{}", fetched.stderr);
    assert!(fetched.stdout.contains("page"), "{}", fetched.stdout);

    // A native sidecar (an init container that always restarts) runs
    // beside them, in the same network, with a status of its own.
    let side = kubectl(
        &cluster,
        // Ready means running, not listening: asked until it answers.
        &["exec", "duo", "-c", "main", "--", "sh", "-c",
          "for i in $(seq 1 100); do printf 'GET /x HTTP/1.0\\n\\n' | nc side 9090 && exit 0; sleep 0.05; done; exit 1"],
        None,
    )
    .await;
    assert_eq!(side.code, 0, "{}", side.stderr);
    assert!(side.stdout.contains("from-the-sidecar"), "{}", side.stdout);
    let init = kubectl(
        &cluster,
        &["get", "pod", "duo", "-o", "jsonpath={.status.initContainerStatuses[0].name} {.status.initContainerStatuses[0].ready}"],
        None,
    )
    .await;
    assert_eq!(init.stdout, "side true", "{}", init.stderr);
    let logs = kubectl(&cluster, &["logs", "duo", "-c", "side"], None).await;
    assert_eq!(logs.stdout, "side-car-up\n", "{}", logs.stderr);

    // Without -c, kubectl takes the first container and says so.
    let unnamed = kubectl(&cluster, &["logs", "duo"], None).await;
    assert_eq!(unnamed.code, 0, "{}", unnamed.stderr);
    assert!(
        unnamed.stderr.contains("Defaulted container \"main\""),
        "{}",
        unnamed.stderr
    );
    let logs = kubectl(&cluster, &["logs", "duo", "-c", "web"], None).await;
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    assert_eq!(logs.stdout, "web-says-hello\n");

    // exec -c runs in that container: its own filesystem.
    let stopped = kubectl(
        &cluster,
        &["exec", "duo", "-c", "brief", "--", "touch", "/tmp/stop"],
        None,
    )
    .await;
    assert_eq!(stopped.code, 0, "{}", stopped.stderr);
    let not_ready = kubectl(
        &cluster,
        &[
            "wait",
            "--for=condition=Ready=false",
            "pod/duo",
            "--timeout=60s",
        ],
        None,
    )
    .await;
    assert_eq!(
        not_ready.code, 0,
        "{}{}",
        not_ready.stdout, not_ready.stderr
    );
    let states = kubectl(
        &cluster,
        &[
            "get", "pod", "duo", "-o",
            "jsonpath={.status.phase} {.status.containerStatuses[2].state.terminated.exitCode} {.status.containerStatuses[1].state.running}",
        ],
        None,
    )
    .await;
    assert_eq!(states.code, 0, "{}", states.stderr);
    let words: Vec<&str> = states.stdout.splitn(3, ' ').collect();
    assert_eq!(words[..2], ["Running", "4"], "{}", states.stdout);
    assert!(words[2].contains("startedAt"), "{}", states.stdout);

    let deleted = kubectl(&cluster, &["delete", "pod", "duo"], None).await;
    assert_eq!(deleted.code, 0, "{}", deleted.stderr);
    cluster.shutdown().await;
    let _ = std::fs::remove_file(&manifest);
}
