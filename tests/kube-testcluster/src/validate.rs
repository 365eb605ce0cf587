//! Object validation as the API server does it, with the same messages.

use serde_json::Value;

const DNS1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const LABEL_VALUE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const QUALIFIED_NAME: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
/// Total size limit of all annotations.
const ANNOTATIONS_MAX: usize = 256 * 1024;

fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// DNS-1123 subdomain: dot-separated labels, at most 253 characters.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric())
}

fn qualified_name_faults(key: &str) -> Vec<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let mut faults = Vec::new();
    if let Some(p) = prefix {
        if !is_dns1123_subdomain(p) {
            faults.push(format!("prefix part {DNS1123_SUBDOMAIN}"));
        }
    }
    if name.is_empty() || name.len() > 63 || !is_label_value(name) {
        faults.push(QUALIFIED_NAME.to_string());
    }
    faults
}

/// Metadata faults of an object, as `(field, message)` pairs.
pub fn metadata(object: &Value) -> Vec<(String, String)> {
    let meta = &object["metadata"];
    let mut causes = Vec::new();
    let name = meta["name"].as_str().unwrap_or_default();
    if name.is_empty() {
        causes.push((
            "metadata.name".into(),
            "Required value: name or generateName is required".into(),
        ));
    } else if !is_dns1123_subdomain(name) {
        causes.push((
            "metadata.name".into(),
            format!("Invalid value: {name:?}: {DNS1123_SUBDOMAIN}"),
        ));
    }
    if let Some(labels) = meta["labels"].as_object() {
        for (k, v) in labels {
            for fault in qualified_name_faults(k) {
                causes.push((
                    "metadata.labels".into(),
                    format!("Invalid value: {k:?}: {fault}"),
                ));
            }
            match v.as_str() {
                Some(v) if is_label_value(v) => {}
                Some(v) => causes.push((
                    "metadata.labels".into(),
                    format!(
                        "Invalid value: {v:?}: {}",
                        if v.len() > 63 {
                            "must be no more than 63 characters".into()
                        } else {
                            LABEL_VALUE.to_string()
                        }
                    ),
                )),
                None => causes.push((
                    "metadata.labels".into(),
                    format!("Invalid value: {k:?}: label values must be strings"),
                )),
            }
        }
    }
    if let Some(annotations) = meta["annotations"].as_object() {
        let mut total = 0;
        for (k, v) in annotations {
            total += k.len() + v.as_str().map_or(0, str::len);
            for fault in qualified_name_faults(&k.to_lowercase()) {
                causes.push((
                    "metadata.annotations".into(),
                    format!("Invalid value: {k:?}: {fault}"),
                ));
            }
        }
        if total > ANNOTATIONS_MAX {
            causes.push((
                "metadata.annotations".into(),
                format!("Too long: must have at most {ANNOTATIONS_MAX} bytes"),
            ));
        }
    }
    causes
}

/// Faults of a Job beyond its metadata.
pub fn job(object: &Value) -> Vec<(String, String)> {
    let mut causes = metadata(object);
    let template = &object["spec"]["template"];
    if !template.is_object() {
        causes.push(("spec.template".into(), "Required value".into()));
        return causes;
    }
    match template["spec"]["restartPolicy"].as_str() {
        Some("Never") | Some("OnFailure") => {}
        other => causes.push((
            "spec.template.spec.restartPolicy".into(),
            format!(
                "Unsupported value: {:?}: supported values: \"OnFailure\", \"Never\"",
                other.unwrap_or("Always")
            ),
        )),
    }
    let containers = template["spec"]["containers"]
        .as_array()
        .map(Vec::len)
        .unwrap_or(0);
    if containers == 0 {
        causes.push((
            "spec.template.spec.containers".into(),
            "Required value".into(),
        ));
    }
    causes
}

/// Faults of a RuntimeClass: a handler is required, a DNS label.
pub fn runtime_class(object: &Value) -> Vec<(String, String)> {
    let mut causes = metadata(object);
    match object["handler"].as_str() {
        None | Some("") => causes.push(("handler".into(), "Required value".into())),
        Some(h) if !is_dns1123_label(h) => causes.push((
            "handler".into(),
            format!("Invalid value: {h:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
        )),
        Some(_) => {}
    }
    causes
}

/// Faults of a PriorityClass: a value is required.
pub fn priority_class(object: &Value) -> Vec<(String, String)> {
    let mut causes = metadata(object);
    if !object["value"].is_i64() {
        causes.push(("value".into(), "Required value".into()));
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_and_labels() {
        assert!(is_dns1123_subdomain("run-1.a"));
        assert!(!is_dns1123_subdomain("Run_1"));
        let bad =
            json!({"metadata": {"name": "ok", "labels": {"dev.knotless.runner": "did:plc:x"}}});
        assert_eq!(metadata(&bad).len(), 1);
        let good =
            json!({"metadata": {"name": "ok", "labels": {"dev.knotless.runner": "did-plc-x"}}});
        assert!(metadata(&good).is_empty());
    }
}
