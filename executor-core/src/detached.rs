//! Steps that outlive the connection that started them.
//!
//! A container backend starts each step with one exec. Inside the
//! environment the exec's command is only the step's parent: a supervisor
//! in the background runs the step with its output going through `tee`
//! into a record in the state folder (the last 64 MiB of each stream, in
//! pieces; see [`CHUNK`]) and on to the exec while it lasts, and writes
//! the step's exit status to a file when it ends. An engine
//! kills an exec's own process when its client goes away (Docker does,
//! and containerd's CRI may); the supervisor, the step and its output are
//! not that process, so they go on.
//!
//! While nothing breaks this is one exec per step, its output streamed
//! live and its exit code the step's own. When the exec's stream breaks,
//! [`run_step`] opens another exec that sends the output files on from the
//! exact byte already received (on stdout and stderr apart), until the
//! status file is there, then reads the status. Every byte reaches the log
//! once, in order, and the exit code is the step's; bytes no longer kept
//! are counted in the log, never a silent gap. A second cut, or a third,
//! is followed the same way.
//!
//! A stream can end early without an error (Docker's attached stream ends
//! like a whole one when its connection is cut), so the supervisor and
//! every follow end both streams with an end mark ([`end_mark`]) once all
//! output is in them. The runner takes the mark off, and an exec whose
//! streams do not both end with it was cut, whatever its exit code says.
//! The mark carries the exec's status, so a backend need not ask the
//! engine for it ([`ExecEnd::Ended`]), and the exec has ended once both
//! marks are in: the engine's closing of its stream is not waited for.
//! Each exec's marks carry a key of their own ([`end_key`]), so a mark
//! in the step's output is output. They also begin
//! both streams with [`BEGIN_MARK`], with the wrapper's own shell errors
//! sent nowhere: what an engine writes into a stream it could not start
//! is never counted as the step's output.
//!
//! A follow that ends at once with nothing through, again and again, is
//! tried after longer and longer pauses; after 11 the runner kills the
//! step's processes, which can hold every process the environment allows,
//! and follows once more.
//!
//! The scripts are POSIX `sh` with `mkfifo`, `tee`, `dd`, `tail`, `head`,
//! `wc` and `cat`, and Linux's `/proc`: busybox and coreutils both have
//! them. Everything in the
//! state folder is in the step's reach, so the runner treats it as
//! untrusted: a status is accepted only as a number from 0 to 255, and
//! the pid the kill reads is checked (see [`crate::script::kill_tree`]).
//!
//! ```
//! use executor_core::detached::{Offsets, StepFiles};
//! use executor_core::script::Script;
//! let files = StepFiles::new("/.knotless", "1a2b");
//! let argv = files.start_argv("", Script::File("/.knotless/step-ab.sh"));
//! assert_eq!(argv[..2], ["sh".to_string(), "-c".to_string()]);
//! let again = files.follow_argv(Offsets { stdout: 10, stderr: 0 });
//! assert_eq!(again[4..6], ["10".to_string(), "0".to_string()]);
//! ```

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncWrite;
use tokio_util::sync::CancellationToken;

use crate::events::OutputStream;
use crate::script::Script;
use crate::usage::StepUsage;
use crate::{ExecutorError, FailureKind, RunLog};
use begin_mark::Begun;
pub use begin_mark::BEGIN_MARK;
pub use end_mark::{end_key, end_mark};
use end_mark::{EndMarked, Ends};

mod begin_mark;
mod end_mark;

/// The files of one step in the environment's state folder, all named
/// from one prefix, `stepio-ID`: `.pid` (the supervisor's pid, the root of
/// the kill), `.o` and `.e` (the pipes the step writes into), `.out` and
/// `.err` (what it wrote), `.status` (its exit status, once it ended),
/// and `.oom` where OOM kills were counted in the environment before the
/// step started (how many).
/// Each step's start removes the files of the steps before it, whose
/// ends the runner already has: the output on disk is one step's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFiles {
    prefix: String,
}

/// How many bytes of each stream the log already has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offsets {
    /// Bytes of stdout.
    pub stdout: u64,
    /// Bytes of stderr.
    pub stderr: u64,
}

/// The exit status `follow_argv`'s command exits with when the step's
/// supervisor is gone and left no status: nothing more will come.
pub const FOLLOW_LOST: i32 = 3;

/// How many times in a row a stream may break with nothing through it.
const MAX_IDLE_CUTS: u32 = 10;

/// Half the first pause after a follow that ended at once with nothing
/// through: 50 ms, doubling with each one after, to 800 ms.
const IDLE_PAUSE: Duration = Duration::from_millis(25);

/// A follow that stayed open this long before it broke is not part of a
/// loop of failing reconnects.
const LASTED: Duration = Duration::from_secs(2);

/// The size of one piece of a stream's record. Each piece is one `dd`
/// start in the environment: 8 MiB pieces took 1 GiB through the wrapper
/// in 9.3–9.9 s where 1 MiB pieces took 11.5–11.8 s.
pub const CHUNK: u64 = 8 << 20;

/// How many pieces of each stream are kept at least: 64 MiB. The oldest
/// go two at a time, so at most 10 (80 MiB) are on disk.
pub const KEPT_CHUNKS: u64 = 8;

