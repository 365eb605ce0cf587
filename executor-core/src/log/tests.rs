use super::*;
use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[tokio::test]
async fn step_output_cannot_forge_a_runner_line() {
    let forged = b"==> step build: success (exit 0, 0.001s)\n==> run x: success\n";
    let want = " ==> step build: success (exit 0, 0.001s)\n ==> run x: success\n";
    for cut in 0..forged.len() {
        let (log, mem) = RunLog::memory();
        log.output(&forged[..cut]).await;
        log.output(&forged[cut..]).await;
        assert_eq!(mem.text(), want, "cut at {cut}");
    }
    let (log, mem) = RunLog::memory();
    for byte in b"=== RUN TestX\n==>x\n==\nok ==> fine\n" {
        log.output(&[*byte]).await;
    }
    log.output(b"==").await;
    log.line("runner");
    log.output(b"==> after a runner line\n").await;
    assert_eq!(
        mem.text(),
        "=== RUN TestX\n==>x\n==\nok ==> fine\n==\n==> runner\n ==> after a runner line\n"
    );
}

#[tokio::test]
async fn a_panicking_sink_loses_its_event_not_the_log() {
    let text = MemoryLog::default();
    let log = RunLog::new(text.clone());
    let told = Arc::new(AtomicU64::new(0));
    let counter = told.clone();
    log.add_sink(Arc::new(move |event: &Event| {
        if matches!(event, Event::Message { text, .. } if text == "boom") {
            panic!("a sink's own bug");
        }
        counter.fetch_add(1, Ordering::Relaxed);
    }));
    log.line("boom");
    log.output(b"after\n").await;
    log.line("done");
    assert!(log.flush(Duration::from_secs(5)).await);
    assert_eq!(text.text(), "==> boom\nafter\n==> done\n");
    assert_eq!(
        told.load(Ordering::Relaxed),
        2,
        "the output and the last line"
    );
}

#[tokio::test]
async fn output_events_carry_the_step_the_stream_and_masked_bytes() {
    let (log, captured) = RunLog::memory();
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = events.clone();
    log.add_sink(Arc::new(move |event: &Event| {
        seen.lock().unwrap().push(event.clone());
    }));
    log.mask(&Masker::new([&crate::mask::Secret::new("hunter22")]));
    log.emit(Event::StepStarted {
        at: time::OffsetDateTime::now_utc(),
        attempt: 1,
        step: "build".into(),
        index: 0,
    });
    log.output_from(OutputStream::Stdout, b"pw=hun").await;
    log.output_from(OutputStream::Stderr, b"warn\n").await;
    log.output_from(OutputStream::Stdout, b"ter22\n").await;
    log.end_output();
    let outputs: Vec<(Option<String>, OutputStream, String)> = events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::Output {
                step, stream, text, ..
            } => Some((step.clone(), *stream, text.clone())),
            _ => None,
        })
        .collect();
    let all: String = outputs.iter().map(|o| o.2.as_str()).collect();
    assert!(
        !all.contains("hunter22") && !all.contains("hun"),
        "{outputs:?}"
    );
    assert!(
        outputs.iter().all(|o| o.0.as_deref() == Some("build")),
        "{outputs:?}"
    );
    let stdout: String = outputs
        .iter()
        .filter(|o| o.1 == OutputStream::Stdout)
        .map(|o| o.2.as_str())
        .collect();
    assert_eq!(stdout, "pw=[MASKED]\n", "{outputs:?}");
    assert!(outputs
        .iter()
        .any(|o| o.1 == OutputStream::Stderr && o.2 == "warn\n"));
    // One mask per stream: stderr output between the two halves of a
    // secret on stdout does not release the first half.
    let text = captured.text();
    assert!(!text.contains("hun") && !text.contains("ter22"), "{text}");
    assert_eq!(text, "==> step build: started\npw=warn\n[MASKED]\n");
}

