//! The pipeline page's graph, laid out on a grid: which column and row
//! each job and resource stands at, and the edges between them, so that
//! web only has to turn grid places into pixels.
//!
//! Jobs stand in columns by `passed` depth (as [`super::job_columns`]).
//! A resource stands in the column left of the first job that gets it
//! without `passed`; a resource that is only put stands right of the last
//! job that puts it. A resource put by a job at or right of where it is
//! got is drawn a second time ([`NodeKind::Output`]) right of that job, so
//! that no edge runs backwards across the graph.
//!
//! Edges, as Concourse draws them: a get without `passed` runs from its
//! resource to the job; a get with `passed` runs from each upstream job to
//! the job (the version comes through those jobs, not straight from the
//! resource); a put runs from the job to its resource. Edges between the
//! same two nodes are one edge listing every resource it carries.
//!
//! An edge that spans several columns passes through a reserved place in
//! each column between its ends (the places of one source's edges are
//! shared), so it never runs through a node. Rows start in config order
//! and are then reordered by the mean row of each node's neighbours in the
//! next column over (the barycenter heuristic, a few sweeps each way),
//! which untangles most crossings; ties keep config order, so the same
//! config always gives the same picture.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::pipeline::{Group, PipelineConfig};

/// What a node of the graph stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Job,
    Resource,
    /// A resource drawn a second time, right of the jobs that put it,
    /// because it also feeds jobs left of them.
    Output,
}

impl NodeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeKind::Job => "job",
            NodeKind::Resource => "resource",
            NodeKind::Output => "output",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub kind: NodeKind,
    /// The job's or resource's name.
    pub name: String,
    pub column: usize,
    pub row: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EdgeKind {
    /// A resource to a job that gets it without `passed`.
    Get,
    /// A job to a job that gets a version that passed it.
    Passed,
    /// A job to the resource it puts.
    Put,
}

impl EdgeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeKind::Get => "get",
            EdgeKind::Passed => "passed",
            EdgeKind::Put => "put",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    /// Indexes into [`Graph::nodes`].
    pub from: usize,
    pub to: usize,
    pub kind: EdgeKind,
    /// The resources the edge carries, each once, in plan order.
    pub resources: Vec<String>,
    /// Whether a new version along it triggers the job (any of its gets
    /// has `trigger: true`); puts always count as triggering.
    pub trigger: bool,
    /// The places (column, row) it passes through between its ends.
    pub via: Vec<(usize, usize)>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
    pub columns: usize,
    /// The rows of the tallest column, places passed through included.
    pub rows: usize,
}

/// How many times rows are reordered each way.
const SWEEPS: usize = 4;

