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

fn finished(status: StepStatus, exit_code: Option<i32>, failure: Option<Failure>) -> Event {
    Event::StepFinished {
        at: OffsetDateTime::UNIX_EPOCH,
        attempt: 1,
        step: "build".into(),
        status,
        exit_code,
        duration_ms: 1500,
        failure,
        output_dropped_bytes: 0,
        usage: None,
        outputs: Default::default(),
    }
}

#[test]
fn a_step_that_errs_says_why_on_its_end_line() {
    use crate::FailureKind;
    let lost = Failure::new(
        FailureKind::Internal,
        "step build: exit status of step build was lost: its supervisor ended without writing a status",
    );
    let line = finished(StepStatus::Error, None, Some(lost))
        .line()
        .unwrap();
    assert_eq!(
        line,
        "step build: error (no exit code, 1.500s): exit status of step build was lost: its supervisor ended without writing a status",
        "the step is named once"
    );
    // A failure's code says it all.
    let failed = Failure::new(FailureKind::Step, "step build exited 2");
    let line = finished(StepStatus::Failed, Some(2), Some(failed))
        .line()
        .unwrap();
    assert_eq!(line, "step build: failed (exit 2, 1.500s)");
}
