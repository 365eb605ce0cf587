//! With a step user, the runner's side of the container (the channel's
//! agent, each step's supervisor and copier, the state folder) runs as
//! root apart from the steps: a process a step leaves behind, of the
//! step's uid, can neither signal, limit nor write into any of them, nor
//! replace a file they trust, so it cannot start, end or settle a later
//! step.

mod common;

use executor_conformance::fixture::{assert_nothing_left, run_to_end, Fixture};
use executor_core::{RunStatus, Step, StepIsolation};
use executor_docker::DockerOptions;

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_of_the_step_user_cannot_touch_the_runners_side() {
    let backend = common::Docker(
        common::executor(DockerOptions {
            user: Some("65534:65534".into()),
            ..common::options()
        })
        .await,
    );
    executor_conformance::a_leftover_of_the_step_user_cannot_touch_the_runners_side(&backend).await;
}

/// Without a step user every process shares the image's user: the
/// result says so.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_step_user_the_result_says_one_trust_domain() {
    let backend = common::Docker(common::executor(common::options()).await);
    let fx = Fixture::new("isolation-none");
    let spec = fx
        .spec(&backend, "isolation-none")
        .step(Step::new("one", "true"));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    let environment = result.attempts[0]
        .environment
        .clone()
        .expect("the environment");
    assert_eq!(environment.step_isolation, StepIsolation::None);
    assert!(environment.agent, "{environment:?}");
    assert_nothing_left(&backend, &fx.runner).await;
}

/// A root step user is no user apart: one trust domain, said in the log.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_root_step_user_is_one_trust_domain_and_the_log_says_so() {
    let backend = common::Docker(
        common::executor(DockerOptions {
            user: Some("0:0".into()),
            ..common::options()
        })
        .await,
    );
    let fx = Fixture::new("isolation-root");
    let spec = fx
        .spec(&backend, "isolation-root")
        .step(Step::new("one", "id -u"));
    let (result, log) = run_to_end(&backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    assert!(text.contains("one trust domain"), "{text}");
    let environment = result.attempts[0]
        .environment
        .clone()
        .expect("the environment");
    assert_eq!(environment.step_isolation, StepIsolation::None);
    assert_nothing_left(&backend, &fx.runner).await;
}
