//! Create, wait, exec and delete with certificates and tokens, v4 and v5, and status bodies

use super::*;

async fn job_to_exit_code(cluster: &TestCluster, name: &str) -> Vec<Protocol> {
    let client = client(cluster).await;
    let jobs: Api<Job> = Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    jobs.create(&PostParams::default(), &job(name, &image()))
        .await
        .unwrap();
    let pod = pod_of(&pods, name).await;
    ready(&pods, &pod).await;

    // stdin in, output out, exit code back.
    let ap = AttachParams::default()
        .stdin(true)
        .stdout(true)
        .stderr(true);
    let mut attached = pods
        .exec(
            &pod,
            ["sh", "-c", "read line; echo \"got $line\"; exit 7"],
            &ap,
        )
        .await
        .unwrap();
    let mut stdin = attached.stdin().unwrap();
    stdin.write_all(b"hello\n").await.unwrap();
    let mut stdout = attached.stdout().unwrap();
    let status = attached.take_status().unwrap();
    let mut out = String::new();
    stdout.read_to_string(&mut out).await.unwrap();
    drop(stdin);
    let status = status.await.expect("a status");
    assert_eq!(out, "got hello\n");
    assert_eq!(status.status.as_deref(), Some("Failure"));
    let causes = status.details.and_then(|d| d.causes).unwrap_or_default();
    assert_eq!(causes[0].reason.as_deref(), Some("ExitCode"));
    assert_eq!(causes[0].message.as_deref(), Some("7"));

    // Deleting with propagation takes the pod with it.
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Foreground),
        ..DeleteParams::default()
    };
    jobs.delete(name, &dp).await.unwrap();
    let gone = await_condition(pods.clone(), &pod, conditions::is_deleted(""));
    tokio::time::timeout(Duration::from_secs(60), gone)
        .await
        .expect("pod stayed")
        .unwrap();
    let gone = await_condition(jobs.clone(), name, conditions::is_deleted(""));
    tokio::time::timeout(Duration::from_secs(60), gone)
        .await
        .expect("job stayed")
        .unwrap();
    cluster.exec_protocols()
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_creates_waits_execs_and_deletes_with_client_certificates() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    assert_eq!(
        job_to_exit_code(&cluster, "kube-proof").await,
        [Protocol::V5]
    );
    cluster.shutdown().await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_works_with_a_bearer_token_and_on_a_v4_only_server() {
    let cluster = TestCluster::start(ClusterOptions {
        auth: AuthMode::Token,
        v4_only: true,
        ..ClusterOptions::default()
    })
    .await
    .unwrap();
    assert_eq!(
        job_to_exit_code(&cluster, "kube-token").await,
        [Protocol::V4]
    );
    assert!(kube_testcluster::exec::negotiate("v5.channel.k8s.io", true).is_err());
    cluster.shutdown().await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_and_duplicate_jobs_get_status_bodies() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let jobs: Api<Job> = Api::default_namespaced(client(&cluster).await);
    let bad = jobs
        .create(&PostParams::default(), &job("Not_A_Name", &image()))
        .await
        .unwrap_err();
    match bad {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422);
            assert_eq!(s.reason, "Invalid");
            assert!(s.message.contains("metadata.name"), "{}", s.message);
        }
        other => panic!("{other}"),
    }
    let mut labelled = job("bad-label", &image());
    labelled.metadata.labels =
        Some([("dev.knotless.runner".to_string(), "did:plc:x".to_string())].into());
    let err = jobs
        .create(&PostParams::default(), &labelled)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err}"
    );
    jobs.create(&PostParams::default(), &job("twice", &image()))
        .await
        .unwrap();
    let err = jobs
        .create(&PostParams::default(), &job("twice", &image()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "AlreadyExists"),
        "{err}"
    );
    cluster.shutdown().await;
}
