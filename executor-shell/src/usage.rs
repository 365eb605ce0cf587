//! A step's cost from the kernel's own accounting: the rusage of its
//! shell once it has exited, which holds every child it waited for.
//!
//! The shell is watched through a pidfd; once it is a zombie, `waitid`
//! with `WNOWAIT` reads its rusage without reaping it, so tokio's own wait
//! reaps it as before. Linux's `waitid` system call takes the rusage as a
//! fifth argument that the C library's wrapper does not pass on.

use std::os::fd::{AsRawFd, OwnedFd};

use executor_core::usage::StepUsage;
use tokio::io::unix::AsyncFd;

/// A step's shell, watched until it exits.
pub(crate) struct Watched {
    pidfd: AsyncFd<OwnedFd>,
}

impl Watched {
    /// Watches `pid`, a child not yet reaped; `None` where pidfds are not
    /// to be had (kernels before 5.3): the step then runs unmeasured.
    pub(crate) fn new(pid: i32) -> Option<Self> {
        let pidfd = crate::pidfd::pidfd_open(pid, libc::PIDFD_NONBLOCK)?;
        // SAFETY: an OwnedFd is open and keeps its one fd until the
        // AsyncFd that owns it is dropped.
        let pidfd =
            unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) };
        pidfd.ok().map(|pidfd| Watched { pidfd })
    }

    /// Waits for the shell to exit and reads what its tree cost; the
    /// shell is left for its own wait to reap.
    pub(crate) async fn exited(&self) -> Option<StepUsage> {
        let mut ready = self.pidfd.readable().await.ok()?;
        ready.retain_ready();
        // SAFETY: zeroed siginfo and rusage are valid values of these
        // plain C structs.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pidfd, pointers to the two structs above, which
        // outlive the call, and flags that leave the child waitable.
        let done = unsafe {
            libc::syscall(
                libc::SYS_waitid,
                libc::P_PIDFD,
                self.pidfd.get_ref().as_raw_fd(),
                &mut info as *mut libc::siginfo_t,
                libc::WEXITED | libc::WNOWAIT,
                &mut usage as *mut libc::rusage,
            )
        };
        (done == 0).then(|| from_rusage(&usage))
    }
}

fn millis(time: libc::timeval) -> u64 {
    let secs = u64::try_from(time.tv_sec).unwrap_or(0);
    let micros = u64::try_from(time.tv_usec).unwrap_or(0);
    secs.saturating_mul(1000).saturating_add(micros / 1000)
}

fn from_rusage(usage: &libc::rusage) -> StepUsage {
    // ru_maxrss is in KiB on Linux: the largest of the process and its
    // waited-for descendants. The shell's own starts at the runner's
    // resident set, the memory it was spawned from, so it is never below
    // the runner's.
    let peak_kib = u64::try_from(usage.ru_maxrss).unwrap_or(0);
    StepUsage {
        cpu_user_ms: millis(usage.ru_utime),
        cpu_system_ms: millis(usage.ru_stime),
        max_rss_bytes: (peak_kib > 0).then(|| peak_kib.saturating_mul(1024)),
        memory_limit_bytes: None,
        environment_peak_bytes: None,
    }
}
