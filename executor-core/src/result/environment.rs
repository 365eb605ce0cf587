//! What held in an attempt's environment: its architecture, whether the
//! step channel's agent ran there, and whether the steps ran apart from
//! the runner's side.

use serde::{Deserialize, Serialize};

/// What held in one attempt's environment, as its backend saw it
/// ([`Executor::environment`](crate::Executor::environment)).
///
/// ```
/// use executor_core::{EnvironmentFacts, StepIsolation};
/// let facts = EnvironmentFacts {
///     architecture: Some("x86_64".into()),
///     agent: true,
///     step_isolation: StepIsolation::Uid,
/// };
/// let json = serde_json::to_value(&facts).unwrap();
/// assert_eq!(json["stepIsolation"], "uid");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentFacts {
    /// The environment's machine architecture (`uname -m`: `x86_64`,
    /// `aarch64`), where the backend asked.
    pub architecture: Option<String>,
    /// Whether the step channel's agent ran there (its starts sign their
    /// statuses); `false` where every step took the shell's start.
    pub agent: bool,
    /// Whether the steps ran under a uid the runner's side does not have.
    pub step_isolation: StepIsolation,
}

/// Whether the steps ran apart from the runner's side of the environment
/// (the agent, each step's supervisor and copier, the state folder): see
/// docs/security.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StepIsolation {
    /// The steps ran as a user the runner's side is not: no step's
    /// process can signal, limit or write into it.
    Uid,
    /// Every process ran under one uid (no step user, a root step user,
    /// or no agent to start steps as another): one trust domain, where a
    /// process a step leaves can disturb a later step's start or end.
    None,
}
