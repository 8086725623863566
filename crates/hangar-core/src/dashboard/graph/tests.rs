use std::collections::HashSet;

use super::*;
use crate::pipeline::parse_pipeline;

fn config(yaml: &str) -> PipelineConfig {
    match parse_pipeline(yaml) {
        Ok(v) => v.config,
        Err(e) => panic!("{e}\n{yaml}"),
    }
}

/// The graph as lines a person can compare: `kind name column:row` for
/// each node, `kind from -> to [resources]` for each edge, with the
/// places it passes through and `(no trigger)` when it triggers nothing.
fn describe(g: &Graph) -> Vec<String> {
    let mut lines: Vec<String> = g
        .nodes
        .iter()
        .map(|n| format!("{} {} {}:{}", n.kind.as_str(), n.name, n.column, n.row))
        .collect();
    for e in &g.edges {
        let (from, to) = (&g.nodes[e.from], &g.nodes[e.to]);
        let mut line = format!(
            "{} {} -> {} [{}]",
            e.kind.as_str(),
            from.name,
            to.name,
            e.resources.join(",")
        );
        for (c, r) in &e.via {
            line.push_str(&format!(" via {c}:{r}"));
        }
        if !e.trigger {
            line.push_str(" (no trigger)");
        }
        lines.push(line);
    }
    lines
}

const THREE_JOBS: &str = "
resources:
- {name: repo, type: mock, source: {}}
- {name: release, type: mock, source: {}}
jobs:
- name: unit
  plan: [{get: repo, trigger: true}]
- name: integration
  plan: [{get: repo, trigger: true, passed: [unit]}]
- name: ship
  plan:
  - {get: repo, passed: [integration]}
  - {put: release}
";

const FAN_OUT_FAN_IN: &str = "
resources:
- {name: repo, type: mock, source: {}}
jobs:
- name: build
  plan: [{get: repo, trigger: true}]
- name: test-a
  plan: [{get: repo, trigger: true, passed: [build]}]
- name: test-b
  plan: [{get: repo, trigger: true, passed: [build]}]
- name: deploy
  plan: [{get: repo, trigger: true, passed: [test-a, test-b]}]
";

const NO_INPUTS: &str = "
resources:
- {name: repo, type: mock, source: {}}
jobs:
- name: unit
  plan: [{get: repo}]
- name: nightly
  plan:
  - task: hello
    config: {platform: linux, run: {path: echo}}
";

/// `c` passes from `a` directly and through `b`, and gets `tools` that
/// only it uses: its edge from `a` crosses two columns.
const MULTI_PATH: &str = "
resources:
- {name: repo, type: mock, source: {}}
- {name: tools, type: mock, source: {}}
jobs:
- name: a
  plan: [{get: repo}]
- name: b
  plan: [{get: repo, passed: [a]}]
- name: c
  plan:
  - {get: repo, passed: [a, b]}
  - {get: tools}
";

/// In config order the two edges would cross: `second` gets `r1`,
/// `first` gets `r2`.
const CROSSED: &str = "
resources:
- {name: r1, type: mock, source: {}}
- {name: r2, type: mock, source: {}}
jobs:
- name: first
  plan: [{get: r2}]
- name: second
  plan: [{get: r1}]
";

/// `version` is got by the first job and put by the last: put, it is
/// drawn again right of the putter.
const GOT_AND_PUT_LATER: &str = "
resources:
- {name: version, type: mock, source: {}}
jobs:
- name: build
  plan: [{get: version, trigger: true}]
- name: bump
  plan:
  - {get: version, passed: [build]}
  - {put: version}
";

const GROUPS: &str = "
groups:
- {name: build, jobs: [unit, integration]}
- {name: ship-it, jobs: ['sh*'], resources: [notes]}
resources:
- {name: repo, type: mock, source: {}}
- {name: release, type: mock, source: {}}
- {name: notes, type: mock, source: {}}
jobs:
- name: unit
  plan: [{get: repo, trigger: true}, {get: notes}]
- name: integration
  plan: [{get: repo, trigger: true, passed: [unit]}]
- name: ship
  plan:
  - {get: repo, passed: [integration]}
  - {put: release}
";

