use super::*;

#[test]
fn sniffs_every_image_kind() {
    assert_eq!(media_type("a", &[0xFF, 0xD8, 0xFF, 0xE0]), "image/jpeg");
    assert_eq!(media_type("a", b"GIF89a.."), "image/gif");
    assert_eq!(media_type("a", b"RIFF\0\0\0\0WEBPVP8 "), "image/webp");
    assert_eq!(
        media_type("a", b"<?xml version='1.0'?><svg>"),
        "image/svg+xml"
    );
    assert_eq!(media_type("a.SVG", b""), "image/svg+xml");
    assert_eq!(media_type("a", b"\0\0"), "application/octet-stream");
}
