//! Containers as web sees them, and what a worker's report of its
//! containers means.
//!
//! Like volumes, a report is the worker's full list of container handles;
//! the planner diffs it against web's rows both ways. Containers have no
//! parents, so there is no ordering to keep.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::str::FromStr;

use crate::UnixMillis;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    /// The row exists; web is asking the worker to start the container.
    Creating,
    Created,
    /// Web wants it gone; the worker destroys it when it next reports it.
    Destroying,
    /// Creation failed; whatever the worker has of it is to be destroyed.
    Failed,
}

impl ContainerState {
    pub const ALL: [ContainerState; 4] = [
        ContainerState::Creating,
        ContainerState::Created,
        ContainerState::Destroying,
        ContainerState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ContainerState::Creating => "creating",
            ContainerState::Created => "created",
            ContainerState::Destroying => "destroying",
            ContainerState::Failed => "failed",
        }
    }
}

impl fmt::Display for ContainerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ContainerState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ContainerState::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| format!("unknown container state {s:?}"))
    }
}

/// What the report planner needs of one container row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerRow {
    pub handle: String,
    pub state: ContainerState,
    pub missing_since: Option<UnixMillis>,
}

/// The changes one container report calls for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerReportPlan {
    /// Created rows the worker did not report: collected after the grace
    /// period.
    pub mark_missing: Vec<String>,
    /// Rows the worker reported again after they went missing.
    pub clear_missing: Vec<String>,
    /// Handles the worker must destroy: unknown to web, being destroyed, or
    /// failed. Sorted.
    pub destroy_on_worker: Vec<String>,
    /// Rows web wants gone whose container the worker no longer has.
    pub delete_rows: Vec<String>,
}

impl ContainerReportPlan {
    pub fn is_empty(&self) -> bool {
        self.mark_missing.is_empty()
            && self.clear_missing.is_empty()
            && self.destroy_on_worker.is_empty()
            && self.delete_rows.is_empty()
    }
}

/// Diffs a worker's full list of container handles against web's rows.
///
/// Rows still `creating` are never marked missing (the worker may not have
/// made the container yet) and never deleted here: the engine that is
/// creating them settles them, or the finished-builds collector does.
pub fn plan_container_report(rows: &[ContainerRow], reported: &[String]) -> ContainerReportPlan {
    let reported: HashSet<&str> = reported.iter().map(String::as_str).collect();
    let by_handle: HashMap<&str, &ContainerRow> =
        rows.iter().map(|r| (r.handle.as_str(), r)).collect();
    let mut plan = ContainerReportPlan::default();
    let mut destroy: BTreeSet<&str> = BTreeSet::new();
    for handle in &reported {
        match by_handle.get(handle) {
            None => {
                destroy.insert(handle);
            }
            Some(row) => match row.state {
                ContainerState::Destroying | ContainerState::Failed => {
                    destroy.insert(handle);
                }
                ContainerState::Created if row.missing_since.is_some() => {
                    plan.clear_missing.push(row.handle.clone())
                }
                _ => {}
            },
        }
    }
    for row in rows {
        if reported.contains(row.handle.as_str()) {
            continue;
        }
        match row.state {
            ContainerState::Created if row.missing_since.is_none() => {
                plan.mark_missing.push(row.handle.clone())
            }
            ContainerState::Destroying | ContainerState::Failed => {
                plan.delete_rows.push(row.handle.clone())
            }
            _ => {}
        }
    }
    plan.destroy_on_worker = destroy.into_iter().map(str::to_string).collect();
    plan.mark_missing.sort();
    plan.clear_missing.sort();
    plan.delete_rows.sort();
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use ContainerState::*;

    fn row(handle: &str, state: ContainerState, missing: bool) -> ContainerRow {
        ContainerRow {
            handle: handle.into(),
            state,
            missing_since: missing.then_some(1),
        }
    }

    #[test]
    fn container_reports_are_diffed_both_ways_by_the_table() {
        // (rows, reported) => [mark missing, clear missing, destroy on worker, delete rows]
        type Case = (Vec<ContainerRow>, Vec<&'static str>, [Vec<&'static str>; 4]);
        let cases: Vec<Case> = vec![
            // nothing on either side
            (vec![], vec![], [vec![], vec![], vec![], vec![]]),
            // the same on both sides: nothing to do
            (
                vec![row("a", Created, false)],
                vec!["a"],
                [vec![], vec![], vec![], vec![]],
            ),
            // unknown handles are destroyed on the worker, sorted
            (
                vec![],
                vec!["z", "x"],
                [vec![], vec![], vec!["x", "z"], vec![]],
            ),
            // an unreported created row goes missing; a creating one never
            (
                vec![row("a", Created, false), row("c", Creating, false)],
                vec![],
                [vec!["a"], vec![], vec![], vec![]],
            ),
            // already missing: no new mark
            (
                vec![row("a", Created, true)],
                vec![],
                [vec![], vec![], vec![], vec![]],
            ),
            // reported again: no longer missing
            (
                vec![row("a", Created, true)],
                vec!["a"],
                [vec![], vec!["a"], vec![], vec![]],
            ),
            // destroying and failed rows still on the worker: destroy there
            (
                vec![row("d", Destroying, false), row("f", Failed, false)],
                vec!["f", "d"],
                [vec![], vec![], vec!["d", "f"], vec![]],
            ),
            // and once gone from the worker, their rows go
            (
                vec![row("d", Destroying, false), row("f", Failed, false)],
                vec![],
                [vec![], vec![], vec![], vec!["d", "f"]],
            ),
            // a creating row the worker already has: left to its creator
            (
                vec![row("c", Creating, false)],
                vec!["c"],
                [vec![], vec![], vec![], vec![]],
            ),
        ];
        for (i, (rows, reported, [missing, back, destroy, delete])) in cases.into_iter().enumerate()
        {
            let reported: Vec<String> = reported.iter().map(|s| s.to_string()).collect();
            let plan = plan_container_report(&rows, &reported);
            let s = |v: Vec<&str>| v.into_iter().map(String::from).collect::<Vec<_>>();
            assert_eq!(
                plan,
                ContainerReportPlan {
                    mark_missing: s(missing),
                    clear_missing: s(back),
                    destroy_on_worker: s(destroy),
                    delete_rows: s(delete),
                },
                "case {i}"
            );
        }
    }

    #[test]
    fn container_states_round_trip() {
        for s in ContainerState::ALL {
            assert_eq!(s.as_str().parse::<ContainerState>(), Ok(s));
        }
        assert!("running".parse::<ContainerState>().is_err());
    }
}
