//! Registry credentials, read as the docker CLI reads them: the
//! `config.json` in `$DOCKER_CONFIG` (else `~/.docker`), its `auths`
//! (what `docker login` writes), and its credential helpers
//! (`credHelpers` for one registry, `credsStore` for all), which run as
//! `docker-credential-NAME get`.
//!
//! A pull sends the credentials of the image's registry only, and nothing
//! here is ever logged or printed: [`Credentials`] has no `Debug` that
//! shows them.
//!
//! ```
//! use executor_docker::RegistryAuth;
//! let config = r#"{"auths": {"registry.example:5000": {"auth": "dXNlcjpwYXNz"}}}"#;
//! let auth = RegistryAuth::from_json(config, "config.json").unwrap();
//! assert!(auth.names_credentials_for("registry.example:5000/team/app:1"));
//! assert!(!auth.names_credentials_for("busybox"));
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use executor_core::ExecutorError;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

/// What Docker Hub's credentials are filed under in `config.json`.
const DOCKER_HUB_KEY: &str = "https://index.docker.io/v1/";

/// How long a credential helper may take to answer.
const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

/// The credentials of the registries a run may pull from. `Default` has
/// none: every pull is anonymous.
#[derive(Default, Clone)]
pub struct RegistryAuth {
    /// Where they were read from, for messages.
    source: String,
    auths: HashMap<String, Entry>,
    store: Option<String>,
    helpers: HashMap<String, String>,
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut registries: Vec<&String> = self.auths.keys().collect();
        registries.sort();
        f.debug_struct("RegistryAuth")
            .field("source", &self.source)
            .field("registries", &registries)
            .field("store", &self.store)
            .field("helpers", &self.helpers)
            .finish()
    }
}

/// The parts of `config.json` that bear on pulls.
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ConfigFile {
    #[serde(default)]
    auths: HashMap<String, Entry>,
    #[serde(default)]
    creds_store: Option<String>,
    #[serde(default)]
    cred_helpers: HashMap<String, String>,
}

/// One registry's entry under `auths`.
#[derive(Deserialize, Default, Clone)]
struct Entry {
    /// base64 of `user:password`, as `docker login` writes it.
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default, rename = "identitytoken")]
    identity_token: Option<String>,
}

/// What a credential helper's `get` prints.
#[derive(Deserialize)]
struct HelperAnswer {
    #[serde(rename = "Username", default)]
    username: String,
    #[serde(rename = "Secret", default)]
    secret: String,
}

/// The credentials a pull sends for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The registry as the engine is told it (`serveraddress`).
    pub server: String,
    /// A user and password, or an identity token (`Username` `<token>`
    /// from a helper, or `identitytoken` in `auths`).
    pub secret: Secret,
}

/// A registry secret.
#[derive(Clone, PartialEq, Eq)]
pub enum Secret {
    /// A user name and password.
    Password {
        /// The user.
        username: String,
        /// The password.
        password: String,
    },
    /// An OAuth identity token.
    IdentityToken(String),
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Secret::Password { username, .. } => f
                .debug_struct("Password")
                .field("username", username)
                .finish_non_exhaustive(),
            Secret::IdentityToken(_) => f.write_str("IdentityToken(..)"),
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("server", &self.server)
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// As bollard sends them in the pull's `X-Registry-Auth`.
    pub(crate) fn to_bollard(&self) -> bollard::auth::DockerCredentials {
        let mut creds = bollard::auth::DockerCredentials {
            serveraddress: Some(self.server.clone()),
            ..Default::default()
        };
        match &self.secret {
            Secret::Password { username, password } => {
                creds.username = Some(username.clone());
                creds.password = Some(password.clone());
            }
            Secret::IdentityToken(token) => creds.identitytoken = Some(token.clone()),
        }
        creds
    }
}

