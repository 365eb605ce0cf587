//! `knotless-tee`: what a step's start runs for each of the step's
//! streams in place of `tee -a /proc/self/fd/5 | dd bs=65536`. It reads
//! the step's pipe (fd 0) in pieces of up to 64 KiB and writes each piece
//! to the exec's stream (fd 1) and to the recorder's pipe (fd 5).
//!
//! It exists because an exec costs what the executable maps: busybox's
//! `tee` (an exec of the whole static busybox) took 0.77 ms in a busybox
//! container, this file's 1 KiB program 0.2 ms, and it needs no joining
//! `dd` after it, since its own reads are the large pieces. It is built
//! by `build.rs` for x86_64 Linux, with no C library, and sent in with
//! the step scripts; an environment it cannot run in gets the `tee`.
//!
//! As `tee` under `trap '' PIPE` did: SIGPIPE is ignored, an output whose
//! write fails is given up and the other still gets every byte, and the
//! step's pipe is read to its end whatever is left to write to, so the
//! step never blocks on, or dies of, a stream the runner lost.

#![no_std]
#![no_main]

use core::arch::{asm, global_asm};

const READ: usize = 0;
const WRITE: usize = 1;
const POLL: usize = 7;
const RT_SIGACTION: usize = 13;
const EXIT: usize = 60;
const SIGPIPE: usize = 13;
const SIG_IGN: usize = 1;
const EINTR: isize = -4;
const EAGAIN: isize = -11;
const POLLIN: u16 = 1;
const POLLOUT: u16 = 4;

const LIVE: usize = 1;
const RECORD: usize = 5;
const PIECE: usize = 65536;

static mut BUF: [u8; PIECE] = [0; PIECE];

// The kernel enters with the stack 16-byte aligned and no return
// address on it; a Rust function expects to have been called.
global_asm!(
    ".globl _start",
    "_start:",
    "xor ebp, ebp",
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

extern "C" fn entry() -> ! {
    // struct sigaction { handler, flags, restorer, mask }
    let ignore: [usize; 4] = [SIG_IGN, 0, 0, 0];
    unsafe {
        syscall4(RT_SIGACTION, SIGPIPE, ignore.as_ptr() as usize, 0, 8);
    }
    let buf = core::ptr::addr_of_mut!(BUF) as *mut u8;
    let (mut live, mut record) = (true, true);
    loop {
        let n = unsafe { syscall4(READ, 0, buf as usize, PIECE, 0) };
        if n == EINTR {
            continue;
        }
        if n == EAGAIN {
            wait_for(0, POLLIN);
            continue;
        }
        if n == 0 {
            exit(0);
        }
        if n < 0 {
            exit(1);
        }
        let n = n as usize;
        live = live && write_all(LIVE, buf, n);
        record = record && write_all(RECORD, buf, n);
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(101)
}
