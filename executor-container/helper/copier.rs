//! The stream copier of a step: `knotless-tee`'s work, and the agent's
//! copier process's (see `tee.rs` for what it does and why).
use crate::sys::{
    close, exit, read_some, syscall4, write_all, EINTR, FCNTL, IOCTL, POLLIN, READ, RT_SIGACTION,
    RT_SIGPROCMASK, SIGNALFD4,
};

const SIGPIPE: usize = 13;
const SIGWINCH: usize = 28;
const SIG_IGN: usize = 1;
const SIG_BLOCK: usize = 0;
const SFD_CLOEXEC: usize = 0o2000000;
const O_WRONLY_CREAT_TRUNC_CLOEXEC: usize = 0o1 | 0o100 | 0o1000 | 0o2000000;
const FIONREAD: usize = 0x541B;
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
                crate::sys::open(at, O_WRONLY_CREAT_TRUNC_CLOEXEC, 0o666)
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
                crate::sys::unlink(at);
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
        let n = unsafe { crate::sys::poll(fds.as_mut_ptr(), 3, timeout as usize) };
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


/// Removes the file at `path`, a NUL-terminated path.
fn remove(path: *const u8) {
    unsafe {
        crate::sys::unlink(path);
    }
}

/// Copies the step's pipes (fd 0, stdout's, and fd 5, stderr's) to the
/// exec's streams (fds 3 and 4) and into the record under `prefix` until
/// both end, lets go of the exec's streams on a SIGWINCH from `watch`,
/// and removes the `old` files (NUL-terminated paths) while the pipes
/// are idle; exits 0. `released`, if any, is closed once the exec's
/// streams are let go of: what a supervisor that forked the copier polls.
pub fn copy(watch: Option<u32>, prefix: &[u8], old: &[*const u8], released: Option<usize>) -> ! {
    // struct sigaction { handler, flags, restorer, mask }
    let ignore: [usize; 4] = [SIG_IGN, 0, 0, 0];
    unsafe {
        syscall4(RT_SIGACTION, SIGPIPE, ignore.as_ptr() as usize, 0, 8);
    }
    let mut watch = watch.and_then(|pid| Some((pid, winch_fd()?)));
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
    let mut old = old.iter();
    while streams.iter().any(|s| s.input.is_some()) {
        let sfd = watch.map(|(_, fd)| fd);
        let (out, err) = (streams[0].input, streams[1].input);
        // The steps before's files go while nothing waits to be copied.
        let idle_wait = if old.len() > 0 { 0 } else { -1 };
        let ready = wait(out, err, sfd, idle_wait);
        if !(ready.out || ready.err || ready.signal) {
            if let Some(&path) = old.next() {
                remove(path);
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
                    if let Some(fd) = released {
                        close(fd);
                    }
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
    for &path in old {
        remove(path);
    }
    exit(0)
}
