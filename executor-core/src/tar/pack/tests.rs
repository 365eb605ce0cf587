use super::file::SizedReader;
use super::*;

#[tokio::test]
async fn a_file_that_shrank_is_an_error_not_a_short_entry() {
    let mut data = SizedReader {
        inner: &b"abc"[..],
        remaining: 5,
    };
    let err = tokio::io::copy(&mut data, &mut tokio::io::sink())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    assert!(err.to_string().contains("2 bytes missing"), "{err}");
}

#[tokio::test]
async fn a_file_read_whole_ends_cleanly() {
    let mut data = SizedReader {
        inner: &b"abcde"[..],
        remaining: 5,
    };
    let n = tokio::io::copy(&mut data, &mut tokio::io::sink())
        .await
        .unwrap();
    assert_eq!(n, 5);
}
