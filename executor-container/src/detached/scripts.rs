//! The POSIX `sh` the environment runs for a step: its start (the
//! supervisor, the recorders, the runner shell and the sampler of what the
//! step cost), the gate of a start opened ahead, and the follow that sends
//! the recorded output on after a cut.

/// What a start's own exec (`sh -c TEXT PREFIX SCRIPT KEY`) begins with:
/// the files' prefix and the key from its arguments, and no stream copier
/// (`_ktee`, see [`super::tee`]: only a channel has looked for one). Its
/// own variables follow (the step shell's flags `_kfl`, its prelude
/// `_kpre`), then [`START`]. A step channel, which defines [`START`] once,
/// runs the variables in a subshell that sets the rest itself.
pub(super) const HEAD: &str = "_kd=$0; _kkey=$2; _ktee=\n";

/// The start of a step, after [`HEAD`] and its variables (or what a
/// channel's subshell sets in their place): `$_kd` is the files' prefix,
/// `$1` the script (or its file), `$_kkey` the key its end marks carry
/// ([`end_key`](super::end_key)), `$_kfl` the step shell's flags, and
/// `$_kpre` what its command line begins with (exports, `cd DIR && `).
/// The same text for every step: a channel parses it once.
///
/// The step's CPU time is what the `times` builtin says of the shell that
/// waited for it (a read of `/proc/self/stat`, byte by byte as a shell's
/// `read` goes, took 0.26 ms in a busybox container; the builtin 0.02),
/// and the sampler finds its parent itself, off the step's path.
///
/// Every variable it sets before the step's shell starts is named `_k…`:
/// one the environment or the step already exported (`d`, `key`) would
/// reach the step with the start's value.
///
/// The step writes into two pipes. Where the channel found a
/// `knotless-tee` that runs (`$_ktee`, [`super::tee`]), that one process
/// reads both in pieces of up to 1 MiB as they come, sends each on to
/// the exec (fds 3 and 4) and writes it into the stream's record, and
/// removes the files of the steps before while the pipes are idle:
/// one fork and a 5 KiB exec where a `tee` and a recorder per stream
/// were eight forks, and the step's start took 3.3 ms where it took 3.9
/// in a busybox container.
///
/// Otherwise a copier on each pipe sends its stream on to the exec and,
/// through a pipe without a name (fd 5), into a recorder: the image's
/// `tee` (writing to `/proc/self/fd/5`) through a `dd` that joins tee's
/// small writes into reads of up to 64 KiB, so a loud step reaches the
/// runner in large pieces, as it did when it wrote to the exec itself
/// (without it, 512 MiB went through Docker at 51 MB/s against 78). The
/// tee and its `dd` cost 1.07 ms a stream in a busybox container (the
/// `tee` is an exec of the whole busybox).
///
/// Either way a record is pieces of [`CHUNK`](super::CHUNK) bytes,
/// `PREFIX.out.N` and `PREFIX.err.N` (N from 0), and the oldest go so
/// that the last 64 to 80 MiB of each stream are kept. Pieces soon
/// removed seldom reach the disk at all, so a loud step is not held to
/// the disk's speed. A piece short of the full size is the stream's
/// last, or the one being written. The names of the steps before are
/// taken with globbing off: a step that names a file `stepio-*?` must not
/// make a later start remove what it matches.
///
/// Every file made or removed on the state folder's disk costs far more
/// than a process start (0.3 to 0.7 ms on an ext4 volume, against 0.2 ms
/// for a fork), so a step makes six: its two pipes, its pid, its status
/// and the first piece of each stream. The steps before's go while the
/// step runs.
///
/// With the image's `tee`, a loud stream's recorder and the `tee`'s
/// joining `dd` (what holds fd 5 on the recorder's pipe, but for the
/// copier, which reads the step's pipe), go to the lowest priority once
/// it starts its second piece (`renice`, where the image has it; only for
/// a stream past 8 MiB): they yield to the step, and under load the
/// output gathers in the pipes, so it goes on in large pieces (a 512 MiB
/// step through `docker exec` cost dockerd, the shim and the client
/// about a fifth less CPU) while an idle machine still sends each line at
/// once. The copier keeps its priority: a reniced `tee` took a fifth to a
/// quarter off a loud step's throughput.
///
/// The sampler waits with `usleep` where the image has it: busybox runs
/// it in the forked shell, where its `sleep` is an exec of itself (0.2 ms
/// against 0.8 ms in a busybox container), and a step of `true` ends
/// before the first sample.
///
/// The supervisor's own output goes nowhere: only the `dd`s hold the
/// exec's streams, so nothing else dies of a write to a stream that broke.
///
/// The step has ended when its shell has: its status is written once the
/// recorders have all it wrote, unless a process it left behind still
/// holds its output (`sleep 600 &`). Then, where the copier is
/// `knotless-tee`, the supervisor tells it (SIGWINCH, sent again each
/// millisecond: a copier still being started ignores it) to send on what
/// the pipes hold, all the step wrote, and let go of the exec's
/// streams, waits until it has (polling `/proc`, up to 2 s: this is
/// the rare case), and ends the streams with the marks, so the step ends
/// as any other with every byte it wrote, and nothing the leftover writes
/// after reaches the exec. Otherwise (the image's `tee`, or copiers that
/// did not let go in time) the status is written at once and the streams
/// are left unmarked, as an engine ends an exec whose own process ended:
/// the runner reads the status, and a last line still on its way through
/// the `tee` can be lost. A second start of the
/// same step (an exec whose upgrade answer was lost, tried again) finds
/// the pipes made and follows the first instead of running the step
/// twice. It ends with the mark only when it sent every byte and the
/// status is a number from 0 to 255; otherwise (bytes no longer kept, a
/// supervisor gone, a status the step forged) it ends unmarked, so the
/// runner takes it for a cut and follows: the follow counts the lost
/// bytes, and the runner checks the status. Its own exit code is never
/// taken for the step's.
pub(super) const START: &str = r#"STREAMS
_kold=; for _kf in "${_kd%/*}"/stepio-*; do case "$_kf" in "$_kd".*|*'*') ;; *) _kold="$_kold $_kf";; esac; done
if ! mkfifo "$_kd.o" "$_kd.e" 2>/dev/null; then
  [ -p "$_kd.o" ] || { echo "knotless: cannot make the step's pipes in ${_kd%/*}" >&4; exit 125; }
  BEGIN
  second=1
  FOLLOW
  s=; u=; { read -r s u < "$_kd.status"; } 2>/dev/null
  case "$s" in ''|*[!0-9]*|????*) exit 125;; esac
  [ "$s" -le 255 ] || exit 125
  case "$u" in *[![:digit:][:blank:]]*) u=;; esac; [ "${#u}" -le USAGE_MAX ] || u=
  marked "$s" "$u"
  exit "$s"