/// The start of a step. `$0` is the files' prefix, `$1` the script (or its
/// file), `$2` the key its end marks carry ([`end_key`]).
///
/// The step writes into two pipes; a `tee` on each sends its stream on
/// to the exec (through a `dd` that joins tee's small writes into reads
/// of up to 64 KiB, so a loud step reaches the runner in large pieces,
/// as it did when it wrote to the exec itself: without it, 512 MiB went
/// through Docker at 51 MB/s against 78) and, through a pipe
/// without a name (`/proc/self/fd/5`), into a recorder, which writes it
/// in pieces of [`CHUNK`] bytes, `PREFIX.out.N` and `PREFIX.err.N` (N
/// from 0), and removes the oldest so that the last 64 to 80 MiB of each
/// stream are kept. Pieces soon removed seldom reach the disk at all, so
/// a loud step is not held to the disk's speed. A piece `dd` could not
/// fill (its count, in the words POSIX gives it) is the stream's last.
///
/// Every file made or removed on the state folder's disk costs far more
/// than a process start (0.3 to 0.7 ms on an ext4 volume, against 0.2 ms
/// for a fork), so a step makes six: its two pipes, its pid, its status
/// and the first piece of each stream. The stdout recorder removes the
/// steps before, while the step runs.
///
/// A loud stream's recorder and its joining `dd` (what holds fd 5 on
/// the recorder's pipe, but for the `tee`, which reads the step's pipe)
/// go to the lowest priority once it starts its second piece (`renice`,
/// where the image has it; only for a stream past 8 MiB): they yield to
/// the step, and under load the output gathers in the pipes, so it goes
/// on in large pieces (a 512 MiB step through `docker exec` cost
/// dockerd, the shim and the client about a fifth less CPU) while an
/// idle machine still sends each line at once. The `tee` keeps its
/// priority: reniced too, it took a fifth to a quarter off a loud step's
/// throughput.
///
/// The supervisor's own output goes nowhere: only the `dd`s hold the
/// exec's streams, so nothing else dies of a write to a stream that broke.
///
/// The step has ended when its shell has: its status is written once the
/// recorders have all it wrote, unless a process it left behind still
/// holds its output (`sleep 600 &`), when it is written at once, as an
/// engine ends an exec whose own process ended. A second start of the
/// same step (an exec whose upgrade answer was lost, tried again) finds
/// the pipes made and follows the first instead of running the step
/// twice. It ends with the mark only when it sent every byte and the
/// status is a number from 0 to 255; otherwise (bytes no longer kept, a
/// supervisor gone, a status the step forged) it ends unmarked, so the
/// runner takes it for a cut and follows: the follow counts the lost
/// bytes, and the runner checks the status. Its own exit code is never
/// taken for the step's.
const START: &str = r#"d=$0; key=$2
STREAMS
old=; for f in "${d%/*}"/stepio-*; do case "$f" in "$d".*|*'*') ;; *) old="$old $f";; esac; done
if ! mkfifo "$d.o" "$d.e" 2>/dev/null; then
  [ -p "$d.o" ] || { echo "knotless: cannot make the step's pipes in ${d%/*}" >&4; exit 125; }
  BEGIN
  second=1
  FOLLOW
  s=; u=; { read -r s u < "$d.status"; } 2>/dev/null
  case "$s" in ''|*[!0-9]*|????*) exit 125;; esac
  [ "$s" -le 255 ] || exit 125
  case "$u" in *[![:digit:][:blank:]]*) u=;; esac; [ "${#u}" -le USAGE_MAX ] || u=
  marked "$s" "$u"
  exit "$s"
fi
record() {
  [ -z "$3" ] || rm -f $3
  i=0
  while :; do
    r=$(LC_ALL=C dd bs=1048576 count=8 iflag=fullblock of="$d.$1.$i" 2>&1)
    case "$r" in "8+0 records in"*) ;; *) return 0;; esac
    if [ "$i" = 0 ]; then
      read -r me _ < /proc/self/stat && renice -n 19 -p "$me" > /dev/null 2>&1
      for p in /proc/[0-9]*; do { [ "$p/fd/5" -ef /proc/self/fd/0 ] && ! [ "$p/fd/0" -ef "$2" ]; } 2>/dev/null && renice -n 19 -p "${p#/proc/}" > /dev/null 2>&1; done
    fi
    if [ "$i" -ge 9 ] && [ $((i % 2)) = 1 ]; then rm -f "$d.$1.$((i - 9))" "$d.$1.$((i - 8))"; fi
    i=$((i + 1))
  done
}
(
  BEGIN
  { (trap '' PIPE; exec tee -a /proc/self/fd/5) < "$d.o" 3>&- 4>&- | dd bs=65536 >&3 3>&- 4>&-; } 5>&1 | record out "$d.o" "$old" 3>&- 4>&- &
  { (trap '' PIPE; exec tee -a /proc/self/fd/5) < "$d.e" 3>&- 4>&- | dd bs=65536 >&4 3>&- 4>&-; } 5>&1 | record err "$d.e" '' 3>&- 4>&- &
  oom=0; for f in OOM_COUNTERS; do [ -r "$f" ] || continue; while read -r k v; do [ "$k" != oom_kill ] || [ "$v" -le "$oom" ] 2>/dev/null || oom=$v; done < "$f"; done; [ "$oom" = 0 ] || echo "$oom" > "$d.oom"
  p0=; { read -r p0 < /sys/fs/cgroup/memory.peak || read -r p0 < /sys/fs/cgroup/memory/memory.max_usage_in_bytes; } 2>/dev/null
  r=$(exec 9>&1 > "$d.o" 2> "$d.e" < /dev/null 3>&- 4>&-
    { echo 1000 > /proc/self/oom_score_adj; } 2>/dev/null || :
    PRELUDEsh FLAGS "$1" 9>&- &
    c=$!; exec > /dev/null 2>&1
    l=; { read -r l < /proc/self/stat; } 2>/dev/null; pp=${l%% *}
    ( unset IFS; t=" $c "; h=0; w=0.01
      me() { l=; { read -r l < /proc/self/stat; } 2>/dev/null; l=${l##*) }; set -- $l; up=$2; }
      while :; do
        sleep $w 9>&- || { [ "$w" = 1 ] && exit 0; w=1; continue; }
        me; [ "$up" = "$pp" ] || exit 0
        for q in /proc/[0-9]*; do
          l=; { read -r l < "$q/stat"; } 2>/dev/null || continue; l=${l##*) }; set -- $l
          case "$t" in *" ${q#/proc/} "*) ;; *" $2 "*) t="$t${q#/proc/} ";; *) { [ "$q/fd/1" -ef "$d.o" ] || [ "$q/fd/2" -ef "$d.e" ]; } 2>/dev/null || continue;; esac
          v=; { while read -r k v _; do [ "$k" = VmHWM: ] && break; done < "$q/status"; } 2>/dev/null
          case "$v" in ''|*[!0-9]*) ;; *) [ "$v" -le "$h" ] || { h=$v; echo "p $h" >&9; };; esac
        done
        case $w in 0.01) w=0.05;; 0.05) w=0.1;; 0.1) w=0.2;; 0.2) w=0.5;; *) w=1;; esac
      done ) &
    m=$!
    wait $c; s=$?
    kill -9 "$m" 2>/dev/null
    set -f; unset IFS; l=; { read -r l < /proc/self/stat; } 2>/dev/null; l=${l##*) }; set -- $l
    lim=; { read -r lim < /sys/fs/cgroup/memory.max || read -r lim < /sys/fs/cgroup/memory/memory.limit_in_bytes; } 2>/dev/null
    p1=; { read -r p1 < /sys/fs/cgroup/memory.peak || read -r p1 < /sys/fs/cgroup/memory/memory.max_usage_in_bytes; } 2>/dev/null
    case "$lim" in ''|*[!0-9]*) lim=0;; esac
    case "$p1" in ''|*[!0-9]*) p1=0;; esac
    case "${14}${15}" in ''|*[!0-9]*) echo "u - - $lim $p1" >&9;; *) echo "u $((${14} * 10)) $((${15} * 10)) $lim $p1" >&9;; esac
    wait "$m"
    exit "$s"); s=$?
  u=; pk=0; u1=; u2=; u3=; u4=; n=; ran=; set -f
  for w in $r; do case "$n" in p) pk=$w; n=;; u1) u1=$w; n=u2;; u2) u2=$w; n=u3;; u3) u3=$w; n=u4;; u4) u4=$w; n=;; *) case "$w" in p) n=p;; u) n=u1; ran=1;; *) n=;; esac;; esac; done
  [ -n "$ran" ] || exit 125
  case "$p0" in ''|*[!0-9]*) u4=0;; esac
  case "$u4" in ''|*[!0-9]*) u4=0;; *) [ "$u4" -gt "$p0" ] 2>/dev/null || u4=0;; esac
  set +f; case "$u1$u2$pk$u3" in *[!0-9]*) ;; *) [ -z "$u3" ] || u="$u1 $u2 $pk $u3 $u4";; esac
  [ "${#u}" -le USAGE_MAX ] || u=
  held=; for p in /proc/[0-9]*; do { [ "$p/fd/1" -ef "$d.o" ] || [ "$p/fd/2" -ef "$d.e" ]; } 2>/dev/null && held=1; done
  [ -n "$held" ] || wait
  echo "$s $u" > "$d.status"
  [ -n "$held" ] || marked "$s" "$u"
  exit "$s"
) &
echo $! > "$d.pid"
wait $!"#;

