//! What the helpers share, with no C library: the process's entry, the
//! raw system calls they make, and waits on descriptors that whoever
//! shares them made non-blocking. Each helper is its own crate (see
//! `build.rs`) and takes this file in as a module; it defines
//! `extern "C" fn entry(stack: *const usize) -> !`, which `_start` calls
//! with the stack the kernel set up (argc, then argv).

// Each helper uses a part of it.
#![allow(dead_code)]

use core::arch::{asm, global_asm};

pub const READ: usize = 0;
pub const WRITE: usize = 1;
pub const CLOSE: usize = 3;
pub const POLL: usize = 7;
pub const EXIT: usize = 60;
pub const EINTR: isize = -4;
pub const EAGAIN: isize = -11;
pub const POLLIN: u16 = 1;
pub const POLLOUT: u16 = 4;

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
    entry = sym crate::entry,
);

/// A system call with up to four arguments: its raw result (a negative
/// errno on failure).
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
        syscall4(POLL, pollfd.as_mut_ptr() as usize, 1, usize::MAX, 0);
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
