//! A step's supervisor: what the shell's start does (see `scripts.rs`),
//! in one process. It makes the step's pipes (a second start finds them
//! and is handed to the shell, which follows the first), writes its pid
//! and the begin marks, forks the copier and the step, samples the
//! step's memory while it runs, takes its status and CPU time from the
//! kernel (`wait4`), writes the status file and ends the streams with the
//! end marks: the same files and marks, so a follow, a kill or a resume
//! cannot tell which wrote them.

use super::os::*;
use super::procs::{output_held, stat_of, stat_word, Sampler};
use super::Step;
use crate::copier;
use crate::sys::{close, exit, write_all};

/// The files a step's start removes: those of the steps before it, named
/// in the state folder, NUL-terminated.
static mut OLD: [u8; 1 << 16] = [0; 1 << 16];
static mut OLD_AT: [*const u8; 1024] = [core::ptr::null(); 1024];

/// The step's environment: the exec's, with the step's variables set.
static mut ENVP: [*const u8; 8192] = [core::ptr::null(); 8192];
static mut ENV_BUF: [u8; 1 << 20] = [0; 1 << 20];

fn say(fd: usize, text: &[u8]) {
    write_all(fd, text.as_ptr(), text.len());
}

fn file(step: &Step, suffix: &[u8]) -> Path {
    Path::of(&[step.prefix, suffix])
}

