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

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Pressure {
    #[default]
    None,
    /// Take no new work.
    Soft,
    /// Land: finish what runs, take nothing, until it clears.
    Hard,
}

impl Pressure {
    pub const ALL: [Pressure; 3] = [Pressure::None, Pressure::Soft, Pressure::Hard];

    pub fn as_str(self) -> &'static str {
        match self {
            Pressure::None => "none",
            Pressure::Soft => "soft",
            Pressure::Hard => "hard",
        }
    }
}

impl std::fmt::Display for Pressure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn fraction(used: u64, total: u64) -> Option<f64> {
    (total > 0).then(|| used as f64 / total as f64)
}

/// The pressure of each resource on its own, so that hysteresis holds a
/// resource only near the line *it* crossed: a disk at 78% must not keep a
/// worker under pressure because its memory was over 80% a moment ago.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Levels {
    pub memory: Pressure,
    pub disk: Pressure,
}

/// What [`assess`] found: each resource's level, the worst of them, and
/// the reason in plain words when there is any pressure.
#[derive(Debug, Clone, PartialEq)]
pub struct Assessment {
    pub levels: Levels,
    pub pressure: Pressure,
    pub reason: Option<String>,
}

fn level(f: f64, t: &Thresholds, before: Pressure) -> Pressure {
    if f >= t.hard {
        Pressure::Hard
    } else if f >= t.soft {
        Pressure::Soft
    } else if before != Pressure::None && f >= t.soft - t.hysteresis {
        // Still close to the line it crossed: stay where it was, but never
        // above soft without reaching hard again.
        before.min(Pressure::Soft)
    } else {
        Pressure::None
    }
}

/// The pressure now, given the readings, each resource's thresholds and
/// each resource's level before (for hysteresis).
pub fn assess(
    r: &Readings,
    memory_t: &Thresholds,
    disk_t: &Thresholds,
    before: Levels,
) -> Assessment {
    let memory =
        fraction(r.memory_used, r.memory_limit).map(|f| (f, level(f, memory_t, before.memory)));
    let disk = fraction(r.disk_used, r.disk_total).map(|f| (f, level(f, disk_t, before.disk)));
    let levels = Levels {
        memory: memory.map_or(Pressure::None, |(_, l)| l),
        disk: disk.map_or(Pressure::None, |(_, l)| l),
    };
    let mut worst = (Pressure::None, None);
    for (what, found, total) in [
        ("memory", memory, r.memory_limit),
        ("disk", disk, r.disk_total),
    ] {
        let Some((f, level)) = found else {
            continue;
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
    Assessment {
        levels,
        pressure: worst.0,
        reason: worst.1,
    }
}

/// A work dir that is full is hard pressure whatever its percentage says
/// (a huge disk at 99.9% still has gigabytes; a full one has nothing): the
/// worker takes no work and says why. `full` is what the worker found: less
/// than its reserve left, or a write that failed for want of space since.
pub fn with_full_disk(a: Assessment, full: bool, free: u64) -> Assessment {
    if !full {
        return a;
    }
    Assessment {
        levels: Levels {
            disk: Pressure::Hard,
            ..a.levels
        },
        pressure: Pressure::Hard,
        reason: Some(format!(
            "disk full: {} left in the work dir",
            crate::build::human_bytes(free)
        )),
    }
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
            let before = Levels {
                memory: before,
                disk: None,
            };
            assert_eq!(
                assess(&r, &t, &t, before).pressure,
                expected,
                "{r:?} after {before:?}"
            );
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
        let a = assess(
            &r,
            &Thresholds::default(),
            &Thresholds::default(),
            Levels::default(),
        );
        assert_eq!(a.pressure, Pressure::Hard);
        assert_eq!(a.reason.as_deref(), Some("disk at 97% of 100 GiB"));
        let idle = assess(
            &Readings::default(),
            &Thresholds::default(),
            &Thresholds::default(),
            Levels::default(),
        );
        assert_eq!((idle.pressure, idle.reason), (Pressure::None, None));
    }

    #[test]
    fn hysteresis_holds_only_the_resource_that_crossed_the_line() {
        use Pressure::*;
        let t = Thresholds::default();
        let at = |memory: u64, disk: u64| Readings {
            memory_used: memory,
            memory_limit: 100,
            disk_used: disk,
            disk_total: 100,
        };
        // (readings, levels before, overall pressure expected, reason)
        let cases = [
            // Memory was over the line; the disk never was, and sits at 78%
            // (inside the hysteresis band): the memory clearing clears all.
            (
                at(50, 78),
                Levels {
                    memory: Soft,
                    disk: None,
                },
                None,
                Option::<&str>::None,
            ),
            // The disk crossed it and is still in its band: it holds.
            (
                at(50, 78),
                Levels {
                    memory: None,
                    disk: Soft,
                },
                Soft,
                Some("disk at 78%"),
            ),
            // Memory still in its band, disk clear.
            (
                at(77, 10),
                Levels {
                    memory: Soft,
                    disk: None,
                },
                Soft,
                Some("memory at 77%"),
            ),
            // Both in their bands after both crossed: soft.
            (
                at(77, 78),
                Levels {
                    memory: Soft,
                    disk: Soft,
                },
                Soft,
                Some("memory at 77%"),
            ),
        ];
        for (r, before, expected, why) in cases {
            let a = assess(&r, &t, &t, before);
            assert_eq!(a.pressure, expected, "{r:?} after {before:?}");
            match why {
                Some(w) => assert!(a.reason.as_deref().unwrap_or("").starts_with(w), "{a:?}"),
                Option::None => assert_eq!(a.reason, Option::None),
            }
        }
    }

    #[test]
    fn disk_and_memory_have_their_own_thresholds() {
        let memory_t = Thresholds::default();
        let disk_t = Thresholds {
            soft: 0.98,
            hard: 0.99,
            hysteresis: 0.05,
        };
        let r = Readings {
            memory_used: 10,
            memory_limit: 100,
            disk_used: 90,
            disk_total: 100,
        };
        assert_eq!(
            assess(&r, &memory_t, &disk_t, Levels::default()).pressure,
            Pressure::None
        );
        assert_eq!(
            assess(&r, &memory_t, &memory_t, Levels::default()).pressure,
            Pressure::Soft
        );
    }

    #[test]
    fn a_full_disk_is_hard_pressure_named_as_such() {
        use Pressure::*;
        let t = Thresholds::default();
        // (memory %, disk full, pressure, reason starts with)
        let cases = [
            (50, false, None, Option::<&str>::None),
            (50, true, Hard, Some("disk full: 4 KiB left")),
            (99, true, Hard, Some("disk full")),
            (99, false, Hard, Some("memory at 99%")),
        ];
        for (m, full, pressure, why) in cases {
            let a = with_full_disk(assess(&mem(m), &t, &t, Levels::default()), full, 4096);
            assert_eq!(a.pressure, pressure, "{m} {full}");
            match why {
                Some(w) => assert!(a.reason.as_deref().unwrap_or("").starts_with(w), "{a:?}"),
                Option::None => assert_eq!(a.reason, Option::None),
            }
            if full {
                assert_eq!(a.levels.disk, Hard);
            }
        }
    }

    #[test]
    fn room_is_checked_only_when_both_sides_are_known() {
        assert!(has_room(Some(10), Some(10)));
        assert!(!has_room(Some(9), Some(10)));
        assert!(has_room(None, Some(10)));
        assert!(has_room(Some(0), None));
    }
}
