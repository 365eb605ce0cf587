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

#[path = "mem.rs"]
mod mem;
#[path = "sys.rs"]
mod sys;

use sys::{close, exit, read_some, syscall4, write_all, EINTR, POLL, POLLIN, READ};

const OPEN: usize = 2;
const RT_SIGACTION: usize = 13;
const RT_SIGPROCMASK: usize = 14;
const IOCTL: usize = 16;
const UNLINK: usize = 87;
const SIGNALFD4: usize = 289;
const SIGPIPE: usize = 13;
const SIGWINCH: usize = 28;
const SIG_IGN: usize = 1;
const SIG_BLOCK: usize = 0;
const SFD_CLOEXEC: usize = 0o2000000;
const O_WRONLY_CREAT_TRUNC_CLOEXEC: usize = 0o1 | 0o100 | 0o1000 | 0o2000000;
const FIONREAD: usize = 0x541B;
const FCNTL: usize = 72;
const F_SETPIPE_SZ: usize = 1031;
/// `si_code` of a signal sent by `kill`: its sender's pid is the kernel's.
const SI_USER: i32 = 0;

/// A piece of a stream's record: the follow's `C` and the runner's
/// `CHUNK`.
const PIECE_FILE: u64 = 8 << 20;
/// A read's most, and what each pipe is asked to hold: a loud step's
/// output goes on in pieces of up to this, each a write to the exec and
/// one to the record, where a pipe's default 64 KiB made sixteen of each.
const READ_MOST: usize = 1 << 20;
/// The longest PREFIX a piece's path takes; a longer one records nothing.
const PREFIX_MOST: usize = 4000;

static mut BUF: [u8; READ_MOST] = [0; READ_MOST];

/// One of the step's streams: where it comes from, where it goes live,
/// and its record.
struct Stream {
    /// The step's pipe; none once it ended.
    input: Option<usize>,
    /// The exec's stream; none once given up or let go of.
    live: Option<usize>,
    /// `.out` or `.err`.
    suffix: &'static [u8],
    /// The piece being written; none when not recording (no prefix, or a
    /// write failed).
    piece: Option<usize>,
    /// Its number and how much of it is written.
    index: u64,
    written: u64,
}

/// The path `PREFIX SUFFIX . N`, NUL-terminated, written into `path`:
/// where it starts, none when it does not fit. (No indexing that could
/// panic: a panic's formatting would be most of the program.)
fn piece_path(
    path: &mut [u8; PREFIX_MOST + 32],
    prefix: &[u8],
    suffix: &[u8],
    n: u64,
) -> Option<*const u8> {
    let mut slots = path.iter_mut();
    let mut put = |b: u8| slots.next().map(|slot| *slot = b);
    for &b in prefix.iter().chain(suffix).chain(b".") {
        put(b)?;
    }
    // Division by a NonZero: no check that could panic.
    let mut div = core::num::NonZeroU64::MIN;
    while n / div >= 10 {
        div = div.checked_mul(core::num::NonZeroU64::new(10)?)?;
    }
    loop {
        put(b'0' + (n / div % 10) as u8)?;
        match core::num::NonZeroU64::new(div.get() / 10) {
            Some(next) => div = next,
            None => break,
        }
    }
    put(0)?;
    Some(path.as_ptr())
}

impl Stream {
    /// Opens piece `index` of the record: false when it could not be.
    fn open_piece(&mut self, prefix: &[u8]) -> bool {
        let mut path = [0u8; PREFIX_MOST + 32];
        let fd = match piece_path(&mut path, prefix, self.suffix, self.index) {
            Some(at) => unsafe {
                syscall4(OPEN, at as usize, O_WRONLY_CREAT_TRUNC_CLOEXEC, 0o666, 0)
            },
            None => -1,
        };
        self.piece = (fd >= 0).then_some(fd as usize);
        self.written = 0;
        self.piece.is_some()
    }

    fn remove_piece(&self, prefix: &[u8], index: u64) {
        let mut path = [0u8; PREFIX_MOST + 32];
        if let Some(at) = piece_path(&mut path, prefix, self.suffix, index) {
            unsafe {
                syscall4(UNLINK, at as usize, 0, 0, 0);
            }
        }
    }

    /// Sends `len` bytes at `at` live and into the record.
    fn take(&mut self, prefix: &[u8], mut at: *const u8, mut len: usize) {
        if let Some(fd) = self.live {
            if !write_all(fd, at, len) {
                self.live = None;
            }
        }
        while len > 0 {
            let Some(fd) = self.piece else { return };
            let n = len.min((PIECE_FILE - self.written) as usize);
            if !write_all(fd, at, n) {
                self.lose_record();
                return;
            }
            at = unsafe { at.add(n) };
            len -= n;
            self.advance(prefix, n);
        }
    }

    fn lose_record(&mut self) {
        if let Some(fd) = self.piece.take() {
            close(fd);
        }
    }

    /// Counts `n` bytes more in the piece (at most its room), and goes
    /// on to the next once it is full.
    fn advance(&mut self, prefix: &[u8], n: usize) {
        self.written += n as u64;
        if self.written < PIECE_FILE {
            return;
        }
        self.lose_record();
        if self.index >= 9 && self.index % 2 == 1 {
            self.remove_piece(prefix, self.index - 9);
            self.remove_piece(prefix, self.index - 8);
        }
        self.index += 1;
        self.open_piece(prefix);
    }

