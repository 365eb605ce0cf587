//! The test cluster and executor the Kubernetes tests use.

#![allow(dead_code)]

pub mod arm64;

use std::time::Duration;

use executor_conformance::Backend;
use executor_core::{Executor, RunSpec};
use executor_k8s::{K8sExecutor, K8sOptions, KubeconfigSource};
use kube_testcluster::{ClusterOptions, TestCluster};

/// The local busybox image `scripts/prepare-engine.sh` imports.
pub fn image() -> String {
    std::env::var("KNOTLESS_TEST_IMAGE").unwrap_or_else(|_| "knotless-busybox:local".into())
}

/// Options for tests: short waits, so a fault shows fast.
pub fn options() -> K8sOptions {
    K8sOptions {
        pod_timeout: Duration::from_secs(60),
        stop_timeout: Duration::from_secs(60),
        keepalive: Duration::from_secs(1),
        ..K8sOptions::default()
    }
}

/// A test cluster and an executor on it.
pub struct K8s {
    pub executor: K8sExecutor,
    pub cluster: TestCluster,
    /// How the executor was made: a second runner is made the same way.
    made: (KubeconfigSource, K8sOptions),
}

impl K8s {
    pub async fn start(cluster: ClusterOptions, options: K8sOptions) -> Self {
        Self::start_in(None, cluster, options).await
    }

    /// As [`K8s::start`], with the executor in `namespace` (else the
    /// kubeconfig's, `default`).
    pub async fn start_in(
        namespace: Option<&str>,
        cluster: ClusterOptions,
        options: K8sOptions,
    ) -> Self {
        let cluster = TestCluster::start(cluster)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        if let Some(ns) = namespace {
            cluster.create_namespace(ns);
        }
        let source = KubeconfigSource {
            kubeconfig: Some(cluster.kubeconfig().to_path_buf()),
            namespace: namespace.map(str::to_string),
            ..KubeconfigSource::default()
        };
        let executor = K8sExecutor::connect(&source, options.clone())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        K8s {
            executor,
            cluster,
            made: (source, options),
        }
    }
}

impl K8s {
    /// Runs `argv` in the run's pod straight through the engine under the
    /// test cluster's kubelet, not the API server: it works in an outage.
    pub async fn in_the_pod(&self, argv: &[&str]) {
        let (ns, pod) = self
            .cluster
            .all_pods()
            .pop()
            .unwrap_or_else(|| panic!("no pod to run {argv:?} in"));
        self.cluster.exec_in_pod(&ns, &pod, argv).await;
    }
}

#[async_trait::async_trait]
impl Backend for K8s {
    fn executor(&self) -> &dyn Executor {
        &self.executor
    }
    fn image(&self) -> Option<String> {
        Some(image())
    }
    fn services(&self) -> bool {
        true
    }
    fn adjust(&self, _spec: &mut RunSpec) {}
    async fn leftovers(&self, runner: &str) -> Vec<String> {
        let mut found = self
            .executor
            .leftovers(runner)
            .await
            .unwrap_or_else(|e| vec![format!("cannot list: {e}")]);
        // Every object in any namespace, whatever its labels: each case
        // has a cluster of its own, so anything there is left behind.
        found.extend(self.cluster.everything());
        found
    }
    async fn lose_environment(&self, _runner: &str) -> bool {
        let pods = self.cluster.all_pods();
        for (ns, pod) in &pods {
            self.cluster
                .pod_fault(ns, pod, kube_testcluster::PodFault::Delete)
                .await;
        }
        !pods.is_empty()
    }
    async fn cut_streams_after(&self, bytes: &[u64]) -> bool {
        self.cluster.faults().cut_execs_after(bytes);
        true
    }
    async fn another_runner(&self) -> Option<Box<dyn Executor>> {
        let (source, options) = &self.made;
        let executor = K8sExecutor::connect(source, options.clone())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Some(Box::new(executor))
    }
}
