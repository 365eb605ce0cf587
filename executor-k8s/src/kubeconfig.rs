//! The kubeconfig, found and read as kubectl finds it (`--kubeconfig`,
//! else the files `KUBECONFIG` lists, else `~/.kube/config`), with its
//! errors in kubectl's words: `stat PATH: no such file or directory`,
//! `context was not found for specified context: NAME`.

use std::path::{Path, PathBuf};

use executor_core::ExecutorError;
use kube::config::Kubeconfig;

/// Where the client comes from, as kubectl finds it.
#[derive(Debug, Clone, Default)]
pub struct KubeconfigSource {
    /// `--kubeconfig`; otherwise `KUBECONFIG`, then `~/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context`; otherwise the current context.
    pub context: Option<String>,
    /// `--namespace`; otherwise the context's namespace, then `default`.
    pub namespace: Option<String>,
    /// Accept a kubeconfig whose cluster sets `insecure-skip-tls-verify`.
    /// Without it such a kubeconfig is refused: the server's certificate
    /// would go unchecked, and anyone on the path could pose as the
    /// cluster and receive the run's checkout and secrets.
    pub insecure_skip_tls_verify: bool,
    /// Accept a kubeconfig whose server is `http://`. Without it such a
    /// kubeconfig is refused: its bearer token, and every run's Secret
    /// and checkout, would cross the network in plain text.
    pub insecure_plain_http: bool,
}

/// The kubeconfig `source` names, checked to have the context it will use.
///
/// # Errors
/// [`ExecutorError::InvalidInput`] naming the file, the variable or the
/// context, and what to do.
pub(crate) fn read(source: &KubeconfigSource) -> Result<Kubeconfig, ExecutorError> {
    let kubeconfig = match &source.kubeconfig {
        Some(path) => read_file(path, "KubeconfigSource::kubeconfig")?,
        None => match std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
            Some(list) => {
                let named: Vec<PathBuf> = std::env::split_paths(&list)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect();
                // As kubectl: files KUBECONFIG names that are missing are
                // passed over, but not all of them.
                let present: Vec<&PathBuf> = named.iter().filter(|p| p.exists()).collect();
                let Some(first) = named.first() else {
                    return Err(no_kubeconfig());
                };
                if present.is_empty() {
                    return Err(ExecutorError::InvalidInput(format!(
                        "KUBECONFIG {}: stat {}: no such file or directory; point KUBECONFIG at a kubeconfig (kubectl config view shows the one kubectl uses), or name one with KubeconfigSource::kubeconfig",
                        list.to_string_lossy(),
                        first.display()
                    )));
                }
                let mut merged = Kubeconfig::default();
                for path in present {
                    merged = merged.merge(read_file(path, "KUBECONFIG")?).map_err(|e| {
                        ExecutorError::InvalidInput(format!(
                            "KUBECONFIG {}: {e}",
                            list.to_string_lossy()
                        ))
                    })?;
                }
                merged
            }
            None => {
                let path = std::env::var_os("HOME")
                    .map(|home| Path::new(&home).join(".kube").join("config"))
                    .filter(|p| p.exists())
                    .ok_or_else(no_kubeconfig)?;
                read_file(&path, "the kubeconfig")?
            }
        },
    };
    check_context(&kubeconfig, source.context.as_deref())?;
    Ok(kubeconfig)
}

fn no_kubeconfig() -> ExecutorError {
    ExecutorError::InvalidInput(
        "no kubeconfig: KUBECONFIG is not set and ~/.kube/config does not exist; point KUBECONFIG or KubeconfigSource::kubeconfig at the cluster's kubeconfig".into(),
    )
}

/// One kubeconfig file; `named` says how it was named.
fn read_file(path: &Path, named: &str) -> Result<Kubeconfig, ExecutorError> {
    if let Err(err) = std::fs::metadata(path) {
        let words = match err.kind() {
            std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
            _ => err.to_string(),
        };
        return Err(ExecutorError::InvalidInput(format!(
            "{named} {}: stat {}: {words}",
            path.display(),
            path.display()
        )));
    }
    Kubeconfig::read_from(path).map_err(|e| {
        ExecutorError::InvalidInput(format!(
            "{named} {}: {e}; it must be a kubeconfig as kubectl reads it",
            path.display()
        ))
    })
}

