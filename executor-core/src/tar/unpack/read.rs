//! Parsing the untrusted stream: headers one at a time, extension headers
//! read by this code under a cap (never by the tar library at their
//! declared size), and the stream read to its true end.

use std::io;
use std::path::{Component, Path, PathBuf};

use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_tar::{Archive, EntryType};

use super::{Batcher, Op, ReadEnd, UnpackError, UnpackLimits, CHUNK, MAX_EXTENSION_BYTES};

/// Extension headers waiting for the entry they describe.
#[derive(Default)]
struct Pending {
    path: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
}

/// Counts the bytes read from the stream against `max_bytes`.
struct Budget {
    used: u64,
    max: u64,
}

impl Budget {
    fn take(&mut self, n: u64) -> Result<(), UnpackError> {
        self.used = self.used.saturating_add(n);
        if self.used > self.max {
            return Err(UnpackError::TooLarge { limit: self.max });
        }
        Ok(())
    }
}

/// Parses the stream, checks each entry lexically and against the limits,
/// and queues what to write (or what was refused) for the writer.
pub(super) async fn read_entries<R: AsyncRead + Unpin>(
    reader: R,
    dest: &Path,
    limits: UnpackLimits,
    ops: &mut Batcher,
) -> Result<(), ReadEnd> {
    let io_err = |source: io::Error| UnpackError::Io {
        dest: dest.to_path_buf(),
        source,
    };
    let mut archive = Archive::new(reader);
    let mut budget = Budget {
        used: 0,
        max: limits.max_bytes,
    };
    {
        // Raw entries: the library hands over every header as it is, so
        // long names and PAX records are read here, capped, and no header
        // is interpreted by code that trusts its declared size.
        let mut entries = archive.entries_raw().map_err(io_err)?;
        let mut pending = Pending::default();
        let mut count = 0u64;
        while let Some(entry) = entries.next().await {
            let mut entry = entry.map_err(io_err)?;
            count += 1;
            if count > limits.max_entries {
                return Err(UnpackError::TooManyEntries {
                    limit: limits.max_entries,
                }
                .into());
            }
            let header_path = entry.header().path_bytes().into_owned();
            let shown = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
            let kind = entry.header().entry_type();
            let size = entry.header().raw_entry_size().map_err(io_err)?;
            if let Some(name) = extension_kind(kind) {
                if size > MAX_EXTENSION_BYTES {
                    return Err(UnpackError::ExtensionTooLarge {
                        kind: name,
                        size,
                        limit: MAX_EXTENSION_BYTES,
                    }
                    .into());
                }
                budget.take(size)?;
                let mut data = Vec::with_capacity(size as usize);
                (&mut entry)
                    .take(size)
                    .read_to_end(&mut data)
                    .await
                    .map_err(io_err)?;
                match kind {
                    EntryType::GNULongName => pending.path = Some(trim_nul(data)),
                    EntryType::GNULongLink => pending.link = Some(trim_nul(data)),
                    EntryType::XHeader => apply_pax(&data, &mut pending, &shown(&header_path))?,
                    // Global records describe nothing this unpacker applies.
                    _ => {}
                }
                continue;
            }
            let raw_bytes = pending.path.take().unwrap_or(header_path);
            let link_bytes = match pending.link.take() {
                Some(link) => Some(link),
                None => entry.header().link_name_bytes().map(|l| l.into_owned()),
            };
            let raw = shown(&raw_bytes);
            let refuse = |reason: String| Op::Refused {
                raw: raw.clone(),
                reason,
            };
            // No host path can hold a NUL; it would fail the write, and
            // its lossy rendering would hide it.
            if raw_bytes.contains(&0) || link_bytes.as_ref().is_some_and(|l| l.contains(&0)) {
                ops.send(refuse("the name holds a NUL byte".into())).await?;
                continue;
            }
            let forbidden = |kind: &'static str| UnpackError::Forbidden {
                entry: raw.clone(),
                kind,
            };
            match kind {
                EntryType::GNUSparse => return Err(forbidden("sparse file").into()),
                EntryType::Other(_) | EntryType::SolarisXHeader => {
                    return Err(forbidden("unknown").into())
                }
                _ => {}
            }
            let rel = match relative_path(&raw, limits.strip_components) {
                Ok(Some(rel)) => rel,
                Ok(None) => {
                    ops.send(Op::Root).await?;
                    continue;
                }
                Err(reason) => {
                    ops.send(refuse(reason.to_string())).await?;
                    continue;
                }
            };
            // From here on an entry is named as it lands in the destination
            // (after `strip_components`), as the result lists it.
            let raw = rel.display().to_string();
            let refuse = |reason: String| Op::Refused {
                raw: raw.clone(),
                reason,
            };
            match kind {
                EntryType::Char | EntryType::Block => {
                    ops.send(refuse("device entries are not allowed".into()))
                        .await?
                }
                EntryType::Fifo => {
                    ops.send(refuse("fifo entries are not allowed".into()))
                        .await?
                }
                EntryType::Directory => ops.send(Op::Dir { rel, raw }).await?,
                EntryType::Regular | EntryType::Continuous => {
                    budget.take(size)?;
                    let mode = entry.header().mode().map_err(|source| UnpackError::Io {
                        dest: dest.to_path_buf(),
                        source: io::Error::new(source.kind(), format!("{raw}: {source}")),
                    })? & 0o777;
                    ops.send(Op::File {
                        rel,
                        raw: raw.clone(),
                        mode,
                    })
                    .await?;
                    copy_contents(&mut entry, size, ops, dest, &raw).await?;
                    ops.send(Op::EndFile).await?;
                }
                EntryType::Symlink => {
                    let Some(link) = link_bytes.filter(|l| !l.is_empty()) else {
                        ops.send(refuse("symlink without a target".into())).await?;
                        continue;
                    };
                    let link = PathBuf::from(shown(&link));
                    if link.is_absolute() {
                        ops.send(refuse(format!(
                            "symlink to absolute path {}",
                            link.display()
                        )))
                        .await?;
                        continue;
                    }
                    let parent = rel.parent().map(Path::to_path_buf).unwrap_or_default();
                    if normalize(&parent.join(&link)).is_none() {
                        ops.send(refuse(format!(
                            "symlink to {} points outside the destination",
                            link.display()
                        )))
                        .await?;
                        continue;
                    }
                    ops.send(Op::Symlink { rel, raw, link }).await?;
                }
                EntryType::Link => {
                    let Some(link) = link_bytes.filter(|l| !l.is_empty()) else {
                        ops.send(refuse("hard link without a target".into()))
                            .await?;
                        continue;
                    };
                    let target = shown(&link);
                    match relative_path(&target, limits.strip_components) {
                        Ok(Some(source)) => {
                            ops.send(Op::HardLink {
                                rel,
                                raw,
                                source,
                                shown: target,
                            })
                            .await?
                        }
                        Ok(None) => {
                            ops.send(refuse("hard link to the destination itself".into()))
                                .await?
                        }
                        Err(reason) => {
                            ops.send(refuse(format!("hard link target: {reason}")))
                                .await?
                        }
                    }
                }
                _ => return Err(forbidden("unknown").into()),
            }
        }
        if pending.path.is_some() || pending.link.is_some() {
            return Err(UnpackError::Io {
                dest: dest.to_path_buf(),
                source: io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "an extension header was not followed by an entry",
                ),
            }
            .into());
        }
    }
    drain(archive, &mut budget, dest).await
}

