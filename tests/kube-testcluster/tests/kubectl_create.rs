//! `kubectl create job`, whose typed client sends the Job as protobuf,
//! as a real server takes it.

mod common;

use common::{image, kubectl};
use kube_testcluster::{ClusterOptions, TestCluster};

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_job_is_taken_and_runs() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let image = format!("--image={}", image());
    let created = kubectl(
        &cluster,
        &[
            "create",
            "job",
            "made",
            &image,
            "--",
            "echo",
            "made by kubectl create",
        ],
        None,
    )
    .await;
    assert_eq!(created.code, 0, "{}{}", created.stdout, created.stderr);
    assert!(
        created.stdout.contains("job.batch/made created"),
        "{}",
        created.stdout
    );
    let done = kubectl(
        &cluster,
        &[
            "wait",
            "--for=condition=complete",
            "job/made",
            "--timeout=60s",
        ],
        None,
    )
    .await;
    assert_eq!(done.code, 0, "{}{}", done.stdout, done.stderr);
    let logs = kubectl(&cluster, &["logs", "job/made"], None).await;
    assert_eq!(logs.stdout, "made by kubectl create\n", "{}", logs.stderr);
    let deleted = kubectl(&cluster, &["delete", "job", "made", "--wait"], None).await;
    assert_eq!(deleted.code, 0, "{}{}", deleted.stdout, deleted.stderr);
    cluster.shutdown().await;
}
