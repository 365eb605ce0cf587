//! Pack round trips and hostile archives against the untrusted unpacker.

use executor_core::tar::{pack_dir, unpack_untrusted, UnpackError, UnpackLimits};
use futures_util::StreamExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use tokio::io::AsyncReadExt;

mod packing;
mod refusals;
mod unpacking;

/// One raw ustar header + data, built by hand so tests can say anything a
/// hostile archive could.
fn raw_entry(name: &str, kind: u8, link: &str, data: &[u8]) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..107].copy_from_slice(b"0000644");
    h[108..115].copy_from_slice(b"0000000");
    h[116..123].copy_from_slice(b"0000000");
    let size = format!("{:011o}", data.len());
    h[124..135].copy_from_slice(size.as_bytes());
    h[136..147].copy_from_slice(b"00000000000");
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

fn archive(entries: &[Vec<u8>]) -> Vec<u8> {
    let mut out: Vec<u8> = entries.concat();
    out.extend_from_slice(&[0u8; 1024]);
    out
}

async fn unpack(bytes: Vec<u8>, dest: &Path) -> Result<(), UnpackError> {
    unpack_untrusted(&bytes[..], dest, UnpackLimits::default())
        .await
        .map(|_| ())
}

/// Every file under `root`, to show nothing was written outside `dest`.
fn tree(root: &Path) -> Vec<String> {
    let mut all: Vec<String> = walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| e.path().strip_prefix(root).unwrap().display().to_string())
        .collect();
    all.sort();
    all
}