/// Lays out the whole pipeline, or the jobs of one of its groups with the
/// resources they get and put and those the group lists.
pub fn layout(config: &PipelineConfig, group: Option<&Group>) -> Graph {
    let shown: Vec<&str> = match group {
        Some(g) => config.group_jobs(g),
        None => config.jobs.iter().map(|j| j.name.as_str()).collect(),
    };
    let shown_set: HashSet<&str> = shown.iter().copied().collect();
    let jobs: Vec<_> = config
        .jobs
        .iter()
        .filter(|j| shown_set.contains(j.name.as_str()))
        .collect();

    // Each get's upstream jobs among those shown: a get whose upstream
    // jobs are all hidden (another group's) is drawn from its resource.
    let mut gets = Vec::new();
    for job in &jobs {
        for get in job.inputs() {
            let upstream: Vec<&str> = config
                .passed_jobs(get)
                .into_iter()
                .filter(|u| *u != job.name && shown_set.contains(u))
                .collect();
            gets.push((
                job.name.as_str(),
                get.resource_name(),
                upstream,
                get.trigger,
            ));
        }
    }
    let mut passed: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (job, _, upstream, _) in &gets {
        passed
            .entry(job.to_string())
            .or_default()
            .extend(upstream.iter().map(|u| u.to_string()));
    }
    let names: Vec<String> = jobs.iter().map(|j| j.name.clone()).collect();
    // Jobs on odd columns, resources on even ones; empty columns close up
    // below.
    let column: HashMap<String, usize> = super::job_columns(&names, &passed)
        .into_iter()
        .enumerate()
        .flat_map(|(depth, names)| names.into_iter().map(move |n| (n, 2 * depth + 1)))
        .collect();

    let mut nodes: Vec<Node> = jobs
        .iter()
        .map(|j| Node {
            kind: NodeKind::Job,
            name: j.name.clone(),
            column: column[j.name.as_str()],
            row: 0,
        })
        .collect();
    let job_node: HashMap<&str, usize> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.name.as_str(), i))
        .collect();
    let puts: Vec<(&str, &str)> = jobs
        .iter()
        .flat_map(|j| {
            j.outputs()
                .into_iter()
                .map(move |p| (j.name.as_str(), p.resource_name()))
        })
        .collect();
    let listed: HashSet<&str> = group
        .map(|g| g.resources.iter().map(String::as_str).collect())
        .unwrap_or_default();
    // Where each put of a resource lands: its node, or its output node.
    let mut input_node: HashMap<&str, usize> = HashMap::new();
    let mut output_node: HashMap<&str, usize> = HashMap::new();
    for r in &config.resources {
        let name = r.name.as_str();
        let got: Vec<usize> = gets
            .iter()
            .filter(|(_, res, up, _)| *res == name && up.is_empty())
            .map(|(job, ..)| column[*job])
            .collect();
        let put_by: Vec<usize> = puts
            .iter()
            .filter(|(_, res)| *res == name)
            .map(|(job, _)| column[*job])
            .collect();
        let touched = gets.iter().any(|(_, res, ..)| *res == name) || !put_by.is_empty();
        if !touched && !listed.contains(name) {
            continue;
        }
        let mut place = |kind, column| {
            nodes.push(Node {
                kind,
                name: name.to_string(),
                column,
                row: 0,
            });
            nodes.len() - 1
        };
        match got.iter().min() {
            Some(first) => {
                let at = first - 1;
                input_node.insert(name, place(NodeKind::Resource, at));
                if let Some(last) = put_by.iter().filter(|c| **c >= at).max() {
                    output_node.insert(name, place(NodeKind::Output, last + 1));
                }
            }
            None => {
                // Only put (or only got through `passed`, or only listed).
                let at = put_by.iter().max().map_or(0, |c| c + 1);
                input_node.insert(name, place(NodeKind::Resource, at));
            }
        }
    }

    let mut edges: Vec<Edge> = Vec::new();
    let mut merged: HashMap<(usize, usize, EdgeKind), usize> = HashMap::new();
    let mut add = |from: usize, to: usize, kind: EdgeKind, resource: &str, trigger: bool| {
        let i = *merged.entry((from, to, kind)).or_insert_with(|| {
            edges.push(Edge {
                from,
                to,
                kind,
                resources: Vec::new(),
                trigger: false,
                via: Vec::new(),
            });
            edges.len() - 1
        });
        let e = &mut edges[i];
        if !e.resources.iter().any(|r| r == resource) {
            e.resources.push(resource.to_string());
        }
        e.trigger |= trigger;
    };
    for job in &jobs {
        // The job is the edge's end for its gets, its start for its puts.
        let to = job_node[job.name.as_str()];
        for (_, resource, upstream, trigger) in gets.iter().filter(|g| g.0 == job.name) {
            if upstream.is_empty() {
                if let Some(&from) = input_node.get(resource) {
                    add(from, to, EdgeKind::Get, resource, *trigger);
                }
            }
            for up in upstream {
                add(job_node[up], to, EdgeKind::Passed, resource, *trigger);
            }
        }
        for put in job.outputs() {
            let resource = put.resource_name();
            let Some(&input) = input_node.get(resource) else {
                continue;
            };
            let target = match output_node.get(resource) {
                Some(&out) if nodes[input].column <= nodes[to].column => out,
                _ => input,
            };
            add(to, target, EdgeKind::Put, resource, true);
        }
    }

    // Columns nobody stands in close up.
    let used: Vec<usize> = {
        let mut c: Vec<usize> = nodes.iter().map(|n| n.column).collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    for n in &mut nodes {
        n.column = used.binary_search(&n.column).unwrap_or_default();
    }
    let columns = used.len();
    let (rows, places) = order_rows(&mut nodes, &edges, columns);
    for e in &mut edges {
        let (a, b) = (nodes[e.from].column, nodes[e.to].column);
        if b > a + 1 {
            e.via = places
                .range((e.from, a + 1)..(e.from, b))
                .map(|((_, c), row)| (*c, *row))
                .collect();
        }
    }
    Graph {
        nodes,
        edges,
        columns,
        rows,
    }
}

