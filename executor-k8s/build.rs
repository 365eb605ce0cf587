//! The tests that need a container engine run where one was prepared
//! (`scripts/test.sh`, or `eval "$(scripts/prepare-engine.sh)"`, sets
//! `KNOTLESS_TEST_ENGINE`); elsewhere `cargo test` lists them as ignored,
//! saying how to run them, and runs everything else. The arm64 cases
//! need, besides, the aarch64 helpers and the arm64 image that script
//! makes where qemu runs aarch64 programs (`KNOTLESS_TEST_IMAGE_ARM64`).
fn main() {
    println!("cargo::rustc-check-cfg=cfg(knotless_engine)");
    println!("cargo::rustc-check-cfg=cfg(knotless_arm64)");
    println!("cargo::rerun-if-env-changed=KNOTLESS_TEST_ENGINE");
    println!("cargo::rerun-if-env-changed=KNOTLESS_TEST_IMAGE_ARM64");
    let engine = std::env::var_os("KNOTLESS_TEST_ENGINE").is_some_and(|v| !v.is_empty());
    if engine {
        println!("cargo::rustc-cfg=knotless_engine");
    }
    let built = std::env::var("DEP_KNOTLESS_HELPERS_BUILT").unwrap_or_default();
    let aarch64 = ["agent.aarch64", "tee.aarch64", "gz.aarch64"]
        .iter()
        .all(|helper| built.split(',').any(|name| name == *helper));
    let image = std::env::var_os("KNOTLESS_TEST_IMAGE_ARM64").is_some_and(|v| !v.is_empty());
    if engine && aarch64 && image {
        println!("cargo::rustc-cfg=knotless_arm64");
    }
}
