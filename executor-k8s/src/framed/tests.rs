use tokio::io::AsyncReadExt;

use super::*;

/// What `UNFRAME` does in the pod, done here: lengths and bodies.
fn unframe(mut framed: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = framed.iter().position(|&b| b == b'\n').unwrap();
        let n: usize = std::str::from_utf8(&framed[..line_end])
            .unwrap()
            .parse()
            .unwrap();
        framed = &framed[line_end + 1..];
        if n == 0 {
            assert!(framed.is_empty(), "bytes after the end mark");
            return out;
        }
        out.extend_from_slice(&framed[..n]);
        framed = &framed[n..];
    }
}

/// What `PLAIN_OR_FRAMED` hands `cat`, run by this machine's `sh`.
fn through_the_script(stdin: &[u8]) -> (bool, Vec<u8>) {
    through_the_script_with(stdin, &std::env::var("PATH").unwrap())
}

/// [`through_the_script`] with `path` as the script's `PATH`.
fn through_the_script_with(stdin: &[u8], path: &str) -> (bool, Vec<u8>) {
    use std::io::Write;
    let mut child = std::process::Command::new("sh")
        .args(["-c", PLAIN_OR_FRAMED, "sh", "cat"])
        .env("PATH", path)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Written from a thread: the output is read as it comes.
    let (mut pipe, input) = (child.stdin.take().unwrap(), stdin.to_vec());
    let writer = std::thread::spawn(move || pipe.write_all(&input));
    let out = child.wait_with_output().unwrap();
    let _ = writer.join().unwrap();
    (out.status.success(), out.stdout)
}

/// Each frame goes through whole, and no `dd` of the loop holds a
/// block larger than a pipe's 64 KiB: a frame-sized block cost the
/// pod 4 MiB of fresh memory per frame (a `dd` on `PATH` before the
/// real one notes each block size).
#[tokio::test]
async fn frames_are_copied_in_pipe_sized_blocks() {
    let real = std::process::Command::new("sh")
        .args(["-c", "command -v dd"])
        .output()
        .unwrap();
    let real = String::from_utf8(real.stdout).unwrap().trim().to_string();
    let dir = tempfile::tempdir().unwrap();
    let noted = dir.path().join("blocks");
    let fake = dir.path().join("dd");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\nfor a; do case $a in bs=*) echo \"${{a#bs=}}\" >> '{}';; esac; done\nexec '{real}' \"$@\"\n",
            noted.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    for size in [1, 65535, 65536, 65537, 3 * 65536 + 5, FRAME, FRAME + 1] {
        let data: Vec<u8> = (0..size).map(|i| (i % 249) as u8).collect();
        let mut framed = Vec::new();
        Prefixed::new(FRAMED, Framed::new(std::io::Cursor::new(data.clone())))
            .read_to_end(&mut framed)
            .await
            .unwrap();
        let _ = std::fs::remove_file(&noted);
        assert_eq!(
            through_the_script_with(&framed, &path),
            (true, data),
            "size {size}"
        );
        let blocks = std::fs::read_to_string(&noted).unwrap();
        for block in blocks.lines() {
            let block: usize = block.parse().unwrap();
            assert!(
                block <= 65536,
                "a dd of {block} bytes for a stream of {size}"
            );
        }
    }
}

#[tokio::test]
async fn the_first_line_says_how_the_stream_comes() {
    let data: Vec<u8> = (0..300_000).map(|i| (i % 253) as u8).collect();
    let mut plain = Vec::new();
    Prefixed::new(PLAIN, std::io::Cursor::new(data.clone()))
        .read_to_end(&mut plain)
        .await
        .unwrap();
    assert_eq!(through_the_script(&plain), (true, data.clone()));
    let mut framed = Vec::new();
    Prefixed::new(FRAMED, Framed::new(std::io::Cursor::new(data.clone())))
        .read_to_end(&mut framed)
        .await
        .unwrap();
    // Bytes after the end mark are never read: stdin stays open on v4.
    framed.extend_from_slice(b"what comes after");
    assert_eq!(through_the_script(&framed), (true, data));
    assert_eq!(through_the_script(b""), (false, Vec::new()), "no line");
}

/// The line goes out with the stream's first bytes, not alone (a
/// small write Nagle's algorithm would hold), and nothing goes out
/// before the stream has something.
#[tokio::test]
async fn the_line_goes_with_the_first_bytes() {
    use tokio::io::AsyncWriteExt;
    let (mut source, rest) = tokio::io::duplex(1 << 16);
    let mut prefixed = Prefixed::new(PLAIN, rest);
    let mut buf = vec![0u8; 1 << 16];
    use futures_util::FutureExt;
    let early = prefixed.read(&mut buf).now_or_never();
    assert!(early.is_none(), "the line went alone: {early:?}");
    source.write_all(b"tar").await.unwrap();
    let n = prefixed.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"plain\ntar");
}

#[tokio::test]
async fn any_stream_comes_through_whole_and_ends_with_the_mark() {
    for size in [0, 1, 4096, FRAME - 1, FRAME, FRAME + 1, 3 * FRAME + 12345] {
        let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        let mut framed = Vec::new();
        Framed::new(std::io::Cursor::new(data.clone()))
            .read_to_end(&mut framed)
            .await
            .unwrap();
        assert_eq!(unframe(&framed), data, "size {size}");
        assert!(framed.ends_with(b"0\n"));
    }
}

/// A short stream, a checkout of an empty folder, goes in one read
/// with its end mark: two writes in a row would wait for the
/// server's delayed ACK.
#[tokio::test]
async fn the_last_frame_and_the_end_mark_are_one_piece() {
    let mut framed = Framed::new(std::io::Cursor::new(b"abc".to_vec()));
    let mut buf = vec![0u8; 1 << 16];
    let n = framed.read(&mut buf).await.unwrap();
    assert_eq!(&buf[..n], b"3\nabc0\n");
    assert_eq!(framed.read(&mut buf).await.unwrap(), 0);
}

#[tokio::test]
async fn a_failing_source_fails_the_stream_instead_of_ending_it() {
    let failing = tokio_test_reader();
    let mut framed = Vec::new();
    let err = Framed::new(failing)
        .read_to_end(&mut framed)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::Other);
    assert!(!framed.ends_with(b"0\n"));
}

fn tokio_test_reader() -> impl AsyncRead + Send + Unpin + 'static {
    use tokio::io::AsyncReadExt as _;
    (&b"some bytes"[..]).chain(FailingRead)
}

struct FailingRead;
impl AsyncRead for FailingRead {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Err(io::Error::other("the packer failed")))
    }
}
/// An eager frame goes once it holds enough and nothing is queued,
/// though the source has not ended: a compressor's first bytes reach
/// the link at once.
#[tokio::test]
async fn an_eager_frame_goes_before_the_source_ends() {
    use tokio::io::AsyncWriteExt;
    let (mut source, rest) = tokio::io::duplex(1 << 20);
    source.write_all(&vec![7u8; 300 << 10]).await.unwrap();
    let mut framed = Framed::eager(rest);
    let mut line = Vec::new();
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let mut byte = [0u8; 1];
        loop {
            framed.read_exact(&mut byte).await.unwrap();
            if byte[0] == b'\n' {
                break;
            }
            line.push(byte[0]);
        }
    })
    .await;
    assert!(first.is_ok(), "no frame before the source ended");
    let n: usize = String::from_utf8(line).unwrap().parse().unwrap();
    assert!((EAGER_FRAME..FRAME).contains(&n), "{n}");
    drop(source);
}
