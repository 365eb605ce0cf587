//! A pod's volumes beyond emptyDir: a PersistentVolumeClaim is an engine
//! volume of its own, kept while the claim is (so a warm cache outlives
//! the pods that use it); any other kind the kubelet cannot serve, and
//! says so as a real one does when a mount fails.

use std::collections::HashMap;

use bollard::models::{Mount, MountType, VolumeCreateRequest};
use bollard::query_parameters::{ListVolumesOptions, RemoveVolumeOptions};
use serde_json::Value;

use super::{Kubelet, CLUSTER_LABEL};

/// The volume kinds this kubelet serves.
const SERVED: [&str; 2] = ["emptyDir", "persistentVolumeClaim"];

impl Kubelet {
    /// The engine volume holding claim `claim` of `ns`.
    fn claim_volume(&self, ns: &str, claim: &str) -> String {
        format!("knotless-claim-{}-{ns}-{claim}", self.cluster_id)
    }

    /// The first volume of `spec` of a kind this kubelet cannot mount, as
    /// the kubelet's FailedMount message.
    pub(crate) fn unmountable(spec: &Value) -> Option<String> {
        spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| !SERVED.iter().any(|kind| v.get(*kind).is_some()))
            .map(|v| {
                format!(
                    "MountVolume.SetUp failed for volume {:?} : the test kubelet mounts emptyDir and persistentVolumeClaim volumes only",
                    v["name"].as_str().unwrap_or_default()
                )
            })
    }

    /// The mounts of `container` that are claims: each claim's volume is
    /// made (labelled as this cluster's) the first time a pod uses it.
    pub(crate) async fn claim_mounts(
        &self,
        ns: &str,
        spec: &Value,
        container: &Value,
    ) -> Vec<Mount> {
        let claims: HashMap<&str, (&str, bool)> = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| {
                let claim = &v["persistentVolumeClaim"];
                Some((
                    v["name"].as_str()?,
                    (claim["claimName"].as_str()?, claim["readOnly"] == true),
                ))
            })
            .collect();
        let mut mounts = Vec::new();
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let Some((claim, read_only)) = mount["name"].as_str().and_then(|n| claims.get(n))
            else {
                continue;
            };
            let volume = self.claim_volume(ns, claim);
            let request = VolumeCreateRequest {
                name: Some(volume.clone()),
                labels: Some(HashMap::from([(
                    CLUSTER_LABEL.to_string(),
                    self.cluster_id.clone(),
                )])),
                ..Default::default()
            };
            if let Err(err) = self.docker.create_volume(request).await {
                tracing::warn!(%err, %volume, "test kubelet: making a claim's volume");
            }
            mounts.push(Mount {
                target: mount["mountPath"].as_str().map(str::to_string),
                source: Some(volume),
                typ: Some(MountType::VOLUME),
                read_only: Some(*read_only || mount["readOnly"] == true),
                ..Default::default()
            });
        }
        mounts
    }

    /// Removes the volume of a deleted claim (a pod still using it keeps
    /// it, as the claim's protection finalizer would).
    pub(crate) async fn claim_deleted(&self, ns: &str, claim: &str) {
        let volume = self.claim_volume(ns, claim);
        if let Err(err) = self
            .docker
            .remove_volume(&volume, None::<RemoveVolumeOptions>)
            .await
        {
            tracing::debug!(%err, %volume, "test kubelet: removing a claim's volume");
        }
    }
}

/// Removes every volume labelled with `cluster_id`.
pub async fn remove_cluster_volumes(docker: &bollard::Docker, cluster_id: &str) {
    let filters = HashMap::from([(
        "label".to_string(),
        vec![format!("{CLUSTER_LABEL}={cluster_id}")],
    )]);
    let options = ListVolumesOptions {
        filters: Some(filters),
    };
    if let Ok(found) = docker.list_volumes(Some(options)).await {
        for volume in found.volumes.into_iter().flatten() {
            let _ = docker
                .remove_volume(&volume.name, None::<RemoveVolumeOptions>)
                .await;
        }
    }
}
