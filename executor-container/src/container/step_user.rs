//! The steps' user kept apart from the runner's side: the channel runs as
//! root and its agent starts each step as the steps' user, so no process a
//! step leaves behind shares a uid with the agent, its supervisors or
//! copiers (no signal, `prlimit`, scheduler change, `/proc` descriptor or
//! file of theirs is in its reach), and the state folder is root's.
//!
//! The user is resolved in the environment, as an engine resolves a user
//! (a name or a number, with an optional group; a number the image's
//! `/etc/passwd` lacks has group 0), by one root exec ([`RESOLVE`]) that
//! also gives the run's folders to that user and names the architecture.

/// Resolves a user in the environment and prints `UID:GID:GROUPS` and the
/// architecture, after giving the run's folders to it (`$4` = `give`), and
/// `apart` where the agent (`$2/$3`) can start the steps as that user, the
/// state folder `$2` made root's: `$1` is the user (`NAME|UID[:GROUP|GID]`).
pub const RESOLVE: &str = r#"set -e
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
case $(uname -m) in x86_64) x=;; aarch64) x=.aarch64;; *) x=.none;; esac
if [ "$uid" != 0 ] && [ -s "$2/$3$x" ]; then
  chmod 0711 "$2"; echo apart
fi"#;

/// What resolving the steps' user found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepUser {
    /// The user the agent starts each step as (`UID:GID:GROUPS`), where
    /// the runner's side runs apart from the steps.
    pub apart: Option<String>,
    /// The environment's architecture (`uname -m`).
    pub architecture: Option<String>,
}

impl StepUser {
    /// What [`RESOLVE`] printed.
    ///
    /// ```
    /// use executor_container::container::step_user::StepUser;
    /// let found = StepUser::parse("1000:1000:1000,27\nx86_64\napart\n");
    /// assert_eq!(found.apart.as_deref(), Some("1000:1000:1000,27"));
    /// assert_eq!(found.architecture.as_deref(), Some("x86_64"));
    /// assert_eq!(StepUser::parse("1000:1000:1000\naarch64\n").apart, None);
    /// ```
    pub fn parse(said: &str) -> StepUser {
        let mut lines = said.lines().map(str::trim);
        let ident = lines.next().unwrap_or_default();
        let architecture = lines.next().filter(|a| !a.is_empty()).map(String::from);
        let apart = lines.next() == Some("apart");
        StepUser {
            apart: apart.then(|| ident.to_string()),
            architecture,
        }
    }
}
