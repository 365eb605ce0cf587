//! The system calls the agent makes beyond the helpers' shared ones, and
//! NUL-terminated paths built without allocation.

use crate::sys::{syscall4, EINTR};

pub use crate::sys::{
    CHDIR, CLOSE_RANGE, EXECVE, GETDENTS64, GETPID, KILL, O_DIRECTORY, PIPE2, PRCTL,
    RT_SIGACTION, RT_SIGPROCMASK, SETGROUPS, SETRESGID, SETRESUID, SIGCHLD, SIGNALFD4, WAIT4,
};
pub const PR_SET_DUMPABLE: usize = 4;

pub const O_RDONLY: usize = 0;
pub const O_WRONLY: usize = 1;
pub const O_RDWR: usize = 2;
pub const O_CREAT_TRUNC: usize = 0o100 | 0o1000;
pub const O_CLOEXEC: usize = 0o2000000;
pub const EEXIST: isize = -17;
pub const WNOHANG: usize = 1;
pub const SIGPIPE: usize = 13;
pub const SIGWINCH: usize = 28;
pub const SIG_DFL: usize = 0;
pub const SIG_IGN: usize = 1;
pub const SIG_BLOCK: usize = 0;
pub const SIG_SETMASK: usize = 2;

/// The longest path the agent builds; a longer one is refused.
pub const PATH_MOST: usize = 4096;

/// A path built from pieces, NUL-terminated for a system call (none once
/// it no longer fits, or holds a NUL); also the agent's line buffer.
pub struct Path {
    bytes: [u8; PATH_MOST],
    len: usize,
    fits: bool,
}

impl Path {
    pub fn new() -> Self {
        Path {
            bytes: [0; PATH_MOST],
            len: 0,
            fits: true,
        }
    }

    pub fn of(parts: &[&[u8]]) -> Self {
        let mut path = Path::new();
        for part in parts {
            path.push(part);
        }
        path
    }

    pub fn push(&mut self, part: &[u8]) -> &mut Self {
        // One byte is kept for the NUL.
        match self.bytes.get_mut(self.len..self.len + part.len()) {
            Some(room) if self.len + part.len() < PATH_MOST => {
                room.copy_from_slice(part);
                self.len += part.len();
            }
            _ => self.fits = false,
        }
        self
    }

    pub fn push_number(&mut self, n: u64) -> &mut Self {
        let mut digits = [0u8; 20];
        let at = number(n, &mut digits);
        self.push(&digits[at..])
    }

    /// An exit status as the marks and notices write it (`%03d`).
    pub fn push_status(&mut self, code: u8) -> &mut Self {
        let mut digits = [0u8; 20];
        let at = number(u64::from(code), &mut digits);
        for _ in (digits.len() - at)..3 {
            self.push(b"0");
        }
        self.push(&digits[at..])
    }

    /// The path for a system call: NUL-terminated, or none.
    pub fn c(&mut self) -> Option<*const u8> {
        if !self.fits || self.bytes().contains(&0) {
            return None;
        }
        *self.bytes.get_mut(self.len)? = 0;
        Some(self.bytes.as_ptr())
    }

    pub fn bytes(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or_default()
    }
}