/// What a gated start ([`StepFiles::gated_start_argv`]) reads before it
/// does anything: the one line that releases it.
pub const GATE_OPEN: &[u8] = b"go\n";

/// The gate of a start opened ahead: nothing happens before the line
/// `go`, and the exec's stdin is let go of once it came (the step's own
/// is `/dev/null`).
const GATE: &str = r#"IFS= read -r go || exit 0
[ "$go" = go ] || exit 0
exec 0</dev/null"#;

/// What a start and a follow do first: keep the exec's streams as fds 3
/// and 4, and send the shell's own words (a fork that failed, a tool
/// that is missing) nowhere. Only the step's output, and the marks, go
/// to the exec: `marked STATUS` ends both streams with the end mark
/// ([`end_mark`], with the exec's `$key`), SIGPIPE ignored from then on
/// (nothing follows the marks but the exit).
const STREAMS: &str = r#"exec 3>&1 4>&2 >/dev/null 2>&1
marked() { trap '' PIPE; printf '\000knotless-step-end %03d %s%s\n' "$1" "$key" "${2:+ $2}" >&3; printf '\000knotless-step-end %03d %s%s\n' "$1" "$key" "${2:+ $2}" >&4; }"#;

/// Begins both streams with [`BEGIN_MARK`]: only bytes after it are
/// counted as the step's. An engine that could not start the exec writes
/// its own error into the stream (Docker's `OCI runtime exec failed`),
/// and taking that for the step's output would put it in the log and move
/// the offsets a follow goes on from. A start's supervisor writes it, not
/// the exec's own process, which an engine kills when its client goes
/// away: a cut in the mark must not keep the step from starting. SIGPIPE
/// is ignored only while the marks are written: a stream cut at once
/// must not kill the supervisor, and the step must not inherit an
/// ignored SIGPIPE.
const BEGIN: &str = r#"trap '' PIPE; printf '\000knotless-step-begin\n' >&3; printf '\000knotless-step-begin\n' >&4; trap - PIPE"#;

/// Sends the recorded streams on from offsets `o` and `e` until the
/// status file is there (its writer waited for the recorders); what comes
/// after it in a script ends the streams with `marked STATUS`. Exits, marked
/// unless `second` is set, [`FOLLOW_LOST`] when the supervisor is gone without a status;
/// [`FOLLOW_GAP_STDOUT`] or [`FOLLOW_GAP_STDERR`] when the next bytes of
/// that stream are no longer kept (it has sent everything before them);
/// [`FOLLOW_AGAIN`] when a piece was removed while it was being sent, so
/// what was sent of it is for the runner's count to say.
/// There is no portable way to wait for a file to grow, so it looks again
/// every 200 ms (a second where `sleep` takes whole seconds only): this
/// runs only after a stream broke.
const FOLLOW: &str = r#"C=8388608
end() { [ -n "$second" ] || marked "$1"; exit "$1"; }
size() { n=$({ wc -c < "$1"; } 2>/dev/null) && echo $((n)) || echo -1; }
send() {
  while :; do
    k=$((x / C)); f="$d.$1.$k"; n=$(size "$f")
    if [ "$n" -lt 0 ]; then
      for g in "$d.$1".[0-9]*; do [ -e "$g" ] && [ "${g##*.}" -gt "$k" ] 2>/dev/null && end "$2"; done
      return 0
    fi
    r=$((x - k * C))
    if [ "$n" -gt "$r" ]; then
      tail -c +$((r + 1)) "$f" 2>/dev/null | head -c $((n - r))
      [ -e "$f" ] || end 6
      x=$((k * C + n))
    fi
    [ "$n" -ge "$C" ] || return 0
  done
}
while :; do
  if [ -s "$d.status" ]; then last=1; else last=; fi
  x=$o; send out 4 >&3; o=$x
  x=$e; send err 5 >&4; e=$x
  [ -n "$last" ] && break
  p=$(cat "$d.pid" 2>/dev/null)
  case "$p" in ''|*[!0-9]*) [ -s "$d.status" ] || end 3; continue;; esac
  kill -0 "$p" 2>/dev/null || [ -s "$d.status" ] || end 3
  sleep 0.2 2>/dev/null || sleep 1
