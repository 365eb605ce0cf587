//! The operator's settings of a run's container beyond its limits: what
//! it mounts, its runtime, `/dev/shm`, hosts, DNS, devices and
//! privileged mode, as GitLab Runner's `[runners.docker]` takes them and
//! the docker CLI spells them.

use executor_core::{ExecutorError, Trust};

/// A host path or named volume mounted into the run's container
/// (`--volume SRC:DST[:ro]`). What the runner did not make it never
/// removes: a named volume stays after `stop` and `cleanup`.
///
/// ```
/// use executor_docker::Mounted;
/// let cache: Mounted = "warm-cache:/cache:ro".parse().unwrap();
/// assert_eq!((cache.source.as_str(), cache.target.as_str(), cache.read_only), ("warm-cache", "/cache", true));
/// assert!(!cache.is_host_path());
/// assert!("relative:/x".parse::<Mounted>().is_ok());
/// assert!("/src:relative".parse::<Mounted>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mounted {
    /// An absolute host path, or a volume's name.
    pub source: String,
    /// Where it is in the container: an absolute path.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
}

impl Mounted {
    /// Whether the source is a host path (it starts with `/`), not a
    /// named volume.
    pub fn is_host_path(&self) -> bool {
        self.source.starts_with('/')
    }
}

impl std::str::FromStr for Mounted {
    type Err = String;

    /// `SRC:DST`, `SRC:DST:ro` or `SRC:DST:rw`, as `docker run -v`.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{text:?} is not SRC:DST[:ro]: {why}");
        let mut parts = text.split(':');
        let (Some(source), Some(target)) = (parts.next(), parts.next()) else {
            return Err(bad("give a host path or volume name and where it goes"));
        };
        let read_only = match parts.next() {
            None | Some("rw") => false,
            Some("ro") => true,
            Some(other) => return Err(bad(&format!("{other:?} is neither ro nor rw"))),
        };
        if parts.next().is_some() {
            return Err(bad("too many `:`"));
        }
        if source.is_empty() {
            return Err(bad("the source is empty"));
        }
        if !target.starts_with('/') || target.split('/').any(|p| p == "..") {
            return Err(bad("the destination must be an absolute path without `..`"));
        }
        Ok(Mounted {
            source: source.to_string(),
            target: target.trim_end_matches('/').to_string(),
            read_only,
        })
    }
}

/// The operator's settings of each run's container; `Default` is none
/// of them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HostSettings {
    /// Host paths and named volumes mounted into the container.
    pub volumes: Vec<Mounted>,
    /// Privileged mode (`--privileged`: Docker-in-Docker); never for
    /// untrusted code.
    pub privileged: bool,
    /// The engine's runtime for the container (`--runtime`: `runsc` for
    /// gVisor, `sysbox-runc`); `None` is the engine's default.
    pub runtime: Option<String>,
    /// Size of `/dev/shm` in bytes (`--shm-size`).
    pub shm_size: Option<i64>,
    /// `HOST:IP` entries added to `/etc/hosts` (`--add-host`).
    pub extra_hosts: Vec<String>,
    /// DNS servers (`--dns`).
    pub dns: Vec<String>,
    /// Host devices (`--device /dev/x[:/dev/y[:rwm]]`); never for
    /// untrusted code.
    pub devices: Vec<String>,
}

/// The run's own folders, which no mount may cover or sit in.
const RUN_FOLDERS: [&str; 4] = ["/work", "/steps", "/outputs", "/.knotless"];

impl HostSettings {
    /// Checks the settings for a run of `trust`: untrusted code gets no
    /// privileged mode, no device and nothing writable from outside its
    /// container; no mount covers the run's own folders.
    ///
    /// ```
    /// use executor_core::Trust;
    /// use executor_docker::HostSettings;
    /// let privileged = HostSettings { privileged: true, ..HostSettings::default() };
    /// assert!(privileged.check(Trust::Trusted).is_ok());
    /// assert!(privileged.check(Trust::Untrusted).is_err());
    /// ```
    ///
    /// # Errors
    /// [`ExecutorError::InvalidInput`] naming the field and what to do.
    pub fn check(&self, trust: Trust) -> Result<(), ExecutorError> {
        let refuse = |msg: String| Err(ExecutorError::InvalidInput(msg));
        for mount in &self.volumes {
            let covers = |folder: &str| {
                mount.target == folder
                    || folder.starts_with(&format!("{}/", mount.target))
                    || mount.target.starts_with(&format!("{folder}/"))
                    || mount.target.is_empty()
            };
            if let Some(folder) = RUN_FOLDERS.iter().find(|f| covers(f)) {
                return refuse(format!(
                    "DockerOptions::volumes {}:{}: it would cover or sit in the run's own folder {folder}; mount it elsewhere",
                    mount.source, mount.target
                ));
            }
        }
        if trust != Trust::Untrusted {
            return Ok(());
        }
        if self.privileged {
            return refuse(
                "DockerOptions::privileged: untrusted code never runs privileged (it would own the host); run it without, or as a trusted trigger".into(),
            );
        }
        if let Some(device) = self.devices.first() {
            return refuse(format!(
                "DockerOptions::devices {device}: untrusted code gets no host device; run it without, or as a trusted trigger"
            ));
        }
        if let Some(mount) = self.volumes.iter().find(|m| !m.read_only) {
            return refuse(format!(
                "DockerOptions::volumes {}:{}: untrusted code mounts nothing writable from outside its container; add `:ro`",
                mount.source, mount.target
            ));
        }
        Ok(())
    }
}
