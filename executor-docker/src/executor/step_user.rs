//! The steps' user kept apart from the runner's side: with
//! `DockerOptions::user`, the step channel runs as root and its agent
//! starts each step as that user, so no process a step leaves behind
//! shares a uid with the agent, its supervisors or copiers (no signal,
//! `prlimit`, scheduler change, `/proc` descriptor or file of theirs is
//! in its reach), and the state folder is root's.
//!
//! The user is resolved in the container, as the engine resolves
//! `--user` (a name or a number, with an optional group; a number the
//! image's `/etc/passwd` lacks has group 0), by one root exec that also
//! gives the run's folders to that user and names the architecture.
//! Where the agent cannot run (an image of another architecture, a build
//! without it), the steps' user is every process's, as before.

use super::*;

/// Resolves `user` in the container and prints `UID:GID:GROUPS` and the
/// architecture, after giving the run's folders to it: `$1` is the user.
const RESOLVE: &str = r#"set -e
spec=$1; user=${spec%%:*}; group=; case "$spec" in *:*) group=${spec#*:};; esac
if uid=$(id -u -- "$user" 2>/dev/null); then known=1; else
  case "$user" in ''|*[!0-9]*) echo "the image has no user $user" >&2; exit 3;; esac
  uid=$user; known=
fi
if [ -n "$group" ]; then
  case "$group" in
    *[!0-9]*) gid=$(awk -F: -v g="$group" '$1 == g { print $3; exit }' /etc/group);;
    *) gid=$group;;
  esac
  [ -n "$gid" ] || { echo "the image has no group $group" >&2; exit 3; }
  groups=$gid
elif [ -n "$known" ]; then
  gid=$(id -g -- "$user"); groups=$(id -G -- "$user" | tr ' ' ,)
else
  gid=0; groups=0
fi
[ "$4" != give ] || chown -R "$uid:$gid" /work /steps /outputs
echo "$uid:$gid:$groups"
uname -m
# Where the agent runs, it alone starts steps, as root: the state folder
# becomes root's, listed and changed by no step.
if [ "$uid" != 0 ] && [ "$(uname -m)" = x86_64 ] && [ -s "$2/$3" ]; then
  chmod 0711 "$2"; echo apart
fi"#;

/// What resolving the steps' user found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct StepUser {
    /// The user the agent starts each step as (`UID:GID:GROUPS`), where
    /// the runner's side runs apart from the steps.
    pub(super) apart: Option<String>,
    /// The container's architecture.
    pub(super) architecture: Option<String>,
}

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
        let mut lines = said.lines().map(str::trim);
        let ident = lines.next().unwrap_or_default();
        let architecture = lines.next().filter(|a| !a.is_empty()).map(String::from);
        let apart = lines.next() == Some("apart");
        Ok(StepUser {
            apart: apart.then(|| ident.to_string()),
            architecture,
        })
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