/// Gives every node its row, reserving a place in each column a long edge
/// crosses (one per source node and column); answers the tallest column's
/// height and the reserved places' rows by (source node, column).
fn order_rows(
    nodes: &mut [Node],
    edges: &[Edge],
    columns: usize,
) -> (usize, BTreeMap<(usize, usize), usize>) {
    // Items are the nodes, then the reserved places.
    let mut column_of: Vec<usize> = nodes.iter().map(|n| n.column).collect();
    let mut place_item: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    let mut hops: HashSet<(usize, usize)> = HashSet::new();
    for e in edges {
        let (a, b) = (nodes[e.from].column, nodes[e.to].column);
        if b <= a {
            continue; // Only ever a cycle; drawn as a loop, not ordered.
        }
        let mut prev = e.from;
        for c in a + 1..b {
            let item = *place_item.entry((e.from, c)).or_insert_with(|| {
                column_of.push(c);
                column_of.len() - 1
            });
            hops.insert((prev, item));
            prev = item;
        }
        hops.insert((prev, e.to));
    }
    let mut before: Vec<Vec<usize>> = vec![Vec::new(); column_of.len()];
    let mut after: Vec<Vec<usize>> = vec![Vec::new(); column_of.len()];
    let mut hops: Vec<(usize, usize)> = hops.into_iter().collect();
    hops.sort_unstable();
    for (a, b) in hops {
        after[a].push(b);
        before[b].push(a);
    }
    let mut grid: Vec<Vec<usize>> = vec![Vec::new(); columns];
    for (item, c) in column_of.iter().enumerate() {
        grid[*c].push(item);
    }
    let mut row: Vec<usize> = vec![0; column_of.len()];
    let number = |grid: &[Vec<usize>], row: &mut [usize]| {
        for col in grid {
            for (r, item) in col.iter().enumerate() {
                row[*item] = r;
            }
        }
    };
    number(&grid, &mut row);
    let reorder = |col: &mut Vec<usize>, row: &mut [usize], neighbours: &[Vec<usize>]| {
        let key = |item: usize| {
            let n = &neighbours[item];
            if n.is_empty() {
                row[item] as f64
            } else {
                n.iter().map(|i| row[*i] as f64).sum::<f64>() / n.len() as f64
            }
        };
        let mut keyed: Vec<(f64, usize)> = col.iter().map(|i| (key(*i), *i)).collect();
        // Stable: equal keys keep their order.
        keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
        *col = keyed.into_iter().map(|(_, i)| i).collect();
        for (r, item) in col.iter().enumerate() {
            row[*item] = r;
        }
    };
    for sweep in 0..=2 * SWEEPS {
        if sweep % 2 == 0 {
            for col in grid.iter_mut().skip(1) {
                reorder(col, &mut row, &before);
            }
        } else {
            for col in grid.iter_mut().rev().skip(1) {
                reorder(col, &mut row, &after);
            }
        }
    }
    for (i, n) in nodes.iter_mut().enumerate() {
        n.row = row[i];
    }
    let rows = grid.iter().map(Vec::len).max().unwrap_or(0);
    let places = place_item
        .into_iter()
        .map(|(key, item)| (key, row[item]))
        .collect();
    (rows, places)
}

#[cfg(test)]
mod tests;
