//! `--pod-template` on the test cluster: the examples of
//! docs/kubernetes-operators.md as written, a claim kept between runs and
//! read by a step, RuntimeClass and PriorityClass objects met by
//! admission, and templates refused by field and line.

use super::*;

/// The `<!-- pod-template: NAME -->` blocks of docs/kubernetes-operators.md,
/// written into `dir`.
fn doc_templates(dir: &Path) -> Vec<(String, PathBuf)> {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/kubernetes-operators.md"),
    )
    .unwrap();
    let mut found = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .strip_prefix("<!-- pod-template: ")
            .and_then(|rest| rest.strip_suffix(" -->"))
        else {
            continue;
        };
        assert_eq!(lines.next(), Some("```yaml"), "{name}");
        let text: Vec<&str> = lines.by_ref().take_while(|l| *l != "```").collect();
        let path = dir.join(name);
        std::fs::write(&path, text.join("\n") + "\n").unwrap();
        found.push((name.to_string(), path));
    }
    found
}

async fn kubectl_apply(cluster: &TestCluster, yaml: &str) {
    use tokio::io::AsyncWriteExt;
    let mut child = Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
        .env("KUBECONFIG", cluster.kubeconfig())
        .env("HOME", std::env::temp_dir())
        .args(["create", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(yaml.as_bytes()).await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "kubectl create: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A run of `script` as one step with `--pod-template template`.
fn templated(kubeconfig: &Path, dir: &Path, name: &str, template: &Path, script: &str) -> Command {
    let steps = dir.join(format!("{name}.tsv"));
    std::fs::write(&steps, format!("step\t{script}\n")).unwrap();
    let mut cmd = cli(kubeconfig);
    cmd.args(["run", "--executor", "k8s", "--image", &image()])
        .args(["--name", name, "--runner", "did:plc:templates"])
        .arg("--workdir")
        .arg(dir)
        .arg("--steps-file")
        .arg(&steps)
        .arg("--pod-template")
        .arg(template)
        .arg("--outputs")
        .arg(dir.join(format!("{name}-out")))
        .arg("--result")
        .arg(dir.join(format!("{name}.json")))
        .arg("--log")
        .arg(dir.join(format!("{name}.log")));
    cmd
}

/// The docs' three templates run as written: the claim is mounted, filled
/// by one run and read by the next; the sandboxed one meets its
/// RuntimeClass and PriorityClass; the annotated one is shown merged by
/// `--dry-run` and runs. Without the classes, admission refuses the pod
/// and the run ends at once with exit 2 in its words.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_templates_run_on_the_test_cluster() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let templates = doc_templates(dir.path());
    let names: Vec<&str> = templates.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["warm-cache.yaml", "sandboxed.yaml", "keep-node.yaml"]
    );
    let path = |name: &str| templates.iter().find(|(n, _)| n == name).unwrap().1.clone();
    let kubeconfig = cluster.kubeconfig().to_path_buf();

    // The claim must exist before the Job is made.
    let missing = templated(
        &kubeconfig,
        dir.path(),
        "no-claim",
        &path("warm-cache.yaml"),
        "true",
    )
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("PersistentVolumeClaim warm-cache"),
        "{stderr}"
    );
    assert!(stderr.contains("--pod-template"), "{stderr}");
    assert!(cluster.jobs("default").is_empty());

    // A tenant with the minimal Role is told the one permission a claim
    // needs; the Role's commented rule, uncommented, gives it.
    let role = std::fs::read_to_string(script("runner-role.yaml")).unwrap();
    let grant = |role: &str| {
        cluster.grant_tenant(kube_testcluster::rbac::Role {
            namespace: "default".into(),
            rules: kube_testcluster::rbac::rules_from_role_yaml(role),
        })
    };
    grant(&role);
    let tenant = cluster.tenant_kubeconfig("default").unwrap();
    let unread = templated(
        &tenant,
        dir.path(),
        "tenant",
        &path("warm-cache.yaml"),
        "true",
    )
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&unread.stderr);
    assert_eq!(unread.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("get persistentvolumeclaims"), "{stderr}");
    grant(
        &role
            .replace("  # - apiGroups", "  - apiGroups")
            .replace("  #   ", "    "),
    );
    let granted = templated(
        &tenant,
        dir.path(),
        "tenant",
        &path("warm-cache.yaml"),
        "true",
    )
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&granted.stderr);
    assert_eq!(granted.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("PersistentVolumeClaim warm-cache"),
        "{stderr}"
    );

    kubectl_apply(
        &cluster,
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata:\n  name: warm-cache\nspec:\n  accessModes: [ReadWriteOnce]\n  resources:\n    requests:\n      storage: 1Gi\n",
    )
    .await;
    let fill = templated(
        &kubeconfig,
        dir.path(),
        "fill",
        &path("warm-cache.yaml"),
        "mkdir -p $CARGO_HOME && echo warm > $CARGO_HOME/marker",
    )
    .output()
    .await
    .unwrap();
    assert!(
        fill.status.success(),
        "{}",
        String::from_utf8_lossy(&fill.stderr)
    );
    let read = templated(
        &kubeconfig,
        dir.path(),
        "read",
        &path("warm-cache.yaml"),
        "test \"$(cat /cache/cargo/marker)\" = warm && echo found-the-warm-cache",
    )
    .output()
    .await
    .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    let log = std::fs::read_to_string(dir.path().join("read.log")).unwrap();
    assert!(log.contains("found-the-warm-cache"), "{log}");

    // An init container runs to its end before the steps, with the
    // template's mounts; one that fails fails the run instead of leaving
    // it waiting.
    let seeded = |code: u8| {
        [
            "volumes:",
            "  - name: cache",
            "    persistentVolumeClaim:",
            "      claimName: warm-cache",
            "initContainers:",
            "  - name: seed",
            &format!("    image: {}", image()),
            &format!("    command: [sh, -c, 'echo seeded > /cache/seed; exit {code}']"),
            "    volumeMounts:",
            "      - name: cache",
            "        mountPath: /cache",
            "containers:",
            "  - name: run",
            "    volumeMounts:",
            "      - name: cache",
            "        mountPath: /cache",
        ]
        .join("\n")
    };
    let init = dir.path().join("init.yaml");
    std::fs::write(&init, seeded(0)).unwrap();
    let after_init = templated(
        &kubeconfig,
        dir.path(),
        "init",
        &init,
        "grep seeded /cache/seed",
    )
    .output()
    .await
    .unwrap();
    assert!(
        after_init.status.success(),
        "{}",
        String::from_utf8_lossy(&after_init.stderr)
    );
    std::fs::write(&init, seeded(3)).unwrap();
    let failed_init = templated(&kubeconfig, dir.path(), "init-fails", &init, "true")
        .output()
        .await
        .unwrap();
    assert!(!failed_init.status.success());
    let log = std::fs::read_to_string(dir.path().join("init-fails.log")).unwrap();
    assert!(!log.contains("step step"), "no step may start: {log}");

    // No RuntimeClass yet: admission refuses the pod, and the run does
    // not wait out the pod timeout for a pod that will never exist.
    let refused = templated(
        &kubeconfig,
        dir.path(),
        "no-class",
        &path("sandboxed.yaml"),
        "true",
    )
    .output()
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("RuntimeClass \"gvisor\" not found"),
        "{stderr}"
    );
    assert!(cluster.jobs("default").is_empty());
    // The test engine has no gVisor: the class's handler here is the
    // engine's own runtime, runc, which the kubelet passes on by name.
    kubectl_apply(
        &cluster,
        "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: gvisor\nhandler: runc\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata:\n  name: ci-untrusted\nvalue: 1000\n",
    )
    .await;
    let sandboxed = templated(
        &kubeconfig,
        dir.path(),
        "sandboxed",
        &path("sandboxed.yaml"),
        "true",
    )
    .args(["--trigger", "pull"])
    .output()
    .await
    .unwrap();
    assert!(
        sandboxed.status.success(),
        "{}",
        String::from_utf8_lossy(&sandboxed.stderr)
    );

    let dry = templated(
        &kubeconfig,
        dir.path(),
        "keep-node",
        &path("keep-node.yaml"),
        "true",
    )
    .arg("--dry-run")
    .output()
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&dry.stdout);
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    assert!(
        stdout.contains("cluster-autoscaler.kubernetes.io/safe-to-evict: \"false\""),
        "{stdout}"
    );
    assert!(stdout.contains("ephemeral-storage: 1Gi"), "{stdout}");
    let kept = templated(
        &kubeconfig,
        dir.path(),
        "keep-node",
        &path("keep-node.yaml"),
        "true",
    )
    .output()
    .await
    .unwrap();
    assert!(
        kept.status.success(),
        "{}",
        String::from_utf8_lossy(&kept.stderr)
    );
    assert!(cluster.jobs("default").is_empty());
    cluster.shutdown().await;
}