/// `n` in decimal at the end of `out`: where its digits start.
pub fn number(mut n: u64, out: &mut [u8; 20]) -> usize {
    let mut at = out.len();
    loop {
        at -= 1;
        out[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || at == 0 {
            return at;
        }
    }
}

/// A decimal number of up to 19 digits and nothing else.
pub fn parse_number(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 {
        return None;
    }
    let mut n: u64 = 0;
    for &c in text {
        if !c.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(n)
}

pub fn open(path: &mut Path, flags: usize) -> Option<usize> {
    let at = path.c()?;
    let fd = unsafe { crate::sys::open(at, flags | O_CLOEXEC, 0o666) };
    (fd >= 0).then_some(fd as usize)
}

/// Reads up to `buf`'s size of the file at `path`: how much, none when
/// it could not be opened or read.
pub fn read_file(path: &mut Path, buf: &mut [u8]) -> Option<usize> {
    let fd = open(path, O_RDONLY)?;
    let mut got = 0;
    while got < buf.len() {
        let rest = buf.get_mut(got..)?;
        let n = unsafe { syscall4(crate::sys::READ, fd, rest.as_mut_ptr() as usize, rest.len(), 0) };
        match n {
            EINTR => continue,
            n if n < 0 => {
                crate::sys::close(fd);
                return None;
            }
            0 => break,
            n => got += n as usize,
        }
    }
    crate::sys::close(fd);
    Some(got)
}

/// Writes `text` as the whole content of the file at `path`.
pub fn write_file(path: &mut Path, text: &[u8]) -> bool {
    let Some(fd) = open(path, O_WRONLY | O_CREAT_TRUNC) else {
        return false;
    };
    let done = crate::sys::write_all(fd, text.as_ptr(), text.len());
    crate::sys::close(fd);
    done
}

/// The first line of the file at `path`, trimmed, as a number.
pub fn read_number(path: &mut Path) -> Option<u64> {
    let mut buf = [0u8; 32];
    let n = read_file(path, &mut buf)?;
    let line = buf.get(..n)?.split(|&b| b == b'\n').next()?;
    parse_number(line)
}

/// The device and inode of the file at `path` (following links), as
/// `[ -ef ]` compares them.
pub fn identity(path: &mut Path) -> Option<(u64, u64)> {
    let at = path.c()?;
    let mut stat = [0u64; 18];
    let r = unsafe { crate::sys::stat(at, stat.as_mut_ptr()) };
    (r == 0).then_some((stat[0], stat[1]))
}

pub fn dup2(from: usize, to: usize) -> bool {
    crate::sys::dup2(from, to) >= 0
}

pub fn getpid() -> u32 {
    unsafe { syscall4(GETPID, 0, 0, 0, 0) as u32 }
}

/// Forks: 0 in the child, the child's pid in the parent, none on failure.
pub fn fork() -> Option<usize> {
    let pid = crate::sys::fork();
    (pid >= 0).then_some(pid as usize)
}

/// Waits for `pid`: its wait status and its resource use (user and
/// system time in ms), none when it is not (or no longer) a child or,
/// with `WNOHANG`, has not ended.
pub fn wait(pid: usize, options: usize) -> Option<(i32, u64, u64)> {
    let mut status: i32 = 0;
    // struct rusage: ru_utime and ru_stime (timevals) first, 144 bytes.
    let mut usage = [0i64; 18];
    loop {
        let r = unsafe {
            syscall4(
                WAIT4,
                pid,
                &mut status as *mut i32 as usize,
                options,
                usage.as_mut_ptr() as usize,
            )
        };
        if r == EINTR {
            continue;
        }
        if r <= 0 {
            return None;
        }
        let ms = |sec: i64, usec: i64| (sec.max(0) as u64) * 1000 + (usec.max(0) as u64) / 1000;
        return Some((status, ms(usage[0], usage[1]), ms(usage[2], usage[3])));
    }
}

/// A wait status as a shell's `$?`: the code, or 128 and the signal.
pub fn exit_code(status: i32) -> u8 {
    let signal = status & 0x7f;
    if signal == 0 {
        ((status >> 8) & 0xff) as u8
    } else {
        128u8.wrapping_add(signal as u8)
    }
}

pub fn kill(pid: usize, signal: usize) -> bool {
    unsafe { syscall4(KILL, pid, signal, 0, 0) == 0 }
}

pub fn set_signal(signal: usize, handler: usize) {
    // struct sigaction { handler, flags, restorer, mask }
    let action: [usize; 4] = [handler, 0, 0, 0];
    unsafe {
        syscall4(RT_SIGACTION, signal, action.as_ptr() as usize, 0, 8);
    }
}

/// Sets the blocked signals to `mask` (bit `n - 1` for signal `n`).
pub fn set_mask(mask: u64) {
    unsafe {
        syscall4(RT_SIGPROCMASK, SIG_SETMASK, &mask as *const u64 as usize, 0, 8);
    }
}

/// A signalfd for the signals of `mask`, which are blocked first.
pub fn signal_fd(mask: u64) -> Option<usize> {
    let at = &mask as *const u64 as usize;
    unsafe {
        syscall4(RT_SIGPROCMASK, SIG_BLOCK, at, 0, 8);
    }
    let fd = unsafe { syscall4(SIGNALFD4, usize::MAX, at, 8, O_CLOEXEC) };
    (fd >= 0).then_some(fd as usize)
}

/// Reads what waits on a signalfd, so that it polls idle again.
pub fn drain_signals(fd: usize) {
    let mut info = [0u8; 128 * 8];
    unsafe {
        syscall4(crate::sys::READ, fd, info.as_mut_ptr() as usize, info.len(), 0);
    }
}

/// Polls `fd` for input (or its end) for at most `ms`: whether it is ready.
pub fn ready(fd: usize, ms: usize) -> bool {
    let mut pollfd: [u32; 2] = [fd as u32, u32::from(crate::sys::POLLIN)];
    let n = unsafe { crate::sys::poll(pollfd.as_mut_ptr(), 1, ms) };
    n > 0 && pollfd[1] >> 16 != 0
}

/// A pipe, both ends close-on-exec: (read, write).
pub fn pipe() -> Option<(usize, usize)> {
    let mut fds = [0i32; 2];
    let r = unsafe { syscall4(PIPE2, fds.as_mut_ptr() as usize, O_CLOEXEC, 0, 0) };
    (r == 0).then_some((fds[0] as usize, fds[1] as usize))
}

pub fn chdir(path: &mut Path) -> bool {
    match path.c() {
        Some(at) => unsafe { syscall4(CHDIR, at as usize, 0, 0, 0) == 0 },
        None => false,
    }
}

/// Makes a named pipe at `path`, its owner's alone (the step's ends are
/// opened for it before it runs): 0, or the negative errno.
pub fn mkfifo(path: &mut Path) -> isize {
    const S_IFIFO: usize = 0o010000;
    match path.c() {
        Some(at) => unsafe { crate::sys::mknod(at, S_IFIFO | 0o600) },
        None => -36,
    }
}

/// The user a step runs as when the agent does not share it: its uid,
/// gid and supplementary groups, as `UID:GID:G1,G2` on the command line.
#[derive(Clone, Copy)]
pub struct StepUser {
    pub uid: u32,
    pub gid: u32,
    groups: [u32; 64],
    count: usize,
}

impl StepUser {
    /// `UID:GID:GROUPS` (the groups comma-separated, maybe none).
    pub fn parse(text: &[u8]) -> Option<Self> {
        let mut parts = text.split(|&b| b == b':');
        let id = |part: Option<&[u8]>| u32::try_from(parse_number(part?)?).ok();
        let uid = id(parts.next())?;
        let gid = id(parts.next())?;
        let mut user = StepUser { uid, gid, groups: [0; 64], count: 0 };
        for group in parts.next()?.split(|&b| b == b',').filter(|g| !g.is_empty()) {
            *user.groups.get_mut(user.count)? = id(Some(group))?;
            user.count += 1;
        }
        parts.next().is_none().then_some(user)
    }

    /// Becomes this user for good: groups, then gid, then uid (after
    /// which neither can change again). Whether every call took.
    pub fn become_it(&self) -> bool {
        let (uid, gid) = (self.uid as usize, self.gid as usize);
        unsafe {
            syscall4(SETGROUPS, self.count, self.groups.as_ptr() as usize, 0, 0) == 0
                && syscall4(SETRESGID, gid, gid, gid, 0) == 0
                && syscall4(SETRESUID, uid, uid, uid, 0) == 0
        }
    }
}
