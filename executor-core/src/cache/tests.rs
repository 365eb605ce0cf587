use super::*;

#[test]
fn save_swaps_atomically_and_a_crashed_save_leaves_the_old_copy() {
    let dir = tempfile::tempdir().unwrap();
    let store = CacheStore::new(dir.path(), u64::MAX);
    assert!(store.current("k").unwrap().is_none());
    let save = store.begin_save("k").unwrap();
    std::fs::write(save.folder().join("f"), "one").unwrap();
    store.commit(save).unwrap();
    let (path, guard) = store.current("k").unwrap().unwrap();
    assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "one");
    drop(guard);

    // A save that never commits (a crash, a refused tar) is discarded.
    let save = store.begin_save("k").unwrap();
    std::fs::write(save.folder().join("f"), "half").unwrap();
    drop(save);
    let (path, _g) = store.current("k").unwrap().unwrap();
    assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "one");
}

#[test]
fn a_commit_never_removes_another_save_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let store = CacheStore::new(dir.path(), u64::MAX);
    let slow = store.begin_save("k").unwrap();
    let fast = store.begin_save("k").unwrap();
    std::fs::write(fast.folder().join("f"), "fast").unwrap();
    store.commit(fast).unwrap();
    assert!(
        slow.folder().is_dir(),
        "the commit removed a save in progress"
    );
    std::fs::write(slow.folder().join("f"), "slow").unwrap();
    store.commit(slow).unwrap();
    let (path, _g) = store.current("k").unwrap().unwrap();
    assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "slow");
}

#[test]
fn a_save_is_locked_before_its_folder_exists() {
    let dir = tempfile::tempdir().unwrap();
    let store = CacheStore::new(dir.path(), u64::MAX);
    let save = store.begin_save("k").unwrap();
    let busy = busy_file(save.folder());
    let held = File::open(&busy).unwrap();
    assert!(
        Flock::lock(held, FlockArg::LockExclusiveNonblock).is_err(),
        "the save's folder exists without its lock held"
    );
    // A crash between the mark and the folder leaves only the mark,
    // which the next commit removes.
    let orphan = dir.path().join("k/data-orphan.busy");
    std::fs::write(&orphan, "").unwrap();
    store.commit(save).unwrap();
    assert!(!orphan.exists());
}

#[test]
fn untrusted_saves_are_never_read_by_trusted_runs() {
    let dir = tempfile::tempdir().unwrap();
    let trusted = CacheStore::new(dir.path(), u64::MAX);
    let save = trusted.begin_save("k").unwrap();
    std::fs::write(save.folder().join("f"), "good").unwrap();
    trusted.commit(save).unwrap();

    let untrusted = trusted.namespace(Trust::Untrusted);
    let (path, _g, from) = untrusted.restorable("k").unwrap().unwrap();
    assert_eq!(from, Trust::Trusted);
    assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "good");
    drop(_g);
    let save = untrusted.begin_save("k").unwrap();
    std::fs::write(save.folder().join("f"), "planted").unwrap();
    untrusted.commit(save).unwrap();

    let (path, _g, from) = trusted.restorable("k").unwrap().unwrap();
    assert_eq!(from, Trust::Trusted);
    assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "good");
    let (path, _g2, from) = untrusted.restorable("k").unwrap().unwrap();
    assert_eq!(from, Trust::Untrusted);
    assert_eq!(std::fs::read_to_string(path.join("f")).unwrap(), "planted");
}

#[test]
fn a_read_only_store_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = CacheStore::read_only(dir.path().join("caches"), u64::MAX);
    assert!(store.current("k").unwrap().is_none());
    let save = store.begin_save("k").unwrap();
    store.commit(save).unwrap();
    assert!(!dir.path().join("caches").exists());
}

#[test]
fn keys_are_checked() {
    for bad in ["", "a/b", "..", "a..b", "sp ace", ".untrusted"] {
        assert!(validate_key(bad).is_err(), "{bad}");
    }
    assert!(validate_key("cargo-registry_1.2").is_ok());
}
