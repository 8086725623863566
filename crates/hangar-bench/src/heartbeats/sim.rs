//! The simulated fleet: its rows seeded before web starts, and each
//! simulated worker's loop (register, heartbeat, report) as a task of the
//! load generator's one runtime.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use hangar_api::{Heartbeat, RegisterWorker, VolumeReport};
use hangar_client::Client;
use hangar_store::{fleet_volume_handle, Backend, Store, WorkerInfo};
use tokio::sync::{Mutex, Semaphore};

use crate::procs::now_ms;

/// The name of simulated worker `i`.
fn sim_name(i: usize) -> String {
    format!("sim-{i:04}")
}

fn sim_identity(i: usize) -> String {
    format!("sim-identity-{i:04}")
}

/// Worker `i`'s handles start with this (a handle is then a UUID's shape).
fn handle_prefix(i: usize) -> String {
    format!("{i:08x}-0000-4000-8000-")
}

fn registration(i: usize, volumes: usize) -> anyhow::Result<RegisterWorker> {
    // Built from JSON so fields added to the wire type later take their
    // defaults here too.
    Ok(serde_json::from_value(serde_json::json!({
        "name": sim_name(i),
        "state_identity": sim_identity(i),
        "platform": "linux",
        "tags": ["sim"],
        "version": env!("CARGO_PKG_VERSION"),
        "volumes": volumes,
    }))?)
}

fn heartbeat(generation: i64, volumes: usize) -> anyhow::Result<Heartbeat> {
    Ok(serde_json::from_value(serde_json::json!({
        "generation": generation,
        "containers": 0,
        "volumes": volumes,
    }))?)
}

fn report(generation: i64, handles: &[String]) -> anyhow::Result<VolumeReport> {
    Ok(serde_json::from_value(serde_json::json!({
        "generation": generation,
        "handles": handles,
    }))?)
}

/// Workers seeded per call of the store's bulk insert (one transaction).
const SEED_WORKERS_PER_BATCH: usize = 100;

/// Registers every simulated worker in the database and inserts its
/// volumes' rows (`Store::insert_fleet_volumes`: the database generates
/// them), before web starts. The volumes are made `volumes_age` before
/// now: an old fleet has its caches, scratch and artifacts past their
/// collectors' ages from the first garbage collection on.
pub async fn seed(
    url: &str,
    workers: usize,
    volumes_per_worker: usize,
    volumes_age: Duration,
) -> anyhow::Result<()> {
    let store = Store::open(url)
        .await
        .with_context(|| format!("open {url} to seed it"))?;
    let per_worker = u32::try_from(volumes_per_worker).context("--volumes is too large")?;
    // Registered a minute ago: web starts with every seeded worker past its
    // heartbeat TTL, as after a restart, so the first run's registrations
    // are not refused as doubles of workers that look alive.
    let now = now_ms() - 60_000;
    // PostgreSQL takes registrations on several connections at once;
    // SQLite has one.
    let at_once = match store.backend() {
        Backend::Postgres => 8,
        Backend::Sqlite => 1,
    };
    let started = Instant::now();
    let mut batch_start = 0;
    while batch_start < workers {
        let batch: Vec<usize> =
            (batch_start..workers.min(batch_start + SEED_WORKERS_PER_BATCH)).collect();
        let mut regs = tokio::task::JoinSet::new();
        for chunk in batch.chunks(batch.len().div_ceil(at_once)) {
            let store = store.clone();
            let chunk = chunk.to_vec();
            regs.spawn(async move {
                for i in chunk {
                    store
                        .register_worker(&worker_info(i, volumes_per_worker), now)
                        .await?;
                }
                Ok::<_, hangar_store::StoreError>(())
            });
        }
        while let Some(done) = regs.join_next().await {
            done??;
        }
        let rows: Vec<(String, String)> = batch
            .iter()
            .map(|&i| (sim_name(i), handle_prefix(i)))
            .collect();
        let made =
            now - i64::try_from(volumes_age.as_millis()).context("--seed-age is too large")?;
        store.insert_fleet_volumes(&rows, per_worker, made).await?;
        batch_start += batch.len();
        if batch_start % 1000 == 0 || batch_start == workers {
            eprintln!(
                "bench heartbeats: seeded {batch_start} of {workers} workers ({:.0}s)",
                started.elapsed().as_secs_f64()
            );
        }
    }
    if store.backend() == Backend::Postgres {
        // Fresh statistics, so web's first queries are planned on the rows
        // as they are rather than on an empty table.
        store.vacuum_after_bulk_insert().await?;
    }
    store.close().await;
    Ok(())
}

