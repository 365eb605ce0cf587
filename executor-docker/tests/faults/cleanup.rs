//! What cleanup removes and what it leaves

use super::*;

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn a_killed_runners_container_is_removed_by_the_next_cleanup_and_no_other() {
    let fx = Fixture::new("crashed");
    let other = Fixture::new("bystander");
    // A runner that starts a run and dies before stopping it.
    let crashed = docker_with(common::options()).await;
    let spec = fx.spec(&crashed, "crashed").step(Step::new("x", "true"));
    let handle = crashed
        .0
        .start(&spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap();
    drop(crashed);
    // Another runner's live run, which must survive.
    let bystander = docker_with(common::options()).await;
    let other_spec = other.spec(&bystander, "bystander");
    let other_handle = bystander
        .0
        .start(&other_spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap();

    let next = docker_with(common::options()).await;
    // Not expired yet: the default cleanup leaves it.
    let report = next
        .0
        .cleanup(&fx.runner, CleanupScope::Expired)
        .await
        .unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    // --force removes it, and only it.
    let report = next.0.cleanup(&fx.runner, CleanupScope::All).await.unwrap();
    assert_eq!(report.removed, vec![handle.id.clone()]);
    assert!(next.leftovers(&fx.runner).await.is_empty());
    // The bystander's container, and the volumes it still uses.
    let theirs = next.leftovers(&other.runner).await;
    assert_eq!(
        next.0.containers(&other.runner).await.unwrap(),
        vec![other_handle.id.clone()]
    );
    assert!(theirs.len() > 1, "its volumes are listed too: {theirs:?}");
    bystander.0.stop(&other_handle).await.unwrap();
}

/// Two runner DIDs that share a label: past the label's 54 characters
/// only a 32-bit digest tells DIDs apart, so a pair is found by trying
/// some 10^5 tails (a birthday search).
fn colliding_runners(prefix: &str) -> (String, String) {
    let long = format!("{prefix}-{}", "x".repeat(64));
    let mut seen = std::collections::HashMap::new();
    for n in 0u64.. {
        let raw = format!("{long}-{n}");
        if let Some(earlier) = seen.insert(label_value(&raw), raw.clone()) {
            return (earlier, raw);
        }
    }
    unreachable!("the tails are endless")
}

/// Two runners whose labels collide. Cleanup goes by the raw DID, so
/// neither removes the other's container or volumes.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn cleanup_tells_apart_runners_whose_labels_collide() {
    let mut fx = Fixture::new("collide");
    let mut twin = Fixture::new("collide-twin");
    (fx.runner, twin.runner) = colliding_runners(&fx.runner);
    assert_ne!(twin.runner, fx.runner);
    assert_eq!(label_value(&twin.runner), label_value(&fx.runner));

    // Both runs are left by a runner that died, so neither is live here.
    let crashed = docker_with(common::options()).await;
    let mut handles = Vec::new();
    for (f, name) in [(&fx, "collide"), (&twin, "collide-twin")] {
        let spec = f.spec(&crashed, name).step(Step::new("x", "true"));
        let handle = crashed
            .0
            .start(&spec, &RunLog::discard(), CancellationToken::new())
            .await
            .unwrap();
        handles.push(handle);
    }
    drop(crashed);
    let docker = docker_with(common::options()).await;
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let before = sorted(docker.leftovers(&fx.runner).await);
    let twins = docker.0.cleanup(&twin.runner, CleanupScope::All).await;
    let twin_left = docker.leftovers(&twin.runner).await;
    let fx_containers = docker.0.containers(&fx.runner).await;
    let fx_after = sorted(docker.leftovers(&fx.runner).await);
    // Cleared before judging, so a failure leaves nothing on the engine.
    let fxs = docker.0.cleanup(&fx.runner, CleanupScope::All).await;
    let both_left = [
        docker.leftovers(&fx.runner).await,
        docker.leftovers(&twin.runner).await,
    ];

    assert_eq!(twins.unwrap().removed, vec![handles[1].id.clone()]);
    assert!(twin_left.is_empty(), "{twin_left:?}");
    assert_eq!(
        fx_containers.unwrap(),
        vec![handles[0].id.clone()],
        "the other runner's container was taken"
    );
    assert_eq!(fx_after, before, "the other runner's volumes were taken");
    assert_eq!(fxs.unwrap().removed, vec![handles[0].id.clone()]);
    assert!(both_left.iter().all(Vec::is_empty), "{both_left:?}");
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn expired_containers_are_removed_by_the_default_cleanup() {
    let fx = Fixture::new("expired");
    let engine = engine().await;
    let labels = [
        (RUNNER_LABEL, label_value(&fx.runner)),
        (RUNNER_RAW_KEY, fx.runner.clone()),
        (EXPIRES_KEY, "1".to_string()),
    ];
    let spec = ContainerSpec {
        name: format!("knotless-expired-{}", std::process::id()),
        image: common::image(),
        cmd: vec!["sleep".into(), "600".into()],
        entrypoint: None,
        env: vec![],
        network_aliases: vec![],
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        user: None,
        working_dir: "/".into(),
        memory: None,
        nano_cpus: None,
        network_mode: Some("none".into()),
        security_opt: vec![],
        volumes: vec![],
        pids_limit: None,
        cap_drop: vec![],
        cap_add: vec![],
        read_only: false,
        secret_env: vec![],
        host: Default::default(),
    };
    let id = engine.create(&spec).await.unwrap();
    let executor = DockerExecutor::with_engine(Arc::new(engine), common::options());
    let report = executor
        .cleanup(&fx.runner, CleanupScope::Expired)
        .await
        .unwrap();
    assert_eq!(report.removed, vec![id]);
    assert!(executor.leftovers(&fx.runner).await.unwrap().is_empty());
}