done"#;

/// The exit status of the follow when the next bytes of stdout are no
/// longer kept.
pub const FOLLOW_GAP_STDOUT: i32 = 4;
/// As [`FOLLOW_GAP_STDOUT`], for stderr.
pub const FOLLOW_GAP_STDERR: i32 = 5;
/// The exit status of the follow when a piece went while it was sent.
pub const FOLLOW_AGAIN: i32 = 6;

impl StepFiles {
    /// The files of the step `id` (unique within the run) in `state_dir`.
    pub fn new(state_dir: &str, id: &str) -> Self {
        StepFiles {
            prefix: format!("{}/stepio-{id}", state_dir.trim_end_matches('/')),
        }
    }

    /// The file holding the supervisor's pid: what an interrupt kills,
    /// with every process under it.
    pub fn pid_file(&self) -> String {
        format!("{}.pid", self.prefix)
    }

    /// The file holding the `oom_kill` count of the environment's memory
    /// cgroup (v2 `memory.events`, or v1 `memory.oom_control`) as the
    /// step started: a kill counted after it is the step's, not one an
    /// earlier step survived. Written only when the count is not 0, so
    /// a run with no OOM kill makes no more files; none means 0.
    pub fn oom_file(&self) -> String {
        format!("{}.oom", self.prefix)
    }

    /// The argv that starts the step: `script` runs as `sh -e` (a file)
    /// or `sh -ec` (inline) after `prelude` (exports, `cd DIR && `), with
    /// its processes' `oom_score_adj` raised to 1000 so the kernel picks
    /// the step, not the environment's keep-alive or the supervisor, when
    /// memory runs out. The exec exits with the step's status. Its last
    /// word is a fresh key for its end marks ([`end_key`]).
    pub fn start_argv(&self, prelude: &str, script: Script<'_>) -> Vec<String> {
        let (flags, arg) = match script {
            Script::Inline(text) => ("-ec", text),
            Script::File(path) => ("-e", path),
        };
        let follow = format!("o=0; e=0\n{FOLLOW}");
        let text = START
            .replace("STREAMS", STREAMS)
            .replace("BEGIN", BEGIN)
            .replace("FOLLOW", &follow)
            .replace("FLAGS", flags)
            .replace("OOM_COUNTERS", crate::container::oom::COUNTERS)
            .replace("USAGE_MAX", &crate::usage::MARKED_MAX.to_string())
            // Last: the prelude names the step's variables (`CFLAGS`).
            .replace("PRELUDE", prelude);
        vec![
            "sh".into(),
            "-c".into(),
            text,
            self.prefix.clone(),
            arg.into(),
            crate::labels::random_hex(16),
        ]
    }

    /// [`StepFiles::start_argv`] opened ahead of its time: the exec's
    /// shell first reads one line from its stdin, and starts the step
    /// only if that line is `go` ([`GATE_OPEN`]). Its stdin closed, or
    /// anything else, and it exits having started nothing, so a start
    /// opened for a step that never comes (an earlier one failed, the
    /// runner died) runs nothing.
    ///
    /// ```
    /// use executor_core::detached::{StepFiles, marks_its_end};
    /// use executor_core::script::Script;
    /// let files = StepFiles::new("/.knotless", "a1s1-00");
    /// let argv = files.gated_start_argv("", Script::File("/.knotless/step-ab.sh"));
    /// assert!(argv[2].starts_with("IFS= read -r go"));
    /// assert!(marks_its_end(&argv));
    /// ```
    pub fn gated_start_argv(&self, prelude: &str, script: Script<'_>) -> Vec<String> {
        let mut argv = self.start_argv(prelude, script);
        argv[2] = format!("{GATE}\n{}", argv[2]);
        argv
    }

    /// The argv that sends the step's output on from `from` and exits 0
    /// once the step has ended, or [`FOLLOW_LOST`]. Its last word is a
    /// fresh key for its end marks ([`end_key`]).
    pub fn follow_argv(&self, from: Offsets) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            // `second` is the start's alone: a step variable of that name
            // reaches this exec's environment too.
            format!("d=$0; o=$1; e=$2; key=$3; second=\n{STREAMS}\n{BEGIN}\n{FOLLOW}\nmarked 0"),
            self.prefix.clone(),
            from.stdout.to_string(),
            from.stderr.to_string(),
            crate::labels::random_hex(16),
        ]
    }

    /// The argv that prints the index of the oldest piece of `stream`
    /// still kept (nothing when there is none).
    pub fn oldest_argv(&self, stream: OutputStream) -> Vec<String> {
        let name = match stream {
            OutputStream::Stdout => "out",
            OutputStream::Stderr => "err",
        };
        vec![
            "sh".into(),
            "-c".into(),
            r#"m=; for g in "$0".[0-9]*; do [ -e "$g" ] || continue; i=${g##*.}; case "$i" in *[!0-9]*) continue;; esac; if [ -z "$m" ] || [ "$i" -lt "$m" ]; then m=$i; fi; done; echo "$m""#.into(),
            format!("{}.{name}", self.prefix),
        ]
    }

    /// The argv that exits 0 if the step was started (its pipes are
    /// there), 1 if not.
    pub fn started_argv(&self) -> Vec<String> {
        vec![
            "sh".into(),
            "-c".into(),
            r#"[ -p "$0.o" ]"#.into(),
            self.prefix.clone(),
        ]
    }

    /// The files of `step` in `state_dir`, named by its
    /// [`StepCommand::id`](crate::StepCommand::id).
    ///
    /// # Errors
    /// `InvalidInput` for an id that is empty, longer than 64 bytes, or
    /// has a byte other than a letter, digit, `.`, `_` or `-`: it names
    /// files.
    ///
    /// ```
    /// use executor_core::{detached::StepFiles, StepCommand};
    /// let mut step = StepCommand::new("build", "make", vec![]);
    /// step.id = "a1s0".into();
    /// assert_eq!(StepFiles::of(&step, "/.knotless").unwrap().pid_file(), "/.knotless/stepio-a1s0.pid");
    /// step.id = "../x".into();
    /// assert!(StepFiles::of(&step, "/.knotless").is_err());
    /// ```
    pub fn of(step: &crate::StepCommand, state_dir: &str) -> Result<Self, ExecutorError> {
        let id = &step.id;
        let fine = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
        if id.is_empty() || id.len() > 64 || !id.bytes().all(fine) || id.starts_with('.') {
            return Err(ExecutorError::InvalidInput(format!(
                "step {}: StepCommand::id {id:?} names the step's files: use 1 to 64 letters, digits, '.', '_' or '-'",
                step.name
            )));
        }
        Ok(Self::new(state_dir, id))
    }

    /// The argv that prints the step's status file.
    pub fn status_argv(&self) -> Vec<String> {
        vec!["cat".into(), format!("{}.status", self.prefix)]
    }

    /// A POSIX `sh` script that kills the step's supervisor, every
    /// process under it, and what the step left behind that still writes
    /// its output.
    pub fn kill_script(&self) -> String {
        let (out, err) = (format!("{}.o", self.prefix), format!("{}.e", self.prefix));
        crate::script::kill_tree(&self.pid_file(), &[&out, &err])
    }
}