/// A template that sets what the runner owns is exit 2 naming the file,
/// the field and its line, before anything is made; an untrusted run is
/// refused a privileged sidecar a trusted one may have.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_that_take_what_the_runner_owns_are_refused_by_field_and_line() {
    let dir = tempfile::tempdir().unwrap();
    // Nothing is contacted: the kubeconfig does not exist.
    let kubeconfig = dir.path().join("no-such-kubeconfig");
    let owned = dir.path().join("owned.yaml");
    std::fs::write(
        &owned,
        "kind: Pod\nspec:\n  containers:\n    - name: run\n      image: alpine:latest\n",
    )
    .unwrap();
    let out = templated(&kubeconfig, dir.path(), "owned", &owned, "true")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--pod-template {}: spec.containers[0].image (line 5)",
            owned.display()
        )),
        "{stderr}"
    );

    let dind = dir.path().join("dind.yaml");
    std::fs::write(
        &dind,
        "containers:\n  - name: docker\n    image: docker:dind\n    securityContext:\n      privileged: true\n",
    )
    .unwrap();
    let untrusted = templated(&kubeconfig, dir.path(), "dind", &dind, "true")
        .args(["--trigger", "pull", "--dry-run"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&untrusted.stderr);
    assert_eq!(untrusted.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("containers[0].securityContext.privileged (line 5)"),
        "{stderr}"
    );
    let trusted = templated(&kubeconfig, dir.path(), "dind", &dind, "true")
        .arg("--dry-run")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&trusted.stdout);
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    assert!(stdout.contains("image: \"docker:dind\""), "{stdout}");
}

/// `--run-as-user` keeps the steps' user apart: `--dry-run` shows the
/// root side's pod, the capabilities it keeps and the admission dry-run it
/// asks first; `--step-isolation required` with no user to keep apart is
/// exit 2 naming both flags.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dry_run_shows_the_root_side_and_the_admission_asked_first() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("no-such-kubeconfig");
    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "spec: {}\n").unwrap();
    let dry = templated(&kubeconfig, dir.path(), "apart", &empty, "true")
        .args(["--run-as-user", "1000", "--dry-run"])
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&dry.stdout);
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
    let admission = stdout.find("pods?dryRun=All").expect("the admission asked");
    let job = stdout.find("POST /apis/batch/v1").expect("the Job made");
    assert!(admission < job, "{stdout}");
    for shown in [
        "runAsUser: 0",
        "- SETUID",
        "- KILL",
        "dev.knotless.step-user: \"1000\"",
    ] {
        assert!(stdout.contains(shown), "{shown}: {stdout}");
    }
    let refused = templated(&kubeconfig, dir.path(), "nothing-apart", &empty, "true")
        .args(["--step-isolation", "required", "--dry-run"])
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--step-isolation is required") && stderr.contains("--run-as-user"),
        "{stderr}"
    );
}
