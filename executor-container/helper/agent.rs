//! `knotless-agent`: the step channel's shell, native. It reads the
//! channel's messages from stdin as the shell's loop does (`CHANNEL` in
//! `channel.rs`: a length line, then the message, whose last line is
//! `#knotless-end`; anything else ends it) and answers each with the
//! same done notice. A message's second line, `#knotless-native HEX`,
//! carries the step in fields ([`Step`]); the agent runs it itself (see
//! `agent/step.rs`), where the shell's start made eight forks and three execs
//! before the step's own `sh` (a subshell, `mkfifo`, the supervisor, the
//! copier, a command substitution, the sampler...): 3.2 ms of a step in
//! a busybox container. A message without that line, or with one it
//! cannot read, and a second start of a step (its pipes are there) go to
//! the shell's start, which the channel hands it as its first argument.
//!
//!     knotless-agent SHELL_START USAGE_MAX [UID:GID:GROUPS]
//!
//! SHELL_START is a `sh -c` script that runs the message in `$1` (it
//! defines the start); USAGE_MAX the longest usage an end mark carries.
//! With a step user, the agent (run as root) starts each step as that
//! user and no message goes to the shell's start, which would run it as
//! root: the agent, its supervisors and copiers are then out of the
//! steps' reach (no signal, `prlimit`, `/proc` descriptor or file of
//! theirs can a step's process touch). It checks once, before its hello,
//! that it can become that user, and ends if not.
//!
//! It and every process it forks but the step are not dumpable: a
//! process of the step's user cannot read their memory or descriptors,
//! where the end marks' keys are.
//!
//! Built by `build.rs` for x86_64 Linux with no C library, as the copier
//! (`tee.rs`), whose code its copier process runs.

#![no_std]
#![no_main]

#[path = "copier.rs"]
mod copier;
#[path = "mem.rs"]
mod mem;
#[path = "agent/os.rs"]
mod os;
#[path = "agent/procs.rs"]
mod procs;
#[path = "siphash.rs"]
mod siphash;
#[path = "agent/step.rs"]
mod step;
#[path = "sys.rs"]
mod sys;

use os::*;
use sys::{exit, read_some, write_all};

/// The longest message the agent takes; a longer one ends the channel
/// (its start is then made on an exec of its own).
const MESSAGE_MOST: usize = 4 << 20;

static mut INPUT: [u8; 1 << 16] = [0; 1 << 16];
static mut MESSAGE: [u8; MESSAGE_MOST + 1] = [0; MESSAGE_MOST + 1];
static mut FIELDS: [u8; MESSAGE_MOST / 2 + 1] = [0; MESSAGE_MOST / 2 + 1];

/// The length of the NUL-terminated string at `at`.
pub fn mem_len(at: *const u8) -> usize {
    let mut n = 0;
    while unsafe { core::ptr::read_volatile(at.add(n)) } != 0 {
        n += 1;
    }
    n
}

/// The channel's stdin, read ahead: the runner sends a message only
/// after the one before has ended, so nothing read ahead is another's.
struct Input {
    have: usize,
    at: usize,
}

impl Input {
    fn byte(&mut self) -> Option<u8> {
        let buf = unsafe { &mut *core::ptr::addr_of_mut!(INPUT) };
        if self.at == self.have {
            self.have = read_some(0, buf.as_mut_ptr(), buf.len()).filter(|&n| n > 0)?;
            self.at = 0;
        }
        let b = *buf.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    /// The next length line: digits only.
    fn length(&mut self) -> Option<usize> {
        let mut line = [0u8; 20];
        let mut n = 0;
        loop {
            match self.byte()? {
                b'\n' => break,
                b => *line.get_mut(n)? = b,
            }
            n += 1;
        }
        usize::try_from(parse_number(line.get(..n)?)?).ok()
    }

    /// The next `n` bytes, whole.
    fn message(&mut self, n: usize) -> Option<&'static mut [u8]> {
        let buf = unsafe { &mut *core::ptr::addr_of_mut!(MESSAGE) };
        let message = buf.get_mut(..n)?;
        for slot in message.iter_mut() {
            *slot = self.byte()?;
        }
        buf.get_mut(..=n)
    }
}