/// A status file's content as an exit status: a number from 0 to 255 and
/// perhaps a newline, nothing else (the file is in the step's reach).
///
/// ```
/// use executor_core::detached::parse_status;
/// assert_eq!(parse_status("137\n"), Some(137));
/// assert_eq!(parse_status("0"), Some(0));
/// assert_eq!(parse_status("-1\n"), None);
/// assert_eq!(parse_status("256\n"), None);
/// assert_eq!(parse_status(" 1\n"), None);
/// ```
pub fn parse_status(text: &str) -> Option<i32> {
    parse_status_line(text).map(|(status, _)| status)
}

/// A status file's content as an exit status and the step's usage after
/// it ([`StepUsage::from_marked`]): `STATUS USAGE` and perhaps a newline.
/// A status with usage that cannot be read is still the status.
///
/// ```
/// use executor_core::detached::parse_status_line;
/// let (status, usage) = parse_status_line("1 120 30 2048 0\n").unwrap();
/// assert_eq!((status, usage.map(|u| u.cpu_user_ms)), (1, Some(120)));
/// assert_eq!(parse_status_line("0 \n"), Some((0, None)));
/// assert_eq!(parse_status_line("0 x\n"), Some((0, None)));
/// assert_eq!(parse_status_line("x 1 2 3 4\n"), None);
/// ```
pub fn parse_status_line(text: &str) -> Option<(i32, Option<StepUsage>)> {
    let line = text.strip_suffix('\n').unwrap_or(text);
    let (digits, usage) = line.split_once(' ').unwrap_or((line, ""));
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let status = digits.parse::<i32>().ok().filter(|c| *c <= 255)?;
    Some((status, StepUsage::from_marked(usage)))
}

/// How one exec ended, as a backend reports it to [`run_step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEnd {
    /// Its command exited with this code.
    Exited(i32),
    /// Its stream ended without an error, and the backend did not ask the
    /// engine for its code: it may answer so only for an exec that marks
    /// its end ([`marks_its_end`]), whose status the end marks carry.
    /// Anything else takes it for a cut.
    Ended,
    /// Its stream broke, or it ended without a status; the command itself
    /// may still run.
    Cut(String),
    /// The interrupt fired first.
    Interrupted,
}

/// The exec a backend gives the step protocol: a command in the run's
/// environment, as the step's own user.
#[async_trait]
pub trait StepExec: Send + Sync {
    /// Runs `argv`, its stdout and stderr into the writers as they arrive,
    /// until it ends or `interrupt` fires.
    ///
    /// # Errors
    /// When the exec could not be started: of kind
    /// [`FailureKind::Unreachable`] when another try may pass.
    async fn exec(
        &self,
        argv: &[String],
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError>;

    /// Runs the kill script, as root where the backend can.
    ///
    /// # Errors
    /// When it could not be run or failed.
    async fn kill(&self, script: &str) -> Result<(), ExecutorError>;
}

/// How a step ended, as far as the protocol can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepEnd {
    /// The step exited with this code.
    Exited(i32),
    /// The interrupt fired; the step's processes were killed.
    Interrupted,
    /// No status will come: the supervisor is gone without one, or the
    /// status file holds something else. The backend asks its
    /// environment why.
    Lost(String),
}

/// `argv` of a gated start, without its gate: the same start, opened now.
fn ungated(argv: &[String]) -> Vec<String> {
    let mut plain = argv.to_vec();
    if let Some(script) = plain.get_mut(2) {
        if let Some(rest) = script.strip_prefix(GATE).and_then(|s| s.strip_prefix('\n')) {
            *script = rest.to_string();
        }
    }
    plain
}

/// A start opened ahead ([`StepFiles::gated_start_argv`]), waiting at its
/// gate. Dropped unreleased, it must let the exec's stdin close, so that
/// the exec ends having started nothing.
#[async_trait]
pub trait GatedStart: Send {
    /// Sends [`GATE_OPEN`] and then is what [`StepExec::exec`] would have
    /// been for its argv: its output into the writers until it ends or
    /// `interrupt` fires.
    ///
    /// # Errors
    /// As [`StepExec::exec`]; an exec whose gate could not be written to
    /// ends as [`ExecEnd::Cut`], not an error: it may have started.
    async fn release(
        self: Box<Self>,
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError>;
}

/// The first exec of a step that was opened ahead: its release, then the
/// exec as usual for whatever follows.
struct Released<'a> {
    gate: std::sync::Mutex<Option<Box<dyn GatedStart>>>,
    exec: &'a dyn StepExec,
}

#[async_trait]
impl StepExec for Released<'_> {
    async fn exec(
        &self,
        argv: &[String],
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        let gate = self.gate.lock().unwrap_or_else(|p| p.into_inner()).take();
        match gate {
            Some(gate) => gate.release(stdout, stderr, interrupt).await,
            None => self.exec.exec(argv, stdout, stderr, interrupt).await,
        }
    }

    async fn kill(&self, script: &str) -> Result<(), ExecutorError> {
        self.exec.kill(script).await
    }
}

/// What [`run_step`] needs besides the exec.
#[derive(Debug, Clone, Copy)]
pub struct Follow {
    /// How long a broken stream may take to be followed again: the
    /// reconnect timeout.
    pub reconnect: Duration,
    /// Set when an earlier runner process may have started the step
    /// ([`StepCommand::follow_from`](crate::StepCommand::follow_from)):
    /// if the step's pipes are there it is followed on from these
    /// offsets; if not, it is started.
    pub from: Option<Offsets>,
}

