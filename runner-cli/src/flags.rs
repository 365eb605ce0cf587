//! The libraries name the fields a run is made of (`RunSpec::checkout`,
//! `DockerOptions::pull`); a `runner-cli` user knows its flags. Every
//! message the CLI shows, and the result it writes, is put in flags here.

use std::borrow::Cow;

/// Each library field (or field and value) and the flag that sets it.
const FLAGS: &[(&str, &str)] = &[
    ("DockerOptions::pull PullPolicy::Never", "--pull never"),
    ("PullPolicy::Missing", "--pull missing"),
    ("DockerOptions::user", "--user"),
    ("DockerOptions::privileged", "--privileged"),
    ("DockerOptions::devices", "--device"),
    ("DockerOptions::volumes", "--volume"),
    ("K8sOptions::pod_template", "--pod-template"),
    ("K8sOptions::cap_add", "--cap-add"),
    ("K8sOptions::step_isolation", "--step-isolation"),
    ("K8sOptions::run_as_user", "--run-as-user"),
    ("K8sOptions::run_as_non_root", "--run-as-non-root"),
    ("RunSpec::checkout", "--workdir"),
    ("RunSpec::steps_dir", "--steps-dir"),
    ("RunSpec::outputs", "--outputs"),
    ("RunSpec::name", "--name"),
    ("RunSpec::runner", "--runner"),
    ("RunSpec::image", "--image"),
    ("CacheStore::max_bytes", "--cache-max"),
    ("KubeconfigSource::kubeconfig", "--kubeconfig"),
    ("KubeconfigSource::context", "--context"),
    ("KubeconfigSource::namespace", "--namespace"),
    (
        "KubeconfigSource::insecure_skip_tls_verify",
        "--insecure-skip-tls-verify",
    ),
    (
        "KubeconfigSource::insecure_plain_http",
        "--insecure-plain-http",
    ),
];

/// `text` with every library field named as the flag that sets it.
pub fn as_flags(text: &str) -> Cow<'_, str> {
    if !text.contains("::") {
        return Cow::Borrowed(text);
    }
    let mut out = text.to_string();
    for (field, flag) in FLAGS {
        if out.contains(field) {
            out = out.replace(field, flag);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn fields_become_the_flags_that_set_them() {
        assert_eq!(
            super::as_flags("RunSpec::checkout /x: missing; set RunSpec::name"),
            "--workdir /x: missing; set --name"
        );
        assert_eq!(
            super::as_flags(
                "DockerOptions::pull PullPolicy::Never forbids it; use PullPolicy::Missing"
            ),
            "--pull never forbids it; use --pull missing"
        );
        assert_eq!(super::as_flags("no fields here"), "no fields here");
    }
}
