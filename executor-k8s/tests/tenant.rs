//! A tenant with only the README's namespace Role (scripts/runner-role.yaml),
//! in a namespace other than `default`: it runs and cleans up, and each
//! permission the Role grants is one the preflight needs.

use std::time::Duration;

use executor_conformance::fixture::{run_to_end, run_watched, Fixture, WatchedLog};
use executor_core::{CleanupScope, Executor, RunStatus, Step, StepStatus};
use executor_k8s::{K8sExecutor, KubeconfigSource};
use kube_testcluster::rbac::{Role, Rule};
use kube_testcluster::{ClusterOptions, TestCluster};
use tokio_util::sync::CancellationToken;

mod common;

const NAMESPACE: &str = "ci-tenant";

/// The Role's rules as scripts/runner-role.yaml writes them.
fn documented_rules() -> Vec<Rule> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/runner-role.yaml"),
    )
    .unwrap();
    let rules = kube_testcluster::rbac::rules_from_role_yaml(&text);
    assert_eq!(rules.len(), 6, "{rules:?}");
    assert_eq!(rules[4], Rule::new("", &["pods/exec"], &["create", "get"]));
    assert_eq!(rules[5], Rule::new("", &["pods/log"], &["get"]));
    rules
}

async fn tenant_executor(cluster: &TestCluster) -> K8sExecutor {
    let source = KubeconfigSource {
        kubeconfig: Some(cluster.tenant_kubeconfig(NAMESPACE).unwrap()),
        ..KubeconfigSource::default()
    };
    K8sExecutor::connect(&source, common::options())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

struct Tenant(K8sExecutor);

#[async_trait::async_trait]
impl executor_conformance::Backend for Tenant {
    fn executor(&self) -> &dyn Executor {
        &self.0
    }
    fn image(&self) -> Option<String> {
        Some(common::image())
    }
    async fn leftovers(&self, runner: &str) -> Vec<String> {
        self.0
            .leftovers(runner)
            .await
            .unwrap_or_else(|e| vec![format!("cannot list: {e}")])
    }
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_with_the_documented_role_runs_and_cleans_up_in_its_namespace() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    cluster.grant_tenant(Role {
        namespace: NAMESPACE.into(),
        rules: documented_rules(),
    });
    let backend = Tenant(tenant_executor(&cluster).await);
    let fx = Fixture::new("tenant");
    std::fs::write(fx.checkout().join("in.txt"), "checked out").unwrap();
    let spec = fx
        .spec(&backend, "tenant")
        .env("PLAIN", "a variable")
        .step(Step::new(
            "build",
            "cat in.txt; echo \" $PLAIN\"; echo made > \"$OUTPUTS_DIR/out\"",
        ));
    let (result, log) = run_to_end(&backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(
        log.text().contains("checked out a variable"),
        "{}",
        log.text()
    );
    assert!(
        cluster.jobs(NAMESPACE).is_empty()
            && cluster.pods(NAMESPACE).is_empty()
            && cluster.secrets(NAMESPACE).is_empty()
    );
    backend
        .0
        .cleanup(&fx.runner, CleanupScope::All)
        .await
        .unwrap();
    cluster.shutdown().await;
}

#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_permission_of_the_documented_role_is_needed_and_checked_first() {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    let rules = documented_rules();
    let fx = Fixture::new("tenant-minus");
    for (i, rule) in rules.iter().enumerate() {
        for verb in &rule.verbs {
            let mut fewer = rules.clone();
            fewer[i].verbs.retain(|v| v != verb);
            cluster.grant_tenant(Role {
                namespace: NAMESPACE.into(),
                rules: fewer,
            });
            let backend = Tenant(tenant_executor(&cluster).await);
            let mut spec = fx
                .spec(&backend, "tenant-minus")
                .step(Step::new("never", "echo ran"));
            if rule.resources[0] == "pods/log" {
                // Only a run with services reads their output.
                spec = spec.service(executor_core::Service::new("db", common::image()));
            }
            let (result, log) = run_to_end(&backend, &spec).await;
            let error = result.error.unwrap_or_default();
            let resource = &rule.resources[0];
            assert_eq!(
                result.status,
                RunStatus::Error,
                "{verb} {resource}: {}",
                log.text()
            );
            assert!(
                error.contains(&format!("{verb} {resource}")) && error.contains(NAMESPACE),
                "without {verb} {resource}: {error}"
            );
            assert!(!log.text().contains("ran\n"));
            // Refused before anything was created.
            assert!(
                cluster.jobs(NAMESPACE).is_empty()
                    && cluster
                        .requests()
                        .iter()
                        .all(|r| r.method != "POST" || r.path.contains("selfsubjectaccessreviews")),
                "{verb} {resource}"
            );
        }
    }
    cluster.shutdown().await;
}

/// The cluster, the tenant bound to the documented Role, and its executor.
async fn tenant_cluster() -> (TestCluster, Tenant) {
    let cluster = TestCluster::start(ClusterOptions::default()).await.unwrap();
    cluster.grant_tenant(Role {
        namespace: NAMESPACE.into(),
        rules: documented_rules(),
    });
    let backend = Tenant(tenant_executor(&cluster).await);
    (cluster, backend)
}

/// A step that prints 20 ticks and `before`, waits for `/tmp/go`, then
/// prints `after`, leaves an output and exits 6.
const WAITING_STEP: &str = "i=0; while [ $i -lt 20 ]; do echo \"tick $i\"; i=$((i+1)); done; \
     echo before; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo after; \
     echo made > \"$OUTPUTS_DIR/made.txt\"; exit 6";

/// The API server restarts mid-step and, back, refuses the tenant for a
/// while before its roles load, as a real v1.24 server did: the runner
/// rides the refusals out as it rides the outage out. The step keeps its
/// own code and every line once, the outputs come back, and nothing is
/// left.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_rides_out_a_restarted_servers_refusals_before_its_roles_load() {
    let (cluster, backend) = tenant_cluster().await;
    cluster
        .faults()
        // Longer than the runner's longest pause between tries (5 s, less
        // up to half at random): a try is sure to land in it.
        .rbac_lag_after_outage(Some(Duration::from_secs(6)));
    let fx = Fixture::new("tenant-restart");
    let spec = fx
        .spec(&backend, "tenant-restart")
        .step(Step::new("work", WAITING_STEP));
    let log = WatchedLog::default();
    let restart = async {
        log.wait_for("before").await;
        let mut over = cluster.faults().outages_over();
        cluster.outage_now(Duration::from_secs(2));
        over.wait_for(|n| *n >= 1).await.unwrap();
        // Back, and refusing the tenant: the step ends meanwhile.
        let (ns, pod) = cluster.all_pods().pop().expect("the run's pod");
        cluster.exec_in_pod(&ns, &pod, &["touch", "/tmp/go"]).await;
    };
    let (result, ()) = tokio::join!(
        run_watched(&backend, &spec, &log, CancellationToken::new()),
        restart
    );
    let text = log.text();
    assert_eq!(result.steps[0].exit_code, Some(6), "{text}");
    assert_eq!(result.steps[0].status, StepStatus::Failed, "{text}");
    for line in (0..20)
        .map(|i| format!("tick {i}\n"))
        .chain(["before\n".into(), "after\n".into()])
    {
        assert_eq!(text.matches(&line).count(), 1, "{line:?} in {text}");
    }
    assert!(fx.outputs().join("made.txt").exists(), "{text}");
    assert!(
        cluster.faults().rbac_lag_refusals() > 0,
        "the runner never met the refusals: {text}"
    );
    assert!(
        text.contains("refuses what it granted at the run's preflight"),
        "{text}"
    );
    assert!(
        cluster.jobs(NAMESPACE).is_empty()
            && cluster.pods(NAMESPACE).is_empty()
            && cluster.secrets(NAMESPACE).is_empty(),
        "{:?}",
        cluster.everything()
    );
    cluster.shutdown().await;
}