/// Runs a step started by `start` (from [`StepFiles::start_argv`]) to its
/// end, following it after every cut; see the module docs.
///
/// # Errors
/// The first exec's start error as it is (the backend tells a lost
/// environment from a refused call); an exec that could not be opened
/// again within `follow.reconnect`; a log that could not be written.
pub async fn run_step(
    exec: &dyn StepExec,
    files: &StepFiles,
    start: &[String],
    log: &RunLog,
    interrupt: &CancellationToken,
    follow: Follow,
) -> Result<StepEnd, ExecutorError> {
    run_step_released(exec, files, start, None, log, interrupt, follow).await
}

/// [`run_step`] whose start was opened ahead as `gate` (its argv is
/// `start`, from [`StepFiles::gated_start_argv`]): released instead of
/// opened, and followed as any start is.
///
/// # Errors
/// As [`run_step`].
pub async fn run_step_released(
    exec: &dyn StepExec,
    files: &StepFiles,
    start: &[String],
    gate: Option<Box<dyn GatedStart>>,
    log: &RunLog,
    interrupt: &CancellationToken,
    follow: Follow,
) -> Result<StepEnd, ExecutorError> {
    let gated = gate.is_some();
    let released = Released {
        gate: std::sync::Mutex::new(gate),
        exec,
    };
    let mut out = Counted::new(log.writer_for(OutputStream::Stdout));
    let mut err = Counted::new(log.writer_for(OutputStream::Stderr));
    let marked = Marked {
        exec: &released,
        log,
    };
    let first = match follow.from {
        None => marked.exec(start, &mut out, &mut err, interrupt).await?,
        Some(from) => match started(exec, files, follow, log, interrupt).await? {
            Some(true) => ExecEnd::Cut("the runner that started it is gone".into()),
            Some(false) if from == Offsets::default() => {
                marked.exec(start, &mut out, &mut err, interrupt).await?
            }
            // Its log has output of it, yet its files are gone.
            Some(false) => return Ok(StepEnd::Lost(
                "the step's files are gone from the environment, though the log has output of it"
                    .into(),
            )),
            None => return killed(exec, files).await,
        },
    };
    // A start opened ahead whose exec broke may have died at its gate
    // (an idle connection dropped while the step before ran): if the
    // step's pipes are not there, it never started, so it starts now,
    // ungated. A release that got through after all is not run twice:
    // the later start finds the pipes and follows the first.
    let first = match first {
        ExecEnd::Cut(why) if gated => match started(exec, files, follow, log, interrupt).await? {
            Some(true) => ExecEnd::Cut(why),
            Some(false) => {
                let plain = ungated(start);
                marked.exec(&plain, &mut out, &mut err, interrupt).await?
            }
            None => return killed(exec, files).await,
        },
        other => other,
    };
    let why = match first {
        ExecEnd::Exited(code) => return Ok(StepEnd::Exited(code)),
        ExecEnd::Interrupted => return killed(exec, files).await,
        ExecEnd::Cut(why) => why,
        ExecEnd::Ended => "it ended without a status".into(),
    };
    let mut cuts = 0u32;
    let mut idle_cuts = 0u32;
    let mut last = Offsets::default();
    let mut lasted = false;
    let mut starved = false;
    // Bytes of each stream no longer kept when they were asked for (the
    // log has said how many), and those an earlier runner's log has: the
    // offsets go on past them.
    let mut skipped = follow.from.unwrap_or_default();
    let mut why = Some(why);
    loop {
        let from = Offsets {
            stdout: out.count.saturating_add(skipped.stdout),
            stderr: err.count.saturating_add(skipped.stderr),
        };
        if let Some(why) = &why {
            cuts = cuts.saturating_add(1);
            log.line(&format!(
                "the step's stream broke ({why}); following it on from byte {} of stdout and {} of stderr (cut {cuts})",
                from.stdout, from.stderr
            ));
            tracing::warn!(%why, cuts, stdout = from.stdout, stderr = from.stderr, "following a step whose stream broke");
        }
        // A follow that ends again and again at once, with nothing new
        // through it, is not an outage that ends; one that brings output,
        // or lasted (a front that drops silent connections), goes on.
        idle_cuts = if from == last && !lasted {
            idle_cuts.saturating_add(1)
        } else {
            0
        };
        last = from;
        if idle_cuts > MAX_IDLE_CUTS && !starved {
            // Nothing could run in the environment: most often the step
            // (or what it left behind) holds every process the environment
            // allows, and a follow cannot fork. Killing its processes
            // (the kill starts none before it kills) frees them; a step
            // that had ended keeps its status, so how it ended can still
            // be read.
            starved = true;
            idle_cuts = 0;
            log.line(&format!(
                "following the step ended {} times in a row with nothing through: the environment may have no process left for it (the step's processes can hold every one its limit allows); killing the step's processes, then reading how it ended",
                MAX_IDLE_CUTS + 1
            ));
            tracing::warn!(cuts, "killing a step whose environment runs nothing more");
            if let Err(err) = exec.kill(&files.kill_script()).await {
                tracing::warn!(%err, "could not kill the step's processes");
            }
        } else if idle_cuts > MAX_IDLE_CUTS {
            return Err(ExecutorError::LostExitStatus {
                what: "following the step".into(),
                detail: format!(
                    "it ended {idle_cuts} times in a row with nothing through, after {cuts} cuts, and again after its processes were killed"
                ),
            });
        } else if idle_cuts > 0 && !paused(idle_cuts, interrupt).await {
            return killed(exec, files).await;
        }
        let argv = files.follow_argv(from);
        let opened = tokio::time::Instant::now();
        let ended = reopened(
            &marked,
            &argv,
            &mut out,
            &mut err,
            follow.reconnect,
            log,
            interrupt,
        )
        .await?;
        lasted = opened.elapsed() >= LASTED;
        why = None;
        match ended {
            ExecEnd::Exited(0) => return status(exec, files, follow, log, interrupt).await,
            ExecEnd::Exited(FOLLOW_LOST) if starved => {
                return Ok(StepEnd::Lost(
                    "no status after the runner killed the step's processes, as nothing could run in the environment: the step still ran then, or never started"
                        .into(),
                ))
            }
            ExecEnd::Exited(FOLLOW_LOST) => {
                return Ok(StepEnd::Lost(
                    "the step's supervisor ended without writing a status".into(),
                ))
            }
            ExecEnd::Exited(code @ (FOLLOW_GAP_STDOUT | FOLLOW_GAP_STDERR)) => {
                let (stream, name, at) = if code == FOLLOW_GAP_STDOUT {
                    (
                        OutputStream::Stdout,
                        "stdout",
                        from_now(&out, skipped.stdout),
                    )
                } else {
                    (
                        OutputStream::Stderr,
                        "stderr",
                        from_now(&err, skipped.stderr),
                    )
                };
                let lost = gap(exec, files, stream, at, follow, log, interrupt).await?;
                if lost > 0 {
                    log.line(&format!(
                        "{lost} bytes of the step's {name} from byte {at} were no longer kept in the environment (it keeps the last {} MiB of each stream) and are not in this log",
                        (KEPT_CHUNKS * CHUNK) >> 20
                    ));
                    match stream {
                        OutputStream::Stdout => {
                            skipped.stdout = skipped.stdout.saturating_add(lost)
                        }
                        OutputStream::Stderr => {
                            skipped.stderr = skipped.stderr.saturating_add(lost)
                        }
                    }
                }
            }
            // A piece went while it was sent: the count says how much came.
            ExecEnd::Exited(FOLLOW_AGAIN) => {}
            ExecEnd::Exited(code) => {
                return Ok(StepEnd::Lost(format!(
                    "following the step's output failed with exit {code}"
                )))
            }
            ExecEnd::Interrupted => return killed(exec, files).await,
            ExecEnd::Cut(again) => why = Some(again),
            // Marked answers with a code or a cut.
            ExecEnd::Ended => why = Some("it ended without a status".into()),
        }
    }
}