    /// Reads what its pipe has and sends it on; at the pipe's end (or a
    /// failed read) it is done.
    fn pump(&mut self, prefix: &[u8], most: usize) -> usize {
        let Some(fd) = self.input else { return 0 };
        let buf = core::ptr::addr_of_mut!(BUF) as *mut u8;
        match read_some(fd, buf, most.min(READ_MOST)) {
            Some(n) if n > 0 => {
                self.take(prefix, buf, n);
                n
            }
            _ => {
                close(fd);
                self.input = None;
                0
            }
        }
    }

    /// Sends on what its pipe holds now.
    fn drain(&mut self, prefix: &[u8]) {
        let Some(fd) = self.input else { return };
        let mut left: i32 = 0;
        let asked = unsafe { syscall4(IOCTL, fd, FIONREAD, &mut left as *mut i32 as usize, 0) };
        let mut left = if asked == 0 { left.max(0) as usize } else { 0 };
        while left > 0 {
            let n = self.pump(prefix, left);
            if n == 0 {
                break;
            }
            left -= n.min(left);
        }
    }

    /// Lets go of the exec's stream.
    fn let_go(&mut self) {
        if let Some(fd) = self.live.take() {
            close(fd);
        }
    }
}

/// Argument `i` as a byte string (without its NUL).
fn arg(argv: *const *const u8, i: usize) -> &'static [u8] {
    let at = unsafe { *argv.add(i) };
    let mut len = 0;
    while unsafe { *at.add(len) } != 0 {
        len += 1;
    }
    unsafe { core::slice::from_raw_parts(at, len) }
}

/// Removes the file argument `i` names.
fn remove(argv: *const *const u8, i: usize) {
    unsafe {
        syscall4(UNLINK, *argv.add(i) as usize, 0, 0, 0);
    }
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

/// A signalfd for SIGWINCH, blocked so that it comes only through it.
fn winch_fd() -> Option<usize> {
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

/// What a poll of the pipes and the signalfd found ready.
struct Ready {
    out: bool,
    err: bool,
    signal: bool,
}

/// Waits until a pipe can be read (or has ended) or the signal came;
/// `timeout` in ms, negative for none.
fn wait(out: Option<usize>, err: Option<usize>, sfd: Option<usize>, timeout: isize) -> Ready {
    // Three struct pollfd; a negative fd is skipped.
    let fd = |f: Option<usize>| f.map_or(u32::MAX, |f| f as u32);
    let events = u32::from(POLLIN);
    let mut fds: [u32; 6] = [fd(out), events, fd(err), events, fd(sfd), events];
    loop {
        let n = unsafe { syscall4(POLL, fds.as_mut_ptr() as usize, 3, timeout as usize, 0) };
        if n == EINTR {
            continue;
        }
        // revents is the high half of each entry's second word.
        let ready = |i: usize| n > 0 && fds[i] >> 16 != 0;
        return Ready {
            out: ready(1),
            err: ready(3),
            signal: ready(5),
        };
    }
}

extern "C" fn entry(stack: *const usize) -> ! {
    // struct sigaction { handler, flags, restorer, mask }
    let ignore: [usize; 4] = [SIG_IGN, 0, 0, 0];
    unsafe {
        syscall4(RT_SIGACTION, SIGPIPE, ignore.as_ptr() as usize, 0, 8);
    }
    let (argc, argv) = unsafe { (*stack, stack.add(1) as *const *const u8) };
    let mut watch = if argc > 1 {
        supervisor(arg(argv, 1)).and_then(|pid| Some((pid, winch_fd()?)))
    } else {
        None
    };
    // A prefix too long for a path opens no piece, so records nothing.
    let prefix = if argc > 2 { arg(argv, 2) } else { b"" };
    let mut streams = [
        Stream {
            input: Some(0),
            live: Some(3),
            suffix: b".out",
            piece: None,
            index: 0,
            written: 0,
        },
        Stream {
            input: Some(5),
            live: Some(4),
            suffix: b".err",
            piece: None,
            index: 0,
            written: 0,
        },
    ];
    for stream in &mut streams {
        if !prefix.is_empty() {
            stream.open_piece(prefix);
        }
        // Refused past the system's or the user's pipe limits: the pipe
        // keeps its size.
        if let Some(fd) = stream.input {
            unsafe {
                syscall4(FCNTL, fd, F_SETPIPE_SZ, READ_MOST, 0);
            }
        }
    }
    let mut old = 3;
    while streams.iter().any(|s| s.input.is_some()) {
        let sfd = watch.map(|(_, fd)| fd);
        let (out, err) = (streams[0].input, streams[1].input);
        // The steps before's files go while nothing waits to be copied.
        let ready = wait(out, err, sfd, if old < argc { 0 } else { -1 });
        if !(ready.out || ready.err || ready.signal) {
            if old < argc {
                remove(argv, old);
                old += 1;
            }
            continue;
        }
        if ready.signal {
            if let Some((pid, sfd)) = watch {
                if from_supervisor(sfd, pid) {
                    // What the pipes hold now, the step's last bytes among
                    // it. Stdout's exec stream (fd 3) goes last: once it
                    // is gone, both are.
                    for stream in &mut streams {
                        stream.drain(prefix);
                    }
                    streams[1].let_go();
                    streams[0].let_go();
                    close(sfd);
                    watch = None;
                }
            }
            continue;
        }
        if ready.out {
            streams[0].pump(prefix, READ_MOST);
        }
        if ready.err {
            streams[1].pump(prefix, READ_MOST);
        }
    }
    // A step that ended at once left no idle time for them.
    for old in old..argc {
        remove(argv, old);
    }
    exit(0)
}
