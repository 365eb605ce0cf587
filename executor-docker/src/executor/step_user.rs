//! The steps' user kept apart from the runner's side on Docker
//! ([`executor_container::container::step_user`]): with
//! `DockerOptions::user`, the step channel runs as root and its agent
//! starts each step as that user. Where the agent cannot run (an image of
//! another architecture, a build without it), the steps' user is every
//! process's, as before.

use super::*;

pub(super) use executor_container::container::step_user::StepUser;
use executor_container::container::step_user::RESOLVE;

impl DockerExecutor {
    /// Gives the run's folders to `DockerOptions::user` in container `id`
    /// and, where the agent can start the steps as that user (it is in
    /// the state folder, the image is x86_64), returns the user as the
    /// agent takes it (`UID:GID:GROUPS`), the state folder made root's
    /// (`0711`: no step lists or changes it). `None`: no user given, the
    /// user is root, or the agent cannot run here.
    ///
    /// # Errors
    /// A user or group the image does not have, named; the exec's failure.
    ///
    /// A resumed run's (`give` false) folders are its steps' already.
    pub(super) async fn resolve_step_user(
        &self,
        id: &str,
        user: Option<&str>,
        give: bool,
    ) -> Result<StepUser, ExecutorError> {
        let Some(user) = user else {
            return Ok(StepUser::default());
        };
        let said = self
            .exec_as_root_with(
                id,
                RESOLVE,
                &[
                    user,
                    STATE_DIR,
                    executor_container::detached::AGENT_FILE,
                    if give { "give" } else { "" },
                ],
                "giving /work to DockerOptions::user",
            )
            .await?;
        Ok(StepUser::parse(&said))
    }

    /// The user the runner's execs for run `id`'s steps (its channel, a
    /// follow, a kill) run as: root where the agent starts each step as
    /// the run's user (see this module), else the run's own user, as it was
    /// started.
    pub(super) fn user_of(&self, id: &str) -> Option<String> {
        match self.bounds().get(id) {
            Some(bounds) if bounds.resolved.apart.is_some() => Some("0".into()),
            Some(bounds) => bounds.user.clone(),
            None => self.options.user.clone(),
        }
    }

    /// What held in run `id`'s container, for the result.
    pub(super) fn environment_of(&self, id: &str) -> executor_core::EnvironmentFacts {
        let bounds = self.bounds().get(id).cloned().unwrap_or_default();
        executor_core::EnvironmentFacts {
            architecture: bounds.resolved.architecture,
            agent: self.channels.agent_ran(id),
            step_isolation: if bounds.resolved.apart.is_some() {
                executor_core::StepIsolation::Uid
            } else {
                executor_core::StepIsolation::None
            },
        }
    }

    /// The user the agent starts run `id`'s steps as, `UID:GID:GROUPS`,
    /// where the runner's side runs apart from them.
    pub(super) fn step_user_of(&self, id: &str) -> Option<String> {
        self.bounds().get(id).and_then(|b| b.resolved.apart.clone())
    }
}