/// Waits before the `n`th try in a row (from 1) of an exec that ended at
/// once: 50 ms, doubling to 800 ms. False when the interrupt fired.
async fn paused(n: u32, interrupt: &CancellationToken) -> bool {
    let pause = IDLE_PAUSE.saturating_mul(1 << n.min(5));
    tokio::select! {
        _ = tokio::time::sleep(pause) => true,
        _ = interrupt.cancelled() => false,
    }
}

/// Whether an earlier runner started the step (its pipes are there);
/// `None` when the interrupt fired. A probe whose answer was lost is
/// asked again, after a pause that grows: a start on a guess could run
/// the step twice.
async fn started(
    exec: &dyn StepExec,
    files: &StepFiles,
    follow: Follow,
    log: &RunLog,
    interrupt: &CancellationToken,
) -> Result<Option<bool>, ExecutorError> {
    for tries in 0..=MAX_IDLE_CUTS {
        if tries > 0 && !paused(tries, interrupt).await {
            return Ok(None);
        }
        let probe = reopened(
            exec,
            &files.started_argv(),
            &mut tokio::io::sink(),
            &mut tokio::io::sink(),
            follow.reconnect,
            log,
            interrupt,
        )
        .await?;
        match probe {
            ExecEnd::Exited(code) => return Ok(Some(code == 0)),
            ExecEnd::Interrupted => return Ok(None),
            ExecEnd::Cut(_) | ExecEnd::Ended => continue,
        }
    }
    Err(ExecutorError::LostExitStatus {
        what: "finding whether the step was started".into(),
        detail: format!("the probe's stream broke {} times", MAX_IDLE_CUTS + 1),
    })
}

/// A stream's offset now: what came, and what was skipped.
fn from_now<W>(counted: &Counted<W>, skipped: u64) -> u64 {
    counted.count.saturating_add(skipped)
}

/// How many bytes of `stream` from `at` on are no longer kept: up to the
/// oldest piece still there.
#[allow(clippy::too_many_arguments)]
async fn gap(
    exec: &dyn StepExec,
    files: &StepFiles,
    stream: OutputStream,
    at: u64,
    follow: Follow,
    log: &RunLog,
    interrupt: &CancellationToken,
) -> Result<u64, ExecutorError> {
    let mut said = crate::text::HeadBuffer::new(32);
    let ended = reopened(
        exec,
        &files.oldest_argv(stream),
        &mut said,
        &mut tokio::io::sink(),
        follow.reconnect,
        log,
        interrupt,
    )
    .await?;
    if ended != ExecEnd::Exited(0) || said.dropped() > 0 {
        return Ok(0);
    }
    // The index is in the step's reach: a number, or no gap.
    let Some(oldest) = said.text().parse::<u64>().ok() else {
        return Ok(0);
    };
    Ok(oldest.saturating_mul(CHUNK).saturating_sub(at))
}

/// Opens an exec again through an outage: tries while its start fails as
/// [`FailureKind::Unreachable`], within `reconnect`, saying so in the log
/// once; the interrupt ends the wait.
#[allow(clippy::too_many_arguments)]
async fn reopened(
    exec: &dyn StepExec,
    argv: &[String],
    stdout: &mut (dyn AsyncWrite + Send + Unpin),
    stderr: &mut (dyn AsyncWrite + Send + Unpin),
    reconnect: Duration,
    log: &RunLog,
    interrupt: &CancellationToken,
) -> Result<ExecEnd, ExecutorError> {
    let mut backoff = crate::outage::Backoff::new(reconnect);
    let mut said = false;
    loop {
        match exec.exec(argv, stdout, stderr, interrupt).await {
            Err(e) if e.kind() == FailureKind::Unreachable => {
                if !said {
                    said = true;
                    log.line(&format!(
                        "waiting up to {}s for the environment to answer again: {e}",
                        reconnect.as_secs()
                    ));
                }
                tokio::select! {
                    more = backoff.pause() => if !more { return Err(e) },
                    _ = interrupt.cancelled() => return Ok(ExecEnd::Interrupted),
                }
            }
            other => return other,
        }
    }
}

