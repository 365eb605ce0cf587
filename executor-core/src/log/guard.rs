//! The line guard: a step's line that starts as the runner's do gets a
//! space in front, so every `==> ` line in the log is the runner's.

/// The runner's lines start with `==> `; a step's line that starts the
/// same way gets one space in front, so a reader of the log (a person or
/// `grep '^==> '`) can trust every runner line. Holds back at most the
/// three bytes of a line start that may still become `==> `.
#[derive(Debug)]
pub(super) struct LineGuard {
    at_line_start: bool,
    held: usize,
}

impl Default for LineGuard {
    fn default() -> Self {
        LineGuard {
            at_line_start: true,
            held: 0,
        }
    }
}

pub(super) const RUNNER_MARK: &[u8] = b"==> ";

impl LineGuard {
    pub(super) fn line_starts(&mut self) {
        self.at_line_start = true;
        self.held = 0;
    }

    pub(super) fn is_holding(&self) -> bool {
        self.held > 0
    }

    /// Bytes held: the start of the mark, as they came.
    pub(super) fn held_len(&self) -> usize {
        self.held
    }

    pub(super) fn push(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.at_line_start {
                // Compare what is held plus what came against the mark.
                let want = &RUNNER_MARK[self.held..];
                let n = want.len().min(rest.len());
                if rest[..n] != want[..n] {
                    out.extend_from_slice(&RUNNER_MARK[..self.held]);
                    self.held = 0;
                    self.at_line_start = false;
                    continue;
                }
                if self.held + n < RUNNER_MARK.len() {
                    self.held += n;
                    return;
                }
                out.push(b' ');
                out.extend_from_slice(RUNNER_MARK);
                self.held = 0;
                self.at_line_start = false;
                rest = &rest[n..];
                continue;
            }
            match memchr::memchr(b'\n', rest) {
                Some(end) => {
                    out.extend_from_slice(&rest[..=end]);
                    rest = &rest[end + 1..];
                    self.at_line_start = true;
                }
                None => {
                    out.extend_from_slice(rest);
                    return;
                }
            }
        }
    }

    /// The output was interrupted (a runner line, the end): what is held
    /// cannot become a forged mark any more.
    pub(super) fn release(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(&RUNNER_MARK[..self.held]);
        if self.held > 0 {
            self.at_line_start = false;
        }
        self.held = 0;
    }
}
