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
