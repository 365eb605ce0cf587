//! Every process of a run, found and ended wherever it went.
//!
//! A step can leave its process group (`setpgid`) and its session
//! (`setsid sleep &`), so killing the step's group does not reach
//! everything it started. Every step process gets the run's mark in its
//! environment, which every descendant inherits whatever group or session
//! it moves to; stop and cleanup end every process that carries it. The
//! mark is kept in the run folder, so a cleanup after the runner itself
//! was killed still finds them. A process is signalled through a pidfd
//! taken before its mark is checked again, so a pid that was reused in
//! between is never killed (without pidfds, kernels before 5.3, the
//! process's start time is compared instead).
//!
//! Not covered: a step that clears its own environment (`env -i`) before
//! leaving its session; only a cgroup would follow that.

use std::os::fd::AsRawFd;
use std::path::Path;

/// The variable that carries a run's mark.
pub(crate) const MARK_VAR: &str = "KNOTLESS_RUN_MARK";

/// The file in the run folder that keeps the mark.
pub(crate) const MARK_FILE: &str = "mark";

/// How many rounds of find-and-kill before giving up on a process that
/// keeps forking (each round kills everything it found).
const ROUNDS: usize = 50;

/// How long a scan that found nothing but processes showing no
/// environment keeps looking again: one changing program (an `execve`
/// in progress) shows its new environment within it even on a machine
/// under load, where a handful of immediate looks saw the change still
/// going on (a `setsid sleep` missed under a full suite on 2 cores, and
/// half a second was once too short there too). It costs only a cleanup
/// that meets a process of the runner's user with no environment.
const UNSURE_FOR: std::time::Duration = std::time::Duration::from_secs(2);

/// A fresh mark for a run.
pub(crate) fn new_mark() -> String {
    executor_core::labels::random_hex(16)
}

/// The mark kept in a run folder, if it is one the runner wrote: 32 hex
/// digits, nothing else (a step can write the file).
pub(crate) fn read_mark(root: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root.join(MARK_FILE)).ok()?;
    let mark = text.trim();
    (mark.len() == 32 && mark.bytes().all(|b| b.is_ascii_hexdigit())).then(|| mark.to_string())
}

/// Kills every process carrying `mark`; returns how many were killed.
/// A process whose environment cannot be read at the scan (one between
/// two programs, in `execve`, shows none) is looked at again in the next
/// round, so a step's process caught changing program is not missed.
pub(crate) fn kill_marked(mark: &str) -> usize {
    let needle = format!("{MARK_VAR}={mark}");
    let mut killed = 0;
    // A process that cleared its own environment shows none for good:
    // looks for a while, pausing longer each time, not for ever.
    let mut unsure_since: Option<std::time::Instant> = None;
    let mut pause = std::time::Duration::from_millis(1);
    let mut rounds = 0;
    while rounds < ROUNDS {
        let (found, unsure) = scan(&needle);
        if found.is_empty() {
            let since = *unsure_since.get_or_insert_with(std::time::Instant::now);
            if unsure == 0 || since.elapsed() >= UNSURE_FOR {
                return killed;
            }
            // Polling /proc: an exec in progress has no event to wait on.
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(50));
            continue;
        }
        rounds += 1;
        for pid in found {
            if kill_if_marked(pid, &needle) {
                killed += 1;
            }
        }
    }
    tracing::warn!(mark, "processes of a run kept appearing; some may be left");
    killed
}

/// Pids of the processes whose environment holds `needle`, and how many
/// live processes of this user showed no environment at all (none is
/// readable while a process is between two programs).
fn scan(needle: &str) -> (Vec<i32>, usize) {
    let me = i32::try_from(std::process::id()).unwrap_or(0);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return (Vec::new(), 0);
    };
    let mut found = Vec::new();
    let mut unsure = 0;
    for pid in entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid > 1 && pid != me)
    {
        match environ(pid) {
            Some(env) if env.is_empty() && is_user_process(pid) => unsure += 1,
            Some(env) if holds(&env, needle) => found.push(pid),
            _ => {}
        }
    }
    (found, unsure)
}

fn environ(pid: i32) -> Option<Vec<u8>> {
    std::fs::read(format!("/proc/{pid}/environ")).ok()
}

fn holds(env: &[u8], needle: &str) -> bool {
    env.split(|&b| b == 0).any(|var| var == needle.as_bytes())
}

fn has_mark(pid: i32, needle: &str) -> bool {
    environ(pid).is_some_and(|env| holds(&env, needle))
}

/// Whether `pid` is a process with memory of its own (kernel threads
/// have none, and so never an environment) that is not a zombie.
fn is_user_process(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let after_name = stat.rfind(')').map_or("", |i| &stat[i + 1..]);
        let state = after_name.split_whitespace().next().unwrap_or("");
        // Field 9 after the name is `flags`; PF_KTHREAD is 0x00200000.
        let flags: u64 = after_name
            .split_whitespace()
            .nth(6)
            .and_then(|f| f.parse().ok())
            .unwrap_or(0);
        state != "Z" && flags & 0x0020_0000 == 0
    })
}

/// The process's start time in clock ticks since boot (field 22 of
/// `/proc/PID/stat`, counted after the command name, which may hold spaces).
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

fn kill_if_marked(pid: i32, needle: &str) -> bool {
    if let Some(pidfd) = crate::pidfd::pidfd_open(pid, 0) {
        // The pidfd pins the process found now: if the pid was reused
        // since the scan, this is the newcomer, which has no mark.
        if !has_mark(pid, needle) {
            return false;
        }
        // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
        let sent = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        return sent == 0;
    }
    // No pidfds: the same pid with the same start time is the same process.
    let Some(born) = start_time(pid) else {
        return false;
    };
    if !has_mark(pid, needle) || start_time(pid) != Some(born) {
        return false;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_mark_the_runner_wrote_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(MARK_FILE),
            "0123456789abcdef0123456789abcdef\n",
        )
        .unwrap();
        assert_eq!(
            read_mark(dir.path()).as_deref(),
            Some("0123456789abcdef0123456789abcdef")
        );
        for forged in [
            "",
            "x",
            "0123456789abcdef0123456789abcde=",
            "KNOTLESS_RUN_MARK=",
        ] {
            std::fs::write(dir.path().join(MARK_FILE), forged).unwrap();
            assert_eq!(read_mark(dir.path()), None, "{forged:?}");
        }
    }

    #[test]
    fn start_times_read_past_a_name_with_spaces_and_parens() {
        assert!(start_time(i32::try_from(std::process::id()).unwrap()).is_some());
    }
}
