//! What a channel's streams show of one step: its end marks, and on
//! stdout the channel's notices (a step's done notice, the agent's
//! hello), which are taken out.

use super::{DONE, HELLO, NOTICE};
use crate::detached::end_mark::{mark_len, status_of, PREFIX};

/// What a channel's stream showed of one step: its end mark, and on
/// stdout the done notices, which are taken out.
pub(super) struct Stream {
    /// The key of the step's end marks.
    key: Vec<u8>,
    notices: bool,
    /// The last bytes seen, enough to hold a mark or a notice cut
    /// between two reads.
    tail: Vec<u8>,
    /// Bytes held back as they may begin a done notice.
    held: Vec<u8>,
    pub(super) marked: bool,
    pub(super) done: Option<i32>,
    pub(super) ended: bool,
    /// The channel's agent said it runs ([`HELLO`]).
    pub(super) agent: bool,
    own_done: Vec<u8>,
}

impl Stream {
    pub(super) fn new(key: &[u8], notices: bool) -> Self {
        let mut own_done = DONE.to_vec();
        own_done.extend_from_slice(b"NNN ");
        own_done.extend_from_slice(key);
        own_done.push(b'\n');
        Stream {
            key: key.to_vec(),
            notices,
            tail: Vec::new(),
            held: Vec::new(),
            marked: false,
            done: None,
            ended: false,
            agent: false,
            own_done,
        }
    }

    /// Takes in `bytes` just read (none: the stream ended); returns what
    /// goes on to the step's writer.
    pub(super) fn take(&mut self, bytes: &[u8]) -> Vec<u8> {
        if bytes.is_empty() {
            self.ended = true;
            return std::mem::take(&mut self.held);
        }
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(bytes);
        let kept = if self.notices {
            self.strip_notices(data)
        } else {
            data
        };
        self.tail.extend_from_slice(&kept);
        // Enough of the end to hold a whole mark split between reads.
        let longest = mark_len(&self.key);
        if self.tail.len() > longest {
            let cut = self.tail.len() - longest;
            self.tail.drain(..cut);
        }
        if !self.marked && ends_with_mark(&self.tail, &self.key) {
            self.marked = true;
        }
        kept
    }

    /// Takes every whole notice out of `data`, noting this step's done
    /// notice and the agent's hello; a notice's possible beginning at the
    /// end is held for the next read.
    fn strip_notices(&mut self, data: Vec<u8>) -> Vec<u8> {
        let mut kept = Vec::with_capacity(data.len());
        let mut rest = data.as_slice();
        while let Some(at) = find(rest, NOTICE) {
            let (before, notice) = rest.split_at(at);
            kept.extend_from_slice(before);
            match notice.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    let (whole, after) = notice.split_at(end + 1);
                    if whole == HELLO {
                        self.agent = true;
                    } else if let Some(code) = own_notice(whole, &self.own_done) {
                        self.done = Some(code);
                    }
                    rest = after;
                }
                None if notice.len() < self.own_done.len() + 8 => {
                    self.held = notice.to_vec();
                    return kept;
                }
                // Too long for a notice: output.
                None => {
                    kept.extend_from_slice(notice);
                    return kept;
                }
            }
        }
        // A notice's first bytes at the very end wait for the rest.
        let split = (1..=rest.len().min(NOTICE.len()))
            .rev()
            .find(|&n| rest.ends_with(&NOTICE[..n]))
            .map_or(rest.len(), |n| rest.len() - n);
        kept.extend_from_slice(&rest[..split]);
        self.held = rest[split..].to_vec();
        kept
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Whether `tail` ends with a whole end mark with `key`, read as the
/// step's own exec reads one ([`status_of`]).
fn ends_with_mark(tail: &[u8], key: &[u8]) -> bool {
    tail.windows(PREFIX.len())
        .rposition(|w| w == PREFIX)
        .is_some_and(|start| status_of(&tail[start..], key).is_some())
}

/// The code of a done notice that is this step's.
fn own_notice(notice: &[u8], own: &[u8]) -> Option<i32> {
    if notice.len() != own.len() {
        return None;
    }
    let mut code = 0i32;
    for (&got, &want) in notice.iter().zip(own) {
        if want == b'N' {
            if !got.is_ascii_digit() {
                return None;
            }
            code = code * 10 + i32::from(got - b'0');
        } else if got != want {
            return None;
        }
    }
    Some(code)
}
