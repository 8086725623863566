//! How a worker judges its own condition from what it measured: memory and
//! disk pressure with hysteresis, and health from its self-checks.

/// What the worker measured of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readings {
    /// Memory in use by the worker's own cgroup (or the host), without
    /// reclaimable page cache.
    pub memory_used: u64,
    /// The memory the worker may use: its cgroup limit, the configured
    /// limit, or the host's memory.
    pub memory_limit: u64,
    pub disk_used: u64,
    pub disk_total: u64,
}

/// Fractions of a limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// Above it the worker takes no new work.
    pub soft: f64,
    /// Above it the worker lands itself.
    pub hard: f64,
    /// Pressure clears only below `soft - hysteresis`, so a worker near the
    /// line does not flap.
    pub hysteresis: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            soft: 0.80,
            hard: 0.95,
            hysteresis: 0.05,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Pressure {
    None,
    /// Take no new work.
    Soft,
    /// Land: finish what runs, take nothing, until it clears.
    Hard,
}

impl Pressure {
    pub fn as_str(self) -> &'static str {
        match self {
            Pressure::None => "none",
            Pressure::Soft => "soft",
            Pressure::Hard => "hard",
        }
    }
}

fn fraction(used: u64, total: u64) -> Option<f64> {
    (total > 0).then(|| used as f64 / total as f64)
}

/// The pressure now, given the readings and the pressure before (for
/// hysteresis), with the reason in plain words when there is any.
pub fn assess(r: &Readings, t: &Thresholds, before: Pressure) -> (Pressure, Option<String>) {
    let mut worst = (Pressure::None, None);
    for (what, used, total) in [
        ("memory", r.memory_used, r.memory_limit),
        ("disk", r.disk_used, r.disk_total),
    ] {
        let Some(f) = fraction(used, total) else {
            continue;
        };
        let level = if f >= t.hard {
            Pressure::Hard
        } else if f >= t.soft {
            Pressure::Soft
        } else if before != Pressure::None && f >= t.soft - t.hysteresis {
            // Still close to the line it crossed: stay where it was, but
            // never above soft without reaching hard again.
            before.min(Pressure::Soft)
        } else {
            Pressure::None
        };
        if level > worst.0 {
            let reason = format!(
                "{what} at {:.0}% of {}",
                f * 100.0,
                crate::build::human_bytes(total)
            );
            worst = (level, Some(reason));
        }
    }
    worst
}

/// Whether a worker with `free` memory (limit minus what it promised to
/// running containers) can take a step that asks for `need`.
pub fn has_room(free: Option<u64>, need: Option<u64>) -> bool {
    match (free, need) {
        (Some(free), Some(need)) => need <= free,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn mem(used_pct: u64) -> Readings {
        Readings {
            memory_used: GIB * used_pct / 100,
            memory_limit: GIB,
            disk_used: 1,
            disk_total: 100,
        }
    }

    #[test]
    fn pressure_follows_the_table_with_hysteresis() {
        use Pressure::*;
        let t = Thresholds::default();
        let cases = [
            (mem(50), None, None),
            (mem(81), None, Soft),
            (mem(94), None, Soft),
            (mem(96), None, Hard),
            (mem(99), Soft, Hard),
            (mem(77), Soft, Soft), // within hysteresis: stays
            (mem(77), Hard, Soft), // drops to soft, not below
            (mem(74), Soft, None), // clear
            (mem(77), None, None), // never crossed: nothing
        ];
        for (r, before, expected) in cases {
            assert_eq!(assess(&r, &t, before).0, expected, "{r:?} after {before:?}");
        }
    }

    #[test]
    fn the_worst_resource_decides_and_is_named() {
        let r = Readings {
            memory_used: 10,
            memory_limit: 100,
            disk_used: 97 * GIB,
            disk_total: 100 * GIB,
        };
        let (p, why) = assess(&r, &Thresholds::default(), Pressure::None);
        assert_eq!(p, Pressure::Hard);
        assert_eq!(why.as_deref(), Some("disk at 97% of 100 GiB"));
        assert_eq!(
            assess(&Readings::default(), &Thresholds::default(), Pressure::None),
            (Pressure::None, None)
        );
    }

    #[test]
    fn room_is_checked_only_when_both_sides_are_known() {
        assert!(has_room(Some(10), Some(10)));
        assert!(!has_room(Some(9), Some(10)));
        assert!(has_room(None, Some(10)));
        assert!(has_room(Some(0), None));
    }
}