impl RegistryAuth {
    /// Reads the docker CLI's configuration: `$DOCKER_CONFIG/config.json`,
    /// else `$HOME/.docker/config.json`. No file there means no
    /// credentials, as for the docker CLI.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] naming the file when it cannot be
    /// read or is not the docker CLI's JSON.
    pub fn from_docker_config() -> Result<Self, ExecutorError> {
        let dir = match std::env::var_os("DOCKER_CONFIG") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => match std::env::var_os("HOME") {
                Some(home) => Path::new(&home).join(".docker"),
                None => return Ok(Self::default()),
            },
        };
        Self::from_file(&dir.join("config.json"))
    }

    /// Reads a docker CLI `config.json`; a missing file has no credentials.
    ///
    /// # Errors
    /// As [`RegistryAuth::from_docker_config`].
    pub fn from_file(path: &Path) -> Result<Self, ExecutorError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(err) => {
                return Err(ExecutorError::InvalidInput(format!(
                    "cannot read the registry credentials in {} ({err}); make it readable, or point DOCKER_CONFIG at another folder",
                    path.display()
                )))
            }
        };
        Self::from_json(&text, &path.display().to_string())
    }

    /// Reads `config.json`'s text; `source` names it in messages.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] naming `source` when it is not the
    /// docker CLI's JSON.
    pub fn from_json(text: &str, source: &str) -> Result<Self, ExecutorError> {
        // serde_json's message names the line and column, never the value.
        let file: ConfigFile = serde_json::from_str(text).map_err(|err| {
            ExecutorError::InvalidInput(format!(
                "the registry credentials in {source} are not the docker CLI's JSON ({err}); fix the file or run `docker login` again"
            ))
        })?;
        let auths = file
            .auths
            .into_iter()
            .map(|(key, entry)| (hostname(&key), entry))
            .collect();
        let helpers = file
            .cred_helpers
            .into_iter()
            .map(|(key, helper)| (hostname(&key), helper))
            .collect();
        Ok(RegistryAuth {
            source: source.to_string(),
            auths,
            store: file.creds_store.filter(|s| !s.is_empty()),
            helpers,
        })
    }

    /// Whether any credentials are named for `image`'s registry (an
    /// `auths` entry, a helper for it, or a store for all).
    pub fn names_credentials_for(&self, image: &str) -> bool {
        let registry = registry_of(image);
        self.store.is_some()
            || self.helpers.contains_key(registry)
            || self.auths.contains_key(registry)
            || (registry == "docker.io" && self.hub_entry().is_some())
    }

    /// The credentials for `image`'s registry, as the docker CLI finds
    /// them: the registry's helper, else the store, else `auths`. `None`:
    /// pull anonymously.
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] naming the helper or the entry when
    /// a helper cannot be run or fails, or an entry cannot be read.
    pub async fn credentials_for(&self, image: &str) -> Result<Option<Credentials>, ExecutorError> {
        let registry = registry_of(image);
        let server = if registry == "docker.io" {
            DOCKER_HUB_KEY.to_string()
        } else {
            registry.to_string()
        };
        if let Some(helper) = self.helpers.get(registry).or(self.store.as_ref()) {
            return helper_get(helper, &server).await;
        }
        let entry = if registry == "docker.io" {
            self.hub_entry()
        } else {
            self.auths.get(registry)
        };
        let Some(entry) = entry else {
            return Ok(None);
        };
        self.entry_credentials(entry, server).map(Some)
    }

    fn hub_entry(&self) -> Option<&Entry> {
        ["index.docker.io", "docker.io", "registry-1.docker.io"]
            .iter()
            .find_map(|key| self.auths.get(*key))
    }

    fn entry_credentials(
        &self,
        entry: &Entry,
        server: String,
    ) -> Result<Credentials, ExecutorError> {
        if let Some(token) = entry.identity_token.as_ref().filter(|t| !t.is_empty()) {
            return Ok(Credentials {
                server,
                secret: Secret::IdentityToken(token.clone()),
            });
        }
        let unreadable = || {
            ExecutorError::InvalidInput(format!(
                "the credentials for {server} in {} cannot be read (`auth` is not base64 of USER:PASSWORD); run `docker login {server}` again",
                self.source
            ))
        };
        let (username, password) = match (&entry.auth, &entry.username, &entry.password) {
            (Some(auth), _, _) if !auth.is_empty() => {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .map_err(|_| unreadable())?;
                let decoded = String::from_utf8(decoded).map_err(|_| unreadable())?;
                let (user, pass) = decoded.split_once(':').ok_or_else(unreadable)?;
                (user.to_string(), pass.to_string())
            }
            (_, Some(user), Some(pass)) => (user.clone(), pass.clone()),
            _ => return Err(unreadable()),
        };
        Ok(Credentials {
            server,
            secret: Secret::Password { username, password },
        })
    }
}

/// A registry key as the docker CLI compares them: without scheme or path
/// (`https://host:5000/v2/` is `host:5000`), Docker Hub's keys as `docker.io`.
fn hostname(key: &str) -> String {
    let bare = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = bare.split('/').next().unwrap_or(bare);
    match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
        other => other.to_string(),
    }
}

/// The registry `image` is pulled from: its first part when that is a
/// host (it has a `.` or a `:`, or is `localhost`), else `docker.io`.
pub(crate) fn registry_of(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first
        }
        _ => "docker.io",
    }
}

/// Runs `docker-credential-HELPER get` with `server` on its stdin, as the
/// docker CLI does. A helper that has nothing for the server says so on
/// stdout and exits non-zero: that is an anonymous pull.
async fn helper_get(helper: &str, server: &str) -> Result<Option<Credentials>, ExecutorError> {
    let program = format!("docker-credential-{helper}");
    let failed = |why: String| {
        ExecutorError::InvalidInput(format!(
            "the credential helper {program} (named in the docker CLI's config.json) {why}; install it on PATH, or remove it from config.json"
        ))
    };
    // A name with a `/` would run a path (relative to the current
    // folder, or anywhere), never a helper found on PATH.
    if helper.contains('/') || helper.is_empty() {
        return Err(failed(
            "is not a helper's name (a name holds no `/`: it is found on PATH)".into(),
        ));
    }
    let mut child = tokio::process::Command::new(&program)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|err| failed(format!("cannot be run ({err})")))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that exits without reading is judged by its answer.
        let _ = stdin.write_all(server.as_bytes()).await;
    }
    let output = tokio::time::timeout(HELPER_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| {
            failed(format!(
                "did not answer within {}s",
                HELPER_TIMEOUT.as_secs()
            ))
        })?
        .map_err(|err| failed(format!("failed ({err})")))?;
    if !output.status.success() {
        // docker-credential-helpers' own words for "nothing stored".
        if String::from_utf8_lossy(&output.stdout).contains("credentials not found") {
            return Ok(None);
        }
        return Err(failed(format!("failed for {server} ({})", output.status)));
    }
    let answer: HelperAnswer = serde_json::from_slice(&output.stdout).map_err(|_| {
        failed(format!(
            "answered for {server} with something other than its JSON"
        ))
    })?;
    let secret = if answer.username == "<token>" {
        Secret::IdentityToken(answer.secret)
    } else {
        Secret::Password {
            username: answer.username,
            password: answer.secret,
        }
    };
    Ok(Some(Credentials {
        server: server.to_string(),
        secret,
    }))
}

#[cfg(test)]
mod tests;
