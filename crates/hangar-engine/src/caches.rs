//! Reusing a cache a worker already holds (a get step's resource cache, a
//! task step's task cache).

use hangar_core::volumes::OwnerKind;

use crate::Engine;

/// The present cache of `kind` and `key` on `worker`, if it has one, with
/// its use recorded so the caches collector measures its retention from
/// this use and not from its creation. A lookup error counts as a miss (the
/// step makes a fresh cache) and is logged; a failed use record is logged,
/// never fatal: it costs the cache an earlier collection, not the step.
pub(crate) async fn reuse_cache(
    engine: &Engine,
    kind: OwnerKind,
    key: &str,
    worker: &str,
) -> Option<String> {
    let present = match engine
        .store()
        .present_volumes_by_owner(kind.as_str(), &[key.to_string()])
        .await
    {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(%worker, error = %e, "cannot look up a cache; making a fresh one");
            return None;
        }
    };
    let handle = present
        .into_iter()
        .find(|(w, _, _)| w == worker)
        .map(|(_, _, h)| h)?;
    if let Err(e) = engine
        .store()
        .mark_volumes_used(std::slice::from_ref(&handle), engine.now())
        .await
    {
        tracing::warn!(%handle, error = %e, "could not record a cache's use");
    }
    Some(handle)
}

/// A task cache to reuse, unless it has gone unused for longer than its
/// `ttl`: then it is released and the step starts with an empty cache, as
/// Concourse's cache ttl promises.
pub(crate) async fn reuse_task_cache(
    engine: &Engine,
    key: &str,
    worker: &str,
    ttl: Option<std::time::Duration>,
) -> Reuse {
    if let Some(ttl) = ttl {
        let present = engine
            .store()
            .present_volumes_by_owner(OwnerKind::TaskCache.as_str(), &[key.to_string()])
            .await
            .unwrap_or_default();
        if let Some((_, _, handle)) = present.into_iter().find(|(w, _, _)| w == worker) {
            if let Ok(Some(volume)) = engine.store().get_volume(&handle).await {
                let last = volume.last_used_at.unwrap_or(volume.created_at);
                let idle_ms = engine.now().saturating_sub(last);
                if idle_ms > ttl.as_millis() as i64 {
                    engine.release_volume(&handle).await;
                    return Reuse::Expired {
                        idle: std::time::Duration::from_millis(idle_ms as u64),
                    };
                }
            }
        }
    }
    match reuse_cache(engine, OwnerKind::TaskCache, key, worker).await {
        Some(handle) => Reuse::Present(handle),
        None => Reuse::Missing,
    }
}

/// What [`reuse_task_cache`] found.
pub(crate) enum Reuse {
    Present(String),
    Missing,
    /// Unused for `idle`, longer than its ttl: released.
    Expired {
        idle: std::time::Duration,
    },
}
