//! The time in front of every line of the text log (`RunLog::timestamps`).

/// `bytes` as the text log gets them: with the time in front of every line
/// when it is stamped (the clock is read only then).
pub(super) fn stamped(
    stamps: &mut Option<Stamper>,
    bytes: &[u8],
    at: impl FnOnce() -> time::OffsetDateTime,
) -> Vec<u8> {
    match stamps {
        Some(stamper) => stamper.stamp(bytes, at()),
        None => bytes.to_vec(),
    }
}

/// Puts the time in front of every line of the text log.
#[derive(Debug)]
pub(super) struct Stamper {
    at_line_start: bool,
}

impl Default for Stamper {
    fn default() -> Self {
        Stamper {
            at_line_start: true,
        }
    }
}

impl Stamper {
    /// `bytes` with `at` in front of every line that starts in them.
    pub(super) fn stamp(&mut self, bytes: &[u8], at: time::OffsetDateTime) -> Vec<u8> {
        let stamp = format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z ",
            at.year(),
            u8::from(at.month()),
            at.day(),
            at.hour(),
            at.minute(),
            at.second(),
            at.millisecond()
        );
        let mut out = Vec::with_capacity(bytes.len() + stamp.len());
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            if self.at_line_start {
                out.extend_from_slice(stamp.as_bytes());
            }
            out.extend_from_slice(line);
            self.at_line_start = line.ends_with(b"\n");
        }
        out
    }
}
