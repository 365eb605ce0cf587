//! The shared conformance suite on the Kubernetes executor, against the
//! test cluster in v4-only mode (it refuses `v5.channel.k8s.io`, as API
//! servers before 1.30 do).

mod common;

use executor_conformance::conformance_tests;
use kube_testcluster::ClusterOptions;

async fn k8s() -> common::K8s {
    let cluster = ClusterOptions {
        v4_only: true,
        ..ClusterOptions::default()
    };
    common::K8s::start(cluster, common::options()).await
}

conformance_tests!(k8s);
