//! The forms a secret value is masked in: as it is, each line of a
//! multi-line value, base64 at every alignment in both alphabets, hex,
//! and each URL encoder's percent-encoding.

use super::MIN_SECRET_LEN;

/// The forms a value is masked in. None contains a newline, so a held
/// tail never spans one.
pub(super) fn forms_of(value: &str) -> Vec<Vec<u8>> {
    let mut forms = Vec::new();
    let mut add = |form: Vec<u8>| {
        if form.len() >= MIN_SECRET_LEN && !form.contains(&b'\n') {
            forms.push(form);
        }
    };
    if value.contains('\n') {
        // A key file: each of its lines, as a step printing it line by
        // line (or a tool quoting one line) would show it.
        for line in value.lines() {
            add(line.trim_end_matches('\r').as_bytes().to_vec());
        }
    } else {
        add(value.as_bytes().to_vec());
    }
    let bytes = value.as_bytes();
    for engine in [
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        for align in 0..3usize {
            add(base64_core(engine, bytes, align));
        }
    }
    // A value that ends the blob also decides the blob's last character
    // (its bits past the value are zero) and the padding after it.
    for engine in [
        &base64::engine::general_purpose::STANDARD,
        &base64::engine::general_purpose::URL_SAFE,
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        for align in 0..3usize {
            add(base64_end(engine, bytes, align));
        }
    }
    add(hex::encode(bytes).into_bytes());
    add(hex::encode_upper(bytes).into_bytes());
    // Each URL encoder a step may pass a value through, with escapes in
    // either case (`%2F`, `%2f`): RFC 3986 components, paths that keep
    // `/` (`urllib.parse.quote`), `encodeURIComponent` (keeps `!'()*`),
    // and form encoding (`quote_plus`: a space is `+`).
    for style in [
        UrlStyle::COMPONENT,
        UrlStyle::PATH,
        UrlStyle::URI_COMPONENT,
        UrlStyle::FORM,
    ] {
        for lower in [false, true] {
            add(url_encode(bytes, style, lower));
        }
    }
    forms.sort();
    forms.dedup();
    forms
}

/// How one URL encoder writes a value: the bytes it leaves as they are
/// besides RFC 3986's unreserved ones, and whether a space is `+`.
#[derive(Clone, Copy)]
struct UrlStyle {
    keep: &'static [u8],
    plus_for_space: bool,
}

impl UrlStyle {
    const COMPONENT: UrlStyle = UrlStyle {
        keep: b"",
        plus_for_space: false,
    };
    const PATH: UrlStyle = UrlStyle {
        keep: b"/",
        plus_for_space: false,
    };
    const URI_COMPONENT: UrlStyle = UrlStyle {
        keep: b"!'()*",
        plus_for_space: false,
    };
    const FORM: UrlStyle = UrlStyle {
        keep: b"",
        plus_for_space: true,
    };
}

/// The base64 characters that depend only on `value` when it starts
/// `align` bytes into a larger encoded blob.
fn base64_core(engine: &impl base64::Engine, value: &[u8], align: usize) -> Vec<u8> {
    let mut padded = vec![0u8; align];
    padded.extend_from_slice(value);
    let encoded = engine.encode(&padded).into_bytes();
    // Character i covers bits [6i, 6i + 6): keep those inside the value's bits.
    let first = (8 * align).div_ceil(6);
    let end = (8 * padded.len()) / 6;
    encoded
        .get(first..end)
        .map(<[u8]>::to_vec)
        .unwrap_or_default()
}

/// The base64 characters from the first that depends only on `value` to
/// the blob's end, padding included, when `value` ends a blob it starts
/// `align` bytes into.
fn base64_end(engine: &impl base64::Engine, value: &[u8], align: usize) -> Vec<u8> {
    let mut padded = vec![0u8; align];
    padded.extend_from_slice(value);
    let encoded = engine.encode(&padded).into_bytes();
    let first = (8 * align).div_ceil(6);
    encoded.get(first..).map(<[u8]>::to_vec).unwrap_or_default()
}

/// `value` percent-encoded as `style` writes it: every byte but RFC
/// 3986's unreserved ones and the style's own escaped, in upper or
/// `lower` case hex.
fn url_encode(value: &[u8], style: UrlStyle, lower: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    for &b in value {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || style.keep.contains(&b) {
            out.push(b);
        } else if b == b' ' && style.plus_for_space {
            out.push(b'+');
        } else if lower {
            out.extend_from_slice(format!("%{b:02x}").as_bytes());
        } else {
            out.extend_from_slice(format!("%{b:02X}").as_bytes());
        }
    }
    out
}
