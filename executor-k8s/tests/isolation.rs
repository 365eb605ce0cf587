//! With a step user (`run_as_user`), the step container is root's with
//! only the capabilities of the drop to that user, and the channel's
//! agent starts each step as it: a process a step leaves behind cannot
//! start, end or settle a later step, on either exec protocol.

mod common;

use common::K8s;
use executor_conformance::fixture::{assert_nothing_left, run_to_end, Fixture};
use executor_core::{RunStatus, Step, StepIsolation};
use executor_k8s::{K8sOptions, StepIsolation as Policy};
use kube_testcluster::ClusterOptions;

fn apart() -> K8sOptions {
    K8sOptions {
        run_as_user: Some(65534),
        run_as_group: Some(65534),
        ..common::options()
    }
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_of_the_step_user_cannot_touch_the_runners_side_v5() {
    let backend = K8s::start(ClusterOptions::default(), apart()).await;
    executor_conformance::a_leftover_of_the_step_user_cannot_touch_the_runners_side(&backend).await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_of_the_step_user_cannot_touch_the_runners_side_v4() {
    let cluster = ClusterOptions {
        v4_only: true,
        ..ClusterOptions::default()
    };
    let backend = K8s::start(cluster, apart()).await;
    executor_conformance::a_leftover_of_the_step_user_cannot_touch_the_runners_side(&backend).await;
}

/// With isolation off, every process of the pod is the steps' user: the
/// run works as before, the log says one trust domain, and the result
/// says `none`.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_isolation_off_the_result_says_one_trust_domain() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            step_isolation: Policy::Off,
            ..apart()
        },
    )
    .await;
    let fx = Fixture::new("isolation-off");
    let spec = fx
        .spec(&backend, "isolation-off")
        .step(Step::new("who", "id -u"));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(text.contains("one trust domain"), "{text}");
    let environment = result.attempts[0]
        .environment
        .clone()
        .expect("the environment");
    assert_eq!(environment.step_isolation, StepIsolation::None);
    assert!(environment.agent, "{environment:?}: {text}");
    assert_nothing_left(&backend, &fx.runner).await;
}

/// `Required` with nothing to keep apart (no step user) is refused before
/// anything is made.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_isolation_without_a_step_user_is_refused_before_anything_is_made() {
    let backend = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            step_isolation: Policy::Required,
            ..common::options()
        },
    )
    .await;
    let fx = Fixture::new("isolation-required");
    let spec = fx
        .spec(&backend, "isolation-required")
        .step(Step::new("never", "echo should-not-run"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.exit_code(), 2, "{}", log.text());
    assert!(
        result
            .error
            .clone()
            .unwrap_or_default()
            .contains("step_isolation"),
        "{:?}",
        result.error
    );
    assert_nothing_left(&backend, &fx.runner).await;
}

/// A namespace that enforces Pod Security `restricted` refuses the root
/// side: asked by a dry-run before anything is made, `auto` runs every
/// process as the steps' user and says so, `required` refuses the run in
/// admission's words; `baseline` takes the root side.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_that_refuses_the_root_side_is_known_before_anything_is_made() {
    let backend = K8s::start(ClusterOptions::default(), apart()).await;
    backend
        .cluster
        .enforce_pod_security("default", "restricted");
    let fx = Fixture::new("isolation-pss");
    let spec = fx
        .spec(&backend, "isolation-pss")
        .step(Step::new("who", "id -u"));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(
        text.contains("warning: namespace default refuses the pod's root side")
            && text.contains("violates PodSecurity \"restricted:latest\"")
            && text.contains("65534\n"),
        "{text}"
    );
    let environment = result.attempts[0]
        .environment
        .clone()
        .expect("the environment");
    assert_eq!(environment.step_isolation, StepIsolation::None);
    assert_nothing_left(&backend, &fx.runner).await;

    let required = K8s::start(
        ClusterOptions::default(),
        K8sOptions {
            step_isolation: Policy::Required,
            ..apart()
        },
    )
    .await;
    required
        .cluster
        .enforce_pod_security("default", "restricted");
    let spec = fx
        .spec(&required, "isolation-pss-required")
        .step(Step::new("never", "echo should-not-run"));
    let (result, log) = run_to_end(&required, &spec).await;
    let error = result.error.clone().unwrap_or_default();
    assert_eq!(result.exit_code(), 2, "{}", log.text());
    assert!(
        error.contains("step_isolation is required")
            && error.contains("runAsUser=0 (container \"run\" must not set runAsUser=0)"),
        "{error}"
    );
    assert!(
        required
            .cluster
            .requests()
            .iter()
            .all(|r| r.method != "POST"
                || r.path.contains("selfsubjectaccessreviews")
                || r.path.ends_with("/pods")),
        "only a dry-run was sent"
    );
    assert_nothing_left(&required, &fx.runner).await;

    let baseline = K8s::start(ClusterOptions::default(), apart()).await;
    baseline.cluster.enforce_pod_security("default", "baseline");
    let spec = fx
        .spec(&baseline, "isolation-baseline")
        .step(Step::new("who", "id -u"));
    let (result, log) = run_to_end(&baseline, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    let environment = result.attempts[0]
        .environment
        .clone()
        .expect("the environment");
    assert_eq!(environment.step_isolation, StepIsolation::Uid);
    assert_nothing_left(&baseline, &fx.runner).await;
}

/// A runner killed mid-run is resumed with the steps' user still apart:
/// the resumed runner reads the user off the Job and starts the later
/// steps through the agent's drop.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_runner_is_resumed_with_the_steps_user_apart() {
    let backend = K8s::start(ClusterOptions::default(), apart()).await;
    executor_conformance::a_killed_runner_is_resumed_with_the_right_result(&backend).await;
}
