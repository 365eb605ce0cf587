//! Steps' outputs, conditions and the runner's variables: what a ported
//! Actions job relies on, the same on every backend.

use executor_core::expr::{Condition, Template};
use executor_core::{RunStatus, Step, StepStatus};

use crate::fixture::{run_to_end, Fixture};
use crate::Backend;

/// A step with an id writes outputs (`NAME=VALUE` and a `NAME<<EOF`
/// block) that later steps read as variables and conditions; a value
/// that looks like shell code stays text; after a failure only the steps
/// whose condition says so run; every step sees `CI` and its own name,
/// index and attempt; the outputs folder that carried the outputs does
/// not come back with the run's outputs.
pub async fn outputs_and_conditions_work_as_in_actions(backend: &dyn Backend) {
    let fx = Fixture::new("expressions");
    let value = |t: &str| Template::parse(t).unwrap();
    let when = |c: &str| Condition::parse(c).unwrap();
    let spec = fx
        .spec(backend, "expressions")
        .env("KIND", "Release")
        .step(
            Step::new(
                "version",
                "echo number=1.2 >> \"$GITHUB_OUTPUT\"\n\
                 printf 'evil=\"; echo INJECTED; #$(echo SUBST)\\n' >> \"$STEP_OUTPUT\"\n\
                 printf 'notes<<END\\none\\ntwo\\nEND\\n' >> \"$STEP_OUTPUT\"\n\
                 echo \"ci=$CI name=$KNOTLESS_STEP_NAME index=$KNOTLESS_STEP_INDEX attempt=$KNOTLESS_ATTEMPT\"",
            )
            .id("version"),
        )
        .step(
            Step::new(
                "use",
                "echo \"tag v$NUMBER\"; echo \"evil [$EVIL]\"; printf 'notes [%s]\\n' \"$NOTES\"",
            )
            .input("NUMBER", value("${{ steps.version.outputs.number }}"))
            .input("EVIL", value("${{ steps.version.outputs.evil }}"))
            .input("NOTES", value("${{ steps.version.outputs.notes }}")),
        )
        .step(
            Step::new("release-only", "echo release-ran")
                .when(when("steps.version.outputs.number == '1.2' && env.KIND == 'release'")),
        )
        .step(Step::new("break", "exit 4"))
        .step(Step::new("plain", "echo plain-must-not-run"))
        .step(Step::new("compare", "echo compare-must-not-run").when(when("env.KIND == 'release'")))
        .step(
            Step::new("notify", "echo \"notify status=$KNOTLESS_JOB_STATUS\"")
                .when(when("failure()")),
        )
        .step(Step::new("tidy", "echo tidy-ran").when(when("!cancelled()")))
        .step(Step::new("on-success", "echo must-not-run").when(when("success()")));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    let statuses: Vec<_> = result.steps.iter().map(|s| s.status).collect();
    use StepStatus::{Failed, Skipped, Success};
    assert_eq!(
        statuses,
        [Success, Success, Success, Failed, Skipped, Skipped, Success, Success, Skipped],
        "{text}"
    );
    assert_eq!(result.status, RunStatus::Failed, "{text}");
    assert!(
        text.contains("ci=true name=version index=0 attempt=1"),
        "{text}"
    );
    assert!(text.contains("tag v1.2"), "{text}");
    assert!(
        text.contains("evil [\"; echo INJECTED; #$(echo SUBST)]"),
        "a value became code: {text}"
    );
    assert!(
        !text.contains("\nINJECTED") && !text.contains("SUBST)]\nSUBST"),
        "{text}"
    );
    assert!(text.contains("notes [one\ntwo]"), "{text}");
    assert!(
        text.contains("release-ran") && text.contains("tidy-ran"),
        "{text}"
    );
    assert!(text.contains("notify status=failure"), "{text}");
    assert!(!text.contains("must-not-run\n"), "{text}");
    let outputs = &result.steps[0].outputs;
    assert_eq!(outputs.get("number").map(String::as_str), Some("1.2"));
    assert_eq!(outputs.get("notes").map(String::as_str), Some("one\ntwo"));
    assert!(result.steps[1].outputs.is_empty());
    assert!(
        !fx.outputs()
            .join(executor_core::STEP_OUTPUTS_FOLDER)
            .exists(),
        "the steps' outputs folder came back with the outputs"
    );
}