/// The context the client will use is in the kubeconfig, with its cluster
/// and user.
fn check_context(kubeconfig: &Kubeconfig, asked: Option<&str>) -> Result<(), ExecutorError> {
    let names: Vec<&str> = kubeconfig
        .contexts
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    let has = if names.is_empty() {
        "it has none".to_string()
    } else {
        format!("it has {}", names.join(", "))
    };
    let name = match asked.or(kubeconfig.current_context.as_deref()) {
        Some(name) if !name.is_empty() => name,
        _ => {
            return Err(ExecutorError::InvalidInput(format!(
                "current-context is not set in the kubeconfig ({has}); name one with KubeconfigSource::context, or set it with kubectl config use-context NAME"
            )))
        }
    };
    let Some(context) = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == name)
        .and_then(|c| c.context.as_ref())
    else {
        let how = if asked.is_some() {
            "name one of its contexts with KubeconfigSource::context"
        } else {
            "set one of its contexts with kubectl config use-context NAME"
        };
        return Err(ExecutorError::InvalidInput(format!(
            "context was not found for specified context: {name} ({has}); {how}"
        )));
    };
    let cluster = &context.cluster;
    if !kubeconfig.clusters.iter().any(|c| &c.name == cluster) {
        return Err(ExecutorError::InvalidInput(format!(
            "cluster \"{cluster}\" of context {name} was not found in the kubeconfig; add it (kubectl config set-cluster) or use another context"
        )));
    }
    if let Some(user) = &context.user {
        if !kubeconfig.auth_infos.iter().any(|a| &a.name == user) {
            return Err(ExecutorError::InvalidInput(format!(
                "user \"{user}\" of context {name} was not found in the kubeconfig; add it (kubectl config set-credentials) or use another context"
            )));
        }
    }
    Ok(())
}

/// Where the kubeconfig's current user keeps its client certificate, for
/// an error about it: the file, or the user whose data holds it.
pub(crate) fn client_certificate_of(source: &KubeconfigSource) -> String {
    let kubeconfig = read(source);
    let Ok(kubeconfig) = kubeconfig else {
        return "the current user's".into();
    };
    let context = source
        .context
        .clone()
        .or_else(|| kubeconfig.current_context.clone())
        .unwrap_or_default();
    let user = kubeconfig
        .contexts
        .iter()
        .find(|c| c.name == context)
        .and_then(|c| c.context.as_ref())
        .and_then(|c| c.user.clone())
        .unwrap_or_default();
    let auth = kubeconfig
        .auth_infos
        .iter()
        .find(|a| a.name == user)
        .and_then(|a| a.auth_info.as_ref());
    match auth.and_then(|a| a.client_certificate.clone()) {
        Some(path) => path,
        None => format!("client-certificate-data of user {user}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Kubeconfig {
        Kubeconfig::from_yaml(text).unwrap()
    }

    const TWO: &str = "apiVersion: v1\nkind: Config\ncurrent-context: a\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\n- name: b\n  context: {cluster: gone, user: u}\n";

    #[test]
    fn a_missing_context_is_worded_as_kubectl_words_it() {
        let err = check_context(&config(TWO), Some("nope"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("context was not found for specified context: nope (it has a, b)"),
            "{err}"
        );
        assert!(err.contains("KubeconfigSource::context"), "{err}");
        let err = check_context(&config(TWO), Some("b"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("cluster \"gone\" of context b"), "{err}");
        assert!(check_context(&config(TWO), None).is_ok());
        let none = TWO.replace("current-context: a\n", "");
        let err = check_context(&config(&none), None).unwrap_err().to_string();
        assert!(err.contains("current-context is not set"), "{err}");
    }

    #[test]
    fn a_missing_file_is_worded_as_kubectl_words_it() {
        let source = KubeconfigSource {
            kubeconfig: Some("/nonexistent/kubeconfig".into()),
            ..KubeconfigSource::default()
        };
        let err = read(&source).unwrap_err().to_string();
        assert!(
            err.contains("KubeconfigSource::kubeconfig /nonexistent/kubeconfig: stat /nonexistent/kubeconfig: no such file or directory"),
            "{err}"
        );
    }
}
