//! Compressed transfers where the link is the bottleneck.
//!
//! Over loopback or a Unix socket a transfer runs at memory speed, and
//! compressing it would only cost CPU; across a long link the bytes on the
//! wire are the time, and a source tree is a fifth of its size after
//! `gzip -1`. So a backend measures its engine's round trip when it
//! connects and [`Compression::Auto`] compresses only past
//! [`AUTO_ROUND_TRIP`]. gzip, not a faster codec: Docker's archive API
//! takes it as it is, and busybox and GNU images both have `gzip -d`.

use std::io;
use std::time::Duration;

use async_compression::tokio::bufread::{GzipDecoder, GzipEncoder};
use async_compression::Level;
use tokio::io::{AsyncRead, BufReader};

use super::PackStream;

/// Whether transfers are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// When the engine's round trip is at least [`AUTO_ROUND_TRIP`]: a
    /// link between machines, not loopback.
    #[default]
    Auto,
    /// Always (where the environment can decompress).
    Always,
    /// Never.
    Never,
}

/// The round trip from which [`Compression::Auto`] compresses. Loopback
/// and Unix sockets answer in a fraction of a millisecond; a link between
/// machines seldom answers under 2 ms.
pub const AUTO_ROUND_TRIP: Duration = Duration::from_millis(2);

impl Compression {
    /// Whether to compress over a connection whose measured round trip is
    /// `round_trip` (`None`: not measured, so `Auto` does not).
    ///
    /// ```
    /// use std::time::Duration;
    /// use executor_core::tar::Compression;
    /// assert!(!Compression::Auto.applies(Some(Duration::from_micros(300))));
    /// assert!(Compression::Auto.applies(Some(Duration::from_millis(40))));
    /// assert!(!Compression::Auto.applies(None));
    /// assert!(Compression::Always.applies(None));
    /// assert!(!Compression::Never.applies(Some(Duration::from_millis(40))));
    /// ```
    pub fn applies(self, round_trip: Option<Duration>) -> bool {
        match self {
            Compression::Always => true,
            Compression::Never => false,
            Compression::Auto => round_trip.is_some_and(|r| r >= AUTO_ROUND_TRIP),
        }
    }
}

/// How many times [`least_round_trip`] asks at most.
pub const ROUND_TRIP_SAMPLES: usize = 3;

/// The least of up to [`ROUND_TRIP_SAMPLES`] round trips of `call`,
/// timed one after another, stopping at the first under
/// [`AUTO_ROUND_TRIP`]: one answer slowed by a busy machine (a loopback
/// engine answering in 3 ms while a run starts beside it) must not make
/// every transfer of the run pay for compression. A link's least round
/// trip is its delay; a loopback engine answers under it at once. A call
/// that fails is logged (`what` names it) and not counted; zero (no round
/// trip known) when none was answered.
///
/// ```
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// use std::time::Duration;
/// use executor_core::tar::least_round_trip;
/// let ms = Duration::from_millis;
/// // A link: every answer takes its 50 ms, so all three are asked.
/// let mut asked = 0;
/// let link = least_round_trip("a ping", || {
///     asked += 1;
///     async { tokio::time::sleep(ms(50)).await; Ok::<_, std::io::Error>(()) }
/// })
/// .await;
/// assert_eq!((link, asked), (ms(50), 3));
/// // Nothing answered: no round trip known.
/// let none = least_round_trip("a ping", || async { Err::<(), _>("refused") }).await;
/// assert_eq!(none, Duration::ZERO);
/// # }
/// ```
pub async fn least_round_trip<F, Fut, T, E>(what: &str, mut call: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let mut least: Option<Duration> = None;
    for _ in 0..ROUND_TRIP_SAMPLES {
        let asked = tokio::time::Instant::now();
        let round_trip = match call().await {
            Ok(_) => asked.elapsed(),
            Err(err) => {
                tracing::debug!(%err, "timing the round trip of {what} failed");
                continue;
            }
        };
        let smaller = least.map_or(round_trip, |l| l.min(round_trip));
        least = Some(smaller);
        if smaller < AUTO_ROUND_TRIP {
            break;
        }
    }
    let least = least.unwrap_or_default();
    tracing::debug!(round_trip = ?least, "the round trip of {what}");
    least
}

impl std::str::FromStr for Compression {
    type Err = String;

    /// `auto`, `always` or `never`.
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(Compression::Auto),
            "always" => Ok(Compression::Always),
            "never" => Ok(Compression::Never),
            _ => Err(format!("{text:?} is not auto, always or never")),
        }
    }
}

