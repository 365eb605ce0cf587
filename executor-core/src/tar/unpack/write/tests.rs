use super::*;

fn writer(root: &Path) -> Writer {
    Writer::new(root, 1000, Arc::new(AtomicBool::new(false)))
}

#[test]
fn a_chain_through_an_unpacked_link_is_followed() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("d")).unwrap();
    std::os::unix::fs::symlink("..", root.path().join("d/up")).unwrap();
    let mut writer = writer(root.path());
    // As text "d/up/.." stays inside; on disk d/up is the root, and
    // its parent is outside.
    assert!(writer
        .resolve_inside(Path::new(""), Path::new("d/up/../x"))
        .is_err());
    let passed = writer
        .resolve_inside(Path::new(""), Path::new("d/up/d"))
        .unwrap();
    let keys = &writer.keys;
    assert_eq!(
        passed,
        vec![keys.of(Path::new("d")), keys.of(Path::new("d/up"))]
    );
}

#[test]
fn loops_are_refused() {
    let root = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("b", root.path().join("a")).unwrap();
    std::os::unix::fs::symlink("a", root.path().join("b")).unwrap();
    let err = writer(root.path())
        .resolve_inside(Path::new(""), Path::new("a"))
        .unwrap_err();
    assert!(err.contains("levels"), "{err}");
}

#[test]
fn a_walk_past_its_cap_is_refused_not_followed() {
    let root = tempfile::tempdir().unwrap();
    let long = "a/../".repeat(MAX_WALK / 2) + "x";
    let err = writer(root.path())
        .resolve_inside(Path::new(""), Path::new(&long))
        .unwrap_err();
    assert!(err.contains("path parts"), "{err}");
    let short = "a/../".repeat(MAX_WALK / 4) + "x";
    assert!(writer(root.path())
        .resolve_inside(Path::new(""), Path::new(&short))
        .is_ok());
}

#[test]
fn below_a_file_or_a_missing_path_nothing_is_looked_at_but_links_made_later_are() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("f"), "").unwrap();
    let mut writer = writer(root.path());
    writer
        .resolve_inside(Path::new(""), Path::new("f/x/y"))
        .unwrap();
    std::fs::create_dir(root.path().join("d")).unwrap();
    writer
        .resolve_inside(Path::new(""), Path::new("d/m/x/y"))
        .unwrap();
    assert!(writer.not_folders.contains(&writer.keys.of(Path::new("f"))));
    assert!(writer
        .not_folders
        .contains(&writer.keys.of(Path::new("d/m"))));
    // A link the writer makes at a once-missing path is seen.
    assert!(writer
        .apply(Op::Symlink {
            rel: "d/m".into(),
            raw: "d/m".into(),
            link: "..".into(),
        })
        .is_ok());
    assert!(writer
        .resolve_inside(Path::new(""), Path::new("d/m/../x"))
        .is_err());
}