fi
pidline() { _kpid_=${1%% *}; set -f; set -- ${1##*) }; set +f; echo "$_kpid_ ${20}"; }
ms() {
  _kms=-; _kmn=${1%%m*}; _kr=${1#*m}; _kr=${_kr%s}; _kf=${_kr#*.}000; _kr=${_kr%%.*}; _kf=${_kf%"${_kf#???}"}
  case "$1" in [0-9]*m[0-9]*.[0-9]*s) ;; *) return 0;; esac
  case "$_kmn:$_kr:$_kf" in *[!0-9:]*|:*|*::*|0[0-9]*|*:0[0-9]*:*) return 0;; esac
  _kms=$((_kmn * 60000 + _kr * 1000 + 1$_kf - 1000))
}
record() {
  [ -z "$3" ] || { set -f; rm -f $3; }
  i=0
  while :; do
    r=$(LC_ALL=C dd bs=1048576 count=8 iflag=fullblock of="$_kd.$1.$i" 2>&1)
    case "$r" in "8+0 records in"*) ;; *) return 0;; esac
    if [ "$i" = 0 ]; then
      read -r me _ < /proc/self/stat && renice -n 19 -p "$me" > /dev/null 2>&1
      for p in /proc/[0-9]*; do { [ "$p/fd/5" -ef /proc/self/fd/0 ] && ! [ "$p/fd/0" -ef "$2" ]; } 2>/dev/null && renice -n 19 -p "${p#/proc/}" > /dev/null 2>&1; done
    fi
    if [ "$i" -ge 9 ] && [ $((i % 2)) = 1 ]; then rm -f "$_kd.$1.$((i - 9))" "$_kd.$1.$((i - 8))"; fi
    i=$((i + 1))
  done
}
(
  _kl=; { read -r _kl < /proc/self/stat; } 2>/dev/null; pidline "$_kl" > "$_kd.pid"; _kme=${_kl%% *}
  BEGIN
  if [ -n "$_ktee" ]; then
    set -f; "$_ktee" "$_kme" "$_kd" $_kold < "$_kd.o" 5< "$_kd.e" &
    set +f
  else
    { (trap '' PIPE; exec tee -a /proc/self/fd/5) < "$_kd.o" 3>&- 4>&- | dd bs=65536 >&3 3>&- 4>&-; } 5>&1 | record out "$_kd.o" "$_kold" 3>&- 4>&- &
    { (trap '' PIPE; exec tee -a /proc/self/fd/5) < "$_kd.e" 3>&- 4>&- | dd bs=65536 >&4 3>&- 4>&-; } 5>&1 | record err "$_kd.e" '' 3>&- 4>&- &
  fi
  _koom=0; for _kf in OOM_COUNTERS; do [ -r "$_kf" ] || continue; while read -r _kk _kv; do [ "$_kk" != oom_kill ] || [ "$_kv" -le "$_koom" ] 2>/dev/null || _koom=$_kv; done < "$_kf"; done; [ "$_koom" = 0 ] || echo "$_koom" > "$_kd.oom"
  _kp0=; { read -r _kp0 < /sys/fs/cgroup/memory.peak || read -r _kp0 < /sys/fs/cgroup/memory/memory.max_usage_in_bytes; } 2>/dev/null
  r=$(exec 9>&1 > "$_kd.o" 2> "$_kd.e" < /dev/null 3>&- 4>&-
    { echo 1000 > /proc/self/oom_score_adj; } 2>/dev/null || :
    (eval "${_kpre}exec sh \"\$_kfl\" \"\$1\"") 9>&- &
    c=$!; exec > /dev/null 2>&1
    ( unset IFS; t=" $c "; h=0; w=0.01; z=10000; command -v usleep > /dev/null 2>&1 || z=
      me() { _kl=; { read -r _kl < /proc/self/stat; } 2>/dev/null; _kl=${_kl##*) }; set -- $_kl; up=$2; }
      me; pp=$up; [ -n "$pp" ] && [ "$pp" != 1 ] || exit 0
      while :; do
        if [ -n "$z" ]; then usleep $z 9>&- || z=; else sleep $w 9>&- || { [ "$w" = 1 ] && exit 0; w=1; continue; }; fi
        me; [ "$up" = "$pp" ] || exit 0
        for q in /proc/[0-9]*; do
          _kl=; { read -r _kl < "$q/stat"; } 2>/dev/null || continue; _kl=${_kl##*) }; set -- $_kl
          case "$t" in *" ${q#/proc/} "*) ;; *" $2 "*) t="$t${q#/proc/} ";; *) { [ "$q/fd/1" -ef "$_kd.o" ] || [ "$q/fd/2" -ef "$_kd.e" ]; } 2>/dev/null || continue;; esac
          _kv=; { while read -r _kk _kv _; do [ "$_kk" = VmHWM: ] && break; done < "$q/status"; } 2>/dev/null
          case "$_kv" in ''|*[!0-9]*) ;; *) [ "$_kv" -le "$h" ] || { h=$_kv; echo "p $h" >&9; };; esac
        done
        case $w in 0.01) w=0.05 z=${z:+50000};; 0.05) w=0.1 z=${z:+100000};; 0.1) w=0.2 z=${z:+200000};; 0.2) w=0.5 z=${z:+500000};; *) w=1 z=${z:+1000000};; esac
      done ) &
    m=$!
    wait $c; s=$?
    kill -9 "$m" 2>/dev/null
    echo t >&9; times >&9
    lim=; { read -r lim < /sys/fs/cgroup/memory.max || read -r lim < /sys/fs/cgroup/memory/memory.limit_in_bytes; } 2>/dev/null
    p1=; { read -r p1 < /sys/fs/cgroup/memory.peak || read -r p1 < /sys/fs/cgroup/memory/memory.max_usage_in_bytes; } 2>/dev/null
    case "$lim" in ''|*[!0-9]*) lim=0;; esac
    case "$p1" in ''|*[!0-9]*) p1=0;; esac
    echo "u $lim $p1" >&9
    wait "$m"
    exit "$s"); s=$?
  u=; pk=0; u1=; u2=; u3=; u4=; n=; ran=; set -f
  for w in $r; do case "$n" in p) pk=$w; n=;; t1) n=t2;; t2) n=t3;; t3) ms "$w"; u1=$_kms; n=t4;; t4) ms "$w"; u2=$_kms; n=;; u3) u3=$w; n=u4;; u4) u4=$w; n=;; *) case "$w" in p) n=p;; t) n=t1;; u) n=u3; ran=1;; *) n=;; esac;; esac; done
  [ -n "$ran" ] || exit 125
  case "$_kp0" in ''|*[!0-9]*) u4=0;; esac
  case "$u4" in ''|*[!0-9]*) u4=0;; *) [ "$u4" -gt "$_kp0" ] 2>/dev/null || u4=0;; esac
  set +f; case "$u1$u2$pk$u3" in *[!0-9]*) ;; *) [ -z "$u3" ] || u="$u1 $u2 $pk $u3 $u4";; esac
  [ "${#u}" -le USAGE_MAX ] || u=
  held=; _kc=; for p in /proc/[0-9]*; do
    { [ "$p/fd/1" -ef "$_kd.o" ] || [ "$p/fd/2" -ef "$_kd.e" ]; } 2>/dev/null && held=1
    [ -z "$_ktee" ] || { { [ "$p/fd/0" -ef "$_kd.o" ] || [ "$p/fd/0" -ef "$_kd.e" ]; } 2>/dev/null && _kc="$_kc ${p#/proc/}"; }
  done
  sent=
  if [ -n "$held" ] && [ -n "$_kc" ]; then
    _kn=0; while [ "$_kn" -lt 2000 ]; do
      _kl=; for c in $_kc; do [ ! -e "/proc/$c/fd/3" ] || { _kl=1; kill -WINCH "$c" 2>/dev/null; }; done
      [ -n "$_kl" ] || { sent=1; break; }
      if usleep 1000 2>/dev/null; then _kn=$((_kn + 1)); elif sleep 0.01 2>/dev/null; then _kn=$((_kn + 10)); else sleep 1; _kn=$((_kn + 1000)); fi
    done
  fi
  [ -n "$held" ] || wait
  echo "$s $u" > "$_kd.status"
  [ -n "$held" ] && [ -z "$sent" ] || marked "$s" "$u"
  exit "$s"
) &
wait $!"#;

