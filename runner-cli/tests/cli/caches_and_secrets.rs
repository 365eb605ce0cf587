//! Caches across runs and secrets that never show

use super::*;

#[test]
fn caches_are_cold_then_warm_across_runs() {
    let case = Case::new();
    let caches = case.path("caches");
    let steps = "use\tif [ -f .c/hit ]; then echo warm-cache; else echo cold-cache; fi; mkdir -p .c && echo 1 > .c/hit\n";
    let cache_dir = caches.display().to_string();
    let out = case
        .run(steps, &["--cache", "deps=.c", "--cache-dir", &cache_dir])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(case.log().contains("cold-cache"));
    assert!(
        case.result().caches[0].saved,
        "{:?}\n{}",
        case.result().caches,
        case.log()
    );
    let out = case
        .run(steps, &["--cache", "deps=.c", "--cache-dir", &cache_dir])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(case.log().contains("warm-cache"), "{}", case.log());
    assert!(case.result().caches[0].hit);

    // Another runner sharing the cache folder neither reads this one's
    // cache nor replaces it.
    let out = case
        .run(
            steps,
            &[
                "--cache",
                "deps=.c",
                "--cache-dir",
                &cache_dir,
                "--runner",
                "did:plc:cli-test-other",
            ],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(case.log().contains("cold-cache"), "{}", case.log());
    let out = case
        .run(steps, &["--cache", "deps=.c", "--cache-dir", &cache_dir])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(case.log().contains("warm-cache"), "{}", case.log());

    for bad in ["../up=.c", "=.c", "deps"] {
        let out = case.run(steps, &["--cache", bad]).output().unwrap();
        assert_eq!(code(&out), 2, "{bad}");
    }
    // A dry-run shows the cache calls and leaves the host copy alone.
    let own = executor_core::CacheStore::new(&caches, u64::MAX)
        .for_runner("did:plc:cli-test")
        .dir()
        .to_path_buf();
    let before = std::fs::read_link(own.join("deps/current")).unwrap();
    let out = case
        .run(
            steps,
            &["--cache", "deps=.c", "--cache-dir", &cache_dir, "--dry-run"],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(plan.matches("/work/.c").count() >= 2, "{plan}");
    assert_eq!(
        std::fs::read_link(own.join("deps/current")).unwrap(),
        before
    );

    let out = case.run(steps, &["--cache", "deps=/etc"]).output().unwrap();
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("relative to WORK_DIR"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn secrets_come_from_the_environment_or_files_and_never_show() {
    const TOKEN: &str = "s3cr3t-deploy-value";
    const KEY: &str = "-----BEGIN KEY-----\nAAAAB3NzaC1yc2E\n-----END KEY-----";
    let case = Case::new();
    std::fs::write(case.path("key"), format!("{KEY}\n")).unwrap();
    std::fs::write(
        case.path("vars"),
        "# plain ones\nPLAIN=from the file\nHOME\n",
    )
    .unwrap();
    let steps = format!(
        "show\techo \"token=$DEPLOY_TOKEN plain=$PLAIN\"; printf '%s\\n' \"$SSH_KEY\" | sed -n 2p; \
         [ \"$(printf %s \"$SSH_KEY\" | wc -l)\" = 2 ]; [ -n \"$HOME\" ]\n\
         no runner secrets\tif [ -n \"${{KUBECONFIG:-}}\" ] || [ -n \"${{RUNNER_ONLY:-}}\" ]; then echo leaked; exit 7; fi\n\
         no command line has it\tprintf %s \"$DEPLOY_TOKEN\" > .pattern; \
         if cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\\\0' '\\\\n' | grep -qF -f .pattern; then echo on-a-command-line; exit 8; fi\n\
         deploy {TOKEN}\texit 1\n"
    );
    let key = case.path("key");
    let vars = case.path("vars");
    let out = case
        .run(
            &steps,
            &[
                "--secret",
                "DEPLOY_TOKEN",
                "--secret-file",
                &format!("SSH_KEY={}", key.display()),
                "--env-file",
                &vars.display().to_string(),
            ],
        )
        .env("DEPLOY_TOKEN", TOKEN)
        .env("KUBECONFIG", "/runner/only/kubeconfig")
        .env("RUNNER_ONLY", "not for steps")
        .output()
        .unwrap();
    let log = case.log();
    assert_eq!(code(&out), 1, "{}{log}", stderr(&out));
    let result = case.result();
    assert_eq!(result.steps[0].exit_code, Some(0), "{log}");
    assert_eq!(result.steps[1].exit_code, Some(0), "{log}");
    assert_eq!(result.steps[2].exit_code, Some(0), "{log}");
    assert!(log.contains("token=[MASKED] plain=from the file"), "{log}");
    assert!(log.contains("\n[MASKED]\n"), "the key's middle line: {log}");
    let json = std::fs::read_to_string(case.path("result.json")).unwrap();
    for shown in [&log, &json, &stderr(&out)] {
        assert!(
            !shown.contains(TOKEN) && !shown.contains("AAAAB3NzaC1yc2E"),
            "{shown}"
        );
    }
    assert!(stderr(&out).contains("deploy [MASKED]"), "{}", stderr(&out));
}

#[test]
fn secrets_that_cannot_be_taken_are_exit_2_naming_them() {
    let case = Case::new();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--secret", "TOKEN=hunter22"],
            "never taken on the command line",
        ),
        (
            &["--secret", "KNOTLESS_NOT_SET_ANYWHERE"],
            "no variable KNOTLESS_NOT_SET_ANYWHERE",
        ),
        (&["--secret", "SHORT"], "shorter than 4 characters"),
        (
            &["--secret-file", "K=/no/such/file"],
            "--secret-file K=/no/such/file",
        ),
    ];
    for (flags, said) in cases {
        let out = case
            .run("a\ttrue\n", flags)
            .env("SHORT", "abc")
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{flags:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(said), "{flags:?}: {}", stderr(&out));
        let json = std::fs::read_to_string(case.path("result.json")).unwrap();
        for shown in [stderr(&out), json] {
            assert!(!shown.contains("hunter22"), "{shown}");
        }
        assert!(!case.log().contains("true"), "no step ran");
    }
}
