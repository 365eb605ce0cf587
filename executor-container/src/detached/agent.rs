//! `knotless-agent`, the step channel's shell made native: a program of
//! this crate's own (`helper/agent.rs`, built for x86_64 Linux with no C
//! library) sent into the state folder with the copier. A channel that
//! finds it (and the copier) runs there execs it in place of its shell's
//! loop; it reads the same messages, and starts a step from the fields of
//! its native line ([`native_line`](super::native_line)) with a fork
//! each for the supervisor, the copier and the step, and the step's `sh`
//! as the only exec, where the shell's start made eight forks and three execs
//! (3.2 ms of a step in a busybox container). It writes the same files
//! and marks as the shell's start: a follow, a kill or a resume is the
//! same for both. A second start, or a message it cannot read, goes to
//! the shell's start, which the channel passes it.
//!
//! It is in the step's reach as the copier is (a step running as root
//! may replace it): a step's end is trusted only as far as its marks'
//! key, which a step never sees.

use std::path::Path;

use executor_core::ExecutorError;

/// The agent's file name in the state folder. The `.1` is its command
/// line's and messages' version: a runner that speaks another finds none
/// there, and its channels use their shell.
pub const AGENT_FILE: &str = "knotless-agent.1";

/// The agent itself, for x86_64; empty where the toolchain that built
/// this crate could not build it (see `build.rs`).
pub const AGENT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/knotless-agent"));

/// The agent for aarch64, staged as [`AGENT_FILE`]`.aarch64`; empty where
/// no aarch64 toolchain was here.
pub const AGENT_AARCH64: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/knotless-agent.aarch64"));

/// What a channel's shell runs once it found the copier (`$_ktee`, see
/// [`super::tee`]), with the state folder for `DIR`: where the agent is
/// there, the shell becomes it, passing its start's definition
/// (`$_ksrc`) and the copier for what the agent leaves to the shell.
/// The copier's probe ran a program of this build in the folder: the
/// agent runs where it does.
/// The file is this machine's build (`$_kx`, set by the probe).
const HAND_OVER: &str = r#"[ -z "$_ktee" ] || [ ! -x DIR/FILE$_kx ] || exec DIR/FILE$_kx "$_ksrc
_ktee=$_ktee
eval \"\$1\"" MAX"#;

/// [`HAND_OVER`] for the state folder `state_dir`.
pub(super) fn hand_over(state_dir: &str) -> String {
    HAND_OVER
        .replace("DIR", state_dir)
        .replace("FILE", AGENT_FILE)
        .replace("MAX", &executor_core::usage::MARKED_MAX.to_string())
}

/// [`hand_over`] for an agent that starts each step as `step_user`
/// (`UID:GID:GROUPS`, digits, `:` and `,` only).
pub(super) fn hand_over_as(state_dir: &str, step_user: &str) -> String {
    let user: String = step_user
        .chars()
        .filter(|c| c.is_ascii_digit() || matches!(c, ':' | ','))
        .collect();
    format!("{} {user}", hand_over(state_dir))
}

/// Writes the agent into `dir`, a folder staged to be sent in as the
/// state folder, as an executable file for each machine this build has
/// one for ([`HELPER_MACHINES`](crate::staging::HELPER_MACHINES)).
///
/// ```
/// use executor_container::detached::{stage_agent, AGENT, AGENT_FILE};
/// let dir = tempfile::tempdir().unwrap();
/// stage_agent(dir.path()).unwrap();
/// assert_eq!(dir.path().join(AGENT_FILE).exists(), !AGENT.is_empty());
/// ```
///
/// # Errors
/// `Io` naming the file when it cannot be written.
pub fn stage_agent(dir: &Path) -> Result<(), ExecutorError> {
    crate::staging::stage_builds(
        dir,
        AGENT_FILE,
        [AGENT, AGENT_AARCH64],
        "writing the step agent",
    )
}
