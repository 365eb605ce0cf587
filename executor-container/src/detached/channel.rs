//! One long-lived exec in the environment that starts every step.
//!
//! Opening an exec costs the runtime's own set-up (40 ms for `runc` on
//! this project's machines, whatever the link) and over a link a round
//! trip for the upgrade. A [`StepChannel`] opens one exec per environment
//! whose shell ([`CHANNEL`]) reads a step's start from its stdin and runs
//! it, then reads the next: a step then costs one message and the
//! wrapper's own forks, as GitLab's attach strategy keeps one shell in
//! the pod for the same reason.
//!
//! What a start through the channel runs is the start a step's own exec
//! would run ([`StepFiles::start_argv`](super::StepFiles::start_argv)):
//! the same pipes say it started (a second start of it follows the
//! first), the same supervisor outlives the channel, the same end marks
//! carry its status. So everything that holds for a step's own exec holds
//! here: a channel whose message or stream is cut at any byte is a cut
//! start, which [`run_step_released`](super::run_step_released) follows if
//! the step's pipes are there and starts on its own exec if not; a
//! channel is used again only after a step whose both end marks came
//! through it, and is dropped after anything else.
//!
//! A message is what is the step's own in the start's text (its shell's
//! flags and prelude), run in a subshell of the channel's shell that sets
//! what the start's own exec took from its arguments and calls the rest,
//! defined once when the channel opens: a fork, not the exec of a new
//! shell (0.8 ms a step in a busybox container), and a few hundred bytes
//! to read and parse, not 6 KB (0.2 ms). Its first line names the key of the start's end marks,
//! its length goes before it and a last line after it, so a message cut
//! short is never run. After each start the channel's shell writes a done notice
//! on stdout; it ends a step whose supervisor left a process holding its
//! output without its end marks (with the image's `tee`, or copiers that
//! did not let go of the streams in time: as on the step's own exec,
//! whose engine ends it when its process ends) and is never output.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::files::start_body;
use super::scripts::HEAD;
use super::{ungated, ExecEnd, GatedStart, Signing, StatusKey};

mod argv;
mod fake;
mod native;
mod scan;
mod variables;

pub use argv::{channel_argv, channel_argv_as};
use executor_core::script::quote;
use executor_core::ExecutorError;
pub use fake::{answer_as_channel, answer_as_dry_channel};
pub use native::native_line;
use scan::Stream;
pub use variables::{is_variable_name, variables_prelude};

/// The channel's shell: reads a length, that many bytes of a command line
/// ending in the line `#knotless-end`, runs it with stdin from
/// `/dev/null`, and says it is done; a length that is not a number, a
/// message cut short, or the end of stdin ends it having run nothing
/// more. `dd` reads the exact count (`head` may read ahead from a pipe).
pub const CHANNEL: &str = r#"while IFS= read -r _kn; do
  case "$_kn" in ''|*[!0-9]*) exit 0;; esac
  _kc=$(dd bs="$_kn" count=1 iflag=fullblock 2>/dev/null) || exit 0
  case "$_kc" in *'
