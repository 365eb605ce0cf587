//! What kind of file an output is, from its name and first bytes.

/// Media type of a file from its first bytes, falling back to its name.
///
/// Images are recognised by content, since outputs become images in the check:
///
/// ```
/// use executor_core::media_type;
/// assert_eq!(media_type("shot.bin", b"\x89PNG\r\n\x1a\n...."), "image/png");
/// assert_eq!(media_type("notes.txt", b"hello"), "text/plain");
/// ```
pub fn media_type(name: &str, head: &[u8]) -> &'static str {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        return "image/png";
    }
    if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return "image/jpeg";
    }
    if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        return "image/gif";
    }
    if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        return "image/webp";
    }
    let text = String::from_utf8_lossy(head);
    let trimmed = text.trim_start();
    if trimmed.starts_with("<svg") || (trimmed.starts_with("<?xml") && text.contains("<svg")) {
        return "image/svg+xml";
    }
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "svg" => "image/svg+xml",
        "txt" | "log" => "text/plain",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "xml" => "application/xml",
        "csv" => "text/csv",
        "md" => "text/markdown",
        "tar" => "application/x-tar",
        "gz" | "tgz" => "application/gzip",
        "zip" => "application/zip",
        "pdf" => "application/pdf",
        _ => "application/octet-stream",
    }
}
