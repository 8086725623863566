//! Input resolution: the versions of a job's next build.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use super::{BuildId, Input, InputVersion, JobId, PassedBuild, VersionId, Window};

/// How many builds one resolution may try before it gives up: a bound on
/// a backtracking search that hostile histories could make long.
const MAX_TRIES: usize = 200_000;

/// An input's version for the next build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub version: VersionId,
    /// The builds of passed jobs that vouched for it.
    pub passed_builds: Vec<BuildId>,
}

/// Why an input has no version for the next build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unresolved {
    /// The resource has no (enabled) version yet.
    NoVersion,
    /// No version of the resource matches its pin.
    PinnedVersionNotFound,
    /// No succeeded builds of these passed jobs agree on a version (for
    /// this input and the inputs resolved with it).
    NotPassed(Vec<JobId>),
    /// The search tried more builds than it may.
    TooManyBuilds,
}

/// Every input's outcome, by input name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub inputs: BTreeMap<String, Result<Resolved, Unresolved>>,
    /// A `version: every` input has another version after the one chosen:
    /// the job is to be scheduled again once this build is created.
    pub has_next_every: bool,
}

/// The window ran out of builds of these passed jobs before the answer was
/// certain: load more of them and resolve again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeedMore {
    pub jobs: BTreeSet<JobId>,
}

/// Resolves `inputs` of one job over `window`.
pub fn resolve(inputs: &[Input], window: &Window) -> Result<Resolution, NeedMore> {
    let mut out = Resolution {
        inputs: BTreeMap::new(),
        has_next_every: false,
    };
    for input in inputs.iter().filter(|i| i.passed.is_empty()) {
        let result = match &input.version {
            InputVersion::Pinned(Some(v)) => Ok(*v),
            InputVersion::Pinned(None) => Err(Unresolved::PinnedVersionNotFound),
            InputVersion::Latest => window
                .latest
                .get(&input.resource)
                .copied()
                .ok_or(Unresolved::NoVersion),
            InputVersion::Every => match window.every_next.get(&input.name) {
                Some(next) => {
                    out.has_next_every |= next.has_next;
                    Ok(next.version)
                }
                None => Err(Unresolved::NoVersion),
            },
        };
        let result = result.map(|version| Resolved {
            version,
            passed_builds: vec![],
        });
        out.inputs.insert(input.name.clone(), result);
    }
    for group in groups(inputs) {
        let members: Vec<&Input> = group.iter().map(|&i| &inputs[i]).collect();
        for (name, result) in resolve_group(&members, window)? {
            out.inputs.insert(name, result);
        }
    }
    Ok(out)
}

/// Inputs with `passed`, grouped so that two inputs sharing a passed job
/// (directly or through others) are in one group.
fn groups(inputs: &[Input]) -> Vec<Vec<usize>> {
    let with_passed: Vec<usize> = (0..inputs.len())
        .filter(|&i| !inputs[i].passed.is_empty())
        .collect();
    let mut groups: Vec<(BTreeSet<JobId>, Vec<usize>)> = Vec::new();
    for i in with_passed {
        let mut jobs = inputs[i].passed.clone();
        let mut members = vec![i];
        // Merge every group this input touches into one.
        let mut rest = Vec::new();
        for (g_jobs, g_members) in groups.drain(..) {
            if g_jobs.is_disjoint(&jobs) {
                rest.push((g_jobs, g_members));
            } else {
                jobs.extend(g_jobs);
                members.extend(g_members);
            }
        }
        members.sort_unstable();
        rest.push((jobs, members));
        groups = rest;
    }
    let mut out: Vec<Vec<usize>> = groups.into_iter().map(|(_, m)| m).collect();
    out.sort();
    out
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Candidate {
    version: VersionId,
    vouched: BTreeSet<JobId>,
    builds: Vec<BuildId>,
}

/// Each input's candidate version and the jobs that vouched for it.
type SearchState = Vec<Option<(VersionId, BTreeSet<JobId>)>>;

/// One input's outcome, by name.
type InputOutcome = (String, Result<Resolved, Unresolved>);

struct Search<'a> {
    inputs: &'a [&'a Input],
    window: &'a Window,
    candidates: Vec<Option<Candidate>>,
    /// States whose search failed: never searched twice.
    doomed: HashSet<SearchState>,
    tries: usize,
    ran_out: BTreeSet<JobId>,
}

enum Stop {
    RanOut,
    TooManyTries,
}

