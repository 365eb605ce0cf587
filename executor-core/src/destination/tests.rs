use std::io::Read;
use std::os::unix::fs::FileTypeExt;

use super::*;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Every name in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn a_regular_file_is_replaced_whole_and_nothing_is_left_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("result.json");
    std::fs::write(&path, "old and longer").unwrap();
    let dest = Destination::of(&path).unwrap();
    assert_eq!(dest, Destination::File(path.clone()));
    dest.replace_with(b"new").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"new");
    assert_eq!(names(dir.path()), ["result.json"]);
}

#[test]
fn a_path_not_there_yet_is_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.json");
    assert!(Destination::of(&path).unwrap().is_file());
    Destination::of(&path).unwrap().replace_with(b"x").unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), b"x");
}

#[test]
fn a_link_to_a_file_is_kept_and_its_file_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target.json");
    std::fs::write(&target, "old").unwrap();
    let link = dir.path().join("link.json");
    std::os::unix::fs::symlink("target.json", &link).unwrap();
    Destination::of(&link)
        .unwrap()
        .replace_with(b"new")
        .unwrap();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(&target).unwrap(), b"new");
    assert_eq!(names(dir.path()), ["link.json", "target.json"]);
}

#[test]
fn a_fifo_being_read_is_written_into_and_stays_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("result.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    // The reader is there first: opened without waiting for a writer.
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let dest = Destination::of(&fifo).unwrap();
    assert_eq!(dest.kind(), "a FIFO");
    assert!(dest.check_writable().is_ok());
    dest.replace_with(b"through the pipe").unwrap();
    let mut text = String::new();
    reader.read_to_string(&mut text).unwrap();
    assert_eq!(text, "through the pipe");
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert_eq!(names(dir.path()), ["result.fifo"]);
}

#[test]
fn a_fifo_nobody_reads_is_an_error_not_a_wait() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("log.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let err = Destination::of(&fifo).unwrap().open().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    assert!(err.to_string().contains("has no reader"), "{err}");
}

#[test]
fn a_device_node_is_written_into_and_stays_a_device() {
    if !is_root() {
        eprintln!("not root: mknod needs root; the FIFO and socket cases cover a non-root run");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let null = dir.path().join("null");
    // A null device of the test's own, never the host's /dev/null.
    nix::sys::stat::mknod(
        &null,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    let dest = Destination::of(&null).unwrap();
    assert_eq!(dest.kind(), "a character device");
    assert!(dest.check_writable().is_ok());
    dest.replace_with(b"{}\n").unwrap();
    dest.open().unwrap().write_all(b"a log line\n").unwrap();
    let meta = std::fs::metadata(&null).unwrap();
    assert!(meta.file_type().is_char_device());
    assert_eq!(meta.len(), 0);
    assert_eq!(names(dir.path()), ["null"]);
}

#[test]
fn a_socket_is_written_into() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let dest = Destination::of(&path).unwrap();
    assert_eq!(dest.kind(), "a socket");
    dest.replace_with(b"over the socket").unwrap();
    let (mut conn, _) = listener.accept().unwrap();
    let mut text = String::new();
    conn.read_to_string(&mut text).unwrap();
    assert_eq!(text, "over the socket");
    assert!(std::fs::metadata(&path).unwrap().file_type().is_socket());
}

#[test]
fn this_process_s_own_descriptors_are_named_not_reopened() {
    assert_eq!(
        Destination::of(Path::new("/dev/stdout")).unwrap(),
        Destination::Descriptor {
            path: "/dev/stdout".into(),
            fd: 1
        }
    );
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::File::create(dir.path().join("out")).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    let named = PathBuf::from(format!("/proc/self/fd/{fd}"));
    let dest = Destination::of(&named).unwrap();
    assert_eq!(dest, Destination::Descriptor { path: named, fd });
    // Written at the descriptor's own offset, twice: nothing is cut.
    dest.replace_with(b"one ").unwrap();
    dest.replace_with(b"two").unwrap();
    drop(file);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).unwrap(),
        "one two"
    );
    assert!(Destination::of(Path::new("/dev/fd/987654"))
        .unwrap()
        .check_writable()
        .is_err());
}

#[test]
fn a_folder_is_refused_and_a_missing_folder_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = Destination::of(dir.path()).unwrap_err();
    assert!(err.to_string().contains("is a folder"), "{err}");
    let missing = dir.path().join("no/such/result.json");
    let msg = Destination::of(&missing)
        .unwrap()
        .check_writable()
        .unwrap_err();
    assert!(msg.contains("does not exist"), "{msg}");
    assert!(!dir.path().join("no").exists());
}
