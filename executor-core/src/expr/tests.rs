use std::collections::BTreeMap;

use super::*;

fn scope_with<'a>(
    env: &'a [(String, String)],
    outputs: &'a BTreeMap<String, BTreeMap<String, String>>,
    state: RunState,
) -> Scope<'a> {
    Scope {
        env,
        secrets: &[],
        outputs: Some(outputs),
        state,
    }
}

#[test]
fn status_functions_follow_actions() {
    let none = BTreeMap::new();
    for (text, ok, failed) in [
        ("success()", true, false),
        ("failure()", false, true),
        ("always()", true, true),
        ("cancelled()", false, false),
        ("!cancelled()", true, true),
        ("failure() || success()", true, true),
        ("!(success())", false, true),
        ("${{ failure() && !cancelled() }}", false, true),
    ] {
        let cond = Condition::parse(text).unwrap();
        assert_eq!(
            cond.holds(&scope_with(&[], &none, RunState::Succeeded)),
            ok,
            "{text}"
        );
        assert_eq!(
            cond.holds(&scope_with(&[], &none, RunState::Failed)),
            failed,
            "{text}"
        );
    }
}

#[test]
fn a_comparison_alone_holds_only_while_the_run_succeeds() {
    let env = vec![("KIND".to_string(), "Release".to_string())];
    let none = BTreeMap::new();
    let cond = Condition::parse("env.KIND == 'release'").unwrap();
    assert!(cond.holds(&scope_with(&env, &none, RunState::Succeeded)));
    assert!(!cond.holds(&scope_with(&env, &none, RunState::Failed)));
    // job.status is a value, not a status check (as in Actions): alone
    // it is read after an implicit success().
    let cond = Condition::parse("job.status == 'failure'").unwrap();
    assert!(!cond.holds(&scope_with(&env, &none, RunState::Failed)));
    let cond = Condition::parse("always() && job.status == 'failure'").unwrap();
    assert!(cond.holds(&scope_with(&env, &none, RunState::Failed)));
    let cond = Condition::parse("env.KIND != 'release' || failure()").unwrap();
    assert!(!cond.holds(&scope_with(&env, &none, RunState::Succeeded)));
}

#[test]
fn step_outputs_are_read_by_id_and_name() {
    let mut outputs = BTreeMap::new();
    outputs.insert(
        "version".to_string(),
        BTreeMap::from([("number".to_string(), "1.2".to_string())]),
    );
    let scope = scope_with(&[], &outputs, RunState::Succeeded);
    let cond = Condition::parse("steps.version.outputs.number == '1.2'").unwrap();
    assert!(cond.holds(&scope));
    // An output nobody wrote is the empty string.
    let cond = Condition::parse("steps.version.outputs.other == ''").unwrap();
    assert!(cond.holds(&scope));
    let t = Template::parse("v${{ steps.version.outputs.number }}-${{ job.status }}").unwrap();
    assert_eq!(t.render(&scope), "v1.2-success");
    assert_eq!(
        t.values().filter_map(Value::step).collect::<Vec<_>>(),
        ["version"]
    );
}

#[test]
fn refusals_point_at_their_column() {
    for (text, column, says) in [
        ("github.ref == 'x'", 1, "github.ref is not taken"),
        (
            "success() && contains(env.A, 'b')",
            14,
            "contains(...) is not taken",
        ),
        ("env.A", 1, "alone is not a condition"),
        ("env.A == \"b\"", 10, "single quotes"),
        ("${{ hashFiles() }}", 5, "hashFiles() is not taken"),
        ("env.A == 'b", 10, "no closing '"),
        ("(success()", 1, "no ')' closing it"),
        ("success() failure()", 11, "join two"),
        ("env.A == true", 10, "true is not taken"),
        ("", 1, "empty"),
        ("env.A == 1", 10, "'1' is not taken"),
    ] {
        let err = Condition::parse(text).unwrap_err();
        assert_eq!(err.column, column, "{text}: {err}");
        assert!(err.message.contains(says), "{text}: {err}");
    }
}

#[test]
fn templates_take_values_only() {
    let err = Template::parse("a ${{ always() }}").unwrap_err();
    assert_eq!(err.column, 7, "{err}");
    let err = Template::parse("a ${{ env.A").unwrap_err();
    assert_eq!(err.column, 3, "{err}");
    let err = Template::parse("${{ env.A env.B }}").unwrap_err();
    assert!(err.message.contains("only one value"), "{err}");
    let err = Template::parse("x ${{ matrix.os }}").unwrap_err();
    assert_eq!(err.column, 7, "{err}");
    // A closing brace inside a literal does not end the part.
    let t = Template::parse("${{ '}}' }}").unwrap();
    assert_eq!(t.parts(), [Part::Value(Value::Literal("}}".into()))]);
    assert!(Template::parse("plain $HOME").unwrap().is_plain());
}

#[test]
fn conditions_print_as_they_read() {
    for text in [
        "always()",
        "!cancelled() && (failure() || env.A == 'it''s')",
        "success() || failure() && steps.a.outputs.b != ''",
        "!(success() && failure())",
    ] {
        let cond = Condition::parse(text).unwrap();
        assert_eq!(cond.to_string(), text);
        assert_eq!(Condition::parse(&cond.to_string()).unwrap(), cond);
    }
}

#[test]
fn an_outputs_file_with_blocks_and_bad_lines() {
    let (outputs, refused) =
        read_outputs("a=1\nb=x=y\n\nlog<<END\none\n\ntwo\nEND\n1x=2\nopen<<EOF\nnever closed\n");
    assert_eq!(outputs["a"], "1");
    assert_eq!(outputs["b"], "x=y");
    assert_eq!(outputs["log"], "one\n\ntwo");
    assert_eq!(outputs.len(), 3);
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused[1].contains("never closed"), "{refused:?}");
}
