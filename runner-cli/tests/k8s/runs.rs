//! Runs on the test cluster as the README shows, dry runs, and what a stopped runner leaves

use super::*;

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
