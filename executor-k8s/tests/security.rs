//! The step container's security context, as a real kubelet applies it
//! (the test cluster maps it onto its containers as the kubelet does).

mod common;

use common::K8s;
use executor_conformance::fixture::{assert_nothing_left, run_to_end, write, Fixture};
use executor_core::{RunStatus, Step};
use executor_k8s::K8sOptions;
use kube_testcluster::ClusterOptions;

/// Effective capabilities of the step's shell, as /proc shows them.
const CAP_EFF: &str = "grep CapEff /proc/self/status";

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_run_with_no_capability_unless_one_is_added() {
    let backend = K8s::start(ClusterOptions::default(), common::options()).await;
    let fx = Fixture::new("nocaps");
    write(&fx.checkout(), "owned-by-the-host.txt", "from the host");
    let spec = fx.spec(&backend, "nocaps").step(Step::new(
        "caps",
        format!(
            "{CAP_EFF}; cat owned-by-the-host.txt; \
             if chown 1234 owned-by-the-host.txt 2>/dev/null; then echo chown-worked; exit 1; fi"
        ),
    ));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert!(text.contains("from the host"), "{text}");
    assert_nothing_left(&backend, &fx.runner).await;

    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            cap_add: vec!["CHOWN".into()],
            ..common::options()
        },
    )
    .await;
    let fx = Fixture::new("chown");
    let spec = fx
        .spec(&backend, "chown")
        .step(Step::new("chown", "touch f && chown 1234 f && ls -ln f"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(log.text().contains(" 1234 "), "{}", log.text());
    assert_nothing_left(&backend, &fx.runner).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_run_as_the_user_asked_and_still_get_their_files() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            run_as_user: Some(1000),
            run_as_group: Some(1000),
            run_as_non_root: true,
            ..common::options()
        },
    )
    .await;
    let fx = Fixture::new("nonroot");
    write(&fx.checkout(), "src/main.c", "int main;");
    let spec = fx.spec(&backend, "nonroot").step(Step::new(
        "who",
        "id -u; id -g; cat src/main.c; echo built > \"$OUTPUTS_DIR/artifact\"",
    ));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(text.contains("1000\n1000\nint main;"), "{text}");
    assert_eq!(
        std::fs::read_to_string(fx.outputs().join("artifact")).unwrap(),
        "built\n"
    );
    assert_nothing_left(&backend, &fx.runner).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_as_non_root_on_a_root_image_fails_before_any_step_naming_why() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            run_as_non_root: true,
            ..common::options()
        },
    )
    .await;
    let fx = Fixture::new("rootimage");
    let spec = fx
        .spec(&backend, "rootimage")
        .step(Step::new("never", "echo should-not-run"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Error, "{}", log.text());
    let error = result.error.clone().unwrap_or_default();
    assert!(
        error.contains("CreateContainerConfigError") && error.contains("runAsNonRoot"),
        "{error}"
    );
    // The run's own configuration: exit 2, and no retry would help.
    let failure = result.failure.clone().unwrap();
    assert_eq!(failure.kind, executor_core::FailureKind::Input);
    assert!(!failure.retryable);
    assert_eq!(result.exit_code(), 2);
    assert!(!log.text().contains("should-not-run"));
    assert_nothing_left(&backend, &fx.runner).await;
}

/// A step's script never travels in an exec's URL, which an API server
/// (and every proxy before it) may log: it goes in with the checkout, as
/// a file in the state folder. Seen failing with the script in the argv.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn step_scripts_never_appear_in_an_exec_url() {
    let backend = K8s::start(ClusterOptions::default(), common::options()).await;
    let fx = Fixture::new("script-url");
    let spec = fx
        .spec(&backend, "script-url")
        .step(Step::new("s", "echo marker-in-the-script-7f3a"));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(text.contains("marker-in-the-script-7f3a"), "{text}");
    let execs: Vec<String> = backend
        .cluster
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/exec"))
        .map(|r| r.query)
        .collect();
    assert!(!execs.is_empty());
    for query in &execs {
        assert!(!query.contains("marker-in-the-script"), "{query}");
    }
    assert_nothing_left(&backend, &fx.runner).await;
}
