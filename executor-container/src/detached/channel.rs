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
//! A message is the start's argv as one shell command line, with its
//! length before it and a last line after it, so a message cut short is
//! never run. After each start the channel's shell writes a done notice
//! on stdout; it ends a step whose supervisor left a process holding its
//! output (no end marks come then, as on the step's own exec, whose
//! engine ends it when its process ends) and is never output.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use super::{ungated, ExecEnd, GatedStart};
use executor_core::ExecutorError;

/// The channel's shell: reads a length, that many bytes of a command line
/// ending in the line `#knotless-end`, runs it with stdin from
/// `/dev/null`, and says it is done; a length that is not a number, a
/// message cut short, or the end of stdin ends it having run nothing
/// more. `dd` reads the exact count (`head` may read ahead from a pipe).
pub const CHANNEL: &str = r#"while IFS= read -r n; do
  case "$n" in ''|*[!0-9]*) exit 0;; esac
  c=$(dd bs="$n" count=1 iflag=fullblock 2>/dev/null) || exit 0
  case "$c" in *'
#knotless-end') ;; *) exit 0;; esac
  k=${c##*"' '"}; k=${k%%"'"*}
  eval "$c" < /dev/null
  s=$?
  printf '\000knotless-channel-done %03d %s\n' "$s" "$k"
done"#;

/// What every done notice begins with.
const DONE: &[u8] = b"\0knotless-channel-done ";

/// An exec with its stdin open, as a backend opens it for a channel: its
/// streams as a reader each, which end when the exec does.
pub struct ChannelIo {
    /// The exec's stdin; dropped, the channel's shell ends.
    pub stdin: Box<dyn AsyncWrite + Send + Unpin>,
    /// The exec's stdout.
    pub stdout: Box<dyn AsyncRead + Send + Unpin>,
    /// The exec's stderr.
    pub stderr: Box<dyn AsyncRead + Send + Unpin>,
}

/// How a backend opens the channel's exec in its environment.
#[async_trait]
pub trait ChannelExec: Send + Sync {
    /// Opens `argv` with stdin, stdout and stderr, as the step's user.
    ///
    /// # Errors
    /// When the exec could not be opened.
    async fn open(&self, argv: &[String]) -> Result<ChannelIo, ExecutorError>;
}

/// The argv of the channel's exec.
pub fn channel_argv() -> Vec<String> {
    vec!["sh".into(), "-c".into(), CHANNEL.into()]
}

/// Answers as a channel in which every start ends at once with status 0,
/// as a dry run's environment does: each message read from `stdin` gets
/// the begin and end marks of its key on both streams and its done
/// notice, until `stdin` ends or holds something else.
///
/// # Errors
/// When a stream cannot be read or written.
pub async fn answer_as_dry_channel(
    stdin: &mut (dyn AsyncRead + Send + Unpin),
    stdout: &mut (dyn AsyncWrite + Send + Unpin),
    stderr: &mut (dyn AsyncWrite + Send + Unpin),
) -> std::io::Result<()> {
    let mut reader = tokio::io::BufReader::new(stdin);
    loop {
        let mut line = String::new();
        if tokio::io::AsyncBufReadExt::read_line(&mut reader, &mut line).await? == 0 {
            return Ok(());
        }
        let Ok(n) = line.trim_end().parse::<usize>() else {
            return Ok(());
        };
        let mut command = vec![0u8; n];
        reader.read_exact(&mut command).await?;
        let command = String::from_utf8_lossy(&command);
        let Some(line) = command.strip_suffix("\n#knotless-end") else {
            return Ok(());
        };
        let key = line
            .rsplit_once("' '")
            .map_or("", |(_, last)| last.trim_end_matches('\''));
        let marks = [super::BEGIN_MARK, &super::end_mark(key, 0)].concat();
        stdout.write_all(&marks).await?;
        stderr.write_all(&marks).await?;
        stdout
            .write_all(format!("\0knotless-channel-done 000 {key}\n").as_bytes())
            .await?;
    }
}

/// The channel of one environment; see the module docs.
pub struct StepChannel {
    exec: Arc<dyn ChannelExec>,
    state: Mutex<State>,
}

enum State {
    Closed,
    Opening(tokio::task::JoinHandle<Result<ChannelIo, ExecutorError>>),
    Open(ChannelIo),
}

impl StepChannel {
    /// A channel that `exec` opens when it is first needed.
    pub fn new(exec: Arc<dyn ChannelExec>) -> Arc<Self> {
        Arc::new(StepChannel {
            exec,
            state: Mutex::new(State::Closed),
        })
    }

    /// Starts opening the channel, unless it is open or opening: a step
    /// that uses it then waits no set-up.
    pub fn warm(&self) {
        if let Ok(mut state) = self.state.try_lock() {
            if matches!(*state, State::Closed) {
                let exec = Arc::clone(&self.exec);
                *state = State::Opening(tokio::spawn(
                    async move { exec.open(&channel_argv()).await },
                ));
            }
        }
    }

    /// Closes the channel unless a step is using it: its shell reads the
    /// end of its stdin and ends, freeing its process (a step's kill may
    /// need it); the next step opens it again.
    pub fn close(&self) {
        if let Ok(mut state) = self.state.try_lock() {
            if let State::Opening(opening) = &*state {
                opening.abort();
            }
            *state = State::Closed;
        }
    }

    /// The start `argv` (a gated start's, from
    /// [`StepFiles::gated_start_argv`](super::StepFiles::gated_start_argv),
    /// or a plain one), to be released through this channel.
    pub fn start(self: &Arc<Self>, argv: Vec<String>) -> Box<dyn GatedStart> {
        Box::new(ChannelStart {
            channel: Arc::clone(self),
            argv: ungated(&argv),
        })
    }

    async fn take(&self, state: &mut State) -> Result<ChannelIo, String> {
        match std::mem::replace(state, State::Closed) {
            State::Open(io) => Ok(io),
            State::Opening(opening) => match opening.await {
                Ok(Ok(io)) => Ok(io),
                Ok(Err(err)) => Err(err.to_string()),
                Err(err) => Err(err.to_string()),
            },
            State::Closed => self
                .exec
                .open(&channel_argv())
                .await
                .map_err(|e| e.to_string()),
        }
    }
}

impl Drop for StepChannel {
    fn drop(&mut self) {
        if let State::Opening(opening) = self.state.get_mut() {
            opening.abort();
        }
    }
}

/// A step's start, sent through its environment's channel.
struct ChannelStart {
    channel: Arc<StepChannel>,
    argv: Vec<String>,
}

/// The message that starts `argv`: its length, then the command line.
fn message(argv: &[String]) -> Vec<u8> {
    let line = argv
        .iter()
        .map(|word| format!("'{}'", word.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ");
    let command = format!("{line}\n#knotless-end");
    format!("{}\n{command}", command.len()).into_bytes()
}

#[async_trait]
impl GatedStart for ChannelStart {
    async fn release(
        self: Box<Self>,
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        let key = super::end_key(&self.argv).unwrap_or_default().to_string();
        let mut state = self.channel.state.lock().await;
        let mut io = match self.channel.take(&mut state).await {
            Ok(io) => io,
            Err(why) => {
                return Ok(ExecEnd::Cut(format!(
                    "the step channel could not be opened: {why}"
                )))
            }
        };
        if let Err(err) = io.stdin.write_all(&message(&self.argv)).await {
            // Some of it may have gone: the step may run; follow it.
            return Ok(ExecEnd::Cut(format!(
                "the step channel took its start only in part: {err}"
            )));
        }
        if let Err(err) = io.stdin.flush().await {
            return Ok(ExecEnd::Cut(format!(
                "the step channel took its start only in part: {err}"
            )));
        }
        let written =
            |e: std::io::Error| ExecutorError::backend("writing the step's output", e.to_string());
        let mut out = Stream::new(key.as_bytes(), true);
        let mut err = Stream::new(key.as_bytes(), false);
        let (mut out_buf, mut err_buf) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
        loop {
            if out.marked && err.marked {
                // Whole: the channel serves the next step.
                *state = State::Open(io);
                return Ok(ExecEnd::Ended);
            }
            match out.done {
                // The start ended without its marks (a process it left
                // holds its output): as an exec whose process ended. The
                // channel's stdout is still that process's: it is not used
                // again.
                Some(code) if !out.marked => return Ok(ExecEnd::Exited(code)),
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

/// What a channel's stream showed of one step: its end mark, and on
/// stdout the done notices, which are taken out.
struct Stream {
    mark: Vec<u8>,
    notices: bool,
    /// The last bytes seen, enough to hold a mark or a notice cut
    /// between two reads.
    tail: Vec<u8>,
    /// Bytes held back as they may begin a done notice.
    held: Vec<u8>,
    marked: bool,
    done: Option<i32>,
    ended: bool,
    own_done: Vec<u8>,
}

/// How much of a stream's end is kept to find a mark split between reads.
const TAIL: usize = 256;

impl Stream {
    fn new(key: &[u8], notices: bool) -> Self {
        let mut mark = b"\0knotless-step-end ".to_vec();
        mark.extend_from_slice(b"NNN ");
        mark.extend_from_slice(key);
        let mut own_done = DONE.to_vec();
        own_done.extend_from_slice(b"NNN ");
        own_done.extend_from_slice(key);
        own_done.push(b'\n');
        Stream {
            mark,
            notices,
            tail: Vec::new(),
            held: Vec::new(),
            marked: false,
            done: None,
            ended: false,
            own_done,
        }
    }

    /// Takes in `bytes` just read (none: the stream ended); returns what
    /// goes on to the step's writer.
    fn take(&mut self, bytes: &[u8]) -> Vec<u8> {
        if bytes.is_empty() {
            self.ended = true;
            return std::mem::take(&mut self.held);
        }
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(bytes);
        let kept = if self.notices {
            self.strip_notices(data)
        } else {
            data
        };
        self.tail.extend_from_slice(&kept);
        if self.tail.len() > TAIL {
            let cut = self.tail.len() - TAIL;
            self.tail.drain(..cut);
        }
        if !self.marked && ends_with_mark(&self.tail, &self.mark) {
            self.marked = true;
        }
        kept
    }

    /// Takes every whole done notice out of `data`, noting this step's;
    /// a notice's possible beginning at the end is held for the next read.
    fn strip_notices(&mut self, data: Vec<u8>) -> Vec<u8> {
        let mut kept = Vec::with_capacity(data.len());
        let mut rest = data.as_slice();
        while let Some(at) = find(rest, b"\0knotless-channel-done ") {
            let (before, notice) = rest.split_at(at);
            kept.extend_from_slice(before);
            match notice.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    let (whole, after) = notice.split_at(end + 1);
                    if let Some(code) = own_notice(whole, &self.own_done) {
                        self.done = Some(code);
                    }
                    rest = after;
                }
                None if notice.len() < self.own_done.len() + 8 => {
                    self.held = notice.to_vec();
                    return kept;
                }
                // Too long for a notice: output.
                None => {
                    kept.extend_from_slice(notice);
                    return kept;
                }
            }
        }
        // A notice's first bytes at the very end wait for the rest.
        let split = (1..=rest.len().min(DONE.len()))
            .rev()
            .find(|&n| rest.ends_with(&DONE[..n]))
            .map_or(rest.len(), |n| rest.len() - n);
        kept.extend_from_slice(&rest[..split]);
        self.held = rest[split..].to_vec();
        kept
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Whether `tail` ends with a whole end mark of the shape `mark` gives
/// (`NNN` any three digits), its usage after the key if any.
fn ends_with_mark(tail: &[u8], mark: &[u8]) -> bool {
    let Some(start) = tail.windows(19).rposition(|w| w == b"\0knotless-step-end ") else {
        return false;
    };
    let found = &tail[start..];
    if found.last() != Some(&b'\n') || found.len() < mark.len() {
        return false;
    }
    found.iter().zip(mark).all(|(&got, &want)| {
        if want == b'N' {
            got.is_ascii_digit()
        } else {
            got == want
        }
    }) && matches!(found.get(mark.len()), Some(b' ' | b'\n'))
}

/// The code of a done notice that is this step's.
fn own_notice(notice: &[u8], own: &[u8]) -> Option<i32> {
    if notice.len() != own.len() {
        return None;
    }
    let mut code = 0i32;
    for (&got, &want) in notice.iter().zip(own) {
        if want == b'N' {
            if !got.is_ascii_digit() {
                return None;
            }
            code = code * 10 + i32::from(got - b'0');
        } else if got != want {
            return None;
        }
    }
    Some(code)
}
