//! The shared conformance suite on the Kubernetes executor, against the
//! test cluster speaking `v5.channel.k8s.io`, in a namespace other than
//! `default` (the v4 suite runs in `default`).

mod common;

use executor_conformance::conformance_tests;
use kube_testcluster::ClusterOptions;

async fn k8s() -> common::K8s {
    common::K8s::start_in(
        Some("ci-tenant"),
        ClusterOptions::default(),
        common::options(),
    )
    .await
}

conformance_tests!(engine: k8s);
