//! A run's service containers on a real engine: hardened as the run's
//! container, found again by a new runner process without being taken for
//! the run, spared by cleanup while the run lives, removed by its stop.

mod common;

use std::time::Duration;

use bollard::query_parameters::InspectContainerOptions;
use executor_conformance::fixture::Fixture;
use executor_core::labels::{label_value, RUNNER_LABEL};
use executor_core::{CleanupScope, Executor, Readiness, RunLog, Service, Step, Trust};
use executor_docker::engine::Engine as _;
use tokio_util::sync::CancellationToken;

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test]
async fn services_are_hardened_found_again_spared_and_stopped_with_their_run() {
    let fx = Fixture::new("docker-services");
    let first = common::executor(common::options()).await;
    let backend = common::Docker(common::executor(common::options()).await);
    let mut spec = fx
        .spec(&backend, "docker-services")
        .service(
            Service::new("web", common::image())
                .command("exec httpd -f -p 8080 -h /tmp")
                .ready(Readiness::Tcp(8080)),
        )
        .step(Step::new("never", "true"));
    spec.trust = Trust::Untrusted;
    spec.run_timeout = Duration::from_secs(600);
    let handle = first
        .start(&spec, &RunLog::discard(), CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let engine = executor_docker::BollardEngine::connect().await.unwrap();
    let listed = engine
        .list(RUNNER_LABEL, &label_value(&fx.runner))
        .await
        .unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let service = listed
        .iter()
        .find(|c| c.labels.get("knotless.service").map(String::as_str) == Some("web"))
        .expect("the service's container, labelled with its name");
    let run = listed.iter().find(|c| c.id != service.id).unwrap();
    let network = run
        .labels
        .get("knotless.network")
        .expect("the run's own network");

    // The service has the run container's hardening and its network only.
    let docker = bollard::Docker::connect_with_local_defaults().unwrap();
    let inspected = docker
        .inspect_container(&service.id, None::<InspectContainerOptions>)
        .await
        .unwrap();
    let host = inspected.host_config.unwrap_or_default();
    for cap in executor_docker::UNTRUSTED_CAP_DROP {
        assert!(
            host.cap_drop.iter().flatten().any(|c| c == cap),
            "{:?}",
            host.cap_drop
        );
    }
    assert!(
        host.security_opt
            .iter()
            .flatten()
            .any(|o| o == "no-new-privileges"),
        "{:?}",
        host.security_opt
    );
    assert_eq!(host.network_mode.as_deref(), Some(network.as_str()));
    assert_ne!(host.privileged, Some(true));

    // A new runner process finds the run, not its service, as the run.
    let second = common::executor(common::options()).await;
    let found = second
        .reattach(&fx.runner, "docker-services")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(found.handle.id, run.id);

    // Cleanup of everything spares the live run and its service.
    first.cleanup(&fx.runner, CleanupScope::All).await.unwrap();
    let left = first.leftovers(&fx.runner).await.unwrap();
    assert!(
        left.contains(&service.id) && left.contains(&run.id),
        "{left:?}"
    );

    // The run's stop removes the service, the container and the network.
    first.stop(&handle).await.unwrap();
    let left = first.leftovers(&fx.runner).await.unwrap();
    assert!(left.is_empty(), "{left:?}");
}
