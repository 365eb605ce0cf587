//! Service containers: reached by name from the first step, ready before
//! it, their output kept, and their failures the run's, named.

use std::time::Duration;

use executor_core::{FailureKind, Readiness, RunStatus, Service, Step, StepStatus};

use crate::fixture::{assert_nothing_left, run_to_end, Fixture};
use crate::Backend;

/// A web server from the backend's image, serving what its variable says.
fn web(backend: &dyn Backend) -> Service {
    Service::new("web", backend.image().unwrap_or_default())
        .env("GREETING", "hello-from-web")
        .command(
            "echo web-started; mkdir -p /tmp/srv; echo \"$GREETING\" > /tmp/srv/index.html; \
             exec httpd -f -p 8080 -h /tmp/srv",
        )
        .ready(Readiness::Tcp(8080))
}

/// What a step runs to fetch `/` from `host`:8080 with busybox's `nc`.
fn fetch(host: &str) -> String {
    format!("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc {host} 8080")
}

/// A service the backend has (here busybox `httpd`) is ready before the
/// first step, which reaches it by name; its output is in the run log;
/// nothing of it is left. A backend without services refuses the run as
/// bad input before anything starts.
pub async fn a_service_is_reached_by_name_from_the_first_step(backend: &dyn Backend) {
    let fx = Fixture::new("service");
    let spec = fx
        .spec(backend, "service")
        .service(web(backend))
        .step(Step::new("get", fetch("web")));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    if !backend.services() {
        assert_eq!(result.status, RunStatus::Error, "{text}");
        let failure = result.failure.expect("a failure");
        assert_eq!(failure.kind, FailureKind::Input);
        assert!(
            failure.message.contains("service web"),
            "{}",
            failure.message
        );
        assert_nothing_left(backend, &fx.runner).await;
        return;
    }
    assert_eq!(
        result.status,
        RunStatus::Success,
        "{text}\n{:?}",
        result.error
    );
    assert!(text.contains("hello-from-web"), "{text}");
    let ready = text
        .find("service web: ready")
        .expect("the service was ready");
    let first_step = text.find("step get: started").expect("the step started");
    assert!(ready < first_step, "{text}");
    assert!(text.contains("web| web-started"), "{text}");
    assert_nothing_left(backend, &fx.runner).await;
}

/// A service that exits, is never ready, or whose image cannot be had
/// fails the run before any step, as `service`, naming the service and
/// its last lines; a service that dies during a step is named in that
/// step's result. Nothing is left after any of them. A backend without
/// services fails it unless [`conformance_tests!`](crate::conformance_tests)
/// lists it as ignored (`services`).
pub async fn a_service_that_fails_is_named_with_its_last_lines(backend: &dyn Backend) {
    assert!(
        backend.services(),
        "this backend has no services: give conformance_tests! `services: \"why\"`"
    );
    let image = backend.image().unwrap_or_default();
    let cases = [
        (
            Service::new("db", &image)
                .command("echo db-is-broken; exit 3")
                .ready(Readiness::Tcp(5432)),
            vec!["service db", "exited 3", "db-is-broken"],
        ),
        (
            Service::new("db", &image)
                .command("echo db-waits-forever; exec sleep 600")
                .ready(Readiness::Tcp(5432)),
            vec!["service db", "not ready within 2s", "db-waits-forever"],
        ),
        (
            Service::new("db", "knotless-no-such-image:none"),
            vec!["service db", "knotless-no-such-image:none"],
        ),
    ];
    for (service, says) in cases {
        let fx = Fixture::new("service-fails");
        let mut spec = fx
            .spec(backend, "service-fails")
            .service(service)
            .step(Step::new("never", "echo must-not-run"));
        spec.service_timeout = Duration::from_secs(2);
        let (result, log) = run_to_end(backend, &spec).await;
        let text = log.text();
        let failure = result.failure.clone().expect("a failure");
        assert_eq!(failure.kind, FailureKind::Service, "{text}");
        for said in says {
            assert!(
                failure.message.contains(said),
                "{said}: {}",
                failure.message
            );
        }
        assert_eq!(result.steps[0].status, StepStatus::Skipped);
        assert!(!text.contains("must-not-run"), "{text}");
        assert_nothing_left(backend, &fx.runner).await;
    }

    // A service that ends when a step talks to it: the step then fails,
    // and its result says the service is gone.
    let fx = Fixture::new("service-dies");
    let spec = fx
        .spec(backend, "service-dies")
        .service(
            Service::new("once", &image)
                .command("nc -l -p 8080 >/dev/null; echo once-is-done; exit 7")
                .ready(Readiness::Tcp(8080)),
        )
        .step(Step::new(
            "talk",
            "echo bye | nc once 8080 || true; \
             until ! nslookup once >/dev/null 2>&1 && ! nc -z once 8080 2>/dev/null; do sleep 0.1; done; \
             exit 1",
        ));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    assert_eq!(result.steps[0].status, StepStatus::Failed, "{text}");
    let error = result.steps[0].error.clone().unwrap_or_default();
    assert!(
        error.contains("service once exited 7 during the step"),
        "{error}\n{text}"
    );
    assert_nothing_left(backend, &fx.runner).await;
}
