//! One process owns a run's log at a time.
//!
//! A runner that is only stopped (SIGSTOP, a paused VM) still owns its
//! run: a second process that carried it on would have its log torn and
//! its result overwritten when the first wakes. So the log's owner holds
//! an exclusive lock on `LOG.lock` for as long as it writes the log, with
//! its pid in the file for the refusal to name. The kernel drops the lock
//! with the process, however it ends, so a killed runner's run is free.

use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

/// How long a log this process let go may take to close.
const SAME_PROCESS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The lock a run's log is owned by: held until dropped.
#[derive(Debug)]
pub(crate) struct Owner {
    _lock: Flock<File>,
}

/// Where the lock of the log at `log` is: `LOG.lock`.
pub fn lock_path(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_os_string();
    name.push(".lock");
    PathBuf::from(name)
}

impl Owner {
    /// Takes the log at `log` for this process.
    ///
    /// # Errors
    /// `WouldBlock` naming the process that holds it; the error of
    /// opening or writing the lock file.
    pub(crate) fn take(log: &Path) -> io::Result<Owner> {
        // A log of this very process that was just let go is still being
        // closed by its writer thread, which holds the lock until its last
        // write is out: that is worth a short wait, never another owner.
        let deadline = std::time::Instant::now() + SAME_PROCESS_WAIT;
        loop {
            match Owner::try_take(log) {
                Err((err, Some(pid)))
                    if pid == std::process::id() && std::time::Instant::now() < deadline =>
                {
                    tracing::debug!(%err, "waiting for this process's earlier log to close");
                    // Polls a lock whose release has no other sign.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                other => return other.map_err(|(err, _)| err),
            }
        }
    }

    fn try_take(log: &Path) -> Result<Owner, (io::Error, Option<u32>)> {
        let path = lock_path(log);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| (e, None))?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut holder = String::new();
                // What the holder wrote is only a name for the message.
                let _ = file.read_to_string(&mut holder);
                let pid = holder.trim().parse::<u32>().ok();
                let holder = match pid {
                    Some(pid) => format!("process {pid}"),
                    None => "another process".to_string(),
                };
                return Err((
                    io::Error::new(
                        io::ErrorKind::WouldBlock,
                        format!(
                            "the run's log {} is held by runner {holder}, which is still running \
                             or only stopped; carry the run on once that process is gone (kill \
                             it first), or give this run another log",
                            log.display()
                        ),
                    ),
                    pid,
                ));
            }
            Err((_, errno)) => return Err((io::Error::from(errno), None)),
        };
        let written = (|| {
            lock.set_len(0)?;
            lock.rewind()?;
            writeln!(lock, "{}", std::process::id())
        })();
        written.map_err(|e| (e, None))?;
        Ok(Owner { _lock: lock })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_owner_is_refused_naming_the_first_and_welcome_once_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("run.log");
        let first = Owner::take(&log).unwrap();
        let (err, pid) = Owner::try_take(&log).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(pid, Some(std::process::id()));
        assert!(
            err.to_string()
                .contains(&format!("runner process {}", std::process::id())),
            "{err}"
        );
        drop(first);
        Owner::take(&log).unwrap();
    }

    /// Another process's hold is refused at once, naming it.
    #[test]
    fn another_processs_hold_is_refused_naming_its_pid() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("run.log");
        // Another process holds the lock, as a runner would, and writes
        // its pid once it does.
        let mut holder = std::process::Command::new("python3")
            .args([
                "-c",
                "import fcntl, os, sys, time\n\
                 f = open(sys.argv[1], 'a+')\n\
                 fcntl.flock(f, fcntl.LOCK_EX)\n\
                 f.truncate(0); f.write(str(os.getpid()) + '\\n'); f.flush()\n\
                 time.sleep(60)",
            ])
            .arg(lock_path(&log))
            .spawn()
            .expect("python3");
        // The holder writes its pid once it holds the lock.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let pid = loop {
            let text = std::fs::read_to_string(lock_path(&log)).unwrap_or_default();
            if let Ok(pid) = text.trim().parse::<u32>() {
                break pid;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the holder never held the lock"
            );
            std::thread::yield_now();
        };
        let err = Owner::take(&log).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert!(
            err.to_string().contains(&format!("runner process {pid}")),
            "{err}"
        );
        holder.kill().unwrap();
        holder.wait().unwrap();
        Owner::take(&log).unwrap();
    }
}
