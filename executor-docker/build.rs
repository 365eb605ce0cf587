//! The tests that need a container engine run where one was prepared
//! (`scripts/test.sh`, or `eval "$(scripts/prepare-engine.sh)"`, sets
//! `KNOTLESS_TEST_ENGINE`); elsewhere `cargo test` lists them as ignored,
//! saying how to run them, and runs everything else.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(knotless_engine)");
    // The helpers executor-container could build for this machine: a test
    // that needs one is ignored, with the reason, where it is missing.
    println!("cargo::rustc-check-cfg=cfg(knotless_gz)");
    let built = std::env::var("DEP_KNOTLESS_HELPERS_BUILT").unwrap_or_default();
    if built.split(',').any(|name| name == "gz") {
        println!("cargo::rustc-cfg=knotless_gz");
    }
    // The arm64 cases need the aarch64 helpers, an arm64 image and qemu
    // (scripts/prepare-engine.sh names the image where it made one).
    println!("cargo::rustc-check-cfg=cfg(knotless_arm64)");
    println!("cargo::rerun-if-env-changed=KNOTLESS_TEST_IMAGE_ARM64");
    let aarch64 = ["agent.aarch64", "tee.aarch64", "gz.aarch64"]
        .iter()
        .all(|helper| built.split(',').any(|name| name == *helper));
    let image = std::env::var_os("KNOTLESS_TEST_IMAGE_ARM64").is_some_and(|v| !v.is_empty());
    let engine = std::env::var_os("KNOTLESS_TEST_ENGINE").is_some_and(|v| !v.is_empty());
    if aarch64 && image && engine {
        println!("cargo::rustc-cfg=knotless_arm64");
    }
    println!("cargo::rerun-if-env-changed=KNOTLESS_TEST_ENGINE");
    if std::env::var_os("KNOTLESS_TEST_ENGINE").is_some_and(|v| !v.is_empty()) {
        println!("cargo::rustc-cfg=knotless_engine");
    }
}
