//! What the helpers share, with no C library: the process's entry, the
//! raw system calls they make, and waits on descriptors that whoever
//! shares them made non-blocking. Each helper is its own crate (see
//! `build.rs`) and takes this file in as a module; it defines
//! `extern "C" fn entry(stack: *const usize) -> !`, which `_start` calls
//! with the stack the kernel set up (argc, then argv).

// Each helper uses a part of it.
#![allow(dead_code)]

pub const EINTR: isize = -4;
pub const EAGAIN: isize = -11;
pub const POLLIN: u16 = 1;
pub const POLLOUT: u16 = 4;
/// `SIGCHLD`: what a forked child sends its parent as it ends.
pub const SIGCHLD: usize = 17;
/// The working folder, for the `*at` calls aarch64 has instead.
#[cfg(target_arch = "aarch64")]
const AT_FDCWD: usize = -100isize as usize;

// The machine's own part: the process's entry, how a system call is
// made, and each call's number. Where aarch64 has only the newer call
// (`openat` for `open`, `clone` for `fork`, `ppoll` for `poll`, ...), the
// functions after this make the old one of it, so the rest of the helpers
// are the same on both.
#[cfg(target_arch = "x86_64")]
mod machine {
    use core::arch::{asm, global_asm};

    pub const READ: usize = 0;
    pub const WRITE: usize = 1;
    pub const OPEN: usize = 2;
    pub const CLOSE: usize = 3;
    pub const STAT: usize = 4;
    pub const POLL: usize = 7;
    pub const RT_SIGACTION: usize = 13;
    pub const RT_SIGPROCMASK: usize = 14;
    pub const IOCTL: usize = 16;
    pub const DUP2: usize = 33;
    pub const GETPID: usize = 39;
    pub const FORK: usize = 57;
    pub const EXECVE: usize = 59;
    pub const EXIT: usize = 60;
    pub const WAIT4: usize = 61;
    pub const KILL: usize = 62;
    pub const FCNTL: usize = 72;
    pub const CHDIR: usize = 80;
    pub const UNLINK: usize = 87;
    pub const SETGROUPS: usize = 116;
    pub const SETRESUID: usize = 117;
    pub const SETRESGID: usize = 119;
    pub const MKNOD: usize = 133;
    pub const PRCTL: usize = 157;
    pub const GETDENTS64: usize = 217;
    pub const SIGNALFD4: usize = 289;
    pub const PIPE2: usize = 293;
    pub const CLOSE_RANGE: usize = 436;
    pub const O_DIRECTORY: usize = 0o200000;

    // The kernel enters with the stack 16-byte aligned, argc at its top,
    // and no return address; a Rust function expects to have been called.
    global_asm!(
        ".globl _start",
        "_start:",
        "xor ebp, ebp",
        "mov rdi, rsp",
        "and rsp, -16",
        "call {entry}",
        "ud2",
        entry = sym crate::entry,
    );

    /// A system call with up to four arguments: its raw result (a
    /// negative errno on failure).
    ///
    /// # Safety
    /// As the call itself: pointers among the arguments must be valid for it.
    pub unsafe fn syscall4(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
        let r: isize;
        asm!(
            "syscall",
            inlateout("rax") n as isize => r,
            in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
        r
    }
}

#[cfg(target_arch = "aarch64")]
mod machine {
    use core::arch::{asm, global_asm};

    pub const READ: usize = 63;
    pub const WRITE: usize = 64;
    pub const OPENAT: usize = 56;
    pub const CLOSE: usize = 57;
    pub const NEWFSTATAT: usize = 79;
    pub const PPOLL: usize = 73;
    pub const RT_SIGACTION: usize = 134;
    pub const RT_SIGPROCMASK: usize = 135;
    pub const IOCTL: usize = 29;
    pub const DUP3: usize = 24;
    pub const GETPID: usize = 172;
    pub const CLONE: usize = 220;
    pub const EXECVE: usize = 221;
    pub const EXIT: usize = 93;
    pub const WAIT4: usize = 260;
    pub const KILL: usize = 129;
    pub const FCNTL: usize = 25;
    pub const CHDIR: usize = 49;
    pub const UNLINKAT: usize = 35;
    pub const SETGROUPS: usize = 159;
    pub const SETRESUID: usize = 147;
    pub const SETRESGID: usize = 149;
    pub const MKNODAT: usize = 33;
    pub const PRCTL: usize = 167;
    pub const GETDENTS64: usize = 61;
    pub const SIGNALFD4: usize = 74;
    pub const PIPE2: usize = 59;
    pub const CLOSE_RANGE: usize = 436;
    pub const O_DIRECTORY: usize = 0o40000;

    // The kernel enters with sp 16-byte aligned and argc at it; x29 and
    // x30 zero mark the outermost frame for anything walking the stack.
    global_asm!(
        ".globl _start",
        "_start:",
        "mov x29, #0",
        "mov x30, #0",
        "mov x0, sp",
        "bl {entry}",
        "brk #1",
        entry = sym crate::entry,
    );