/// Reads past the end-of-archive marker to the stream's true end, so an
/// error of its producer (a packer that failed, an exec that broke) is
/// seen, not hidden behind a well-formed but short archive. Trailing
/// bytes count against the budget.
async fn drain<R: AsyncRead + Unpin>(
    archive: Archive<R>,
    budget: &mut Budget,
    dest: &Path,
) -> Result<(), ReadEnd> {
    let Ok(mut reader) = archive.into_inner() else {
        return Err(UnpackError::Io {
            dest: dest.to_path_buf(),
            source: io::Error::other("the tar reader is still in use after its last entry"),
        }
        .into());
    };
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = reader
            .read(&mut buf)
            .await
            .map_err(|source| UnpackError::Io {
                dest: dest.to_path_buf(),
                source,
            })?;
        if n == 0 {
            return Ok(());
        }
        budget.take(n as u64)?;
    }
}

/// Streams one file's contents to the writer in [`CHUNK`]s.
async fn copy_contents<R: AsyncRead + Unpin>(
    entry: &mut R,
    size: u64,
    ops: &mut Batcher,
    dest: &Path,
    raw: &str,
) -> Result<(), ReadEnd> {
    // No more than the header promised, even if the reader misbehaves.
    let mut left = size;
    while left > 0 {
        let want = usize::try_from(left).map_or(CHUNK, |l| l.min(CHUNK));
        let mut chunk = vec![0u8; want];
        let mut filled = 0;
        while filled < want {
            let n = entry
                .read(&mut chunk[filled..])
                .await
                .map_err(|source| UnpackError::Io {
                    dest: dest.to_path_buf(),
                    source: io::Error::new(source.kind(), format!("{raw}: {source}")),
                })?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        chunk.truncate(filled);
        left -= filled as u64;
        if filled > 0 {
            ops.send(Op::Data(chunk)).await?;
        }
        if filled < want {
            return Err(UnpackError::Io {
                dest: dest.to_path_buf(),
                source: io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{raw}: the stream ended inside the file ({left} bytes missing)"),
                ),
            }
            .into());
        }
    }
    Ok(())
}