/// A 403 with no lost connection before it (here the tenant's Role is
/// taken away mid-step) is final: the run ends at once, not after the
/// reconnect window, and says what was refused.
#[cfg_attr(
    not(knotless_engine),
    ignore = "needs a container engine: run scripts/test.sh"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_403_with_no_outage_before_it_stays_final() {
    let (cluster, backend) = tenant_cluster().await;
    let fx = Fixture::new("tenant-revoked");
    let spec = fx
        .spec(&backend, "tenant-revoked")
        .step(Step::new("work", WAITING_STEP));
    let log = WatchedLog::default();
    let revoke = async {
        log.wait_for("before").await;
        cluster.grant_tenant(Role {
            namespace: NAMESPACE.into(),
            rules: Vec::new(),
        });
        let (ns, pod) = cluster.all_pods().pop().expect("the run's pod");
        cluster.exec_in_pod(&ns, &pod, &["touch", "/tmp/go"]).await;
    };
    // A 403 ridden out says so in the log the moment it starts waiting
    // (the reconnect window is 300 s): that fails the test then, not at
    // a deadline.
    let (result, ()) = tokio::select! {
        ran = async {
            tokio::join!(
                run_watched(&backend, &spec, &log, CancellationToken::new()),
                revoke
            )
        } => ran,
        () = log.appeared("waiting up to") => {
            panic!("a final 403 was ridden out as an outage: {}", log.text())
        }
    };
    let text = log.text();
    assert_eq!(result.status, RunStatus::Error, "{text}");
    assert!(text.contains("forbidden"), "{text}");
    assert!(!text.contains("refuses what it granted"), "{text}");
    assert!(!text.contains("waiting up to"), "{text}");
    // The Role back, a cleanup removes what the refused stop left.
    cluster.grant_tenant(Role {
        namespace: NAMESPACE.into(),
        rules: documented_rules(),
    });
    backend
        .0
        .cleanup(&fx.runner, CleanupScope::All)
        .await
        .unwrap();
    assert!(
        cluster.jobs(NAMESPACE).is_empty() && cluster.secrets(NAMESPACE).is_empty(),
        "{:?}",
        cluster.everything()
    );
    cluster.shutdown().await;
}
