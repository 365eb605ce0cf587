//! A tenant with only the README's namespace Role (scripts/runner-role.yaml),
//! in a namespace other than `default`: it runs and cleans up, and each
//! permission the Role grants is one the preflight needs.

use executor_conformance::fixture::{run_to_end, Fixture};
use executor_core::{CleanupScope, Executor, RunStatus, Step};
use executor_k8s::{K8sExecutor, KubeconfigSource};
use kube_testcluster::rbac::{Role, Rule};
use kube_testcluster::{ClusterOptions, TestCluster};

mod common;

const NAMESPACE: &str = "ci-tenant";

/// The Role's rules as scripts/runner-role.yaml writes them.
fn documented_rules() -> Vec<Rule> {
    let text = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/runner-role.yaml"),
    )
    .unwrap();
    let rules = kube_testcluster::rbac::rules_from_role_yaml(&text);
    assert_eq!(rules.len(), 5, "{rules:?}");
    assert_eq!(rules[4], Rule::new("", &["pods/exec"], &["create", "get"]));
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
            let spec = fx
                .spec(&backend, "tenant-minus")
                .step(Step::new("never", "echo ran"));
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
