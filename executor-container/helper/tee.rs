//! `knotless-tee`: what a step's start runs in place of a `tee` and a
//! recorder on each of the step's streams. One process takes both: it
//! reads the step's stdout pipe (fd 0) and stderr pipe (fd 5) in pieces
//! of up to 1 MiB (each pipe asked to hold that much) as they come, and
//! writes each piece to the exec's stream (fd 3 for stdout, fd 4 for
//! stderr) and to the stream's record in the state folder.
//!
//!     knotless-tee SUPERVISOR PREFIX [OLD_FILE...]
//!
//! The record of stdout is `PREFIX.out.0`, `PREFIX.out.1`, ... (stderr's
//! `PREFIX.err.N`), each [`PIECE_FILE`] bytes but the last, and only the
//! last 64 to 80 MiB of a stream are kept: as the ninth, eleventh, ...
//! piece fills, the two oldest go. A follow after a cut sends the record
//! on from where the runner's count says (see the start's scripts); it
//! reads the pieces as they grow. An empty PREFIX records nothing. The
//! OLD_FILEs, the files of the steps before, are removed while the pipes
//! are idle.
//!
//! It exists because each process a step's start makes is on the step's
//! path: a `tee` and a joining `dd` per stream (execs of the whole static
//! busybox), and a recorder subshell with a `dd` per piece, were 0.5 ms
//! of a 4 ms step in a busybox container. It is built by `build.rs` for
//! x86_64 Linux, with no C library, and sent in with the step scripts; an
//! environment it cannot run in gets the image's `tee` and `dd`.
//!
//! As `tee` under `trap '' PIPE` did: SIGPIPE is ignored, an output whose
//! write fails is given up and the others still get every byte, and the
//! step's pipes are read to their end whatever is left to write to, so
//! the step never blocks on, or dies of, a stream the runner lost or a
//! full disk.
//!
//! SUPERVISOR is the pid of the step's supervisor. A SIGWINCH from that
//! process (sent with `kill`, so the kernel vouches for the sender) says
//! the step has ended while a process it left behind still holds its
//! output: the copier sends on what the pipes hold at that moment (all
//! the step wrote, since it has ended), then closes the exec's streams
//! and goes on recording alone. Then the supervisor ends the exec's
//! streams with the end marks, so a step that left `./server &` behind
//! ends with every byte it wrote, and nothing the leftover writes after
//! reaches the exec. The signal is taken through a signalfd, polled with
//! the pipes, so one that comes between two reads is never missed. Its
//! default action is to be ignored: one that comes before the copier
//! took it in hand (it may still be the shell that execs it) is lost, not
//! fatal, and the supervisor sends it again until the copier lets go.

#![no_std]
#![no_main]

#[path = "copier.rs"]
mod copier;
#[path = "mem.rs"]
mod mem;
#[path = "sys.rs"]
mod sys;

/// Argument `i` as a byte string (without its NUL).
fn arg(argv: *const *const u8, i: usize) -> &'static [u8] {
    let at = unsafe { *argv.add(i) };
    let mut len = 0;
    while unsafe { *at.add(len) } != 0 {
        len += 1;
    }
    unsafe { core::slice::from_raw_parts(at, len) }
}

/// The supervisor's pid: digits only, else none.
fn supervisor(word: &[u8]) -> Option<u32> {
    let mut pid: u32 = 0;
    for &c in word {
        if !c.is_ascii_digit() {
            return None;
        }
        pid = pid.checked_mul(10)?.checked_add(u32::from(c - b'0'))?;
    }
    (pid > 1).then_some(pid)
}

extern "C" fn entry(stack: *const usize) -> ! {
    let (argc, argv) = unsafe { (*stack, stack.add(1) as *const *const u8) };
    let watch = if argc > 1 { supervisor(arg(argv, 1)) } else { None };
    // A prefix too long for a path opens no piece, so records nothing.
    let prefix = if argc > 2 { arg(argv, 2) } else { b"" };
    let old = if argc > 3 {
        unsafe { core::slice::from_raw_parts(argv.add(3), argc - 3) }
    } else {
        &[]
    };
    copier::copy(watch, prefix, old, None)
}