/// What a gated start ([`StepFiles::gated_start_argv`](super::StepFiles::gated_start_argv)) reads before it
/// does anything: the one line that releases it.
pub const GATE_OPEN: &[u8] = b"go\n";

/// The gate of a start opened ahead: nothing happens before the line
/// `go`, and the exec's stdin is let go of once it came (the step's own
/// is `/dev/null`).
pub(super) const GATE: &str = r#"IFS= read -r _kgo || exit 0
[ "$_kgo" = go ] || exit 0
exec 0</dev/null"#;

/// What a start and a follow do first: keep the exec's streams as fds 3
/// and 4, and send the shell's own words (a fork that failed, a tool
/// that is missing) nowhere. Only the step's output, and the marks, go
/// to the exec: `marked STATUS` ends both streams with the end mark
/// ([`end_mark`](super::end_mark), with the exec's `$_kkey`), SIGPIPE ignored from then on
/// (nothing follows the marks but the exit).
pub(super) const STREAMS: &str = r#"exec 3>&1 4>&2 >/dev/null 2>&1
marked() { trap '' PIPE; printf '\000knotless-step-end %03d %s%s\n' "$1" "$_kkey" "${2:+ $2}" >&3; printf '\000knotless-step-end %03d %s%s\n' "$1" "$_kkey" "${2:+ $2}" >&4; }"#;

