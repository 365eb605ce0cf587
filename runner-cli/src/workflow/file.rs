//! The workflow file's shape, as serde reads it: the flat form (`steps:`
//! at the top) and Actions' own (`jobs:`, each with its steps).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    /// Actions' workflow name and triggers: read and ignored.
    #[serde(default)]
    pub(super) name: Option<Value>,
    #[serde(default, rename = "on")]
    pub(super) on: Option<Value>,
    #[serde(default)]
    pub(super) env: Option<Mapping>,
    #[serde(default)]
    pub(super) defaults: Option<Defaults>,
    #[serde(default)]
    pub(super) caches: Vec<CacheEntry>,
    #[serde(default)]
    pub(super) services: BTreeMap<String, ServiceEntry>,
    #[serde(default)]
    pub(super) steps: Option<Vec<StepEntry>>,
    #[serde(default)]
    pub(super) jobs: Option<BTreeMap<String, Job>>,
    /// Actions' keys of the whole workflow that concern GitHub only: read
    /// and ignored.
    #[serde(default, rename = "run-name")]
    pub(super) run_name: Option<Value>,
    #[serde(default)]
    pub(super) permissions: Option<Value>,
    #[serde(default)]
    pub(super) concurrency: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct Job {
    #[serde(default)]
    pub(super) name: Option<Value>,
    #[serde(default)]
    pub(super) runs_on: Option<Value>,
    #[serde(default)]
    pub(super) container: Option<ContainerEntry>,
    #[serde(default)]
    pub(super) services: BTreeMap<String, ServiceEntry>,
    #[serde(default)]
    pub(super) env: Option<Mapping>,
    #[serde(default)]
    pub(super) timeout_minutes: Option<f64>,
    #[serde(default)]
    pub(super) defaults: Option<Defaults>,
    #[serde(default)]
    pub(super) caches: Vec<CacheEntry>,
    /// Refused with a sentence of their own, not as unknown keys.
    #[serde(default)]
    pub(super) uses: Option<Value>,
    #[serde(default)]
    pub(super) strategy: Option<Value>,
    #[serde(default, rename = "if")]
    pub(super) condition: Option<Value>,
    /// What concerns GitHub or other jobs: read, and said to be ignored.
    #[serde(default)]
    pub(super) needs: Option<Value>,
    #[serde(default)]
    pub(super) permissions: Option<Value>,
    #[serde(default)]
    pub(super) outputs: Option<Value>,
    #[serde(default)]
    pub(super) steps: Vec<StepEntry>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct Defaults {
    #[serde(default)]
    pub(super) run: Option<RunDefaults>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct RunDefaults {
    pub(super) shell: Option<String>,
    pub(super) working_directory: Option<String>,
}

/// `container: IMAGE` or `container: {image, env, options}`.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum ContainerEntry {
    Image(String),
    Full(ContainerFull),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ContainerFull {
    pub(super) image: String,
    #[serde(default)]
    pub(super) env: Option<Mapping>,
    #[serde(default)]
    pub(super) options: Option<String>,
}

/// A service in this runner's shape (`command`, `ready`) or Actions'
/// (`ports`, `options: --health-cmd ...`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ServiceEntry {
    pub(super) image: String,
    pub(super) command: Option<String>,
    #[serde(default)]
    pub(super) env: Option<Mapping>,
    pub(super) ready: Option<String>,
    /// Actions maps ports to the runner's host; here a service is reached
    /// by its name on its own ports, so they are read and not needed.
    #[serde(default)]
    pub(super) ports: Option<Value>,
    pub(super) options: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CacheEntry {
    pub(super) key: String,
    pub(super) path: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(super) struct StepEntry {
    pub(super) name: Option<String>,
    pub(super) id: Option<String>,
    pub(super) run: Option<String>,
    #[serde(default)]
    pub(super) env: Option<Mapping>,
    pub(super) timeout_minutes: Option<f64>,
    #[serde(default)]
    pub(super) continue_on_error: bool,
    #[serde(rename = "if")]
    pub(super) condition: Option<String>,
    pub(super) working_directory: Option<String>,
    pub(super) shell: Option<String>,
    /// Refused with a sentence of their own.
    #[serde(default)]
    pub(super) uses: Option<Value>,
    #[serde(default)]
    pub(super) with: Option<Value>,
}
