//! The link through a local echo and sink: what it delays, what it
//! paces, that it keeps every byte in order, and that it holds a sender
//! back once its window is full.

use std::time::Duration;

use knotless_link::{Link, Shape, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// An upstream that echoes every byte back.
async fn echo() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Bytes that are not all alike, from a fixed seed.
fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn through(link: &Link, data: &[u8]) -> Vec<u8> {
    let stream = TcpStream::connect(link.addr()).await.unwrap();
    let (mut r, mut w) = stream.into_split();
    let data = data.to_vec();
    let sender = tokio::spawn(async move {
        w.write_all(&data).await.unwrap();
        w.shutdown().await.unwrap();
    });
    let mut back = Vec::new();
    r.read_to_end(&mut back).await.unwrap();
    sender.await.unwrap();
    back
}

#[tokio::test]
async fn every_byte_comes_back_once_and_in_order() {
    let link = Link::start(
        Upstream::Tcp(echo().await),
        Shape {
            one_way_delay: Duration::from_millis(2),
            bytes_per_second: Some(200 << 20),
        },
    )
    .await
    .unwrap();
    let data = noise(3 << 20);
    assert!(through(&link, &data).await == data);
    assert_eq!(link.stats().bytes(), (3 << 20, 3 << 20));
    assert_eq!(link.stats().connections(), 1);
}

/// A request and its answer take a round trip at least, and a fresh
/// connection's first one takes the handshake's round trip too.
#[tokio::test]
async fn a_round_trip_takes_twice_the_delay_and_a_first_one_the_handshake_too() {
    let delay = Duration::from_millis(40);
    let link = Link::start(
        Upstream::Tcp(echo().await),
        Shape {
            one_way_delay: delay,
            bytes_per_second: None,
        },
    )
    .await
    .unwrap();
    let began = Instant::now();
    let mut stream = TcpStream::connect(link.addr()).await.unwrap();
    let mut byte = [0u8; 1];
    stream.write_all(b"x").await.unwrap();
    stream.read_exact(&mut byte).await.unwrap();
    assert!(began.elapsed() >= delay * 4, "{:?}", began.elapsed());
    let again = Instant::now();
    stream.write_all(b"y").await.unwrap();
    stream.read_exact(&mut byte).await.unwrap();
    assert_eq!(&byte, b"y");
    assert!(again.elapsed() >= delay * 2, "{:?}", again.elapsed());
}

/// Bytes leave no faster than the cap: 1 MiB at 4 MiB/s takes a quarter
/// of a second each way.
#[tokio::test]
async fn the_cap_paces_each_direction() {
    let link = Link::start(
        Upstream::Tcp(echo().await),
        Shape {
            one_way_delay: Duration::ZERO,
            bytes_per_second: Some(4 << 20),
        },
    )
    .await
    .unwrap();
    let began = Instant::now();
    let data = noise(1 << 20);
    assert!(through(&link, &data).await == data);
    assert!(
        began.elapsed() >= Duration::from_millis(250),
        "{:?}",
        began.elapsed()
    );
}

/// An upstream that reads nothing: the link stops reading once its window
/// is in flight, so the sender is held back as TCP would hold it.
#[tokio::test]
async fn a_reader_that_stops_holds_the_sender_back_at_the_window() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap().to_string();
    let held = tokio::spawn(async move {
        // Accepted, never read.
        let (s, _) = listener.accept().await.unwrap();
        std::future::pending::<()>().await;
        drop(s);
    });
    let shape = Shape {
        one_way_delay: Duration::from_millis(1),
        bytes_per_second: None,
    };
    let link = Link::start(Upstream::Tcp(upstream), shape).await.unwrap();
    let mut stream = TcpStream::connect(link.addr()).await.unwrap();
    let chunk = noise(1 << 20);
    // 64 MiB is far past the window and every socket buffer on the way:
    // the writes stop going through.
    let sent = tokio::time::timeout(Duration::from_secs(2), async {
        for _ in 0..64 {
            stream.write_all(&chunk).await.unwrap();
        }
    })
    .await;
    assert!(
        sent.is_err(),
        "64 MiB went into a reader that reads nothing"
    );
    assert!(
        link.stats().max_in_flight() <= shape.window() as u64,
        "{} in flight, window {}",
        link.stats().max_in_flight(),
        shape.window()
    );
    held.abort();
}
