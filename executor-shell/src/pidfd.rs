//! pidfds: a process to wait on that cannot be mistaken for one that got
//! its pid later.

/// A pidfd for `pid` with `flags` (0, or `PIDFD_NONBLOCK`), or `None`
/// where the kernel has none to give (before 5.3, or the pid is gone).
pub(crate) fn pidfd_open(pid: i32, flags: std::os::raw::c_uint) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the fd was just returned to us and is owned here alone.
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}
