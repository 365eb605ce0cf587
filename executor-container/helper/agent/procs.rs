//! What the supervisor reads of other processes in `/proc`: their
//! parents, the peak memory of the step's, and who still holds the
//! step's pipes.

use super::os::{identity, open, parse_number, read_file, Path, GETDENTS64, O_DIRECTORY, O_RDONLY};
use crate::sys::{close, syscall4};

/// The words after the command name of a `/proc/PID/stat` (a name may
/// hold spaces and parentheses; the last `)` ends it): word 0 is the
/// state, 1 the parent, 19 the start time.
pub fn stat_word(stat: &[u8], word: usize) -> Option<&[u8]> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = stat.get(close + 2..)?;
    rest.split(|&b| b == b' ').nth(word)
}

/// The first line of `/proc/PID/stat` (`self` for `pid` 0) into `buf`.
pub fn stat_of<'a>(pid: u32, buf: &'a mut [u8; 1024]) -> Option<&'a [u8]> {
    let mut path = Path::of(&[b"/proc/"]);
    if pid == 0 {
        path.push(b"self");
    } else {
        path.push_number(u64::from(pid));
    }
    path.push(b"/stat");
    let n = read_file(&mut path, buf)?;
    buf.get(..n)?.split(|&b| b == b'\n').next()
}

/// Calls `each` with the pid of every process, as `/proc` lists them.
pub fn each_process(mut each: impl FnMut(u32)) {
    each_entry(&mut Path::of(&[b"/proc"]), |name| {
        if let Some(pid) = parse_number(name).and_then(|p| u32::try_from(p).ok()) {
            each(pid);
        }
    });
}

/// Calls `each` with the name of every entry of the folder `dir`.
pub fn each_entry(dir: &mut Path, mut each: impl FnMut(&[u8])) {
    let Some(dir) = open(dir, O_RDONLY | O_DIRECTORY) else {
        return;
    };
    let mut buf = [0u8; 8192];
    loop {
        let n = unsafe { syscall4(GETDENTS64, dir, buf.as_mut_ptr() as usize, buf.len(), 0) };
        if n <= 0 {
            break;
        }
        let mut at = 0usize;
        // struct linux_dirent64 { u64 ino; i64 off; u16 reclen; u8 type; char name[]; }
        while at + 19 < n as usize {
            let reclen = usize::from(u16::from_ne_bytes([buf[at + 16], buf[at + 17]]));
            let Some(entry) = buf.get(at + 19..at + reclen) else { break };
            each(entry.split(|&b| b == 0).next().unwrap_or_default());
            if reclen == 0 {
                break;
            }
            at += reclen;
        }
    }
    close(dir);
}

/// Whether process `pid`'s descriptor `fd` is the file `is`.
pub fn fd_is(pid: u32, fd: u8, is: (u64, u64)) -> bool {
    let mut path = Path::of(&[b"/proc/"]);
    path.push_number(u64::from(pid)).push(b"/fd/").push(&[b'0' + fd]);
    identity(&mut path) == Some(is)
}

/// Whether `pid` writes the step's output: its stdout is the stdout
/// pipe, or its stderr the stderr pipe.
pub fn holds_output(pid: u32, pipes: ((u64, u64), (u64, u64))) -> bool {
    fd_is(pid, 1, pipes.0) || fd_is(pid, 2, pipes.1)
}

/// Whether any process writes the step's output (one it left behind).
pub fn output_held(pipes: ((u64, u64), (u64, u64))) -> bool {
    let mut held = false;
    each_process(|pid| held = held || holds_output(pid, pipes));
    held
}

/// `VmHWM` of `pid`, in KiB.
fn peak_of(pid: u32) -> Option<u64> {
    let mut path = Path::of(&[b"/proc/"]);
    path.push_number(u64::from(pid)).push(b"/status");
    let mut buf = [0u8; 4096];
    let n = read_file(&mut path, &mut buf)?;
    let line = buf.get(..n)?.split(|&b| b == b'\n').find(|l| l.starts_with(b"VmHWM:"))?;
    let digits = line.get(6..)?.split(|&b| b == b' ' || b == b'\t').find(|w| !w.is_empty())?;
    parse_number(digits)
}

/// The step's processes as a sample finds them: the step, every process
/// whose parent is one of them, seen in `/proc`'s order, and what
/// writes its output; and the largest peak among them.
pub struct Sampler {
    tree: [u32; 1024],
    known: usize,
    pub peak: u64,
}

impl Sampler {
    pub fn new(step: u32) -> Self {
        let mut tree = [0u32; 1024];
        tree[0] = step;
        Sampler {
            tree,
            known: 1,
            peak: 0,
        }
    }

    fn has(&self, pid: u32) -> bool {
        self.tree.get(..self.known).unwrap_or_default().contains(&pid)
    }

    pub fn sample(&mut self, pipes: ((u64, u64), (u64, u64))) {
        each_process(|pid| {
            let mine = self.has(pid) || {
                let mut buf = [0u8; 1024];
                let parent = stat_of(pid, &mut buf)
                    .and_then(|s| stat_word(s, 1))
                    .and_then(parse_number)
                    .and_then(|p| u32::try_from(p).ok());
                match parent {
                    Some(parent) if self.has(parent) => {
                        if let Some(slot) = self.tree.get_mut(self.known) {
                            *slot = pid;
                            self.known += 1;
                        }
                        true
                    }
                    Some(_) => holds_output(pid, pipes),
                    None => false,
                }
            };
            if mine {
                if let Some(kib) = peak_of(pid) {
                    self.peak = self.peak.max(kib);
                }
            }
        });
    }
}