/// Reads the step's status once its output is all in; a read cut short
/// is tried again after a pause that grows, as a follow is.
async fn status(
    exec: &dyn StepExec,
    files: &StepFiles,
    follow: Follow,
    log: &RunLog,
    interrupt: &CancellationToken,
) -> Result<StepEnd, ExecutorError> {
    let argv = files.status_argv();
    for tries in 0..=MAX_IDLE_CUTS {
        if tries > 0 && !paused(tries, interrupt).await {
            return killed(exec, files).await;
        }
        let mut text = crate::text::HeadBuffer::new(128);
        let ended = reopened(
            exec,
            &argv,
            &mut text,
            &mut tokio::io::sink(),
            follow.reconnect,
            log,
            interrupt,
        )
        .await?;
        match ended {
            ExecEnd::Exited(0) => {
                let said = text.text();
                let parsed = (text.dropped() == 0)
                    .then(|| parse_status_line(&said))
                    .flatten();
                return Ok(match parsed {
                    Some((code, usage)) => {
                        if let Some(usage) = usage {
                            log.record_usage(usage);
                        }
                        StepEnd::Exited(code)
                    }
                    None => StepEnd::Lost(format!(
                        "the step's status file holds {:?}, not an exit status",
                        said.chars().take(16).collect::<String>()
                    )),
                });
            }
            ExecEnd::Exited(code) => {
                return Ok(StepEnd::Lost(format!(
                    "reading the step's status failed with exit {code}"
                )))
            }
            ExecEnd::Interrupted => return killed(exec, files).await,
            // A cut while reading a few bytes: read them again.
            ExecEnd::Cut(_) | ExecEnd::Ended => continue,
        }
    }
    Err(ExecutorError::LostExitStatus {
        what: "reading the step's status".into(),
        detail: format!("its stream broke {} times", MAX_IDLE_CUTS + 1),
    })
}

async fn killed(exec: &dyn StepExec, files: &StepFiles) -> Result<StepEnd, ExecutorError> {
    if let Err(err) = exec.kill(&files.kill_script()).await {
        tracing::warn!(%err, "could not kill an interrupted step");
    }
    Ok(StepEnd::Interrupted)
}

/// A writer that counts the bytes it took.
struct Counted<W> {
    inner: W,
    count: u64,
}

impl<W> Counted<W> {
    fn new(inner: W) -> Self {
        Counted { inner, count: 0 }
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counted<W> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.count = self.count.saturating_add(n as u64);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Whether the exec `argv` begins both its streams with [`BEGIN_MARK`]
/// and ends them with an end mark ([`end_mark`]) when it runs to its end:
/// a step's start or a follow. A dry-run or a fake answers these with
/// both marks, as the environment would, and a backend may answer
/// [`ExecEnd::Ended`] for them without asking for the code.
///
/// ```
/// use executor_core::detached::{marks_its_end, Offsets, StepFiles};
/// use executor_core::script::Script;
/// let files = StepFiles::new("/.knotless", "a1s0");
/// assert!(marks_its_end(&files.start_argv("", Script::Inline("true"))));
/// assert!(marks_its_end(&files.follow_argv(Offsets::default())));
/// assert!(!marks_its_end(&files.status_argv()));
/// ```
pub fn marks_its_end(argv: &[String]) -> bool {
    argv.get(2)
        .is_some_and(|script| script.contains("knotless-step-end"))
}

/// A step's execs (starts and follows), whose output counts from
/// [`BEGIN_MARK`] on and whose end counts only when both streams end with
/// an end mark; the marks are taken off before the log, and the status
/// they carry is the exec's code. The exec has ended once both streams
/// hold their mark: it is dropped then, the engine's end of it not
/// waited for. A stream cut short that ended like a
/// whole one (Docker's attached stream does) is a cut, whatever code the
/// exec ended with; so is an exec whose command never began, and what the
/// environment said instead is told in the log.
struct Marked<'a> {
    exec: &'a dyn StepExec,
    log: &'a RunLog,
}

#[async_trait]
impl StepExec for Marked<'_> {
    async fn exec(
        &self,
        argv: &[String],
        stdout: &mut (dyn AsyncWrite + Send + Unpin),
        stderr: &mut (dyn AsyncWrite + Send + Unpin),
        interrupt: &CancellationToken,
    ) -> Result<ExecEnd, ExecutorError> {
        let key = end_key(argv).unwrap_or_default();
        let ends = Ends::default();
        let mut out = Begun::new(EndMarked::new(stdout, key, &ends, 0));
        let mut err = Begun::new(EndMarked::new(stderr, key, &ends, 1));
        // Both marks are the end: the engine's closing of the stream after
        // them is not waited for.
        let ended = tokio::select! {
            biased;
            ended = self.exec.exec(argv, &mut out, &mut err, interrupt) => ended,
            () = ends.both() => Ok(ExecEnd::Ended),
        };
        let written =
            |e: std::io::Error| ExecutorError::backend("writing the step's output", e.to_string());
        let out = out.finish().await.map_err(written)?;
        let err = err.finish().await.map_err(written)?;
        for said in [&out.before, &err.before] {
            if !said.is_empty() {
                self.log.line(&format!(
                    "the environment answered, before the step's command began: {said}"
                ));
            }
        }
        let begun = out.begun && err.begun;
        let out = out.inner.finish().await.map_err(written)?;
        let err = err.inner.finish().await.map_err(written)?;
        let said = |ended: &ExecEnd| match ended {
            ExecEnd::Exited(code) => format!("it ended (exit {code})"),
            _ => "its stream ended".to_string(),
        };
        Ok(match (ended?, out, err) {
            (ended @ (ExecEnd::Exited(_) | ExecEnd::Ended), ..) if !begun => {
                ExecEnd::Cut(format!("{} before its command began", said(&ended)))
            }
            // The marks, not the engine, say how it ended: an engine that
            // killed the exec's own process after them would say otherwise.
            (ExecEnd::Exited(_) | ExecEnd::Ended, Some((out, usage)), Some((err, _)))
                if out == err =>
            {
                if let Some(usage) = usage {
                    self.log.record_usage(usage);
                }
                ExecEnd::Exited(i32::from(out))
            }
            (ExecEnd::Exited(_) | ExecEnd::Ended, Some((out, _)), Some((err, _))) => ExecEnd::Cut(
                format!("its streams' end marks disagree (status {out} and {err})"),
            ),
            (ended @ (ExecEnd::Exited(_) | ExecEnd::Ended), ..) => ExecEnd::Cut(format!(
                "{} before the mark that ends a whole stream",
                said(&ended)
            )),
            (other, ..) => other,
        })
    }

    async fn kill(&self, script: &str) -> Result<(), ExecutorError> {
        self.exec.kill(script).await
    }
}

#[cfg(test)]
mod tests;