/// Runs `step` as the start's supervisor would and exits with its
/// status; `fallback`, which does not return, runs the shell's start
/// instead (a second start, which follows the first). With a step
/// `user` (the agent does not share the step's uid), the step alone
/// becomes that user, and nothing that could not start the step as the
/// agent does goes to the shell, which would run it as the agent's user:
/// such a start fails.
pub fn supervise(step: &Step, envp: *const *const u8, usage_max: usize, user: Option<&StepUser>, fallback: &dyn Fn()) -> ! {
    let instead = |why: &[u8]| -> ! {
        if user.is_some() {
            say(2, b"knotless: the step cannot be started as its user: ");
            say(2, why);
            say(2, b"\n");
        } else {
            fallback();
        }
        exit(125)
    };
    // Standard input is /dev/null; the other descriptors are the exec's
    // until the pipes are made (a second start's shell gets them).
    if let Some(null) = open(&mut Path::of(&[b"/dev/null"]), O_RDWR) {
        dup2(null, 0);
        close(null);
    }
    if let Some(dir) = step.dir {
        if !chdir(&mut Path::of(&[dir])) {
            exit(125);
        }
    }
    // The exec's streams as 3 and 4 too (a shell's start, if it comes to
    // that, takes them from 1 and 2 again), before anything takes those.
    dup2(1, 3);
    dup2(2, 4);
    // What could fail for want of a system call (a seccomp profile that
    // refuses it) is made before the pipes: the shell starts the step
    // instead, where nothing has happened yet.
    let (Some(chld), Some((released, release))) = (signal_fd(1 << (SIGCHLD - 1)), pipe()) else {
        instead(b"no signalfd or pipe here")
    };
    let made = mkfifo(&mut file(step, b".o"));
    if made == EEXIST {
        fallback();
        exit(125);
    }
    if made != 0 {
        let dir = step.prefix.rsplit(|&b| b == b'/').nth(1).unwrap_or_default();
        say(2, b"knotless: cannot make the step's pipes in ");
        say(2, dir);
        say(2, b"\n");
        exit(125);
    }
    if mkfifo(&mut file(step, b".e")) != 0 {
        instead(b"its second pipe cannot be made")
    }
    // The supervisor's own words go nowhere.
    dup2(0, 1);
    dup2(0, 2);
    set_signal(SIGPIPE, SIG_IGN);
    let old = old_files(step.prefix);
    let me = getpid();
    let mut stat = [0u8; 1024];
    if let Some(start) = stat_of(0, &mut stat).and_then(|s| stat_word(s, 19)) {
        let mut line = Path::new();
        line.push_number(u64::from(me)).push(b" ").push(start).push(b"\n");
        write_file(&mut file(step, b".pid"), line.bytes());
    }
    for fd in [3, 4] {
        say(fd, b"\0knotless-step-begin\n");
    }
    let Some(copier_pid) = fork() else { exit(125) };
    if copier_pid == 0 {
        set_mask(0);
        close(released);
        close(chld);
        let out = open(&mut file(step, b".o"), O_RDONLY);
        let err = open(&mut file(step, b".e"), O_RDONLY);
        let (Some(out), Some(err)) = (out, err) else { exit(1) };
        dup2(out, 0);
        dup2(err, 5);
        copier::copy(Some(me), step.prefix, old, Some(release));
    }
    close(release);
    let oom = oom_kills();
    if oom > 0 {
        let mut text = Path::new();
        text.push_number(oom).push(b"\n");
        write_file(&mut file(step, b".oom"), text.bytes());
    }
    let peak_before = cgroup_number(b"memory.peak", b"memory/memory.max_usage_in_bytes");
    let Some(pid) = fork() else { exit(125) };
    if pid == 0 {
        run_step(step, envp, user);
    }
    let pipes = (
        identity(&mut file(step, b".o")).unwrap_or((0, 0)),
        identity(&mut file(step, b".e")).unwrap_or((0, 0)),
    );
    let mut sampler = Sampler::new(pid as u32);
    let mut every = [10, 50, 100, 200, 500].iter();
    let (status, user, system) = loop {
        if let Some(ended) = wait(pid, WNOHANG) {
            break ended;
        }
        let ms = every.next().copied().unwrap_or(1000);
        if ready(chld, ms) {
            drain_signals(chld);
        } else {
            sampler.sample(pipes);
        }
    };
    let code = exit_code(status);
    let limit = cgroup_number(b"memory.max", b"memory/memory.limit_in_bytes").unwrap_or(0);
    let peak = cgroup_number(b"memory.peak", b"memory/memory.max_usage_in_bytes").unwrap_or(0);
    let grew = match peak_before {
        Some(before) if peak > before => peak,
        _ => 0,
    };
    let mut usage = Path::new();
    for (i, n) in [user, system, sampler.peak, limit, grew].into_iter().enumerate() {
        if i > 0 {
            usage.push(b" ");
        }
        usage.push_number(n);
    }
    let usage = if usage.bytes().len() <= usage_max { usage.bytes() } else { b"" };
    let held = output_held(pipes);
    let mut sent = false;
    if held {
        // The copier sends on what the pipes hold and lets go of the
        // exec's streams when told; one not yet listening is told again.
        for _ in 0..2000 {
            if ready(released, 0) {
                sent = true;
                break;
            }
            kill(copier_pid, SIGWINCH);
            if ready(released, 1) {
                sent = true;
                break;
            }
        }
    } else {
        wait(copier_pid, 0);
    }
    let mut line = Path::new();
    line.push_number(u64::from(code)).push(b" ").push(usage);
    if let Some(key) = &step.status_key {
        // Signed: a process of the step's user can write this file too.
        let mac = crate::siphash::status_mac(key, step.prefix, line.bytes());
        line.push(b"\nm ").push(&crate::siphash::mac_hex(mac));
    }
    line.push(b"\n");
    write_file(&mut file(step, b".status"), line.bytes());
    if !held || sent {
        let mut mark = Path::of(&[b"\0knotless-step-end "]);
        mark.push_status(code).push(b" ").push(step.key);
        if !usage.is_empty() {
            mark.push(b" ").push(usage);
        }
        mark.push(b"\n");
        say(3, mark.bytes());
        say(4, mark.bytes());
    }
    exit(usize::from(code))
}

