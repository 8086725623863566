//! The seeded fault schedule: which fault, on which worker, when, for how
//! long. Pure, so a seed names one schedule for ever.

use std::time::Duration;

use serde::Serialize;

use hangar_core::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultKind {
    /// SIGKILL the worker and everything it started, wipe its work dir,
    /// start it again under the same name (a pod recreated with a new disk).
    KillWipe,
    /// SIGKILL the worker process alone and start it again on the same dir
    /// (a crashed process; its containers live on).
    KillKeep,
    /// SIGSTOP the worker past the TTL, then SIGCONT (a long pause or a
    /// partition that heals).
    Pause,
    /// A memory-hungry step gets the worker OOM-killed by the kernel; the
    /// worker is started again on the same dir.
    Oom,
    /// SIGKILL web (one web node, when there are several) and start it
    /// again on the same database.
    WebRestart,
    /// SIGSTOP one web node, then SIGCONT: sometimes past its build leases,
    /// so another node takes its builds over and it must not write to them
    /// once it wakes (only with several web nodes).
    WebPause,
    /// Stop PostgreSQL and start it again.
    DbRestart,
}

impl FaultKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::KillWipe => "kill-wipe",
            FaultKind::KillKeep => "kill-keep",
            FaultKind::Pause => "pause",
            FaultKind::Oom => "oom",
            FaultKind::WebRestart => "web-restart",
            FaultKind::WebPause => "web-pause",
            FaultKind::DbRestart => "db-restart",
        }
    }

    pub fn hits_a_worker(self) -> bool {
        !matches!(
            self,
            FaultKind::WebRestart | FaultKind::WebPause | FaultKind::DbRestart
        )
    }
}

/// One planned fault.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    /// When, from the start of the run.
    #[serde(serialize_with = "ser_ms")]
    pub at: Duration,
    pub kind: FaultKind,
    /// Which worker (an index), for faults that hit one; for a fault on a
    /// web node, that node is this modulo the number of nodes.
    pub worker: usize,
    /// How long the process (or the database) stays down or paused.
    #[serde(serialize_with = "ser_ms")]
    pub down_for: Duration,
}

fn ser_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

/// Spacing of faults: about one every this long.
pub const FAULT_EVERY: Duration = Duration::from_secs(14);
/// No fault in the first seconds (the fleet starts) nor the last ones.
pub const QUIET_START: Duration = Duration::from_secs(6);
pub const QUIET_END: Duration = Duration::from_secs(6);

/// Plans the faults of a run of `duration` with `workers` workers and the
/// fault kinds `kinds`: every kind at least once when the run is long enough
/// for them, in a seeded order, then again, at seeded times about
/// [`FAULT_EVERY`] apart. `ttl` sets the downtimes: some shorter than it (the
/// worker comes back before web notices), most longer.
pub fn plan(
    seed: u64,
    duration: Duration,
    workers: usize,
    kinds: &[FaultKind],
    ttl: Duration,
) -> Vec<Fault> {
    let mut rng = Rng::new(seed);
    if kinds.is_empty() || workers == 0 || duration <= QUIET_START + QUIET_END {
        return Vec::new();
    }
    let window = duration - QUIET_START - QUIET_END;
    let slots = ((window.as_millis() / FAULT_EVERY.as_millis()) as usize).max(kinds.len());
    let slot = window / slots as u32;
    let mut order: Vec<FaultKind> = Vec::new();
    while order.len() < slots {
        let mut round = kinds.to_vec();
        rng.shuffle(&mut round);
        order.extend(round);
    }
    order.truncate(slots);
    let ttl_ms = ttl.as_millis() as u64;
    order
        .into_iter()
        .enumerate()
        .map(|(i, kind)| {
            let jitter = rng.range(0, (slot.as_millis() as u64 / 3).max(1));
            let at = QUIET_START + slot * i as u32 + Duration::from_millis(jitter);
            let down_ms = match kind {
                // One in four comes back before the TTL runs out.
                FaultKind::KillWipe | FaultKind::KillKeep if rng.chance(1, 4) => {
                    rng.range(ttl_ms / 5, ttl_ms / 2)
                }
                FaultKind::KillWipe | FaultKind::KillKeep | FaultKind::Oom => {
                    rng.range(ttl_ms * 2, ttl_ms * 4)
                }
                FaultKind::Pause => rng.range(ttl_ms * 2, ttl_ms * 5),
                FaultKind::WebRestart => rng.range(500, 2500),
                // Around the 6 s build lease: some end before it runs out.
                FaultKind::WebPause => rng.range(2000, 10_000),
                FaultKind::DbRestart => rng.range(1000, 4000),
            };
            Fault {
                at,
                kind,
                worker: rng.index(workers),
                down_for: Duration::from_millis(down_ms),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [FaultKind; 7] = [
        FaultKind::KillWipe,
        FaultKind::KillKeep,
        FaultKind::Pause,
        FaultKind::Oom,
        FaultKind::WebRestart,
        FaultKind::WebPause,
        FaultKind::DbRestart,
    ];

    #[test]
    fn a_seed_names_one_schedule() {
        let a = plan(5, Duration::from_secs(240), 3, &ALL, Duration::from_secs(1));
        let b = plan(5, Duration::from_secs(240), 3, &ALL, Duration::from_secs(1));
        let c = plan(6, Duration::from_secs(240), 3, &ALL, Duration::from_secs(1));
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn every_kind_happens_in_a_short_run_inside_the_window() {
        for seed in 0..50 {
            let d = Duration::from_secs(120);
            let faults = plan(seed, d, 3, &ALL, Duration::from_secs(1));
            for kind in ALL {
                assert!(
                    faults.iter().any(|f| f.kind == kind),
                    "seed {seed}: no {kind:?}"
                );
            }
            for f in &faults {
                assert!(f.at >= QUIET_START && f.at <= d - QUIET_END, "{f:?}");
                assert!(f.worker < 3);
            }
            assert!(faults.windows(2).all(|w| w[0].at < w[1].at));
        }
    }

    #[test]
    fn nothing_is_planned_without_kinds_workers_or_time() {
        let ttl = Duration::from_secs(1);
        assert!(plan(1, Duration::from_secs(120), 3, &[], ttl).is_empty());
        assert!(plan(1, Duration::from_secs(120), 0, &ALL, ttl).is_empty());
        assert!(plan(1, Duration::from_secs(10), 3, &ALL, ttl).is_empty());
    }
}