/// The highest volume number below `volumes` that is a cache in
/// [`hangar_store::fleet_volume`]'s mix (numbers ending in 0 to 6).
fn last_cache(volumes: u64) -> u64 {
    let last = volumes - 1;
    last - last % 10 + (last % 10).min(6)
}

/// Refuses a database that does not hold a seeded fleet of this size (its
/// last worker and that worker's last cache), so that reusing one never
/// measures reports against missing rows.
pub(super) async fn check_seeded(
    url: &str,
    workers: usize,
    volumes_per_worker: usize,
) -> anyhow::Result<()> {
    let store = Store::open(url)
        .await
        .with_context(|| format!("open {url} to check its seeded fleet"))?;
    let last = workers - 1;
    let worker = store.get_worker(&sim_name(last)).await?;
    let volume = match volumes_per_worker {
        0 => None,
        // The last cache: caches outlive a garbage collection of an old
        // fleet (its scratch and artifacts do not).
        n => store
            .get_volume(&fleet_volume_handle(
                &handle_prefix(last),
                last_cache(n as u64),
            ))
            .await?
            .map(|_| ()),
    };
    let beyond = store.get_worker(&sim_name(workers)).await?;
    store.close().await;
    if worker.is_none() || (volumes_per_worker > 0 && volume.is_none()) || beyond.is_some() {
        anyhow::bail!(
            "--reuse-seeded: the database does not hold a seeded fleet of {workers} workers x \
             {volumes_per_worker} volumes; run once without --reuse-seeded to seed it"
        );
    }
    Ok(())
}

fn worker_info(i: usize, volumes: usize) -> WorkerInfo {
    WorkerInfo {
        name: sim_name(i),
        state_identity: sim_identity(i),
        platform: "linux".into(),
        tags: vec!["sim".into()],
        team: None,
        version: env!("CARGO_PKG_VERSION").into(),
        resource_types_json: "[]".into(),
        ephemeral: false,
        containers: 0,
        volumes: volumes as i64,
        api_url: None,
        allow_privileged: false,
    }
}

/// What the simulated workers measured, per web node.
#[derive(Default)]
pub(super) struct Samples {
    /// Per node: heartbeat latencies (ms).
    pub(super) heartbeat_ms: Vec<Vec<f64>>,
    pub(super) heartbeat_errors: usize,
    pub(super) report_ms: Vec<f64>,
    pub(super) report_errors: usize,
    /// How late each measured call was sent after its tick was due (ms):
    /// near zero unless the load generator falls behind.
    pub(super) send_lag_ms: Vec<f64>,
    /// Workers through their first registration, and when the last one
    /// was (seconds after the fleet started).
    pub(super) registered: usize,
    pub(super) all_registered_after_s: Option<f64>,
}

/// One simulated worker's plan.
pub(super) struct SimWorker {
    pub(super) i: usize,
    pub(super) node: usize,
    pub(super) volumes: usize,
    pub(super) heartbeat_interval: Duration,
    pub(super) report_interval: Duration,
    /// When it registers (its first heartbeat is one interval later).
    pub(super) register_at: tokio::time::Instant,
    pub(super) first_report_at: tokio::time::Instant,
    pub(super) measure_from: Instant,
    pub(super) until: Instant,
    /// When the fleet started, and how many workers it has.
    pub(super) fleet_started: Instant,
    pub(super) fleet_size: usize,
}

