//! Files in and out: checkout, shared steps, outputs.

use std::os::unix::fs::{symlink, PermissionsExt};

use executor_core::{RunStatus, Step, StepStatus};

use crate::fixture::{assert_nothing_left, run_to_end, write, Fixture};
use crate::Backend;

/// The checkout arrives intact in `WORK_DIR`: contents, exec bits,
/// symlinks, empty folders and odd names, and steps start there.
pub async fn checkout_arrives_intact(backend: &dyn Backend) {
    let fx = Fixture::new("checkout");
    let c = fx.checkout();
    write(&c, "README", "hello checkout\n");
    write(&c, "bin/run.sh", "#!/bin/sh\necho ran-from-checkout\n");
    std::fs::set_permissions(c.join("bin/run.sh"), std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
    write(&c, "dir with space/ünïcødé file.txt", "odd name\n");
    std::fs::create_dir_all(c.join("empty/nested")).unwrap_or_else(|e| panic!("{e}"));
    symlink("bin/run.sh", c.join("link")).unwrap_or_else(|e| panic!("{e}"));
    let script = r#"
        [ "$(pwd)" = "$WORK_DIR" ]
        [ "$(cat README)" = "hello checkout" ]
        [ -x bin/run.sh ]
        [ ! -x README ]
        [ "$(cat 'dir with space/ünïcødé file.txt')" = "odd name" ]
        [ -d empty/nested ]
        [ -L link ]
        [ "$(readlink link)" = bin/run.sh ]
        ./link
    "#;
    let spec = fx
        .spec(backend, "checkout")
        .step(Step::new("inspect", script));
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(
        result.status,
        RunStatus::Success,
        "{}\n{}",
        result.to_json(),
        log.text()
    );
    assert!(log.text().contains("ran-from-checkout"), "{}", log.text());
    assert_nothing_left(backend, &fx.runner).await;
}

/// The shared steps folder arrives in `STEPS_DIR`.
pub async fn steps_dir_arrives(backend: &dyn Backend) {
    let fx = Fixture::new("stepsdir");
    write(&fx.steps(), "lib/greet.sh", "echo \"greetings from $1\"\n");
    let spec = fx
        .spec(backend, "steps-dir")
        .step(Step::new("use", "sh \"$STEPS_DIR/lib/greet.sh\" steps"));
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    assert!(
        log.text().contains("greetings from steps"),
        "{}",
        log.text()
    );
    assert_nothing_left(backend, &fx.runner).await;
}

/// `OUTPUTS_DIR` comes back to the host: binary and nested files, with
/// sizes, hashes and image media types in the result.
pub async fn outputs_come_back(backend: &dyn Backend) {
    let fx = Fixture::new("outputs");
    let script = r#"
        mkdir -p "$OUTPUTS_DIR/nested/deeper"
        printf '\211PNG\r\n\032\n\000\000\000\rIHDR' > "$OUTPUTS_DIR/shot.png"
        printf '\000\001\002\377\376' > "$OUTPUTS_DIR/nested/deeper/blob.bin"
        echo report > "$OUTPUTS_DIR/nested/report.txt"
    "#;
    let spec = fx.spec(backend, "outputs").step(Step::new("write", script));
    let (result, log) = run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Success, "{}", log.text());
    let out = fx.outputs();
    let blob = std::fs::read(out.join("nested/deeper/blob.bin")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(blob, [0, 1, 2, 255, 254]);
    assert_eq!(
        std::fs::read_to_string(out.join("nested/report.txt")).unwrap_or_default(),
        "report\n"
    );
    let paths: Vec<&str> = result.outputs.iter().map(|o| o.path.as_str()).collect();
    assert_eq!(
        paths,
        ["nested/deeper/blob.bin", "nested/report.txt", "shot.png"]
    );
    let png = &result.outputs[2];
    assert_eq!(png.media_type, "image/png");
    assert_eq!(png.size, 16);
    assert_eq!(result.outputs[0].size, 5);
    assert_nothing_left(backend, &fx.runner).await;
}

/// Outputs come back even when a step failed: a failure's screenshot is
/// what a user wants most.
pub async fn outputs_come_back_after_failure(backend: &dyn Backend) {
    let fx = Fixture::new("outputsfail");
    let spec = fx.spec(backend, "outputs-after-failure").step(Step::new(
        "fail",
        "echo evidence > \"$OUTPUTS_DIR/failure.txt\"; exit 7",
    ));
    let (result, _) = run_to_end(backend, &spec).await;
    assert_eq!(result.status, RunStatus::Failed);
    assert_eq!(result.steps[0].status, StepStatus::Failed);
    assert_eq!(
        std::fs::read_to_string(fx.outputs().join("failure.txt")).unwrap_or_default(),
        "evidence\n"
    );
    assert_eq!(result.outputs.len(), 1);
    assert_nothing_left(backend, &fx.runner).await;
}

/// How far into a copy a test cuts its connection: past the first
/// megabyte of [`a_copy_cut_partway_goes_again_whole`]'s file.
pub const COPY_CUT_AT: u64 = 1 << 20;

/// A 3 MiB file goes in with the checkout and a step copies it to
/// `OUTPUTS_DIR`: with the caller having arranged for the copy in or out
/// to be cut partway (past [`COPY_CUT_AT`]), the run still succeeds, the
/// copy having gone again whole, and every byte comes back. Returns the
/// run's log, for the caller to see the cut was met.
pub async fn a_copy_cut_partway_goes_again_whole(backend: &dyn Backend) -> String {
    let fx = Fixture::new("copy-cut");
    // Bytes that do not repeat within a chunk, so a misplaced piece shows.
    let data: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13).to_le_bytes()[0])
        .collect();
    std::fs::write(fx.checkout().join("big.bin"), &data).unwrap_or_else(|e| panic!("{e}"));
    let spec = fx.spec(backend, "copy-cut").step(Step::new(
        "copy",
        "cp \"$WORK_DIR/big.bin\" \"$OUTPUTS_DIR/\"",
    ));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    assert_eq!(result.status, RunStatus::Success, "{text}");
    let back =
        std::fs::read(fx.outputs().join("big.bin")).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(
        back == data,
        "the file came back changed ({} bytes): {text}",
        back.len()
    );
    assert_nothing_left(backend, &fx.runner).await;
    text
}
