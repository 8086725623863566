//! Concourse's container placement strategies, chained as an operator
//! chooses them (`--container-placement-strategy`, repeatable).
//!
//! As in Concourse, each strategy of the chain orders the candidates, the
//! first strategy deciding and each next one breaking the ties the ones
//! before left, and the step goes to the first worker that every limit of
//! the chain allows. When a limit refuses every worker the step waits: it
//! is not a worker of the wrong kind, only a busy one.
//!
//! Unlike Concourse, which shuffles the workers before every placement,
//! what the chain leaves equal keeps the candidates' order (the engine
//! gives them by name), so placement is repeatable; `random` orders at
//! its place in the chain by a seed the engine draws for each placement.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use super::{Candidate, NoWorker, Requirement};

/// One strategy of the chain, by Concourse's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Workers holding more of the step's inputs and caches first.
    VolumeLocality,
    /// Workers with fewer active build steps first: steps placed there
    /// and not finished, as the database knows them at placement (so a
    /// step placed a moment ago counts before the worker reports it).
    FewestBuildContainers,
    /// A random order (the ties of the strategies before it broken at
    /// random; alone, a random worker).
    Random,
    /// For a task: workers with fewer active tasks first, and none at
    /// `--max-active-tasks-per-worker` (when it is not 0).
    LimitActiveTasks,
    /// Workers under `--max-active-containers-per-worker` first, and
    /// none at it (when it is not 0).
    LimitActiveContainers,
    /// Workers under `--max-active-volumes-per-worker` first, and none
    /// at it (when it is not 0).
    LimitActiveVolumes,
}

impl Strategy {
    pub const ALL: [Strategy; 6] = [
        Strategy::VolumeLocality,
        Strategy::FewestBuildContainers,
        Strategy::Random,
        Strategy::LimitActiveTasks,
        Strategy::LimitActiveContainers,
        Strategy::LimitActiveVolumes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::VolumeLocality => "volume-locality",
            Strategy::FewestBuildContainers => "fewest-build-containers",
            Strategy::Random => "random",
            Strategy::LimitActiveTasks => "limit-active-tasks",
            Strategy::LimitActiveContainers => "limit-active-containers",
            Strategy::LimitActiveVolumes => "limit-active-volumes",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Strategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        Strategy::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| {
                let valid: Vec<&str> = Strategy::ALL.iter().map(|k| k.as_str()).collect();
                format!(
                    "unknown container placement strategy {s:?} (valid: {})",
                    valid.join(", ")
                )
            })
    }
}

/// How web places steps: the chain and its limits (0: no limit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub chain: Vec<Strategy>,
    pub max_active_tasks: u32,
    pub max_active_containers: u32,
    pub max_active_volumes: u32,
}

/// hangar's chain when the operator names none: volume locality, then
/// the fewest active build steps. (Concourse's default is
/// `volume-locality` alone, its ties broken at random.)
pub const DEFAULT_CHAIN: [Strategy; 2] =
    [Strategy::VolumeLocality, Strategy::FewestBuildContainers];

impl Default for Placement {
    fn default() -> Placement {
        Placement {
            chain: DEFAULT_CHAIN.to_vec(),
            max_active_tasks: 0,
            max_active_containers: 0,
            max_active_volumes: 0,
        }
    }
}

/// What the step being placed is, for the strategies that tell tasks
/// from other steps (`limit-active-tasks` orders and limits tasks only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepClass {
    Task,
    /// A get, a put, a check, an upload.
    #[default]
    Other,
}

impl Placement {
    /// The chain of `names` in order (the default chain when there are
    /// none), or the first unknown name and the valid ones.
    pub fn from_names(
        names: &[String],
        max_active_tasks: u32,
        max_active_containers: u32,
        max_active_volumes: u32,
    ) -> Result<Placement, String> {
        let chain = if names.is_empty() {
            DEFAULT_CHAIN.to_vec()
        } else {
            // A flag's value may list several, as an environment variable
            // does: `volume-locality,fewest-build-containers`.
            names
                .iter()
                .flat_map(|n| n.split(','))
                .filter(|n| !n.trim().is_empty())
                .map(str::parse)
                .collect::<Result<Vec<Strategy>, String>>()?
        };
        Ok(Placement {
            chain,
            max_active_tasks,
            max_active_containers,
            max_active_volumes,
        })
    }