/// One simulated worker: registers (at most `registering` at once, so a
/// fleet starting together does not open a connection each), then
/// heartbeats and reports on its intervals until `until`. `client` is its
/// web node's shared client: workers on one node reuse its connections.
pub(super) async fn simulate_worker(
    w: SimWorker,
    client: Client,
    registering: Arc<Semaphore>,
    samples: Arc<Mutex<Samples>>,
) -> anyhow::Result<()> {
    let name = sim_name(w.i);
    let prefix = handle_prefix(w.i);
    let mut handles: Vec<String> = (0..w.volumes as u64)
        .map(|v| fleet_volume_handle(&prefix, v))
        .collect();
    tokio::time::sleep_until(w.register_at).await;
    let fleet = client;
    let (fleet, registering) = (&fleet, &registering);
    let register = |handles: Vec<String>| async move {
        let _permit = registering.acquire().await?;
        let registered = fleet.register(&registration(w.i, w.volumes)?).await?;
        let generation = registered.generation;
        anyhow::Ok((
            fleet.with_token(&registered.token),
            heartbeat(generation, handles.len())?,
            report(generation, &handles)?,
        ))
    };
    let (mut client, mut hb_body, mut report_body) = register(handles.clone()).await?;
    {
        let mut s = samples.lock().await;
        s.registered += 1;
        if s.registered == w.fleet_size {
            let after = w.fleet_started.elapsed().as_secs_f64();
            s.all_registered_after_s = Some(after);
            eprintln!(
                "bench heartbeats: all {} workers registered after {after:.1}s",
                w.fleet_size
            );
        }
    }
    let mut hb =
        tokio::time::interval_at(w.register_at + w.heartbeat_interval, w.heartbeat_interval);
    hb.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rep = tokio::time::interval_at(w.first_report_at, w.report_interval);
    rep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let (is_heartbeat, due) = tokio::select! {
            due = hb.tick() => (true, due),
            due = rep.tick() => (false, due),
        };
        let sent = Instant::now();
        if sent >= w.until {
            return Ok(());
        }
        let lag_ms = tokio::time::Instant::now()
            .saturating_duration_since(due)
            .as_secs_f64()
            * 1000.0;
        let result = if is_heartbeat {
            client.heartbeat(&name, &hb_body).await.map(|_| ())
        } else {
            let answer = client.report_volumes(&name, &report_body).await;
            // Like a real worker, destroy what web wants gone and stop
            // listing it; the next report lets web delete the rows.
            if let Ok(a) = &answer {
                if !a.destroy.is_empty() {
                    let gone: std::collections::HashSet<&String> = a.destroy.iter().collect();
                    handles.retain(|h| !gone.contains(h));
                    report_body.handles.clone_from(&handles);
                    hb_body.volumes = handles.len() as i64;
                }
            }
            answer.map(|_| ())
        };
        let ms = sent.elapsed().as_secs_f64() * 1000.0;
        if let Err(e) = &result {
            if matches!(
                e.code(),
                Some(hangar_api::codes::REREGISTER | hangar_api::codes::NOT_FOUND)
            ) {
                (client, hb_body, report_body) = register(handles.clone()).await?;
            }
        }
        if sent >= w.measure_from {
            let mut s = samples.lock().await;
            s.send_lag_ms.push(lag_ms);
            match (is_heartbeat, result.is_ok()) {
                (true, true) => s.heartbeat_ms[w.node].push(ms),
                (true, false) => s.heartbeat_errors += 1,
                (false, true) => s.report_ms.push(ms),
                (false, false) => s.report_errors += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_cache_is_the_highest_cache_number() {
        for (volumes, cache) in [
            (1, 0),
            (7, 6),
            (8, 6),
            (10, 6),
            (11, 10),
            (17, 16),
            (1000, 996),
        ] {
            assert_eq!(last_cache(volumes), cache, "{volumes} volumes");
            let v = hangar_store::fleet_volume("w", "p-", cache);
            assert!(
                matches!(
                    v.owner_kind,
                    hangar_core::volumes::OwnerKind::ResourceCache
                        | hangar_core::volumes::OwnerKind::TaskCache
                ),
                "{volumes}: {v:?}"
            );
        }
    }
}