fn resolve_group(inputs: &[&Input], window: &Window) -> Result<Vec<InputOutcome>, NeedMore> {
    let mut search = Search {
        inputs,
        window,
        candidates: vec![None; inputs.len()],
        doomed: HashSet::new(),
        tries: 0,
        ran_out: BTreeSet::new(),
    };
    let outcome = search.resolve();
    let names = inputs.iter().map(|i| i.name.clone());
    match outcome {
        Err(Stop::RanOut) => Err(NeedMore {
            jobs: search.ran_out,
        }),
        Err(Stop::TooManyTries) => Ok(names.map(|n| (n, Err(Unresolved::TooManyBuilds))).collect()),
        Ok(false) => {
            let jobs: Vec<JobId> = inputs
                .iter()
                .flat_map(|i| i.passed.iter().copied())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            Ok(names
                .map(|n| (n, Err(Unresolved::NotPassed(jobs.clone()))))
                .collect())
        }
        Ok(true) => Ok(inputs
            .iter()
            .zip(search.candidates)
            .map(|(input, c)| {
                let c = c.expect("a resolved group has a candidate for every input");
                (
                    input.name.clone(),
                    Ok(Resolved {
                        version: c.version,
                        passed_builds: c.builds,
                    }),
                )
            })
            .collect()),
    }
}

impl Search<'_> {
    /// Whether every input's passed jobs vouch for its candidate.
    fn resolve(&mut self) -> Result<bool, Stop> {
        for i in 0..self.inputs.len() {
            if !self.satisfy(i)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn satisfy(&mut self, i: usize) -> Result<bool, Stop> {
        let window = self.window;
        for &job in &self.inputs[i].passed {
            if self.candidates[i]
                .as_ref()
                .is_some_and(|c| c.vouched.contains(&job))
            {
                continue;
            }
            let Some(list) = window.passed_builds.get(&job) else {
                self.ran_out.insert(job);
                return Err(Stop::RanOut);
            };
            for build in &list.builds {
                if !self.agrees(build, job) {
                    continue;
                }
                self.tries += 1;
                if self.tries > MAX_TRIES {
                    return Err(Stop::TooManyTries);
                }
                if self.try_build(i, job, build)? {
                    // The recursion behind `try_build` satisfied the rest.
                    return Ok(true);
                }
            }
            if !list.complete {
                self.ran_out.insert(job);
                return Err(Stop::RanOut);
            }
            return Ok(false);
        }
        Ok(true)
    }

    /// Whether `build` of `job` had every version already chosen for the
    /// inputs that `job` constrains.
    fn agrees(&self, build: &PassedBuild, job: JobId) -> bool {
        self.inputs
            .iter()
            .zip(&self.candidates)
            .all(|(input, c)| match c {
                Some(c) if input.passed.contains(&job) => {
                    build.versions.contains(&(input.resource, c.version))
                }
                _ => true,
            })
    }

    /// Takes `build`'s versions for the inputs `job` constrains, then
    /// resolves the rest; undoes it all when that fails.
    fn try_build(&mut self, i: usize, job: JobId, build: &PassedBuild) -> Result<bool, Stop> {
        let saved = self.candidates.clone();
        let mut touched = BTreeSet::new();
        for &(resource, version) in &build.versions {
            for (c, input) in self.inputs.iter().enumerate() {
                if touched.contains(&c)
                    || input.resource != resource
                    || !input.passed.contains(&job)
                {
                    continue;
                }
                if self.candidates[c]
                    .as_ref()
                    .is_some_and(|cand| cand.version != version)
                {
                    // `agrees` let the build through for the chosen version,
                    // but it also had another: that one is not the input's.
                    continue;
                }
                if self.window.disabled.contains(&(resource, version)) {
                    continue;
                }
                if let InputVersion::Pinned(pin) = input.version {
                    if pin != Some(version) {
                        continue;
                    }
                }
                touched.insert(c);
                let mut next = self.candidates[c].take().unwrap_or(Candidate {
                    version,
                    vouched: BTreeSet::new(),
                    builds: vec![],
                });
                next.vouched.insert(job);
                next.builds.push(build.id);
                self.candidates[c] = Some(next);
            }
        }
        let vouched = self.candidates[i]
            .as_ref()
            .is_some_and(|c| c.vouched.contains(&job));
        if vouched {
            let state = self.state();
            if !self.doomed.contains(&state) {
                if self.resolve()? {
                    return Ok(true);
                }
                self.doomed.insert(state);
            }
        }
        self.candidates = saved;
        Ok(false)
    }

    fn state(&self) -> SearchState {
        self.candidates
            .iter()
            .map(|c| c.as_ref().map(|c| (c.version, c.vouched.clone())))
            .collect()
    }
}
