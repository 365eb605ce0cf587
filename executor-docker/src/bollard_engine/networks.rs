//! The run's own network: created before its container, removed after.

use std::collections::HashMap;

use bollard::models::NetworkCreateRequest;
use bollard::query_parameters::ListNetworksOptions;
use executor_core::ExecutorError;

use super::{fail, status, BollardEngine};
use crate::engine::Listed;

impl BollardEngine {
    /// One create; `again` when an earlier try's answer was lost. An
    /// engine before API 1.44 (Docker 25) makes a second network of the
    /// same name rather than refusing it, and a name two networks share
    /// is one no container can join: a retry first looks for the network
    /// its first try made.
    pub(super) async fn create_network_once(
        &self,
        name: &str,
        labels: &HashMap<String, String>,
        internal: bool,
        again: bool,
    ) -> Result<(), ExecutorError> {
        if again {
            match self
                .docker
                .inspect_network(
                    name,
                    None::<bollard::query_parameters::InspectNetworkOptions>,
                )
                .await
            {
                Ok(_) => return Ok(()),
                Err(err) if status(&err) == Some(404) => {}
                Err(err) => return Err(fail(format!("looking for the run's network {name}"))(err)),
            }
        }
        let request = NetworkCreateRequest {
            name: name.to_string(),
            driver: Some("bridge".into()),
            internal: internal.then_some(true),
            labels: Some(labels.clone()),
            ..Default::default()
        };
        match self.docker.create_network(request).await {
            Ok(_) => Ok(()),
            // The name is the run's own: a 409 (from an engine that
            // refuses a second network of a name) is this very call.
            Err(err) if status(&err) == Some(409) => Ok(()),
            Err(err) => Err(fail(format!(
                "creating the run's network {name} (an engine out of address pools for \
                 networks refuses this: raise default-address-pools in its daemon.json, \
                 or run fewer untrusted runs at once)"
            ))(err)),
        }
    }

    pub(super) async fn list_networks_once(
        &self,
        label: &str,
        value: &str,
    ) -> Result<Vec<Listed>, ExecutorError> {
        let filters = HashMap::from([("label".to_string(), vec![format!("{label}={value}")])]);
        let options = ListNetworksOptions {
            filters: Some(filters),
        };
        let found = self
            .docker
            .list_networks(Some(options))
            .await
            .map_err(fail("listing networks"))?;
        Ok(found
            .into_iter()
            .filter_map(|n| {
                Some(Listed {
                    id: n.name?,
                    labels: n.labels.unwrap_or_default(),
                })
            })
            .collect())
    }

    pub(super) async fn remove_network_once(&self, name: &str) -> Result<bool, ExecutorError> {
        match self.docker.remove_network(name).await {
            Ok(()) => Ok(true),
            Err(err) if status(&err) == Some(404) => Ok(true),
            // A container is still on it.
            Err(err) if matches!(status(&err), Some(403 | 409)) => Ok(false),
            Err(err) => Err(fail(format!("removing network {name}"))(err)),
        }
    }
}
