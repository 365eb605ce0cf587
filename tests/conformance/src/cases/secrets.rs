//! Secrets: they reach steps, and never the log, the result or a command line.

use base64::Engine as _;
use executor_core::mask::{Secret, MASK};
use executor_core::{RunStatus, Step};

use crate::fixture::{assert_nothing_left, run_to_end, Fixture};
use crate::Backend;

/// Has `/` and `+`, so its URL-encoding and its two base64 alphabets differ.
const VALUE: &str = "tok-3f9a/Z+q~x7";

/// A step prints the run's secret in every way masking promises to catch:
/// as it is, glued to itself and to other text, split by a pause into two
/// writes, a byte at a time, inside a larger base64 blob in both
/// alphabets (encoded by the environment's own `base64`), in hex and
/// URL-encoded (with `/` escaped and kept). A step named after the value
/// puts it in runner lines and the result. The log shows `[MASKED]` where
/// each went and none of the forms; the value is on no process's command
/// line in the environment; a step's own variables reach that step only.
pub async fn secrets_are_masked_in_every_form(backend: &dyn Backend) {
    let fx = Fixture::new("secrets");
    let hex = hex::encode(VALUE);
    let url = "tok-3f9a%2FZ%2Bq~x7";
    // Python's urllib.parse.quote keeps `/`.
    let url_path = "tok-3f9a/Z%2Bq~x7";
    let (head, tail) = VALUE.split_at(7);
    let script = format!(
        r#"echo "plain:$DEPLOY_TOKEN."
printf 'glued:%s%s|%s\n' "$DEPLOY_TOKEN" "$DEPLOY_TOKEN" "$DEPLOY_TOKEN"
printf 'split:%s' "$(printf %s "$DEPLOY_TOKEN" | cut -c1-7)"
sleep 1
printf '%s:end\n' "$(printf %s "$DEPLOY_TOKEN" | cut -c8-)"
printf 'bytes:'
for c in $(printf %s "$DEPLOY_TOKEN" | sed 's/./& /g'); do printf %s "$c"; done
echo
printf 'user:%s@host' "$DEPLOY_TOKEN" | base64
printf 'user:%s@host' "$DEPLOY_TOKEN" | base64 | tr '+/' '-_'
echo "hex:{hex}"
echo "url:{url}"
echo "urlpath:{url_path}"
echo "half:{head}"
printf %s "$DEPLOY_TOKEN" > "$WORK_DIR/.pattern"
if cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' '\n' | grep -qF -f "$WORK_DIR/.pattern"; then
  echo "the value is on a command line"; exit 1
fi
rm "$WORK_DIR/.pattern"
"#
    );
    let spec = fx
        .spec(backend, "secrets")
        .secret("DEPLOY_TOKEN", Secret::new(VALUE))
        .step(Step::new("print", script).env("OWN_VAR", "step-one-only"))
        .step(Step::new(
            "next",
            r#"if [ -n "${OWN_VAR:-}" ]; then echo "OWN_VAR leaked into the next step"; exit 1; fi
if env | grep -q "^KNOTLESS_S[0-9]"; then echo "a step variable leaked under its Secret key"; exit 1; fi
echo "second step sees a token of ${#DEPLOY_TOKEN} characters""#,
        ))
        .step(Step::new(format!("named {VALUE}"), "exit 3"));
    let (result, log) = run_to_end(backend, &spec).await;
    let text = log.text();
    let events = log.events();
    let json = result.to_json();
    assert_eq!(result.status, RunStatus::Failed, "{text}\n{json}");
    assert_eq!(result.steps[0].exit_code, Some(0), "{text}");
    assert_eq!(result.steps[1].exit_code, Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "second step sees a token of {} characters",
            VALUE.len()
        )),
        "{text}"
    );

    let blob = base64::engine::general_purpose::STANDARD.encode(format!("user:{VALUE}@host"));
    let url_safe_blob =
        base64::engine::general_purpose::URL_SAFE.encode(format!("user:{VALUE}@host"));
    assert_ne!(blob, url_safe_blob, "VALUE must encode apart in the two");
    for (what, form) in [
        ("the value", VALUE.to_string()),
        ("hex", hex.clone()),
        ("URL-encoding", url.to_string()),
        ("URL-encoding that keeps /", url_path.to_string()),
        ("the base64 blob", blob),
        ("the URL-safe base64 blob", url_safe_blob),
    ] {
        assert!(
            !text.contains(&form),
            "{what} {form:?} is in the log:\n{text}"
        );
        assert!(
            !json.contains(&form),
            "{what} {form:?} is in the result:\n{json}"
        );
        assert!(
            !events.contains(&form),
            "{what} {form:?} is in the events:\n{events}"
        );
    }
    // The events carry the masked output, and the masked step name.
    for said in [
        format!("plain:{MASK}."),
        format!("\"step\":\"named {MASK}\""),
    ] {
        assert!(
            events.contains(&said),
            "{said:?} is not in the events:\n{events}"
        );
    }
    for line in [
        format!("plain:{MASK}."),
        format!("glued:{MASK}{MASK}|{MASK}"),
        format!("split:{MASK}:end"),
        format!("bytes:{MASK}"),
        format!("hex:{MASK}"),
        format!("url:{MASK}"),
        format!("==> step named {MASK}: failed (exit 3"),
    ] {
        assert!(text.contains(&line), "{line:?} is not in the log:\n{text}");
    }
    // A part of the value is not the value: masking does not shred text.
    assert!(text.contains(&format!("half:{head}")), "{text}");
    assert!(!text.contains(tail), "{text}");
    assert!(
        text.contains(MASK) && json.contains(&format!("named {MASK}")),
        "{json}"
    );
    assert_nothing_left(backend, &fx.runner).await;
}