#knotless-end') ;; *) exit 0;; esac
  _kk=${_kc#: }; _kk=${_kk%%[!0-9a-f]*}
  eval "$_kc" < /dev/null
  _ks=$?
  printf '\000knotless-channel-done %03d %s\n' "$_ks" "$_kk"
done"#;

/// Why a step through the channel ended without its end marks when its
/// supervisor left a process holding its output: its status is read from
/// the environment, as after a cut, which [`run_step`](super::run_step)
/// does not word as one.
pub(super) const HELD: &str = "it ended and left a process holding its output";

/// What every line the channel's own process writes on its stdout begins
/// with: a step's done notice, the agent's hello.
const NOTICE: &[u8] = b"\0knotless-channel-";

/// What every done notice begins with.
const DONE: &[u8] = b"\0knotless-channel-done ";

/// What the agent writes on the channel's stdout before it reads a
/// message: its starts sign their status files ([`super::signed`]).
const HELLO: &[u8] = b"\0knotless-channel-agent\n";

/// An exec with its stdin open, as a backend opens it for a channel: its
/// streams as a reader each, which end when the exec does.
pub struct ChannelIo {
    /// The exec's stdin; dropped, the channel's shell ends.
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    /// The exec's stdout.
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    /// The exec's stderr.
    pub stderr: Box<dyn AsyncRead + Send + Unpin>,
    /// The task that carries the exec's streams, if the backend runs one:
    /// aborted when the channel is dropped, so the exec's connection goes
    /// with it even while a process a step left holds its output open.
    pub pump: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for ChannelIo {
    fn drop(&mut self) {
        if let Some(pump) = &self.pump {
            pump.abort();
        }
    }
}

/// How a backend opens the channel's exec in its environment.
#[async_trait]
pub trait ChannelExec: Send + Sync {
    /// Opens `argv` with stdin, stdout and stderr, as the step's user, or
    /// as root where [`ChannelExec::step_user`] names the step's.
    ///
    /// # Errors
    /// When the exec could not be opened.
    async fn open(&self, argv: &[String]) -> Result<ChannelIo, ExecutorError>;

    /// The user the agent starts each step as, `UID:GID:GROUPS` (groups
    /// comma-separated), where the channel runs as root and the steps do
    /// not: the agent, its supervisors and copiers are then out of every
    /// step's reach ([`channel_argv_as`]). `None` (the default): the
    /// channel runs as the steps' own user.
    fn step_user(&self) -> Option<String> {
        None
    }
}

/// The channel of one environment; see the module docs.
pub struct StepChannel {
    exec: Arc<dyn ChannelExec>,
    state: Mutex<State>,
    /// Set once one of this environment's channels said its agent runs
    /// ([`super::signed`]): the status files of its starts are signed
    /// from then on, and one that is not is refused.
    agent: super::signed::AgentSaid,
    /// Channels whose stdout a step's leftover process holds, kept open
    /// and drained until [`StepChannel::close`]: an exec ended while a
    /// process holds its streams keeps an engine waiting on them (Docker
    /// held the container's next exec for 4 s), and a leftover writing
    /// into a closed stream could die of it.
    lingering: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

enum State {
    Closed,
    Open(ChannelIo),
}

impl StepChannel {
    /// A channel that `exec` opens when it is first needed.
    pub fn new(exec: Arc<dyn ChannelExec>) -> Arc<Self> {
        Arc::new(StepChannel {
            exec,
            state: Mutex::new(State::Closed),
            agent: Arc::new(tokio::sync::watch::Sender::new(false)),
            lingering: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Keeps `io`, a channel a step's leftover process holds, open and
    /// drained until [`StepChannel::close`] (or until the leftover lets
    /// its streams end).
    fn linger(&self, mut io: ChannelIo) {
        let drained = tokio::spawn(async move {
            let (mut out, mut err) = (tokio::io::sink(), tokio::io::sink());
            let _ = tokio::join!(
                tokio::io::copy(&mut io.stdout, &mut out),
                tokio::io::copy(&mut io.stderr, &mut err)
            );
        });
        let mut lingering = self.lingering.lock().unwrap_or_else(|p| p.into_inner());
        lingering.retain(|task| !task.is_finished());
        lingering.push(drained);
    }

    /// Closes the channel unless a step is using it: its shell reads the
    /// end of its stdin and ends, freeing its process (a step's kill may
    /// need it); the next step opens it again.
    pub fn close(&self) {
        if let Ok(mut state) = self.state.try_lock() {
            *state = State::Closed;
        }
        let lingering =
            std::mem::take(&mut *self.lingering.lock().unwrap_or_else(|p| p.into_inner()));
        for task in lingering {
            task.abort();
        }
    }

    /// The start `argv` (a gated start's, from
    /// [`StepFiles::gated_start_argv`](super::StepFiles::gated_start_argv),
    /// or a plain one), to be released through this channel in
    /// `working_dir`, as an exec of its own would run it. The step's
    /// variables go in the start's prelude, which sets them for the step's
    /// shell alone. Where the agent starts it, its status is signed with
    /// the key `signing` gives. `None` for an argv that is not a start's.
    pub fn start(
        self: &Arc<Self>,
        argv: Vec<String>,
        working_dir: Option<&str>,
        signing: Signing,
    ) -> Option<Box<dyn GatedStart>> {
        let argv = ungated(&argv);
        let key = super::end_key(&argv)?.to_string();
        let [_, _, text, prefix, script, _] = argv.as_slice() else {
            return None;
        };
        // What is the step's own: its shell's flags and its prelude.
        let own = text.strip_prefix(HEAD)?.strip_suffix(start_body())?;
        let mut command = format!(": {key}\n");
        // Without a native line the agent leaves the start to the shell,
        // which cannot sign: no key, and no status of it is refused.
        let mut status_key = None;
        if let Some(mut line) = native_line(&key, prefix, script, own, working_dir) {
            let signed = StatusKey::new(Arc::clone(&self.agent), signing);
            // The status key's record, only here: the message is read
            // from the channel's stdin, never seen in a command line.
            if native::push_record(&mut line, 'm', &signed.hex()).is_some() {
                command.push_str(&line);
                command.push('\n');
                status_key = Some(signed);
            }
        }
        command.push('(');
        if let Some(dir) = working_dir {
            // A folder it cannot enter starts nothing: no begin mark, so
            // the start is taken for a cut and made on its own exec.
            command.push_str(&format!("cd -- {} || exit 125\n", quote(dir)));
        }
        command.push_str(&format!(
            "_kd={}; _kkey={key}; set -- {} {key}\n{own}_kstart \"$@\"\n)",
            quote(prefix),
            quote(script),
        ));
        Some(Box::new(ChannelStart {
            channel: Arc::clone(self),
            key,
            command,
            status_key,
        }))
    }

    async fn take(&self, state: &mut State) -> Result<ChannelIo, String> {
        match std::mem::replace(state, State::Closed) {
            State::Open(io) => Ok(io),
            State::Closed => self
                .exec
                .open(&channel_argv_as(self.exec.step_user().as_deref()))
                .await
                .map_err(|e| e.to_string()),
        }
    }
}

impl Drop for StepChannel {
    fn drop(&mut self) {
        self.close();
    }
}

/// The step channels of a backend's environments, by environment.
#[derive(Default)]
pub struct StepChannels {
    open: std::sync::Mutex<std::collections::HashMap<String, Arc<StepChannel>>>,
}

impl StepChannels {
    /// Environment `env`'s channel; `exec` opens it, made on first use.
    pub fn of(&self, env: &str, exec: impl FnOnce() -> Arc<dyn ChannelExec>) -> Arc<StepChannel> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            open.entry(env.to_string())
                .or_insert_with(|| StepChannel::new(exec())),
        )
    }

    /// Whether environment `env`'s channel has said its agent runs (its
    /// starts sign their statuses); `false` for one never opened.
    pub fn agent_ran(&self, env: &str) -> bool {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(env)
            .is_some_and(|channel| *channel.agent.borrow())
    }

    /// Closes environment `env`'s channel ([`StepChannel::close`]) and
    /// forgets it: a step's kill may need its process, and a stopped
    /// run's is done.
    pub fn close(&self, env: &str) {
        let channel = self
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(env);
        if let Some(channel) = channel {
            channel.close();
        }
    }
}

/// A step's start, sent through its environment's channel.
#[derive(Clone)]
struct ChannelStart {
    channel: Arc<StepChannel>,
    /// The key of its end marks: the start's argv's last word.
    key: String,
    /// The command line the channel's shell runs.
    command: String,
    /// The key its status file is signed with, where the agent starts it
    /// (none for a message without a native line).
    status_key: Option<StatusKey>,
}

/// The message that runs `command`: its length, then the command line
/// and the line that says it is whole.
fn message(command: &str) -> Vec<u8> {
    let command = format!("{command}\n#knotless-end");
    format!("{}\n{command}", command.len()).into_bytes()
}

/// The key of the end marks a channel message's start carries, as the
/// channel's shell reads it from the message's first line (`: KEY`);
/// empty when there is none. Fakes of the channel answer with it.
///
/// ```
/// use executor_container::detached::message_key;
/// assert_eq!(message_key(": 0a1b\n(true)"), "0a1b");
/// assert_eq!(message_key("true"), "");
/// ```
pub fn message_key(command: &str) -> &str {
    command.strip_prefix(": ").map_or("", |rest| {
        let hex = rest.bytes().take_while(u8::is_ascii_hexdigit).count();
        rest.get(..hex).unwrap_or_default()
    })
}

#[async_trait]
impl GatedStart for ChannelStart {
    fn status_key(&self) -> Option<StatusKey> {
        self.status_key.clone()
    }

    /// The same message, on the channel opened again if it broke.
    fn again(&self) -> Option<Box<dyn GatedStart>> {
        Some(Box::new(self.clone()))
    }
    async fn release(
        self: Box<Self>,
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        let mut state = self.channel.state.lock().await;
        let mut io = match self.channel.take(&mut state).await {
            Ok(io) => io,
            Err(why) => {
                return Ok(ExecEnd::Cut(format!(
                    "the step channel could not be opened: {why}"
                )))
            }
        };
        let sent = async {
            io.stdin.write_all(&message(&self.command)).await?;
            io.stdin.flush().await
        };
        if let Err(err) = sent.await {
            // Some of it may have gone: the step may run; follow it.
            return Ok(ExecEnd::Cut(format!(
                "the step channel took its start only in part: {err}"
            )));
        }
        let written =
            |e: std::io::Error| ExecutorError::backend("writing the step's output", e.to_string());
        let mut out = Stream::new(self.key.as_bytes(), true);
        let mut err = Stream::new(self.key.as_bytes(), false);
        let (mut out_buf, mut err_buf) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
        loop {
            if out.agent {
                self.channel
                    .agent
                    .send_if_modified(|said| !std::mem::replace(said, true));
            }
            if out.marked && err.marked {
                // Whole: the channel serves the next step.
                *state = State::Open(io);
                return Ok(ExecEnd::Ended);
            }
            match out.done {
                // The start ended without its marks (a process it left
                // holds its output): as an exec whose process ended. The
                // channel's stdout is still that process's: it is not used
                // again, nor ended while the step's run goes on.
                Some(_) if !out.marked => {
                    self.channel.linger(io);
                    return Ok(ExecEnd::Cut(HELD.into()));
                }
                // Both marks were written before the notice: stderr's is
                // on its way.
                _ => {}
            }
            if out.ended && err.ended {
                return Ok(ExecEnd::Cut("the step channel's stream ended".into()));
            }
            tokio::select! {
                () = interrupt.cancelled() => return Ok(ExecEnd::Interrupted),
                read = io.stdout.read(&mut out_buf), if !out.ended => {
                    let n = read.map_err(|e| cut_read(&e)).unwrap_or(0);
                    let kept = out.take(out_buf.get(..n).unwrap_or_default());
                    stdout.write_all(&kept).await.map_err(written)?;
                }
                read = io.stderr.read(&mut err_buf), if !err.ended => {
                    let n = read.map_err(|e| cut_read(&e)).unwrap_or(0);
                    let kept = err.take(err_buf.get(..n).unwrap_or_default());
                    stderr.write_all(&kept).await.map_err(written)?;
                }
            }
        }
    }
}

fn cut_read(err: &std::io::Error) {
    tracing::debug!(%err, "the step channel's stream broke");
}
