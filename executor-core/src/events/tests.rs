use super::json_lines::complete_utf8;
use super::*;

fn texts(out: &[u8]) -> Vec<String> {
    String::from_utf8(out.to_vec())
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn json_lines_join_a_character_split_across_pieces() {
    let sink = JsonLines::new(Vec::new());
    let word = "grüße €".as_bytes();
    for cut in [3, 4, 8] {
        sink.event(&Event::output(None, OutputStream::Stdout, &word[..cut]));
        sink.event(&Event::output(None, OutputStream::Stdout, &word[cut..]));
    }
    let got = texts(&sink.into_inner());
    assert_eq!(got.concat(), "grüße €".repeat(3));
    assert!(got.iter().all(|t| !t.contains('\u{fffd}')), "{got:?}");
}

#[test]
fn json_lines_keep_each_streams_tail_apart() {
    let sink = JsonLines::new(Vec::new());
    let euro = "€".as_bytes();
    sink.event(&Event::output(None, OutputStream::Stdout, &euro[..1]));
    sink.event(&Event::output(None, OutputStream::Stderr, b"err\n"));
    sink.event(&Event::output(None, OutputStream::Stdout, &euro[1..]));
    assert_eq!(texts(&sink.into_inner()), ["err\n", "€"]);
}

#[test]
fn invalid_bytes_are_shown_not_held() {
    assert_eq!(complete_utf8(b"a\xffb"), 3);
    assert_eq!(complete_utf8(b"a\xff\xe2\x82"), 2);
    assert_eq!(complete_utf8(b""), 0);
}
