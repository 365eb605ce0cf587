//! The command line of a channel's exec.

use executor_core::script::quote;

use super::super::files::start_body;
use super::CHANNEL;

/// The argv of the channel's exec: [`CHANNEL`] under `sh -c`, after the
/// start every step's message runs (`_kstart`), defined once: each message
/// then carries only what is the step's own, a few hundred bytes where the
/// whole start is 6 KB, and the channel's shell parses the start once.
/// Between them it looks for the stream copier its starts use
/// ([`TEE_FILE`](crate::detached::TEE_FILE) in the state folder), once, and where
/// it is, becomes the agent ([`AGENT_FILE`](crate::detached::AGENT_FILE)) if that is
/// there: the start's definition, kept as text in `$_ksrc`, goes with it
/// for the messages it leaves to a shell.
///
/// ```
/// use executor_container::detached::{channel_argv, CHANNEL};
/// let argv = channel_argv();
/// assert_eq!(argv[..2], ["sh", "-c"]);
/// assert!(argv[2].starts_with("_ksrc='_kstart() {") && argv[2].ends_with(CHANNEL));
/// ```
pub fn channel_argv() -> Vec<String> {
    channel_argv_as(None)
}

/// [`channel_argv`], run as root for steps that run as `step_user`
/// (`UID:GID:GROUPS`): the shell becomes the agent, which starts each
/// step as that user, or ends (exit 125) where the agent or its copier
/// cannot run; it never reads a message itself, as its shell's start
/// would run the step as root.
///
/// ```
/// use executor_container::detached::{channel_argv, channel_argv_as, CHANNEL};
/// let argv = channel_argv_as(Some("1000:1000:1000"));
/// assert!(argv[2].contains(" 1000:1000:1000") && !argv[2].ends_with(CHANNEL));
/// assert_eq!(channel_argv_as(None), channel_argv());
/// ```
pub fn channel_argv_as(step_user: Option<&str>) -> Vec<String> {
    let state = crate::staging::STATE_DIR;
    let start = quote(&format!("_kstart() {{\n{}\n}}", start_body()));
    let probe = super::super::tee::probe(state);
    let script = match step_user {
        None => format!(
            "_ksrc={start}\neval \"$_ksrc\"\n{probe}\n{}\n{CHANNEL}",
            super::super::agent::hand_over(state),
        ),
        Some(user) => format!(
            "_ksrc={start}\neval \"$_ksrc\"\n{probe}\n{}\n\
             echo 'knotless: the step agent cannot run in this environment, and only it starts steps as their user' >&2\nexit 125",
            super::super::agent::hand_over_as(state, user),
        ),
    };
    vec!["sh".into(), "-c".into(), script]
}
