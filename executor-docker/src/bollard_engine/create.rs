//! The body of a container's create call.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, DeviceMapping, EndpointSettings, HostConfig, Mount, MountType,
    MountVolumeOptions, NetworkingConfig,
};

use crate::engine::ContainerSpec;

/// The body of `POST /containers/create` for `spec`, exactly as sent.
pub fn create_body(spec: &ContainerSpec) -> ContainerCreateBody {
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: (!spec.cmd.is_empty()).then(|| spec.cmd.clone()),
        entrypoint: spec.entrypoint.clone(),
        labels: Some(spec.labels.clone()),
        user: spec.user.clone(),
        working_dir: Some(spec.working_dir.clone()),
        env: (!spec.secret_env.is_empty() || !spec.env.is_empty()).then(|| {
            spec.env
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .chain(
                    spec.secret_env
                        .iter()
                        .map(|(k, v)| format!("{k}={}", v.expose())),
                )
                .collect()
        }),
        networking_config: match (&spec.network_mode, spec.network_aliases.is_empty()) {
            (Some(network), false) => Some(NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    network.clone(),
                    EndpointSettings {
                        aliases: Some(spec.network_aliases.clone()),
                        ..Default::default()
                    },
                )])),
            }),
            _ => None,
        },
        host_config: Some(HostConfig {
            memory: spec.memory,
            // No swap beyond the memory limit, so the limit is the limit.
            memory_swap: spec.memory,
            nano_cpus: spec.nano_cpus,
            network_mode: spec.network_mode.clone(),
            security_opt: Some(spec.security_opt.clone()),
            mounts: Some(
                spec.volumes
                    .iter()
                    .map(|path| Mount {
                        target: Some(path.clone()),
                        typ: Some(MountType::VOLUME),
                        // Labelled as the container, so a volume left by a
                        // failed removal is found and removed by cleanup.
                        volume_options: Some(MountVolumeOptions {
                            labels: Some(spec.labels.clone()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .chain(spec.host.volumes.iter().map(|mounted| Mount {
                        // The operator's: never labelled as the run's, so
                        // nothing of the runner's removes it.
                        source: Some(mounted.source.clone()),
                        target: Some(mounted.target.clone()),
                        typ: Some(if mounted.is_host_path() {
                            MountType::BIND
                        } else {
                            MountType::VOLUME
                        }),
                        read_only: Some(mounted.read_only),
                        ..Default::default()
                    }))
                    .collect(),
            ),
            privileged: Some(spec.host.privileged),
            runtime: spec.host.runtime.clone(),
            shm_size: spec.host.shm_size,
            extra_hosts: (!spec.host.extra_hosts.is_empty()).then(|| spec.host.extra_hosts.clone()),
            dns: (!spec.host.dns.is_empty()).then(|| spec.host.dns.clone()),
            devices: (!spec.host.devices.is_empty())
                .then(|| spec.host.devices.iter().map(|d| device(d)).collect()),
            pids_limit: spec.pids_limit,
            cap_drop: (!spec.cap_drop.is_empty()).then(|| spec.cap_drop.clone()),
            cap_add: (!spec.cap_add.is_empty()).then(|| spec.cap_add.clone()),
            readonly_rootfs: spec.read_only.then_some(true),
            tmpfs: spec.read_only.then(|| {
                HashMap::from([("/tmp".to_string(), "rw,nosuid,nodev,mode=1777".to_string())])
            }),
            // A minimal init reaps what steps leave behind.
            init: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `--device` as the docker CLI reads it: `HOST[:CONTAINER[:PERMISSIONS]]`.
fn device(text: &str) -> DeviceMapping {
    let mut parts = text.splitn(3, ':');
    let host = parts.next().unwrap_or_default().to_string();
    let container = parts
        .next()
        .filter(|c| !c.is_empty())
        .map_or_else(|| host.clone(), String::from);
    DeviceMapping {
        path_on_host: Some(host),
        path_in_container: Some(container),
        cgroup_permissions: Some(parts.next().unwrap_or("rwm").to_string()),
    }
}
