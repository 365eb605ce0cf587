//! What of a runner exists on the engine: its containers, volumes and
//! networks, found by label and checked against its raw DID.

use super::*;

impl DockerExecutor {
    /// Every container of `runner`, live or not, then every volume of its
    /// (as `volume/NAME`) and every network (as `network/NAME`), by
    /// label: the probe for leftovers.
    ///
    /// # Errors
    /// `Backend` when the engine could not be listed.
    pub async fn leftovers(&self, runner: &str) -> Result<Vec<String>, ExecutorError> {
        let mut found = self.containers(runner).await?;
        found.extend(
            self.runner_volumes(runner)
                .await?
                .into_iter()
                .map(|name| format!("volume/{name}")),
        );
        found.extend(
            self.runner_networks(runner)
                .await?
                .into_iter()
                .map(|(name, _)| format!("network/{name}")),
        );
        Ok(found)
    }

    pub(super) async fn runner_networks(
        &self,
        runner: &str,
    ) -> Result<Vec<(String, HashMap<String, String>)>, ExecutorError> {
        let found = self
            .engine
            .list_networks(RUNNER_LABEL, &label_value(runner))
            .await?;
        Ok(found
            .into_iter()
            .filter(|n| is_runners(&n.labels, runner))
            .map(|n| (n.id, n.labels))
            .collect())
    }

    /// The ids of every container of `runner`, live or not.
    ///
    /// # Errors
    /// `Backend` when the engine could not be listed.
    pub async fn containers(&self, runner: &str) -> Result<Vec<String>, ExecutorError> {
        Ok(self
            .runner_containers(runner)
            .await?
            .into_iter()
            .map(|(id, _)| id)
            .collect())
    }

    pub(super) async fn runner_volumes(&self, runner: &str) -> Result<Vec<String>, ExecutorError> {
        let found = self
            .engine
            .list_volumes(RUNNER_LABEL, &label_value(runner))
            .await?;
        Ok(found
            .into_iter()
            .filter(|v| v.labels.get(RUNNER_RAW_KEY).map(String::as_str) == Some(runner))
            .map(|v| v.id)
            .collect())
    }

    pub(super) async fn runner_containers(
        &self,
        runner: &str,
    ) -> Result<Vec<(String, HashMap<String, String>)>, ExecutorError> {
        let found = self.engine.list(RUNNER_LABEL, &label_value(runner)).await?;
        // The sanitised label could in principle be shared; the raw DID decides.
        Ok(found
            .into_iter()
            .filter(|c| is_runners(&c.labels, runner))
            .map(|c| (c.id, c.labels))
            .collect())
    }
}