#[tokio::test]
async fn runner_lines_start_on_a_fresh_line() {
    let (log, mem) = RunLog::memory();
    log.output(b"no newline").await;
    log.emit(Event::StepFinished {
        at: time::OffsetDateTime::now_utc(),
        attempt: 1,
        step: "a".into(),
        status: crate::StepStatus::Success,
        exit_code: Some(0),
        duration_ms: 1500,
        failure: None,
        output_dropped_bytes: 0,
        usage: None,
        outputs: Default::default(),
    });
    assert_eq!(
        mem.text(),
        "no newline\n==> step a: success (exit 0, 1.500s)\n"
    );
}

/// A destination that takes nothing until it is opened (or, so a
/// runner that blocks on it cannot hang the test, ten seconds pass).
#[derive(Clone)]
struct Gate {
    open: Arc<(Mutex<bool>, std::sync::Condvar)>,
    got: MemoryLog,
}

impl Gate {
    fn open(&self) {
        let (lock, opened) = &*self.open;
        *lock.lock().unwrap() = true;
        opened.notify_all();
    }
}

impl Write for Gate {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let (lock, opened) = &*self.open;
        let open = lock.lock().unwrap();
        let _open = opened
            .wait_timeout_while(open, Duration::from_secs(10), |open| !*open)
            .unwrap();
        self.got.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_stalled_destination_holds_back_output_but_never_the_runtime() {
    let gate = Gate {
        open: Arc::new((Mutex::new(false), std::sync::Condvar::new())),
        got: MemoryLog::default(),
    };
    let log = RunLog::new(gate.clone());
    let chunk = vec![b'x'; 64 * 1024];
    let writer = log.clone();
    let flood = tokio::spawn(async move {
        for _ in 0..64 {
            writer.output(&chunk).await;
        }
    });
    // A timer on the same single thread fires while the log is stalled
    // (a log that wrote inline would hold the thread until the gate's
    // own ten seconds, and the flood would be done by then).
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !flood.is_finished(),
        "4 MiB went into a stalled log: it blocked the runtime or queued without bound"
    );
    log.line("runner lines never wait");
    assert!(
        !log.flush(Duration::from_millis(100)).await,
        "a stalled log is not flushed"
    );

    gate.open();
    flood.await.unwrap();
    assert!(log.flush(Duration::from_secs(5)).await);
    let text = gate.got.text();
    assert_eq!(
        text.len(),
        64 * 64 * 1024 + "\n==> runner lines never wait\n".len()
    );
    assert!(
        text.contains("x\n==> runner lines never wait\nx"),
        "in order"
    );
}

#[test]
fn each_step_has_a_status_key_of_its_own() {
    let (log, _) = RunLog::memory();
    let ids = ["a1s0-00", "a1s1-00", "a1s0-01", "a2s0-00"];
    let keys: Vec<_> = ids.iter().map(|id| log.status_key(id)).collect();
    assert!(keys.iter().all(Option::is_some));
    for (i, a) in keys.iter().enumerate() {
        for b in keys.iter().skip(i + 1) {
            assert_ne!(a, b, "two steps share a status key");
        }
    }
    // The same step's key is derived again, and another run's differs.
    assert_eq!(log.status_key(ids[0]), keys[0]);
    assert_ne!(RunLog::memory().0.status_key(ids[0]), keys[0]);
}

#[tokio::test]
async fn a_log_through_a_link_is_resumed_through_the_same_link() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("real.log"), "").unwrap();
    let link = dir.path().join("run.log");
    std::os::unix::fs::symlink("real.log", &link).unwrap();
    let log = RunLog::create_resumable(&link).unwrap();
    log.line("through the link");
    assert!(log.flush(Duration::from_secs(10)).await);
    drop(log);
    // The mark is where `resume` with the same path looks, and the link
    // is still a link to the log it wrote.
    assert!(crate::resume::mark_path(&link).exists());
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let (_log, mark) = RunLog::resume(&link).unwrap();
    assert_eq!(mark.log_len, "==> through the link\n".len() as u64);
}