/// The name of an extension header kind, or `None` for an entry.
fn extension_kind(kind: EntryType) -> Option<&'static str> {
    match kind {
        EntryType::GNULongName => Some("GNU long name"),
        EntryType::GNULongLink => Some("GNU long link"),
        EntryType::XHeader => Some("PAX"),
        EntryType::XGlobalHeader => Some("PAX global"),
        _ => None,
    }
}

fn trim_nul(mut bytes: Vec<u8>) -> Vec<u8> {
    if let Some(nul) = bytes.iter().position(|b| *b == 0) {
        bytes.truncate(nul);
    }
    bytes
}

/// Takes `path` and `linkpath` from a PAX record set. A `size` record (or
/// any sparse one) would make the next entry's length differ from its
/// header's, which this reader does not follow: refused, never guessed.
fn apply_pax(data: &[u8], pending: &mut Pending, entry: &str) -> Result<(), ReadEnd> {
    let malformed = |why: &str| UnpackError::Io {
        dest: PathBuf::new(),
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("PAX header before {entry:?}: {why}"),
        ),
    };
    for record in pax_records(data) {
        let (key, value) = record.ok_or_else(|| malformed("malformed record"))?;
        match key {
            b"path" => pending.path = Some(value.to_vec()),
            b"linkpath" => pending.link = Some(value.to_vec()),
            b"size" => {
                return Err(UnpackError::Forbidden {
                    entry: entry.to_string(),
                    kind: "PAX size (files over 8 GiB)",
                }
                .into())
            }
            key if key.starts_with(b"GNU.sparse.") => {
                return Err(UnpackError::Forbidden {
                    entry: entry.to_string(),
                    kind: "sparse file",
                }
                .into())
            }
            _ => {}
        }
    }
    Ok(())
}

/// The records of a PAX header, `LEN KEY=VALUE\n` each; `None` for a
/// malformed one (and nothing after it).
fn pax_records(mut data: &[u8]) -> impl Iterator<Item = Option<(&[u8], &[u8])>> {
    std::iter::from_fn(move || {
        if data.is_empty() {
            return None;
        }
        let record = (|| {
            let space = data.iter().position(|b| *b == b' ')?;
            let len: usize = std::str::from_utf8(&data[..space]).ok()?.parse().ok()?;
            let record = data.get(space + 1..len)?;
            let record = record.strip_suffix(b"\n")?;
            let eq = record.iter().position(|b| *b == b'=')?;
            let (key, value) = (&record[..eq], &record[eq + 1..]);
            data = &data[len..];
            Some((key, value))
        })();
        if record.is_none() {
            data = &[];
        }
        Some(record)
    })
}

/// The entry's path relative to the destination; `Ok(None)` for the root itself.
fn relative_path(raw: &str, strip_components: usize) -> Result<Option<PathBuf>, &'static str> {
    let mut rel = PathBuf::new();
    for component in Path::new(raw).components() {
        match component {
            Component::Normal(part) => rel.push(part),
            Component::CurDir => {}
            Component::ParentDir => return Err("path contains `..`"),
            Component::RootDir | Component::Prefix(_) => return Err("absolute path"),
        }
    }
    let stripped: PathBuf = rel.components().skip(strip_components).collect();
    Ok((!stripped.as_os_str().is_empty()).then_some(stripped))
}

/// Lexically resolves `..` in a relative path; `None` if it climbs above its root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}