/// The step itself: its pipes as stdout and stderr, its variables and
/// folder, `sh FLAGS SCRIPT`. A folder it cannot enter is left to the
/// shell, which says so and fails as the prelude would.
fn run_step(step: &Step, envp: *const *const u8, user: Option<&StepUser>) -> ! {
    set_mask(0);
    set_signal(SIGPIPE, SIG_DFL);
    let out = open(&mut file(step, b".o"), O_WRONLY);
    let err = open(&mut file(step, b".e"), O_WRONLY);
    let (Some(out), Some(err)) = (out, err) else { exit(126) };
    dup2(out, 1);
    dup2(err, 2);
    if unsafe { crate::sys::syscall4(CLOSE_RANGE, 3, u32::MAX as usize, 0, 0) } != 0 {
        for fd in 3..1024 {
            close(fd);
        }
    }
    write_file(&mut Path::of(&[b"/proc/self/oom_score_adj"]), b"1000");
    // Its pipes are open: from here on it is the step's user, whose
    // processes cannot signal, trace or limit the agent's.
    if let Some(user) = user {
        if !user.become_it() {
            say(2, b"knotless: cannot become the step's user\n");
            exit(126);
        }
    }
    for (kind, value) in step.records() {
        if kind == b'd' && !chdir(&mut Path::of(&[value])) {
            let text = unsafe { &mut *core::ptr::addr_of_mut!(ENV_BUF) };
            let tail: &[u8] = b"exec sh \"$0\" \"$1\"\0";
            let Some(room) = text.get_mut(..step.prelude.len() + tail.len()) else { exit(1) };
            let (head, rest) = room.split_at_mut(step.prelude.len());
            head.copy_from_slice(step.prelude);
            rest.copy_from_slice(tail);
            let argv = [b"sh\0".as_ptr(), b"-c\0".as_ptr(), text.as_ptr(), step.flags_c, step.script_c, core::ptr::null()];
            exec_sh(&argv, envp);
        }
    }
    let env = step_env(step, envp);
    let argv = [b"sh\0".as_ptr(), step.flags_c, step.script_c, core::ptr::null()];
    exec_sh(&argv, env)
}

/// Execs `sh` from the `PATH` of `env`, as `exec sh` in a shell would.
pub fn exec_sh(argv: &[*const u8], env: *const *const u8) -> ! {
    let path = lookup(env, b"PATH").unwrap_or(b"/sbin:/usr/sbin:/bin:/usr/bin");
    for dir in path.split(|&b| b == b':') {
        let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
        if let Some(at) = Path::of(&[dir, b"/sh"]).c() {
            unsafe {
                crate::sys::syscall4(EXECVE, at as usize, argv.as_ptr() as usize, env as usize, 0);
            }
        }
    }
    say(2, b"sh: not found\n");
    exit(127)
}

/// The value of `name` in `env`.
fn lookup(env: *const *const u8, name: &[u8]) -> Option<&'static [u8]> {
    let mut at = env;
    loop {
        let entry = unsafe { *at };
        if entry.is_null() {
            return None;
        }
        let text = unsafe { core::slice::from_raw_parts(entry, crate::mem_len(entry)) };
        if text.len() > name.len() && text.starts_with(name) && text[name.len()] == b'=' {
            return text.get(name.len() + 1..);
        }
        at = unsafe { at.add(1) };
    }
}