#[test]
fn the_graph_places_jobs_and_resources_and_draws_their_edges() {
    type Case<'a> = (&'a str, &'a str, Option<&'a str>, &'a [&'a str]);
    let cases: &[Case] = &[
        (
            "three jobs and a resource put at the end",
            THREE_JOBS,
            None,
            &[
                "job unit 1:0",
                "job integration 2:0",
                "job ship 3:0",
                "resource repo 0:0",
                "resource release 4:0",
                "get repo -> unit [repo]",
                "passed unit -> integration [repo]",
                "passed integration -> ship [repo] (no trigger)",
                "put ship -> release [release]",
            ],
        ),
        (
            "fan-out then fan-in",
            FAN_OUT_FAN_IN,
            None,
            &[
                "job build 1:0",
                "job test-a 2:0",
                "job test-b 2:1",
                "job deploy 3:0",
                "resource repo 0:0",
                "get repo -> build [repo]",
                "passed build -> test-a [repo]",
                "passed build -> test-b [repo]",
                "passed test-a -> deploy [repo]",
                "passed test-b -> deploy [repo]",
            ],
        ),
        (
            "a job with no inputs stands in the first job column, alone",
            NO_INPUTS,
            None,
            &[
                "job unit 1:0",
                "job nightly 1:1",
                "resource repo 0:0",
                "get repo -> unit [repo] (no trigger)",
            ],
        ),
        (
            "an edge across columns passes through a place of its own",
            MULTI_PATH,
            None,
            &[
                "job a 1:0",
                "job b 2:0",
                "job c 4:0",
                "resource repo 0:0",
                "resource tools 3:0",
                "get repo -> a [repo] (no trigger)",
                "passed a -> b [repo] (no trigger)",
                "passed a -> c [repo] via 2:1 via 3:2 (no trigger)",
                "passed b -> c [repo] via 3:1 (no trigger)",
                "get tools -> c [tools] (no trigger)",
            ],
        ),
        (
            "rows follow the mean row of upstream nodes",
            CROSSED,
            None,
            &[
                "job first 1:1",
                "job second 1:0",
                "resource r1 0:0",
                "resource r2 0:1",
                "get r2 -> first [r2] (no trigger)",
                "get r1 -> second [r1] (no trigger)",
            ],
        ),
        (
            "a resource put right of where it is got is drawn again",
            GOT_AND_PUT_LATER,
            None,
            &[
                "job build 1:0",
                "job bump 2:0",
                "resource version 0:0",
                "output version 3:0",
                "get version -> build [version]",
                "passed build -> bump [version] (no trigger)",
                "put bump -> version [version]",
            ],
        ),
        (
            "a group shows its jobs and their resources",
            GROUPS,
            Some("build"),
            &[
                "job unit 1:0",
                "job integration 2:0",
                "resource repo 0:0",
                "resource notes 0:1",
                "get repo -> unit [repo]",
                "get notes -> unit [notes] (no trigger)",
                "passed unit -> integration [repo]",
            ],
        ),
        (
            "upstream jobs of another group: got from the resource; listed resources shown",
            GROUPS,
            Some("ship-it"),
            &[
                "job ship 1:0",
                "resource repo 0:0",
                "resource release 2:0",
                "resource notes 0:1",
                "get repo -> ship [repo] (no trigger)",
                "put ship -> release [release]",
            ],
        ),
    ];
    for (what, yaml, group, want) in cases {
        let config = config(yaml);
        let group = group.map(|name| {
            config
                .groups
                .iter()
                .find(|g| g.name == name)
                .expect("the group")
        });
        let got = describe(&layout(&config, group));
        assert_eq!(got, *want, "{what}");
    }
}

/// Edges between the same two nodes are one edge carrying each resource.
#[test]
fn edges_between_the_same_nodes_are_merged() {
    let config = config(
        "
resources:
- {name: repo, type: mock, source: {}}
- {name: tools, type: mock, source: {}}
jobs:
- name: unit
  plan: [{get: repo}, {get: tools}]
- name: deploy
  plan:
  - {get: repo, passed: [unit], trigger: true}
  - {get: tools, passed: [unit]}
  - {get: again, resource: repo, passed: [unit]}
",
    );
    let g = layout(&config, None);
    let passed: Vec<_> = g
        .edges
        .iter()
        .filter(|e| e.kind == EdgeKind::Passed)
        .collect();
    assert_eq!(passed.len(), 1, "{:?}", g.edges);
    assert_eq!(passed[0].resources, ["repo", "tools"]);
    assert!(passed[0].trigger, "one triggering get makes it trigger");
}

/// ~100 jobs in a lattice with long edges: every node and every place an
/// edge passes through has a grid place of its own, and each edge runs
/// left to right.
#[test]
fn a_hundred_jobs_never_share_a_place() {
    let mut yaml = String::from("resources:\n- {name: repo, type: mock, source: {}}\n");
    for r in 0..10 {
        yaml.push_str(&format!("- {{name: r{r}, type: mock, source: {{}}}}\n"));
        yaml.push_str(&format!("- {{name: out{r}, type: mock, source: {{}}}}\n"));
    }
    yaml.push_str("jobs:\n");
    for j in 0..100 {
        yaml.push_str(&format!("- name: job-{j}\n  plan:\n  - get: repo\n"));
        // Each job passes from one or two earlier ones, some far back.
        let mut upstream = Vec::new();
        if j >= 10 {
            upstream.push(format!("job-{}", j - 10));
        }
        if j >= 37 && j % 3 == 0 {
            upstream.push(format!("job-{}", j - 37));
        }
        if !upstream.is_empty() {
            yaml.push_str(&format!("    passed: [{}]\n", upstream.join(", ")));
        }
        // Resources got straight by jobs in many columns: long edges.
        yaml.push_str(&format!("  - get: r{}\n", (j * 7) % 10));
        yaml.push_str(&format!("  - put: out{}\n", j % 10));
    }
    let config = config(&yaml);
    let g = layout(&config, None);
    assert_eq!(
        g.nodes.iter().filter(|n| n.kind == NodeKind::Job).count(),
        100
    );
    let mut taken = HashSet::new();
    for n in &g.nodes {
        assert!(n.column < g.columns && n.row < g.rows, "{n:?}");
        assert!(taken.insert((n.column, n.row)), "{n:?} shares its place");
    }
    let mut through = HashSet::new();
    for e in &g.edges {
        let (a, b) = (g.nodes[e.from].column, g.nodes[e.to].column);
        assert!(a < b, "{e:?} runs backwards");
        assert_eq!(e.via.len(), b - a - 1, "{e:?}");
        for place in &e.via {
            // A place is a source's: edges from one node share it.
            through.insert((e.from, *place));
            assert!(!taken.contains(place), "{e:?} runs through a node");
        }
    }
    let places: HashSet<_> = through.iter().map(|(_, p)| *p).collect();
    assert_eq!(places.len(), through.len(), "two sources share a place");
}

#[test]
fn an_empty_pipeline_is_an_empty_graph() {
    assert_eq!(layout(&PipelineConfig::default(), None), Graph::default());
}