impl PackStream {
    /// This archive gzip-compressed at the fastest level as it is read,
    /// in a task of its own, so packing, compressing and sending overlap.
    /// A packing error is still the last read's, never a short archive
    /// that looks whole.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// use tokio::io::AsyncReadExt;
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("a.txt"), "hello ".repeat(10_000))?;
    /// let mut gz = Vec::new();
    /// executor_core::tar::pack_dir(dir.path()).gzip().read_to_end(&mut gz).await?;
    /// assert_eq!(&gz[..2], &[0x1f, 0x8b]);
    /// assert!(gz.len() < 2_000);
    /// # Ok(()) }
    /// ```
    pub fn gzip(self) -> PackStream {
        PackStream::from_task(|mut writer| async move {
            let mut encoder = GzipEncoder::with_quality(BufReader::new(self), Level::Fastest);
            tokio::io::copy(&mut encoder, &mut writer).await?;
            tokio::io::AsyncWriteExt::shutdown(&mut writer).await?;
            Ok::<(), io::Error>(())
        })
    }
}

/// `stream` gzip-decompressed as it is read: what an environment sent
/// compressed, for [`unpack_untrusted`](super::unpack_untrusted), whose
/// limits then count the decompressed bytes, so a small stream that
/// inflates without end is refused as it grows, in flat memory. A stream
/// cut short is an error, never an archive that looks whole.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use tokio::io::AsyncReadExt;
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("a.txt"), "hello")?;
/// let mut gz = Vec::new();
/// executor_core::tar::pack_dir(dir.path()).gzip().read_to_end(&mut gz).await?;
/// let mut tar = Vec::new();
/// executor_core::tar::gunzip(&gz[..]).read_to_end(&mut tar).await?;
/// assert!(tar.len() >= 1024);
/// assert!(executor_core::tar::gunzip(&gz[..gz.len() - 4]).read_to_end(&mut Vec::new()).await.is_err());
/// # Ok(()) }
/// ```
pub fn gunzip<R: AsyncRead + Unpin>(stream: R) -> impl AsyncRead + Unpin {
    GzipDecoder::new(BufReader::new(stream))
}

/// `stream`, a tar packed from a folder's `.` (`tar c -C DIR .`), through
/// [`gunzip`] if it begins as gzip does (`1f 8b`), as it is if not: such
/// a tar begins with the entry `./`. So one exec can send a folder
/// compressed where the environment has `gzip` and as it is where not,
/// and the runner need not ask first (an exec, a round trip or more over
/// a link). Either way it is untrusted: the unpacker's limits count what
/// comes out.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use tokio::io::AsyncReadExt;
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("a.txt"), "hello")?;
/// let mut tar = Vec::new();
/// executor_core::tar::pack_dir(dir.path()).read_to_end(&mut tar).await?;
/// let mut gz = Vec::new();
/// executor_core::tar::pack_dir(dir.path()).gzip().read_to_end(&mut gz).await?;
/// for sent in [&tar, &gz] {
///     let mut got = Vec::new();
///     executor_core::tar::gunzip_if_gzipped(&sent[..]).await?.read_to_end(&mut got).await?;
///     assert_eq!(got, tar);
/// }
/// # Ok(()) }
/// ```
///
/// # Errors
/// When the stream's first read fails.
pub async fn gunzip_if_gzipped<'a, R: AsyncRead + Unpin + Send + 'a>(
    mut stream: R,
) -> io::Result<Box<dyn AsyncRead + Unpin + Send + 'a>> {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 2];
    let mut have = 0;
    while have < head.len() {
        match stream.read(&mut head[have..]).await? {
            0 => break,
            n => have += n,
        }
    }
    let start = io::Cursor::new(head).take(have as u64);
    let whole = start.chain(stream);
    Ok(if head[..have] == [0x1f, 0x8b] {
        Box::new(gunzip(whole))
    } else {
        Box::new(whole)
    })
}