/// The step's environment: the exec's with its records applied in order
/// (`e NAME=VALUE`, `r NAME=VAR` as `export NAME="$VAR"`, `u NAME`).
fn step_env(step: &Step, envp: *const *const u8) -> *const *const u8 {
    let slots = unsafe { &mut *core::ptr::addr_of_mut!(ENVP) };
    let buf = unsafe { &mut *core::ptr::addr_of_mut!(ENV_BUF) };
    let mut count = 0;
    let mut at = envp;
    while count + 1 < slots.len() {
        let entry = unsafe { *at };
        if entry.is_null() {
            break;
        }
        slots[count] = entry;
        count += 1;
        at = unsafe { at.add(1) };
    }
    let mut used = 0;
    for (kind, value) in step.records() {
        let name = value.split(|&b| b == b'=').next().unwrap_or_default();
        // Every entry of that name goes; a set puts one back at the end.
        let mut kept = 0;
        for i in 0..count {
            let entry = slots[i];
            let text = unsafe { core::slice::from_raw_parts(entry, crate::mem_len(entry)) };
            let same = text.len() > name.len() && text.starts_with(name) && text[name.len()] == b'=';
            if !same || !matches!(kind, b'e' | b'r' | b'u') {
                slots[kept] = entry;
                kept += 1;
            }
        }
        count = kept;
        // What went must not be found by a later record's lookup.
        slots[count] = core::ptr::null();
        let entry = match kind {
            b'e' => value.as_ptr(),
            b'r' => {
                let var = value.get(name.len() + 1..).unwrap_or_default();
                let set = lookup(slots.as_ptr(), var).unwrap_or_default();
                let Some(room) = buf.get_mut(used..used + name.len() + set.len() + 2) else { continue };
                room[..name.len()].copy_from_slice(name);
                room[name.len()] = b'=';
                room[name.len() + 1..name.len() + 1 + set.len()].copy_from_slice(set);
                room[name.len() + 1 + set.len()] = 0;
                let entry = room.as_ptr();
                used += name.len() + set.len() + 2;
                entry
            }
            _ => continue,
        };
        if count + 1 < slots.len() {
            slots[count] = entry;
            count += 1;
        }
        slots[count] = core::ptr::null();
    }
    slots[count] = core::ptr::null();
    slots.as_ptr()
}

/// The files of the steps before, in the folder of `prefix`: every
/// `stepio-*` but this step's own, as NUL-terminated paths.
fn old_files(prefix: &[u8]) -> &'static [*const u8] {
    let cut = prefix.iter().rposition(|&b| b == b'/').unwrap_or(0);
    let (dir, own) = (&prefix[..cut], &prefix[cut + 1..]);
    let paths = unsafe { &mut *core::ptr::addr_of_mut!(OLD) };
    let at = unsafe { &mut *core::ptr::addr_of_mut!(OLD_AT) };
    let (mut used, mut count) = (0, 0);
    let mut dir_path = Path::of(&[if dir.is_empty() { b"/" } else { dir }]);
    super::procs::each_entry(&mut dir_path, |name| {
        let mine = name.starts_with(own) && name.get(own.len()) == Some(&b'.');
        if !name.starts_with(b"stepio-") || mine || name.contains(&b'*') || count >= at.len() {
            return;
        }
        let len = dir.len() + 1 + name.len() + 1;
        let Some(room) = paths.get_mut(used..used + len) else { return };
        room[..dir.len()].copy_from_slice(dir);
        room[dir.len()] = b'/';
        room[dir.len() + 1..len - 1].copy_from_slice(name);
        room[len - 1] = 0;
        at[count] = room.as_ptr();
        used += len;
        count += 1;
    });
    &at[..count]
}

/// The environment's OOM kills so far, as its memory cgroup counts them.
fn oom_kills() -> u64 {
    let mut most = 0;
    for counters in [&b"/sys/fs/cgroup/memory.events"[..], b"/sys/fs/cgroup/memory/memory.oom_control"] {
        let mut buf = [0u8; 2048];
        let Some(n) = read_file(&mut Path::of(&[counters]), &mut buf) else { continue };
        for line in buf[..n].split(|&b| b == b'\n') {
            if let Some(count) = line.strip_prefix(b"oom_kill ").and_then(parse_number) {
                most = most.max(count);
            }
        }
    }
    most
}

/// A number from the cgroup v2 file `v2`, else the v1 file `v1`.
fn cgroup_number(v2: &[u8], v1: &[u8]) -> Option<u64> {
    read_number(&mut Path::of(&[b"/sys/fs/cgroup/", v2]))
        .or_else(|| read_number(&mut Path::of(&[b"/sys/fs/cgroup/", v1])))
}