/// Begins both streams with [`BEGIN_MARK`](super::BEGIN_MARK): only bytes after it are
/// counted as the step's. An engine that could not start the exec writes
/// its own error into the stream (Docker's `OCI runtime exec failed`),
/// and taking that for the step's output would put it in the log and move
/// the offsets a follow goes on from. A start's supervisor writes it, not
/// the exec's own process, which an engine kills when its client goes
/// away: a cut in the mark must not keep the step from starting. SIGPIPE
/// is ignored only while the marks are written: a stream cut at once
/// must not kill the supervisor, and the step must not inherit an
/// ignored SIGPIPE.
pub(super) const BEGIN: &str = r#"trap '' PIPE; printf '\000knotless-step-begin\n' >&3; printf '\000knotless-step-begin\n' >&4; trap - PIPE"#;

/// Sends the recorded streams on from offsets `o` and `e` until the
/// status file is there (its writer waited for the recorders); what comes
/// after it in a script ends the streams with `marked STATUS`. Exits, marked
/// unless `second` is set, [`FOLLOW_LOST`](super::FOLLOW_LOST) when the supervisor is gone without a status;
/// [`FOLLOW_GAP_STDOUT`](super::FOLLOW_GAP_STDOUT) or [`FOLLOW_GAP_STDERR`](super::FOLLOW_GAP_STDERR) when the next bytes of
/// that stream are no longer kept (it has sent everything before them);
/// [`FOLLOW_AGAIN`](super::FOLLOW_AGAIN) when a piece was removed while it was being sent, so
/// what was sent of it is for the runner's count to say.
/// There is no portable way to wait for a file to grow, so it looks again
/// every 200 ms (a second where `sleep` takes whole seconds only): this
/// runs only after a stream broke.
pub(super) const FOLLOW: &str = r#"C=8388608
end() { [ -n "$second" ] || marked "$1"; exit "$1"; }
size() { n=$({ wc -c < "$1"; } 2>/dev/null) && echo $((n)) || echo -1; }
send() {
  while :; do
    _kk=$((x / C)); _kf="$_kd.$1.$_kk"; n=$(size "$_kf")
    if [ "$n" -lt 0 ]; then
      for g in "$_kd.$1".[0-9]*; do [ -e "$g" ] && [ "${g##*.}" -gt "$_kk" ] 2>/dev/null && end "$2"; done
      return 0
    fi
    r=$((x - _kk * C))
    if [ "$n" -gt "$r" ]; then
      tail -c +$((r + 1)) "$_kf" 2>/dev/null | head -c $((n - r))
      [ -e "$_kf" ] || end 6
      x=$((_kk * C + n))
    fi
    [ "$n" -ge "$C" ] || return 0
  done
}
while :; do
  if [ -s "$_kd.status" ]; then last=1; else last=; fi
  x=$o; send out 4 >&3; o=$x
  x=$e; send err 5 >&4; e=$x
  [ -n "$last" ] && break
  p=; { read -r p _ < "$_kd.pid"; } 2>/dev/null
  case "$p" in ''|*[!0-9]*) [ -s "$_kd.status" ] || end 3; continue;; esac
  kill -0 "$p" 2>/dev/null || [ -s "$_kd.status" ] || end 3
  sleep 0.2 2>/dev/null || sleep 1
done"#;

/// The exit status of the follow when the next bytes of stdout are no
/// longer kept.
pub const FOLLOW_GAP_STDOUT: i32 = 4;
/// As [`FOLLOW_GAP_STDOUT`](super::FOLLOW_GAP_STDOUT), for stderr.
pub const FOLLOW_GAP_STDERR: i32 = 5;
/// The exit status of the follow when a piece went while it was sent.
pub const FOLLOW_AGAIN: i32 = 6;