    pub fn uses(&self, s: Strategy) -> bool {
        self.chain.contains(&s)
    }

    /// The chain's names, comma-separated, for logs and docs.
    pub fn names(&self) -> String {
        self.chain
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Picks a worker of `candidates` (in the order that breaks the
    /// chain's ties) for a step of `class`: the fitting ones (see
    /// [`super::place`]), ordered by the chain (`random` by `seed`), the
    /// first every limit allows.
    pub fn place(
        &self,
        candidates: &[Candidate],
        req: &Requirement,
        class: StepClass,
        seed: u64,
    ) -> Result<String, NoWorker> {
        let mut pool = super::pool(candidates, req);
        if pool.is_empty() {
            return Err(NoWorker(super::explain(candidates, req)));
        }
        // Stable: what the chain leaves equal keeps the given order.
        pool.sort_by(|a, b| {
            self.chain.iter().fold(Ordering::Equal, |o, s| {
                o.then_with(|| self.order(*s, a, b, req, class, seed))
            })
        });
        let mut refused = Vec::new();
        for c in &pool {
            match self.refusal(c, class) {
                None => return Ok(c.name.clone()),
                Some(limit) if !refused.contains(&limit) => refused.push(limit),
                Some(_) => {}
            }
        }
        // In one order whatever the counts, so a waiting step says it once.
        refused.sort();
        Err(NoWorker(format!(
            "every worker that fits is at its limit ({})",
            refused.join(", ")
        )))
    }

    fn order(
        &self,
        s: Strategy,
        a: &Candidate,
        b: &Candidate,
        req: &Requirement,
        class: StepClass,
        seed: u64,
    ) -> Ordering {
        match s {
            Strategy::VolumeLocality => hits(b, req).cmp(&hits(a, req)),
            Strategy::FewestBuildContainers => a.load.build_steps.cmp(&b.load.build_steps),
            Strategy::Random => draw(seed, &a.name).cmp(&draw(seed, &b.name)),
            Strategy::LimitActiveTasks => match class {
                StepClass::Task => a.load.tasks.cmp(&b.load.tasks),
                StepClass::Other => Ordering::Equal,
            },
            Strategy::LimitActiveContainers => under(containers(a), self.max_active_containers)
                .cmp(&under(containers(b), self.max_active_containers))
                .reverse(),
            Strategy::LimitActiveVolumes => under(a.load.volumes, self.max_active_volumes)
                .cmp(&under(b.load.volumes, self.max_active_volumes))
                .reverse(),
        }
    }

    /// The limit of the chain that keeps the step off `c`, if one does.
    fn refusal(&self, c: &Candidate, class: StepClass) -> Option<String> {
        self.chain.iter().find_map(|s| {
            let (count, max, flag) = match s {
                Strategy::LimitActiveTasks if class == StepClass::Task => (
                    c.load.tasks,
                    self.max_active_tasks,
                    "--max-active-tasks-per-worker",
                ),
                Strategy::LimitActiveContainers => (
                    containers(c),
                    self.max_active_containers,
                    "--max-active-containers-per-worker",
                ),
                Strategy::LimitActiveVolumes => (
                    c.load.volumes,
                    self.max_active_volumes,
                    "--max-active-volumes-per-worker",
                ),
                _ => return None,
            };
            (!under(count, max)).then(|| format!("{flag} {max}"))
        })
    }
}

/// How many of the step's wanted caches and volumes `c` holds.
fn hits(c: &Candidate, req: &Requirement) -> usize {
    req.wants.iter().filter(|k| c.has.contains(*k)).count()
}

/// A worker's active containers: what it last reported, or the build
/// steps the database has placed there when that is more (a step placed
/// since its last heartbeat).
fn containers(c: &Candidate) -> i64 {
    c.active_containers.max(c.load.build_steps)
}

/// A worker's place in `seed`'s random order.
fn draw(seed: u64, name: &str) -> u64 {
    // FNV-1a of the name, mixed with the seed.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    crate::rng::Rng::new(seed ^ h).next_u64()
}

fn under(count: i64, max: u32) -> bool {
    max == 0 || count < i64::from(max)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::Load;
    use super::*;
    use crate::WorkerState;

    /// A running linux worker: build steps, tasks, volumes, reported
    /// containers, and the cache keys it holds.
    fn w(
        name: &str,
        steps: i64,
        tasks: i64,
        volumes: i64,
        reported: i64,
        has: &[&str],
    ) -> Candidate {
        Candidate {
            name: name.into(),
            state: WorkerState::Running,
            platform: "linux".into(),
            tags: BTreeSet::new(),
            team: None,
            active_containers: reported,
            load: Load {
                build_steps: steps,
                tasks,
                volumes,
            },
            has: has.iter().map(|s| s.to_string()).collect(),
            accepting_work: true,
            memory_free: None,
            allow_privileged: false,
            distrusted: false,
        }
    }

    fn chain(names: &str, tasks: u32, containers: u32, volumes: u32) -> Placement {
        let names: Vec<String> = names.split(' ').map(str::to_string).collect();
        Placement::from_names(&names, tasks, containers, volumes).unwrap()
    }

    fn wanting(keys: &[&str]) -> Requirement {
        Requirement {
            platform: "linux".into(),
            wants: keys.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn each_strategy_and_chain_places_as_the_table_says() {
        use StepClass::{Other, Task};
        // (chain, maxes tasks/containers/volumes, workers in tie order,
        // wanted keys, class, expected)
        type Row = (
            &'static str,
            (u32, u32, u32),
            Vec<Candidate>,
            &'static [&'static str],
            StepClass,
            Result<&'static str, &'static str>,
        );
        let rows: Vec<Row> = vec![
            // volume-locality: the cache wins over load; ties keep the
            // given order.
            (
                "volume-locality",
                (0, 0, 0),
                vec![w("a", 0, 0, 0, 0, &[]), w("b", 9, 9, 9, 9, &["k"])],
                &["k"],
                Other,
                Ok("b"),
            ),
            (
                "volume-locality",
                (0, 0, 0),
                vec![w("b", 9, 0, 0, 0, &[]), w("a", 0, 0, 0, 0, &[])],
                &["k"],
                Other,
                Ok("b"),
            ),
            // More of the wanted keys beat fewer.
            (
                "volume-locality",
                (0, 0, 0),
                vec![w("a", 0, 0, 0, 0, &["k"]), w("b", 0, 0, 0, 0, &["k", "j"])],
                &["k", "j"],
                Other,
                Ok("b"),
            ),
            // fewest-build-containers: the database's count, not the
            // worker's report.
            (
                "fewest-build-containers",
                (0, 0, 0),
                vec![w("a", 3, 0, 0, 0, &["k"]), w("b", 1, 0, 0, 9, &[])],
                &["k"],
                Other,
                Ok("b"),
            ),
            (
                "fewest-build-containers",
                (0, 0, 0),
                vec![w("b", 2, 0, 0, 0, &[]), w("a", 2, 0, 0, 0, &[])],
                &[],
                Other,
                Ok("b"),
            ),
            // limit-active-tasks: a task goes to the fewest tasks...
            (
                "limit-active-tasks",
                (0, 0, 0),
                vec![w("a", 0, 2, 0, 0, &[]), w("b", 5, 1, 0, 0, &[])],
                &[],
                Task,
                Ok("b"),
            ),
            // ...other steps are not ordered by it...
            (
                "limit-active-tasks",
                (0, 0, 0),
                vec![w("a", 0, 2, 0, 0, &[]), w("b", 5, 1, 0, 0, &[])],
                &[],
                Other,
                Ok("a"),
            ),
            // ...nor limited.
            (
                "limit-active-tasks",
                (1, 0, 0),
                vec![w("a", 0, 2, 0, 0, &[]), w("b", 5, 1, 0, 0, &[])],
                &[],
                Other,
                Ok("a"),
            ),
            // With a limit, a task skips a worker at it.
            (
                "volume-locality limit-active-tasks",
                (2, 0, 0),
                vec![w("a", 0, 2, 0, 0, &["k"]), w("b", 0, 1, 0, 0, &[])],
                &["k"],
                Task,
                Ok("b"),
            ),
            (
                "limit-active-tasks",
                (2, 0, 0),
                vec![w("a", 0, 2, 0, 0, &[]), w("b", 0, 3, 0, 0, &[])],
                &[],
                Task,
                Err("every worker that fits is at its limit (--max-active-tasks-per-worker 2)"),
            ),
            // limit-active-containers: the larger of the report and the
            // database's count; under the limit first, at it never.
            (
                "limit-active-containers",
                (0, 3, 0),
                vec![w("a", 0, 0, 0, 3, &[]), w("b", 1, 0, 0, 0, &[])],
                &[],
                Other,
                Ok("b"),
            ),
            (
                "limit-active-containers",
                (0, 3, 0),
                vec![w("a", 3, 0, 0, 0, &[]), w("b", 2, 0, 0, 2, &[])],
                &[],
                Other,
                Ok("b"),
            ),
            (
                "limit-active-containers",
                (0, 3, 0),
                vec![w("a", 3, 0, 0, 0, &[]), w("b", 0, 0, 0, 4, &[])],
                &[],
                Task,
                Err("every worker that fits is at its limit (--max-active-containers-per-worker 3)"),
            ),
            // Without a limit it orders and refuses nothing.
            (
                "limit-active-containers",
                (0, 0, 0),
                vec![w("a", 50, 0, 0, 50, &[]), w("b", 0, 0, 0, 0, &[])],
                &[],
                Other,
                Ok("a"),
            ),
            // limit-active-volumes.
            (
                "limit-active-volumes",
                (0, 0, 10),
                vec![w("a", 0, 0, 10, 0, &["k"]), w("b", 0, 0, 9, 0, &[])],
                &["k"],
                Other,
                Ok("b"),
            ),
            (
                "limit-active-volumes",
                (0, 0, 10),
                vec![w("a", 0, 0, 10, 0, &[]), w("b", 0, 0, 11, 0, &[])],
                &[],
                Other,
                Err("every worker that fits is at its limit (--max-active-volumes-per-worker 10)"),
            ),
            // Several limits: each refusing one worker, both named.
            (
                "limit-active-containers limit-active-volumes",
                (0, 1, 1),
                vec![w("a", 1, 0, 0, 0, &[]), w("b", 0, 0, 1, 0, &[])],
                &[],
                Other,
                Err("every worker that fits is at its limit (--max-active-containers-per-worker 1, --max-active-volumes-per-worker 1)"),
            ),
            // The chain's order: the first strategy decides, the next
            // breaks its ties.
            (
                "volume-locality fewest-build-containers",
                (0, 0, 0),
                vec![
                    w("a", 0, 0, 0, 0, &[]),
                    w("b", 4, 0, 0, 0, &["k"]),
                    w("c", 2, 0, 0, 0, &["k"]),
                ],
                &["k"],
                Other,
                Ok("c"),
            ),
            (
                "fewest-build-containers volume-locality",
                (0, 0, 0),
                vec![
                    w("a", 1, 0, 0, 0, &[]),
                    w("b", 0, 0, 0, 0, &[]),
                    w("c", 0, 0, 0, 0, &["k"]),
                ],
                &["k"],
                Other,
                Ok("c"),
            ),
            // A limit first keeps the cache from choosing a full worker;
            // a limit last still refuses it.
            (
                "limit-active-containers volume-locality",
                (0, 2, 0),
                vec![w("a", 2, 0, 0, 0, &["k"]), w("b", 0, 0, 0, 1, &[])],
                &["k"],
                Other,
                Ok("b"),
            ),
            (
                "volume-locality limit-active-containers",
                (0, 2, 0),
                vec![w("a", 2, 0, 0, 0, &["k"]), w("b", 0, 0, 0, 1, &[])],
                &["k"],
                Other,
                Ok("b"),
            ),
            // The comma form of a flag's value (an environment variable).
            (
                "volume-locality,fewest-build-containers",
                (0, 0, 0),
                vec![w("a", 1, 0, 0, 0, &[]), w("b", 0, 0, 0, 0, &[])],
                &[],
                Other,
                Ok("b"),
            ),
        ];
        for (i, (names, (t, c, v), workers, keys, class, expected)) in rows.into_iter().enumerate()
        {
            let got = chain(names, t, c, v).place(&workers, &wanting(keys), class, 7);
            let expected = expected
                .map(str::to_string)
                .map_err(|why| NoWorker(why.to_string()));
            assert_eq!(got, expected, "row {i}: {names}");
        }
    }

    #[test]
    fn random_picks_by_the_seed_at_its_place_in_the_chain() {
        let workers: Vec<Candidate> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| w(n, 0, 0, 0, 0, &[]))
            .collect();
        let random = chain("random", 0, 0, 0);
        let pick = |p: &Placement, ws: &[Candidate], seed| {
            p.place(ws, &wanting(&["k"]), StepClass::Other, seed)
                .unwrap()
        };
        // The same seed, the same worker; over seeds, every worker.
        let mut seen = BTreeSet::new();
        for seed in 0..64 {
            let name = pick(&random, &workers, seed);
            assert_eq!(pick(&random, &workers, seed), name);
            seen.insert(name);
        }
        assert_eq!(seen.len(), 4, "{seen:?}");
        // After a strategy, it only breaks that strategy's ties: the
        // cache still decides, and among the least busy only.
        let mut busy = workers.clone();
        busy[0].has.insert("k".into());
        let locality = chain("volume-locality random", 0, 0, 0);
        let fewest = chain("fewest-build-containers random", 0, 0, 0);
        busy[1].load.build_steps = 1;
        let mut least = BTreeSet::new();
        for seed in 0..64 {
            assert_eq!(pick(&locality, &busy, seed), "a");
            least.insert(pick(&fewest, &busy, seed));
        }
        assert_eq!(
            least,
            ["a", "c", "d"].iter().map(|n| n.to_string()).collect()
        );
    }

    #[test]
    fn the_default_chain_is_locality_then_fewest_build_steps() {
        let p = Placement::from_names(&[], 0, 0, 0).unwrap();
        assert_eq!(p, Placement::default());
        assert_eq!(p.names(), "volume-locality,fewest-build-containers");
        // 200 steps on two idle workers, each placed one counting: an
        // even split, whatever their reports say.
        let mut workers = vec![w("w1", 0, 0, 0, 0, &[]), w("w2", 0, 0, 0, 7, &[])];
        for _ in 0..200 {
            let name = p
                .place(&workers, &wanting(&[]), StepClass::Task, 0)
                .unwrap();
            let chosen = workers.iter_mut().find(|c| c.name == name).unwrap();
            chosen.load.build_steps += 1;
        }
        let counts: Vec<i64> = workers.iter().map(|c| c.load.build_steps).collect();
        assert_eq!(counts, vec![100, 100]);
    }

    #[test]
    fn unknown_names_are_refused_naming_the_valid_ones() {
        let err = Placement::from_names(&["volume-locality".into(), "fewest".into()], 0, 0, 0)
            .unwrap_err();
        assert_eq!(
            err,
            "unknown container placement strategy \"fewest\" (valid: volume-locality, \
             fewest-build-containers, random, limit-active-tasks, limit-active-containers, \
             limit-active-volumes)"
        );
        for s in Strategy::ALL {
            assert_eq!(s.as_str().parse::<Strategy>(), Ok(s));
        }
        let p = Placement::from_names(&["random".into(), " limit-active-tasks ".into()], 4, 0, 0)
            .unwrap();
        assert_eq!(p.chain, vec![Strategy::Random, Strategy::LimitActiveTasks]);
        assert!(p.uses(Strategy::LimitActiveTasks) && !p.uses(Strategy::LimitActiveVolumes));
    }
}
