use base64::Engine as _;

use super::*;

const VALUE: &str = "tok-3f9a/Z+q";

fn masker() -> Masker {
    Masker::new([&Secret::new(VALUE), &Secret::new("second-secret")])
}

fn streamed(chunks: &[&[u8]]) -> String {
    let mut stream = masker().stream();
    let mut out = Vec::new();
    for chunk in chunks {
        stream.push(chunk, &mut out);
        assert!(
            stream.pending.len() < masker().inner.as_ref().map_or(0, |f| f.longest),
            "holds back less than the longest form"
        );
    }
    stream.flush(&mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn plain_values_are_masked_anywhere_in_the_text() {
    let m = masker();
    assert_eq!(
        m.mask_str(&format!("a{VALUE}b second-secret")),
        "a[MASKED]b [MASKED]"
    );
    assert_eq!(m.mask_str("nothing here"), "nothing here");
}

#[test]
fn encoded_forms_are_masked() {
    // `?` and `>` make base64's `/` and `+`, where the two alphabets
    // differ: each of them is a form of its own.
    let value = "tok-???>>>q";
    let m = Masker::new([&Secret::new(value)]);
    let b64 = base64::engine::general_purpose::STANDARD.encode(value);
    let url = base64::engine::general_purpose::URL_SAFE.encode(value);
    assert_ne!(b64, url);
    for form in [
        b64,
        url,
        hex::encode(value),
        hex::encode_upper(value),
        "tok-%3F%3F%3F%3E%3E%3Eq".to_string(),
    ] {
        let masked = m.mask_str(&form).into_owned();
        assert!(masked.contains(MASK), "{form} -> {masked}");
        assert!(masked.len() <= MASK.len() + 2, "{form} -> {masked}");
    }
    let masked = masker().mask_str("tok-3f9a%2FZ%2Bq").into_owned();
    assert_eq!(masked, MASK);
}

#[test]
fn a_value_inside_a_larger_base64_blob_is_masked_at_every_alignment() {
    let m = masker();
    for prefix in ["", "a", "ab", "abc", "abcd"] {
        let blob = format!("{prefix}user:{VALUE}@host");
        let encoded = base64::engine::general_purpose::STANDARD.encode(&blob);
        let masked = m.mask_str(&encoded).into_owned();
        assert!(masked.contains(MASK), "{blob:?} -> {encoded} -> {masked}");
    }
}

#[test]
fn a_value_that_ends_a_base64_blob_leaves_no_tail_after_the_mask() {
    let m = masker();
    for prefix in ["", "a", "ab", "abc"] {
        let blob = format!("{prefix}user:{VALUE}");
        for engine in [
            &base64::engine::general_purpose::STANDARD,
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        ] {
            let encoded = engine.encode(&blob);
            let masked = m.mask_str(&encoded).into_owned();
            assert!(masked.ends_with(MASK), "{blob:?} -> {encoded} -> {masked}");
        }
    }
}

#[test]
fn a_url_path_form_that_keeps_its_slashes_is_masked() {
    // As Python's urllib.parse.quote writes it: `/` stays, `+` goes.
    let m = masker();
    let masked = m.mask_str("url:tok-3f9a/Z%2Bq.").into_owned();
    assert_eq!(masked, format!("url:{MASK}."));
}

#[test]
fn a_multi_line_value_is_masked_line_by_line() {
    let key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkq\r\nhkiG9w0BAQEFAASC\n-----END KEY-----\n";
    let m = Masker::new([&Secret::new(key)]);
    let printed = m.mask_str("MIIEvQIBADANBgkq\r\nhkiG9w0BAQEFAASC\n");
    assert_eq!(printed, "[MASKED]\r\n[MASKED]\n");
}

#[test]
fn values_split_across_chunks_are_masked() {
    let text = format!("x{VALUE}y\nsecond-secret\n");
    let bytes = text.as_bytes();
    let want = "x[MASKED]y\n[MASKED]\n";
    for cut in 0..bytes.len() {
        assert_eq!(streamed(&[&bytes[..cut], &bytes[cut..]]), want, "cut {cut}");
    }
    let one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
    assert_eq!(streamed(&one_by_one), want);
}

#[test]
fn glued_and_repeated_values_are_each_masked() {
    assert_eq!(
        streamed(&[format!("{VALUE}{VALUE}second-secret{VALUE}").as_bytes()]),
        "[MASKED][MASKED][MASKED][MASKED]"
    );
}

#[test]
fn a_prefix_that_never_completes_comes_out_unchanged() {
    assert_eq!(streamed(&[b"tok-3f9", b"!"]), "tok-3f9!");
    assert_eq!(streamed(&[b"tok-3f9"]), "tok-3f9");
}

#[test]
fn a_line_is_never_held_back_once_it_ends() {
    let mut stream = masker().stream();
    let mut out = Vec::new();
    stream.push(b"done: tok-3f\n", &mut out);
    assert_eq!(out, b"done: tok-3f\n");
    assert!(!stream.is_holding());
    stream.push(b"next tok-3f", &mut out);
    assert_eq!(out, b"done: tok-3f\nnext ");
    assert!(stream.is_holding());
}

#[test]
fn a_longer_value_sharing_a_prefix_with_a_shorter_one_is_masked_whole() {
    let m = Masker::new([&Secret::new("abcd"), &Secret::new("abcdefgh")]);
    let mut stream = m.stream();
    let mut out = Vec::new();
    stream.push(b"<abcd", &mut out);
    stream.push(b"efgh>", &mut out);
    stream.flush(&mut out);
    assert_eq!(out, b"<[MASKED]>");
}

#[test]
fn short_values_and_no_values_mask_nothing() {
    let m = Masker::new([&Secret::new("abc")]);
    assert!(m.is_empty());
    assert_eq!(m.mask_str("abc"), "abc");
    let mut stream = m.stream();
    let mut out = Vec::new();
    stream.push(b"abc", &mut out);
    assert_eq!(out, b"abc");
}

#[test]
fn every_url_encoders_form_is_masked() {
    // Bytes each encoder writes its own way: a space, `/`, `!'()*`, `+`.
    let value = "p a/s!s'(w)*o+rd";
    let m = Masker::new([&Secret::new(value)]);
    for form in [
        // encodeURIComponent
        "p%20a%2Fs!s'(w)*o%2Brd",
        // urllib.parse.quote_plus
        "p+a%2Fs%21s%27%28w%29%2Ao%2Brd",
        // urllib.parse.quote, which keeps `/`
        "p%20a/s%21s%27%28w%29%2Ao%2Brd",
        // RFC 3986 components, in lower case
        "p%20a%2fs%21s%27%28w%29%2ao%2brd",
        // quote_plus in lower case
        "p+a%2fs%21s%27%28w%29%2ao%2brd",
    ] {
        let masked = m.mask_str(&format!("<{form}>")).into_owned();
        assert_eq!(masked, format!("<{MASK}>"), "{form}");
    }
}