/// [`unpack_untrusted`](super::unpack_untrusted) of a stream that an
/// environment packed, gzip-compressed or not ([`gunzip_if_gzipped`]
/// tells which): what a container backend's copy out ends in. The
/// limits count the bytes the stream inflates to, so a small stream that
/// inflates past them is refused as it grows, in flat memory.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use executor_core::tar::{pack_dir, unpack_untrusted_gzipped_or_not, UnpackLimits};
/// use tokio::io::AsyncReadExt;
/// let from = tempfile::tempdir()?;
/// std::fs::write(from.path().join("report.txt"), "all passed")?;
/// let mut gz = Vec::new();
/// pack_dir(from.path()).gzip().read_to_end(&mut gz).await?;
/// let to = tempfile::tempdir()?;
/// unpack_untrusted_gzipped_or_not(&gz[..], to.path(), UnpackLimits::default()).await?;
/// assert_eq!(std::fs::read_to_string(to.path().join("report.txt"))?, "all passed");
/// # Ok(()) }
/// ```
///
/// # Errors
/// As [`unpack_untrusted`](super::unpack_untrusted); a first read that
/// fails is its `Io`.
pub async fn unpack_untrusted_gzipped_or_not<R: AsyncRead + Unpin + Send>(
    stream: R,
    dest: &std::path::Path,
    limits: super::UnpackLimits,
) -> Result<super::UnpackSummary, super::UnpackError> {
    let tar = gunzip_if_gzipped(stream)
        .await
        .map_err(|source| super::UnpackError::Io {
            dest: dest.to_path_buf(),
            source,
        })?;
    super::unpack_untrusted(tar, dest, limits).await
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    /// A folder that cannot be packed (it holds a socket) gives a
    /// compressed stream whose last read is the packer's error, never an
    /// archive that looks whole.
    #[tokio::test]
    async fn a_packing_error_is_the_compressed_streams_last_read() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "a").unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(dir.path().join("s.sock")).unwrap();
        let mut out = Vec::new();
        let err = crate::tar::pack_dir(dir.path())
            .gzip()
            .read_to_end(&mut out)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("s.sock"), "{err}");
    }

    /// What goes in comes out of `gzip -d` byte for byte.
    #[tokio::test]
    async fn gzip_d_gives_back_the_archive() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..50 {
            std::fs::write(
                dir.path().join(format!("f{i}.txt")),
                "line\n".repeat(i * 100),
            )
            .unwrap();
        }
        let mut plain = Vec::new();
        crate::tar::pack_dir(dir.path())
            .read_to_end(&mut plain)
            .await
            .unwrap();
        let mut gz = Vec::new();
        crate::tar::pack_dir(dir.path())
            .gzip()
            .read_to_end(&mut gz)
            .await
            .unwrap();
        let mut decoder = async_compression::tokio::bufread::GzipDecoder::new(&gz[..]);
        let mut back = Vec::new();
        decoder.read_to_end(&mut back).await.unwrap();
        // Two packings of one folder differ only where a clock went in.
        assert_eq!(back.len(), plain.len());
        assert!(
            gz.len() * 5 < plain.len(),
            "{} of {}",
            gz.len(),
            plain.len()
        );
    }
}

#[cfg(test)]
mod bomb {
    use async_compression::tokio::write::GzipEncoder;
    use tokio::io::AsyncWriteExt;

    use crate::tar::{UnpackError, UnpackLimits};

    /// A tar of one entry that declares `size` bytes of zeros, gzipped:
    /// a few hundred KiB that inflate to `size`.
    async fn bomb(size: u64) -> Vec<u8> {
        let mut header = tokio_tar::Header::new_gnu();
        header.set_path("zeros").unwrap();
        header.set_size(size);
        header.set_mode(0o644);
        header.set_cksum();
        let mut gz = GzipEncoder::new(Vec::new());
        gz.write_all(header.as_bytes()).await.unwrap();
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..size >> 20 {
            gz.write_all(&zeros).await.unwrap();
        }
        gz.write_all(&[0u8; 1024]).await.unwrap();
        gz.shutdown().await.unwrap();
        gz.into_inner()
    }

    /// 64 MiB inflated from well under 1 MiB is refused at the limit on
    /// the decompressed bytes, and no file past the limit is left.
    #[tokio::test]
    async fn a_compressed_bomb_is_refused_at_the_limit_on_what_it_inflates_to() {
        let gz = bomb(64 << 20).await;
        assert!(gz.len() < 1 << 20, "{}", gz.len());
        let dest = tempfile::tempdir().unwrap();
        let limits = UnpackLimits {
            max_bytes: 8 << 20,
            ..UnpackLimits::default()
        };
        // Through the function the backends call with a gzipped stream.
        let err = super::unpack_untrusted_gzipped_or_not(&gz[..], dest.path(), limits)
            .await
            .unwrap_err();
        assert!(matches!(err, UnpackError::TooLarge { .. }), "{err}");
        let left = std::fs::metadata(dest.path().join("zeros")).map_or(0, |m| m.len());
        assert!(left <= 8 << 20, "{left}");
    }
}
