//! Secrets, and masking their values out of everything a run prints.
//!
//! A [`Secret`] is a value that must never be shown: its `Debug` and
//! `Display` print nothing of it. A [`Masker`] knows the values of a run's
//! secrets in the forms a step is likely to print them (as they are, each
//! line of a multi-line value, base64 at all three byte alignments and in
//! both alphabets, URL-encoding and hex) and replaces each with
//! [`MASK`]. A [`MaskStream`] does the same to a byte stream that arrives
//! in chunks of any size: it holds back only a tail that could still
//! become a value, never more than the longest form minus one byte, and
//! never past a newline (no form contains one), so memory does not grow
//! with the log and a line is never delayed once it ends.
//!
//! What masking cannot cover: a step that transforms a value its own way
//! (reverses it, encrypts it, prints every other character) prints
//! something no list of forms contains.
//!
//! ```
//! use executor_core::mask::{Masker, Secret};
//!
//! let masker = Masker::new([&Secret::new("hunter22")]);
//! assert_eq!(masker.mask_str("password: hunter22"), "password: [MASKED]");
//!
//! // A value printed a byte at a time is still masked.
//! let mut stream = masker.stream();
//! let mut out = Vec::new();
//! for byte in b"pw=hunter22\n" {
//!     stream.push(&[*byte], &mut out);
//! }
//! stream.flush(&mut out);
//! assert_eq!(out, b"pw=[MASKED]\n");
//! ```

use std::borrow::Cow;
use std::io::{self, Write};
use std::sync::Arc;

use aho_corasick::{AhoCorasick, MatchKind};

mod forms;
use forms::forms_of;

/// What a masked value is replaced by.
pub const MASK: &str = "[MASKED]";

/// The shortest secret value accepted, in characters: masking shorter
/// values would shred the log (every `true` or `1234` in it).
pub const MIN_SECRET_LEN: usize = 4;

/// A secret value. Its `Debug` and `Display` print [`MASK`], so a value
/// never reaches a log through formatting; [`Secret::expose`] is the one
/// way to read it.
///
/// ```
/// use executor_core::mask::Secret;
/// let token = Secret::new("s3cr3t-token");
/// assert_eq!(format!("{token} {token:?}"), "[MASKED] Secret([MASKED])");
/// assert_eq!(token.expose(), "s3cr3t-token");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value itself, for the one place that hands it to the environment.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({MASK})")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(MASK)
    }
}

/// Finds every known form of a set of secret values; see the module docs.
///
/// Cheap to clone (the search automaton is shared).
#[derive(Clone, Default)]
pub struct Masker {
    inner: Option<Arc<Forms>>,
}

struct Forms {
    search: AhoCorasick,
    forms: Vec<Vec<u8>>,
    longest: usize,
    /// Which bytes begin some form: most tails are ruled out by one lookup.
    first_bytes: [bool; 256],
}

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Masker")
            .field("forms", &self.inner.as_ref().map_or(0, |i| i.forms.len()))
            .finish()
    }
}

impl Masker {
    /// A masker for these values. Values shorter than [`MIN_SECRET_LEN`]
    /// characters are not masked (`RunSpec::validate` refuses them).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a Secret>) -> Self {
        Self::from_forms(
            secrets
                .into_iter()
                .filter(|s| s.0.chars().count() >= MIN_SECRET_LEN)
                .flat_map(|s| forms_of(&s.0))
                .collect(),
        )
    }

    /// A masker for the values of both.
    ///
    /// ```
    /// use executor_core::mask::{Masker, Secret};
    /// let both = Masker::new([&Secret::new("first-value")])
    ///     .union(&Masker::new([&Secret::new("other-value")]));
    /// assert_eq!(both.mask_str("first-value other-value"), "[MASKED] [MASKED]");
    /// ```
    pub fn union(&self, other: &Masker) -> Masker {
        let forms = [self, other]
            .iter()
            .filter_map(|m| m.inner.as_ref())
            .flat_map(|f| f.forms.iter().cloned())
            .collect();
        Self::from_forms(forms)
    }

    fn from_forms(mut forms: Vec<Vec<u8>>) -> Self {
        forms.sort();
        forms.dedup();
        if forms.is_empty() {
            return Masker::default();
        }
        let longest = forms.iter().map(Vec::len).max().unwrap_or(0);
        let mut first_bytes = [false; 256];
        for form in &forms {
            if let Some(&b) = form.first() {
                first_bytes[usize::from(b)] = true;
            }
        }
        // Leftmost-longest: where a value's line and the whole value both
        // match, the whole one is masked.
        let search = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&forms);
        match search {
            Ok(search) => Masker {
                inner: Some(Arc::new(Forms {
                    search,
                    forms,
                    longest,
                    first_bytes,
                })),
            },
            // The automaton only fails past sizes no set of secrets reaches;
            // masking everything would still be wrong, so say it loudly.
            Err(err) => {
                tracing::error!(%err, "cannot build the secret masker; secrets are not masked");
                Masker::default()
            }
        }
    }

    /// Whether there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// `text` with every form of every value replaced by [`MASK`].
    pub fn mask_str<'t>(&self, text: &'t str) -> Cow<'t, str> {
        match &self.inner {
            Some(f) if f.search.is_match(text) => {
                let masks = vec![MASK; f.forms.len()];
                Cow::Owned(f.search.replace_all(text, &masks))
            }
            _ => Cow::Borrowed(text),
        }
    }

    /// Masks `text` in place.
    pub fn mask_string(&self, text: &mut String) {
        if let Cow::Owned(masked) = self.mask_str(text) {
            *text = masked;
        }
    }

    /// A stream masker for output that arrives in chunks.
    pub fn stream(&self) -> MaskStream {
        MaskStream {
            masker: self.clone(),
            pending: Vec::new(),
        }
    }
}

