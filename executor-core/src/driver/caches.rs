//! Restoring a run's caches after start and saving them after its last step.

use std::time::Instant;

use super::millis;
use crate::cache::CacheResult;
use crate::events::Event;
use crate::tar::{UnpackError, UnpackLimits};
use crate::{DriverOptions, Executor, ExecutorError, RunHandle, RunLog, RunSpec};

fn folder_size(dir: &std::path::Path) -> u64 {
    walkdir::WalkDir::new(dir)
        .follow_links(false)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

/// Streams each cache's host copy in; a cold or failed cache is logged,
/// never fatal: a cache only saves time.
pub(super) async fn restore_caches(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    log: &RunLog,
    options: &DriverOptions,
    deadline: Instant,
) -> Vec<CacheResult> {
    let mut results = Vec::new();
    for cache in &spec.caches {
        let path = cache.resolve(&handle.work_dir);
        let mut r = CacheResult {
            key: cache.key.clone(),
            path: path.clone(),
            ..CacheResult::default()
        };
        let Some(store) = &options.caches else {
            r.note = Some("no cache folder configured".into());
            log.emit(Event::CacheRestored {
                at: time::OffsetDateTime::now_utc(),
                cache: r.clone(),
            });
            results.push(r);
            continue;
        };
        let own = store.for_runner(&spec.runner).namespace(spec.trust);
        r.namespace = spec.trust;
        match own.restorable(&cache.key) {
            Ok(None) => {
                log.line(&format!(
                    "cache {}: cold (no host copy yet); the run goes on without it",
                    cache.key
                ));
                r.note = Some("cold: no host copy yet".into());
            }
            Ok(Some((dir, _guard, from))) => {
                r.restored_from = Some(from);
                let clock = Instant::now();
                let size = folder_size(&dir);
                match tokio::time::timeout_at(
                    deadline.into(),
                    executor.copy_in(handle, &dir, &path),
                )
                .await
                {
                    Ok(Ok(())) => {
                        r.hit = true;
                        r.size_in = size;
                        r.ms_in = millis(clock);
                        log.line(&format!(
                            "cache {}: restored {size} bytes into {path} in {} ms",
                            cache.key, r.ms_in
                        ));
                    }
                    Ok(Err(err)) => {
                        log.line(&format!(
                            "cache {}: restore failed, going on without it: {err}",
                            cache.key
                        ));
                        r.note = Some(format!("restore failed: {err}"));
                    }
                    Err(_) => r.note = Some("restore ran out of run time".into()),
                }
            }
            Err(err) => {
                log.line(&format!(
                    "cache {}: unreadable host copy, going on without it: {err}",
                    cache.key
                ));
                r.note = Some(format!("unreadable host copy: {err}"));
            }
        }
        log.emit(Event::CacheRestored {
            at: time::OffsetDateTime::now_utc(),
            cache: r.clone(),
        });
        results.push(r);
    }
    results
}

/// Streams each cache back into a fresh host folder and swaps it in only
/// when whole; too large, hostile or broken streams leave the old copy.
pub(super) async fn save_caches(
    executor: &dyn Executor,
    handle: &RunHandle,
    spec: &RunSpec,
    log: &RunLog,
    options: &DriverOptions,
    deadline: Instant,
    results: &mut [CacheResult],
) {
    let Some(store) = &options.caches else { return };
    for (cache, r) in spec.caches.iter().zip(results.iter_mut()) {
        let store = store.for_runner(&spec.runner).namespace(spec.trust);
        let pending = match store.begin_save(&cache.key) {
            Ok(p) => p,
            Err(err) => {
                r.note = Some(format!("not saved: {err}"));
                log.emit(Event::CacheSaved {
                    at: time::OffsetDateTime::now_utc(),
                    cache: r.clone(),
                });
                continue;
            }
        };
        let limits = UnpackLimits {
            max_bytes: store.max_bytes,
            ..UnpackLimits::default()
        };
        let clock = Instant::now();
        let copied = tokio::time::timeout_at(
            deadline.into(),
            executor.copy_out(handle, &r.path, pending.folder(), limits),
        )
        .await;
        // The copy's time, before the commit removes the copy it replaces:
        // that removal is the store's housekeeping, not bringing data back.
        let ms_out = millis(clock);
        let why = match copied {
            Ok(Ok(summary)) if !summary.is_whole() => {
                let first = summary
                    .refused
                    .first()
                    .map_or_else(String::new, |r| format!(": {:?} {}", r.path, r.reason));
                format!(
                    "not saved: {} entries refused{first}",
                    summary.refused_count
                )
            }
            Ok(Ok(summary)) => match store.commit(pending) {
                Ok(()) => {
                    r.saved = true;
                    r.size_out = summary.bytes;
                    r.ms_out = ms_out;
                    log.line(&format!(
                        "cache {}: saved {} bytes from {} in {} ms",
                        cache.key, summary.bytes, r.path, r.ms_out
                    ));
                    log.emit(Event::CacheSaved {
                        at: time::OffsetDateTime::now_utc(),
                        cache: r.clone(),
                    });
                    continue;
                }
                Err(err) => format!("not saved: {err}"),
            },
            Ok(Err(ExecutorError::Unpack(UnpackError::TooLarge { limit }))) => {
                format!("not saved: larger than the cache limit of {limit} bytes (CacheStore::max_bytes)")
            }
            Ok(Err(err)) => format!("not saved: {err}"),
            Err(_) => "not saved: ran out of run time".to_string(),
        };
        log.line(&format!(
            "warning: cache {}: {why}; the old copy stays",
            cache.key
        ));
        r.note = Some(why);
        log.emit(Event::CacheSaved {
            at: time::OffsetDateTime::now_utc(),
            cache: r.clone(),
        });
    }
}
