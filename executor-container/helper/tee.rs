//! `knotless-tee`: what a step's start runs for each of the step's
//! streams in place of `tee -a /proc/self/fd/5 | dd bs=65536`. It reads
//! the step's pipe (fd 0) in pieces of up to 64 KiB and writes each piece
//! to the exec's stream (fd 1) and to the recorder's pipe (fd 5).
//!
//! It exists because an exec costs what the executable maps: busybox's
//! `tee` (an exec of the whole static busybox) took 0.77 ms in a busybox
//! container, this file's program 0.2 ms, and it needs no joining `dd`
//! after it, since its own reads are the large pieces. It is built by
//! `build.rs` for x86_64 Linux, with no C library, and sent in with the
//! step scripts; an environment it cannot run in gets the `tee`.
//!
//! As `tee` under `trap '' PIPE` did: SIGPIPE is ignored, an output whose
//! write fails is given up and the other still gets every byte, and the
//! step's pipe is read to its end whatever is left to write to, so the
//! step never blocks on, or dies of, a stream the runner lost.
//!
//! Its one argument is the pid of the step's supervisor. A SIGWINCH from
//! that process (sent with `kill`, so the kernel vouches for the sender)
//! says the step has ended while a process it left behind still holds its
//! output: the copier sends on what is in the pipe at that moment (all
//! the step wrote, since it has ended), then closes the exec's stream and
//! goes on recording alone. Once both copiers have, the supervisor ends
//! the exec's streams with the end marks, so a step that left `./server &`
//! behind ends with every byte it wrote, and nothing the leftover writes
//! after reaches the exec. The signal is taken through a signalfd, polled
//! with the pipe, so one that comes between two reads is never missed.
//! Its default action is to be ignored: one that comes before the copier
//! took it in hand (it may still be the shell that execs it) is lost, not
//! fatal, and the supervisor sends it again until the copier lets go.

#![no_std]
#![no_main]

use core::arch::{asm, global_asm};

const READ: usize = 0;
const WRITE: usize = 1;
const CLOSE: usize = 3;
const POLL: usize = 7;
const RT_SIGACTION: usize = 13;
const RT_SIGPROCMASK: usize = 14;
const IOCTL: usize = 16;
const EXIT: usize = 60;
const SIGNALFD4: usize = 289;
const SIGPIPE: usize = 13;
const SIGWINCH: usize = 28;
const SIG_IGN: usize = 1;
const SIG_BLOCK: usize = 0;
const SFD_CLOEXEC: usize = 0o2000000;
const FIONREAD: usize = 0x541B;
const EINTR: isize = -4;
const EAGAIN: isize = -11;
const POLLIN: u16 = 1;
const POLLOUT: u16 = 4;
/// `si_code` of a signal sent by `kill`: its sender's pid is the kernel's.
const SI_USER: i32 = 0;

const LIVE: usize = 1;
const RECORD: usize = 5;
const PIECE: usize = 65536;

static mut BUF: [u8; PIECE] = [0; PIECE];

// The kernel enters with the stack 16-byte aligned, argc at its top, and
// no return address; a Rust function expects to have been called.
global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {entry}",
    "ud2",
    entry = sym entry,
);