/// Masks a byte stream chunk by chunk; see [`Masker::stream`].
#[derive(Debug)]
pub struct MaskStream {
    masker: Masker,
    pending: Vec<u8>,
}

impl MaskStream {
    /// Takes the next chunk and appends to `out` everything that can no
    /// longer become part of a value, masked.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<u8>) {
        let Some(f) = self.masker.inner.clone() else {
            out.extend_from_slice(chunk);
            return;
        };
        if self.pending.is_empty() {
            // The common case: nothing held, so search the chunk where it is.
            let held = f.mask_releasable(chunk, out);
            self.pending.extend_from_slice(&chunk[held..]);
        } else {
            self.pending.extend_from_slice(chunk);
            let buf = std::mem::take(&mut self.pending);
            let held = f.mask_releasable(&buf, out);
            self.pending = buf;
            self.pending.drain(..held);
        }
    }

    /// Appends everything held back, masked: the stream ended, or a
    /// runner line is about to be written after it.
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        let rest = std::mem::take(&mut self.pending);
        match &self.masker.inner {
            Some(f) => {
                let mut done = 0;
                for m in f.search.find_iter(rest.as_slice()) {
                    out.extend_from_slice(&rest[done..m.start()]);
                    out.extend_from_slice(MASK.as_bytes());
                    done = m.end();
                }
                out.extend_from_slice(&rest[done..]);
            }
            None => out.extend_from_slice(&rest),
        }
    }

    /// The masker it masks with.
    pub fn masker(&self) -> &Masker {
        &self.masker
    }

    /// Whether bytes are held back.
    pub fn is_holding(&self) -> bool {
        !self.pending.is_empty()
    }

    /// How many bytes are held back: the tail of what was pushed, as it came.
    pub fn held_len(&self) -> usize {
        self.pending.len()
    }
}

impl Forms {
    /// Appends `buf` masked up to the tail that could still become a
    /// form, and returns where that tail begins.
    fn mask_releasable(&self, buf: &[u8], out: &mut Vec<u8>) -> usize {
        let mut done = 0;
        let mut hold = self.held_tail(buf, 0);
        for m in self.search.find_iter(buf) {
            if m.start() >= hold {
                // It may yet grow into a longer form: wait for more.
                break;
            }
            out.extend_from_slice(&buf[done..m.start()]);
            out.extend_from_slice(MASK.as_bytes());
            done = m.end();
            if done > hold {
                hold = self.held_tail(buf, done);
            }
        }
        out.extend_from_slice(&buf[done..hold]);
        hold
    }

    /// Where the tail of `buf` that could still become a form begins (at
    /// or after `from`), or `buf.len()` when no tail could.
    fn held_tail(&self, buf: &[u8], from: usize) -> usize {
        let first = from.max(buf.len().saturating_sub(self.longest.saturating_sub(1)));
        (first..buf.len())
            .find(|&start| {
                let tail = &buf[start..];
                if !self.first_bytes[usize::from(tail[0])] {
                    return false;
                }
                self.forms
                    .iter()
                    .any(|form| form.len() > tail.len() && form.starts_with(tail))
            })
            .unwrap_or(buf.len())
    }
}

/// A writer that masks everything written through it; held-back bytes go
/// out on `flush` and when it is dropped.
///
/// ```
/// use executor_core::mask::{MaskedWrite, Masker, Secret};
/// use std::io::Write;
///
/// let masker = Masker::new([&Secret::new("hunter22")]);
/// let mut out = MaskedWrite::new(Vec::new(), masker);
/// write!(out, "pw=hunt").unwrap();
/// write!(out, "er22\n").unwrap();
/// out.flush().unwrap();
/// assert_eq!(out.get_ref(), b"pw=[MASKED]\n");
/// ```
pub struct MaskedWrite<W: Write> {
    inner: W,
    stream: MaskStream,
    out: Vec<u8>,
}

impl<W: Write> MaskedWrite<W> {
    /// Masks what is written and passes it to `inner`.
    pub fn new(inner: W, masker: Masker) -> Self {
        MaskedWrite {
            inner,
            stream: masker.stream(),
            out: Vec::new(),
        }
    }

    /// The writer it passes to.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }
}

impl<W: Write> Write for MaskedWrite<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.out.clear();
        self.stream.push(buf, &mut self.out);
        self.inner.write_all(&self.out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.clear();
        self.stream.flush(&mut self.out);
        self.inner.write_all(&self.out)?;
        self.inner.flush()
    }
}

impl<W: Write> Drop for MaskedWrite<W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests;