/// A step as a message's native line has it: records `KIND VALUE`, each
/// ending in a NUL, in the order they apply.
pub struct Step<'a> {
    /// The key of its end marks.
    pub key: &'a [u8],
    /// Its files' prefix, absolute.
    pub prefix: &'a [u8],
    /// The folder its start runs in (the channel's `cd`), if any.
    pub dir: Option<&'a [u8]>,
    /// Its shell's flags and script, NUL-terminated.
    pub flags_c: *const u8,
    pub script_c: *const u8,
    /// Its prelude as shell text: run by a shell when a folder it names
    /// cannot be entered, so that the shell says why.
    pub prelude: &'a [u8],
    /// The key its status file is signed with (`m`, 32 hex digits), if
    /// the runner sent one.
    pub status_key: Option<[u8; 16]>,
    records: &'a [u8],
}

impl<'a> Step<'a> {
    /// Its records: `d DIR` (the prelude's `cd`), `e NAME=VALUE`,
    /// `r NAME=VAR` and `u NAME` among them.
    pub fn records(&self) -> impl Iterator<Item = (u8, &'a [u8])> {
        self.records
            .split(|&b| b == 0)
            .filter_map(|r| Some((*r.first()?, r.get(1..)?)))
    }

    fn parse(fields: &'a [u8]) -> Option<Self> {
        let mut step = Step {
            key: b"",
            prefix: b"",
            dir: None,
            flags_c: core::ptr::null(),
            script_c: core::ptr::null(),
            prelude: b"",
            status_key: None,
            records: fields,
        };
        let mut offset = 0;
        for record in fields.split(|&b| b == 0) {
            let value = record.get(1..).unwrap_or_default();
            // Each record ends in a NUL (the last in the one after the fields).
            let c = fields.as_ptr().wrapping_add(offset + 1);
            match record.first() {
                Some(b'k') => step.key = value,
                Some(b'p') => step.prefix = value,
                Some(b'w') => step.dir = Some(value),
                Some(b'f') if matches!(value, b"-ec" | b"-e") => step.flags_c = c,
                Some(b's') => step.script_c = c,
                Some(b'P') => step.prelude = value,
                Some(b'm') => step.status_key = Some(siphash::key_of_hex(value)?),
                Some(b'd' | b'e' | b'r' | b'u') | None => {}
                Some(_) => return None,
            }
            offset += record.len() + 1;
        }
        let hex = step.key.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        let whole = !step.flags_c.is_null() && !step.script_c.is_null();
        (whole && hex && !step.key.is_empty() && step.prefix.first() == Some(&b'/')).then_some(step)
    }
}