    /// A system call with up to four arguments: its raw result (a
    /// negative errno on failure).
    ///
    /// # Safety
    /// As the call itself: pointers among the arguments must be valid for it.
    pub unsafe fn syscall4(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
        let r: isize;
        asm!(
            "svc #0",
            in("x8") n,
            inlateout("x0") a as isize => r,
            in("x1") b, in("x2") c, in("x3") d,
            options(nostack),
        );
        r
    }
}

pub use machine::*;

/// `open(path, flags, mode)`: a descriptor, or the negative errno.
///
/// # Safety
/// `path` is NUL-terminated.
pub unsafe fn open(path: *const u8, flags: usize, mode: usize) -> isize {
    #[cfg(target_arch = "x86_64")]
    return syscall4(OPEN, path as usize, flags, mode, 0);
    #[cfg(target_arch = "aarch64")]
    return syscall4(OPENAT, AT_FDCWD, path as usize, flags, mode);
}

/// `unlink(path)`: 0, or the negative errno.
///
/// # Safety
/// `path` is NUL-terminated.
pub unsafe fn unlink(path: *const u8) -> isize {
    #[cfg(target_arch = "x86_64")]
    return syscall4(UNLINK, path as usize, 0, 0, 0);
    #[cfg(target_arch = "aarch64")]
    return syscall4(UNLINKAT, AT_FDCWD, path as usize, 0, 0);
}

/// `stat(path, buf)`, links followed: 0, or the negative errno. The
/// device and inode are the first two words of `buf` on both machines.
///
/// # Safety
/// `path` is NUL-terminated; `buf` holds a `struct stat` (144 bytes).
pub unsafe fn stat(path: *const u8, buf: *mut u64) -> isize {
    #[cfg(target_arch = "x86_64")]
    return syscall4(STAT, path as usize, buf as usize, 0, 0);
    #[cfg(target_arch = "aarch64")]
    return syscall4(NEWFSTATAT, AT_FDCWD, path as usize, buf as usize, 0);
}

/// `mknod(path, mode, 0)`: 0, or the negative errno.
///
/// # Safety
/// `path` is NUL-terminated.
pub unsafe fn mknod(path: *const u8, mode: usize) -> isize {
    #[cfg(target_arch = "x86_64")]
    return syscall4(MKNOD, path as usize, mode, 0, 0);
    #[cfg(target_arch = "aarch64")]
    return syscall4(MKNODAT, AT_FDCWD, path as usize, mode, 0);
}

/// `dup2(from, to)`: `to`, or the negative errno.
pub fn dup2(from: usize, to: usize) -> isize {
    #[cfg(target_arch = "x86_64")]
    return unsafe { syscall4(DUP2, from, to, 0, 0) };
    // dup3 refuses one descriptor as both; dup2 leaves it as it is.
    #[cfg(target_arch = "aarch64")]
    return if from == to {
        to as isize
    } else {
        unsafe { syscall4(DUP3, from, to, 0, 0) }
    };
}

/// `fork()`: 0 in the child, its pid in the parent, or the negative errno.
pub fn fork() -> isize {
    #[cfg(target_arch = "x86_64")]
    return unsafe { syscall4(FORK, 0, 0, 0, 0) };
    #[cfg(target_arch = "aarch64")]
    return unsafe { syscall4(CLONE, SIGCHLD, 0, 0, 0) };
}

/// `poll(fds, n, ms)`, `ms` of `usize::MAX` waiting for ever: how many
/// are ready, or the negative errno.
///
/// # Safety
/// `fds` holds `n` `struct pollfd`s.
pub unsafe fn poll(fds: *mut u32, n: usize, ms: usize) -> isize {
    #[cfg(target_arch = "x86_64")]
    return syscall4(POLL, fds as usize, n, ms, 0);
    #[cfg(target_arch = "aarch64")]
    {
        let ms = ms as isize;
        let timeout: [i64; 2] = [(ms / 1000) as i64, ((ms % 1000) * 1_000_000) as i64];
        let at = if ms < 0 { 0 } else { timeout.as_ptr() as usize };
        syscall4(PPOLL, fds as usize, n, at, 0)
    }
}

pub fn exit(code: usize) -> ! {
    unsafe {
        syscall4(EXIT, code, 0, 0, 0);
    }
    loop {}
}

pub fn close(fd: usize) {
    unsafe {
        syscall4(CLOSE, fd, 0, 0, 0);
    }
}

/// Waits until `fd` is ready for `events`: a descriptor made non-blocking
/// by whoever shares it said it was not.
pub fn wait_for(fd: usize, events: u16) {
    // struct pollfd { int fd; short events; short revents; }
    let mut pollfd: [u32; 2] = [fd as u32, u32::from(events)];
    unsafe {
        poll(pollfd.as_mut_ptr(), 1, usize::MAX);
    }
}

/// Writes `len` bytes from `at` to `fd`: false when a write failed.
pub fn write_all(fd: usize, mut at: *const u8, mut len: usize) -> bool {
    while len > 0 {
        let n = unsafe { syscall4(WRITE, fd, at as usize, len, 0) };
        match n {
            EINTR => continue,
            EAGAIN => wait_for(fd, POLLOUT),
            n if n <= 0 => return false,
            n => {
                at = unsafe { at.add(n as usize) };
                len -= n as usize;
            }
        }
    }
    true
}

/// Reads what `fd` has, up to `most` bytes, into `buf`, waiting for it:
/// the count, 0 at its end, `None` when the read failed.
pub fn read_some(fd: usize, buf: *mut u8, most: usize) -> Option<usize> {
    loop {
        let n = unsafe { syscall4(READ, fd, buf as usize, most, 0) };
        match n {
            EINTR => continue,
            EAGAIN => wait_for(fd, POLLIN),
            n if n < 0 => return None,
            n => return Some(n as usize),
        }
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(101)
}
