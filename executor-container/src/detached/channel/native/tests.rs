use super::*;
use crate::detached::variables_prelude;

/// The records of a native line, as the agent reads them.
fn records(line: &str) -> Vec<(char, String)> {
    let hex = line.strip_prefix(NATIVE).unwrap();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    let mut fields: Vec<&[u8]> = bytes.split(|&b| b == 0).collect();
    assert_eq!(fields.pop(), Some(&b""[..]), "every record ends in a NUL");
    fields
        .into_iter()
        .map(|r| (r[0] as char, String::from_utf8(r[1..].to_vec()).unwrap()))
        .collect()
}

fn own(flags: &str, prelude: &str) -> String {
    format!("_kfl={flags}; _kpre={}\n", quote(prelude))
}

#[test]
fn a_docker_prelude_becomes_exports_in_order() {
    let env = [
        ("A".to_string(), "it's; 'quoted' && $(not run)".to_string()),
        ("B".to_string(), String::new()),
        ("A".to_string(), "second\nline".to_string()),
    ];
    let (prelude, left) = variables_prelude(&env);
    assert!(left.is_empty());
    let line = native_line(
        "ab12",
        "/k/stepio-s1",
        "/k/step-x.sh",
        &own("-e", &prelude),
        Some("/work"),
    )
    .unwrap();
    assert_eq!(
        records(&line),
        [
            ('k', "ab12".into()),
            ('p', "/k/stepio-s1".into()),
            ('f', "-e".into()),
            ('s', "/k/step-x.sh".into()),
            ('w', "/work".into()),
            ('P', prelude.clone()),
            ('e', "A=it's; 'quoted' && $(not run)".into()),
            ('e', "B=".into()),
            ('e', "A=second\nline".into()),
        ]
    );
}

#[test]
fn a_kubernetes_prelude_becomes_references_unsets_and_a_folder() {
    let prelude =
        "export NAME=\"$KNOTLESS_S0_NAME\"; unset KNOTLESS_S0_NAME OTHER; cd '/wo'\\''rk' && ";
    let line = native_line("ab", "/k/stepio-s0", "true", &own("-ec", prelude), None).unwrap();
    let got = records(&line);
    assert_eq!(
        got[5..],
        [
            ('r', "NAME=KNOTLESS_S0_NAME".into()),
            ('u', "KNOTLESS_S0_NAME".into()),
            ('u', "OTHER".into()),
            ('d', "/wo'rk".into()),
        ]
    );
}

#[test]
fn anything_else_is_left_to_the_shell() {
    let refused = [
        own("-ec", "echo hi; "),
        own("-ec", "export A=$(id); "),
        own("-ec", "export A='x'"),
        own("-ec", "cd '/w' && export A='x'; "),
        own("-ec", "unset A-B; "),
        own("-x", ""),
        own("-ec", "export A='nul\0'; "),
        "_kfl=-ec; _kpre=''; rm -rf /\n".to_string(),
    ];
    for own in refused {
        assert_eq!(
            native_line("ab", "/k/stepio-s", "true", &own, None),
            None,
            "{own:?}"
        );
    }
    // A folder the agent would enter relative to another.
    assert_eq!(
        native_line("ab", "/k/stepio-s", "true", &own("-ec", ""), Some("work")),
        None
    );
    // A script with a NUL cannot be an argument.
    assert_eq!(
        native_line("ab", "/k/stepio-s", "a\0b", &own("-ec", ""), None),
        None
    );
}

#[test]
fn an_empty_prelude_has_only_the_step() {
    let line = native_line("ab", "/k/stepio-s", "true", &own("-ec", ""), None).unwrap();
    assert_eq!(records(&line).len(), 5);
}