unsafe fn syscall4(n: usize, a: usize, b: usize, c: usize, d: usize) -> isize {
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

fn exit(code: usize) -> ! {
    unsafe {
        syscall4(EXIT, code, 0, 0, 0);
    }
    loop {}
}

/// Waits until `fd` is ready for `events` (a non-blocking descriptor said
/// it was not).
fn wait_for(fd: usize, events: u16) {
    // struct pollfd { int fd; short events; short revents; }
    let mut pollfd: [u32; 2] = [fd as u32, events as u32];
    unsafe {
        syscall4(POLL, pollfd.as_mut_ptr() as usize, 1, usize::MAX, 0);
    }
}

/// Writes `len` bytes from `at` to `fd`; false when a write failed.
fn write_all(fd: usize, mut at: *const u8, mut len: usize) -> bool {
    while len > 0 {
        let n = unsafe { syscall4(WRITE, fd, at as usize, len, 0) };
        if n == EINTR {
            continue;
        }
        if n == EAGAIN {
            wait_for(fd, POLLOUT);
            continue;
        }
        if n <= 0 {
            return false;
        }
        let n = n as usize;
        at = unsafe { at.add(n) };
        len -= n;
    }
    true
}

/// The supervisor's pid, from the one argument: digits only, else none.
fn supervisor(argc: usize, argv: *const *const u8) -> Option<u32> {
    if argc < 2 {
        return None;
    }
    let mut at = unsafe { *argv.add(1) };
    let mut pid: u32 = 0;
    loop {
        let c = unsafe { *at };
        if c == 0 {
            break;
        }
        if !c.is_ascii_digit() {
            return None;
        }
        pid = pid.checked_mul(10)?.checked_add(u32::from(c - b'0'))?;
        at = unsafe { at.add(1) };
    }
    (pid > 1).then_some(pid)
}

/// A signalfd for SIGWINCH, blocked so that it comes only through it.
fn usr1_fd() -> Option<usize> {
    let mask: u64 = 1 << (SIGWINCH - 1);
    let at = &mask as *const u64 as usize;
    let blocked = unsafe { syscall4(RT_SIGPROCMASK, SIG_BLOCK, at, 0, 8) };
    let fd = unsafe { syscall4(SIGNALFD4, usize::MAX, at, 8, SFD_CLOEXEC) };
    (blocked == 0 && fd >= 0).then_some(fd as usize)
}

/// Whether the signal waiting on `fd` is a SIGWINCH that `pid` sent.
fn from_supervisor(fd: usize, pid: u32) -> bool {
    // struct signalfd_siginfo: 128 bytes; ssi_signo, ssi_errno, ssi_code
    // and ssi_pid are its first four 32-bit fields.
    let mut info = [0u32; 32];
    let n = unsafe { syscall4(READ, fd, info.as_mut_ptr() as usize, 128, 0) };
    n == 128 && info[0] == SIGWINCH as u32 && info[2] as i32 == SI_USER && info[3] == pid
}

/// Reads one piece of at most `most` bytes from the step's pipe into the
/// buffer: its length, 0 at the pipe's end.
fn read_piece(buf: *mut u8, most: usize) -> usize {
    loop {
        let n = unsafe { syscall4(READ, 0, buf as usize, most, 0) };
        if n == EINTR {
            continue;
        }
        if n == EAGAIN {
            wait_for(0, POLLIN);
            continue;
        }
        if n < 0 {
            exit(1);
        }
        return n as usize;
    }
}

/// Waits until the step's pipe can be read, or the signal came: true for
/// the signal.
fn signalled(sfd: usize) -> bool {
    // Two struct pollfd: the pipe, then the signalfd.
    let mut fds: [u32; 4] = [0, POLLIN as u32, sfd as u32, POLLIN as u32];
    loop {
        let n = unsafe { syscall4(POLL, fds.as_mut_ptr() as usize, 2, usize::MAX, 0) };
        if n == EINTR {
            continue;
        }
        // revents is the high half of each entry's second word.
        return n > 0 && fds[3] >> 16 != 0;
    }
}

extern "C" fn entry(stack: *const usize) -> ! {
    // struct sigaction { handler, flags, restorer, mask }
    let ignore: [usize; 4] = [SIG_IGN, 0, 0, 0];
    unsafe {
        syscall4(RT_SIGACTION, SIGPIPE, ignore.as_ptr() as usize, 0, 8);
    }
    let (argc, argv) = unsafe { (*stack, stack.add(1) as *const *const u8) };
    let mut watch = supervisor(argc, argv).and_then(|pid| Some((pid, usr1_fd()?)));
    let buf = core::ptr::addr_of_mut!(BUF) as *mut u8;
    let (mut live, mut record) = (true, true);
    loop {
        if let Some((pid, sfd)) = watch {
            if signalled(sfd) {
                if !from_supervisor(sfd, pid) {
                    continue;
                }
                // What the pipe holds now, the step's last bytes among it.
                let mut left: i32 = 0;
                let asked = unsafe { syscall4(IOCTL, 0, FIONREAD, &mut left as *mut i32 as usize, 0) };
                let mut left = if asked == 0 { left.max(0) as usize } else { 0 };
                while left > 0 {
                    let n = read_piece(buf, left.min(PIECE));
                    if n == 0 {
                        break;
                    }
                    live = live && write_all(LIVE, buf, n);
                    record = record && write_all(RECORD, buf, n);
                    left -= n.min(left);
                }
                unsafe {
                    syscall4(CLOSE, LIVE, 0, 0, 0);
                    syscall4(CLOSE, sfd, 0, 0, 0);
                }
                live = false;
                watch = None;
                continue;
            }
        }
        let n = read_piece(buf, PIECE);
        if n == 0 {
            exit(0);
        }
        live = live && write_all(LIVE, buf, n);
        record = record && write_all(RECORD, buf, n);
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(101)
}