/// The fields of a message's native line, decoded from hex into
/// [`FIELDS`], NUL-terminated.
fn native_fields(message: &[u8]) -> Option<&'static [u8]> {
    let second = message.split(|&b| b == b'\n').nth(1)?;
    let hex = second.strip_prefix(b"#knotless-native ")?;
    let out = unsafe { &mut *core::ptr::addr_of_mut!(FIELDS) };
    let n = hex.len() / 2;
    if hex.len() % 2 != 0 || n >= out.len() {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    for (slot, pair) in out.iter_mut().zip(hex.chunks(2)) {
        *slot = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    out[n] = 0;
    out.get(..n)
}

/// Runs the message (NUL-terminated `text`) through the channel's shell
/// start, here: this process becomes that shell. Its native line goes
/// first (the shell takes it for a comment): the message is the shell's
/// argument, which any process can read in `/proc/PID/cmdline`, and the
/// line holds the key the status is signed with.
fn shell_start(script: *const u8, text: &mut [u8], envp: *const *const u8) -> ! {
    blank_native_line(text);
    if let Some(null) = open(&mut Path::of(&[b"/dev/null"]), O_RDONLY) {
        dup2(null, 0);
    }
    // A supervisor that gave up had blocked SIGCHLD; a mask outlives exec.
    set_mask(0);
    let argv = [b"sh\0".as_ptr(), b"-c\0".as_ptr(), script, b"sh\0".as_ptr(), text.as_ptr(), core::ptr::null()];
    step::exec_sh(&argv, envp)
}

/// Turns the message's second line, if it is a native line, into a bare
/// comment of the same length.
fn blank_native_line(text: &mut [u8]) {
    let Some(first) = text.iter().position(|&b| b == b'\n') else { return };
    let line = &mut text[first + 1..];
    if !line.starts_with(b"#knotless-native ") {
        return;
    }
    for b in line.iter_mut().skip(1) {
        if *b == b'\n' || *b == 0 {
            break;
        }
        *b = b'#';
    }
}

extern "C" fn entry(stack: *const usize) -> ! {
    let argc = unsafe { *stack };
    let argv = unsafe { stack.add(1) as *const *const u8 };
    let envp = unsafe { argv.add(argc + 1) };
    if argc < 3 {
        exit(2);
    }
    let script = unsafe { *argv.add(1) };
    let user = if argc > 3 {
        let at = unsafe { *argv.add(3) };
        match StepUser::parse(unsafe { core::slice::from_raw_parts(at, mem_len(at)) }) {
            Some(user) => Some(user),
            None => exit(2),
        }
    } else {
        None
    };
    let usage_max = {
        let at = unsafe { *argv.add(2) };
        let text = unsafe { core::slice::from_raw_parts(at, mem_len(at)) };
        parse_number(text).unwrap_or(0) as usize
    };
    // A child it makes is waited for, never reaped behind its back.
    set_signal(SIGCHLD, SIG_DFL);
    // Not dumpable: the messages (the keys of the end marks among them)
    // and its descriptors are out of reach of the step's processes, of
    // its user and without CAP_SYS_PTRACE (`/proc/PID/fd`, `mem`,
    // `environ`). Its forks inherit it; the step's exec clears it.
    unsafe {
        sys::syscall4(PRCTL, PR_SET_DUMPABLE, 0, 0, 0);
    }
    // The runner takes a channel that says this for one whose starts sign
    // their status files, and refuses a status without a valid signature
    // from its starts from then on.
    if let Some(user) = &user {
        // A step would fail at its start otherwise: the channel fails now,
        // saying why, before any step is sent.
        let Some(probe) = fork() else { exit(125) };
        if probe == 0 {
            exit(if user.become_it() { 0 } else { 1 });
        }
        if wait(probe, 0).map(|(status, _, _)| exit_code(status)) != Some(0) {
            let why = b"knotless-agent: cannot start steps as their user (no CAP_SETUID and CAP_SETGID?)\n";
            write_all(2, why.as_ptr(), why.len());
            exit(125);
        }
    }
    let hello = b"\0knotless-channel-agent\n";
    if !write_all(1, hello.as_ptr(), hello.len()) {
        exit(0);
    }
    let mut input = Input { have: 0, at: 0 };
    loop {
        let Some(n) = input.length() else { exit(0) };
        let Some(message) = input.message(n) else { exit(0) };
        message[n] = 0;
        let text = &message[..n];
        if !text.ends_with(b"\n#knotless-end") {
            exit(0);
        }
        let key = {
            let rest = text.strip_prefix(b": ").unwrap_or(text);
            let hex = rest.iter().take_while(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')).count();
            Path::of(&[&rest[..hex]])
        };
        let step = native_fields(text).and_then(Step::parse);
        let Some(pid) = fork() else { exit(0) };
        if pid == 0 {
            // The step's fields are a copy (`FIELDS`): the message is the
            // fallback's alone.
            let whole = message.as_mut_ptr();
            let fallback = || shell_start(script, unsafe { core::slice::from_raw_parts_mut(whole, n + 1) }, envp);
            match (&step, &user) {
                (Some(step), _) => step::supervise(step, envp, usage_max, user.as_ref(), &|| fallback()),
                // Only the agent starts a step as its user.
                (None, Some(_)) => exit(125),
                (None, None) => fallback(),
            }
        }
        let code = wait(pid, 0).map_or(125, |(status, _, _)| exit_code(status));
        let mut done = Path::of(&[b"\0knotless-channel-done "]);
        done.push_status(code).push(b" ").push(key.bytes()).push(b"\n");
        if !write_all(1, done.bytes().as_ptr(), done.bytes().len()) {
            exit(0);
        }
    }
}
