//! The pipeline graph as inline SVG: the layout (`hangar_core::dashboard::
//! graph`) turned into pixels, each node a link coloured by its state,
//! each edge a curve with an arrowhead. No script is needed to see it.
//! SVG elements are written with end tags (`rect … {}`): the HTML parser
//! reads a bare `<rect …>` inside `<svg>` as open, nesting what follows.
//!
//! Every node and edge carries `data-` attributes naming what it stands
//! for (`data-node="job:unit"`, `data-from`, `data-to`), so tests (and
//! anyone reading the markup) can find them without knowing the pixels.

use std::collections::HashMap;

use hangar_core::dashboard::graph::{Edge, Graph, Node, NodeKind};
use hangar_core::dashboard::shorten;
use maud::{html, Markup};

use super::layout::seg;

/// What the graph shows of a job.
pub(crate) struct JobState {
    /// The status word of the build that last ended (Concourse's
    /// `finished_build`), else of the newest (`none` without builds).
    pub status: &'static str,
    pub number: Option<i64>,
    /// The number of the newest build running, if one is.
    pub running: Option<i64>,
    pub paused: bool,
}

/// What the graph shows of a resource.
#[derive(Default)]
pub(crate) struct ResourceState {
    pub resource_type: String,
    /// The pinned version's JSON.
    pub pinned: Option<String>,
    pub check_error: Option<String>,
    /// `check_every: never`: only a manual check or a put brings versions.
    pub checks_off: bool,
}

const JOB_WIDTH: u32 = 180;
const RESOURCE_WIDTH: u32 = 170;
const NODE_HEIGHT: u32 = 42;
const ROW_PITCH: u32 = 54;
const COLUMN_GAP: u32 = 64;
const MARGIN: u32 = 12;
/// Labels are monospace at 12px (7.2px a character), so a name's width
/// is known here: this many characters fit a node with its padding.
const JOB_CHARS: usize = 22;
const RESOURCE_CHARS: usize = 21;
/// How much of a failing check's error a resource's title holds.
const ERROR_IN_TITLE: usize = 400;

/// The graph, `base` being the pipeline page's path.
pub(crate) fn svg(
    graph: &Graph,
    base: &str,
    jobs: &HashMap<&str, JobState>,
    resources: &HashMap<&str, ResourceState>,
) -> Markup {
    let widths: Vec<u32> = (0..graph.columns)
        .map(|c| {
            let job = graph
                .nodes
                .iter()
                .any(|n| n.column == c && n.kind == NodeKind::Job);
            if job {
                JOB_WIDTH
            } else {
                RESOURCE_WIDTH
            }
        })
        .collect();
    let mut lefts = Vec::with_capacity(widths.len());
    let mut x = MARGIN;
    for w in &widths {
        lefts.push(x);
        x += w + COLUMN_GAP;
    }
    let width = x - COLUMN_GAP + MARGIN;
    let height = MARGIN * 2 + graph.rows as u32 * ROW_PITCH;
    let at = Geometry { lefts, widths };
    html! {
        div.graph-scroll {
            svg.pipeline-graph xmlns="http://www.w3.org/2000/svg" role="group"
                aria-label="the pipeline's jobs and resources"
                width=(width) height=(height) viewBox={"0 0 " (width) " " (height)} {
                defs {
                    marker #arrow viewBox="0 0 10 10" refX="9" refY="5"
                        markerWidth="7" markerHeight="7" orient="auto-start-reverse" {
                        path d="M0,0L10,5L0,10z" {}
                    }
                }
                @for e in &graph.edges { (edge(graph, e, &at)) }
                @for n in &graph.nodes {
                    @match n.kind {
                        NodeKind::Job => (job_node(n, base, jobs.get(n.name.as_str()), &at)),
                        _ => (resource_node(n, base, resources.get(n.name.as_str()), &at)),
                    }
                }
            }
        }
    }
}

struct Geometry {
    lefts: Vec<u32>,
    widths: Vec<u32>,
}

impl Geometry {
    fn top(&self, row: usize) -> u32 {
        MARGIN + row as u32 * ROW_PITCH
    }

    fn middle(&self, row: usize) -> u32 {
        self.top(row) + NODE_HEIGHT / 2
    }

    fn node_width(&self, n: &Node) -> u32 {
        match n.kind {
            NodeKind::Job => JOB_WIDTH,
            _ => RESOURCE_WIDTH,
        }
    }
}

/// `job:unit`, `resource:repo`, `output:repo`: what a node stands for.
fn node_id(n: &Node) -> String {
    format!("{}:{}", n.kind.as_str(), n.name)
}

fn job_node(n: &Node, base: &str, state: Option<&JobState>, at: &Geometry) -> Markup {
    let (x, y) = (at.lefts[n.column], at.top(n.row));
    let none = JobState {
        status: "none",
        number: None,
        running: None,
        paused: false,
    };
    let s = state.unwrap_or(&none);
    let mut words = Vec::new();
    if s.paused {
        words.push("paused".to_string());
    }
    words.push(match (s.running, s.number) {
        (Some(running), Some(number)) if running != number => {
            format!("{} #{number} · running #{running}", s.status)
        }
        (Some(running), _) => format!("running #{running}"),
        (None, Some(number)) => format!("{} #{number}", s.status),
        (None, None) => "no builds".into(),
    });
    let state_line = words.join(" · ");
    let mut class = format!("node job {}", s.status);
    if s.running.is_some() {
        class.push_str(" running");
    }
    if s.paused {
        class.push_str(" paused");
    }
    html! {
        a class=(class) href={(base) "/jobs/" (seg(&n.name))} data-node=(node_id(n)) {
            title { "job " (n.name) ": " (state_line) }
            rect x=(x) y=(y) width=(JOB_WIDTH) height=(NODE_HEIGHT) rx="4" {}
            text.name x=(x + 8) y=(y + 17) { (shorten(&n.name, JOB_CHARS)) }
            text.state x=(x + 8) y=(y + 33) { (state_line) }
        }
    }
}

fn resource_node(n: &Node, base: &str, state: Option<&ResourceState>, at: &Geometry) -> Markup {
    let (x, y) = (at.lefts[n.column], at.top(n.row));
    let unknown = ResourceState::default();
    let s = state.unwrap_or(&unknown);
    let mut class = String::from("node resource");
    let mut marks = Vec::new();
    let mut title = format!("resource {} ({})", n.name, s.resource_type);
    if n.kind == NodeKind::Output {
        class.push_str(" output");
    }
    // The most pressing mark first: the line may be cut, the title not.
    if let Some(error) = &s.check_error {
        class.push_str(" check-failed");
        marks.push("check failed");
        // A tooltip is no place for a whole log: the resource page has it.
        title.push_str(&format!(
            "\ncheck failed: {}",
            shorten(error, ERROR_IN_TITLE)
        ));
    }
    if let Some(version) = &s.pinned {
        class.push_str(" pinned");
        marks.push("pinned");
        title.push_str(&format!("\npinned to {version}"));
    }
    if s.checks_off {
        class.push_str(" checks-off");
        marks.push("checks off");
        title.push_str("\nperiodic checks off (check_every: never)");
    }
    let state_line = if marks.is_empty() {
        s.resource_type.clone()
    } else {
        marks.join(" · ")
    };
    html! {
        a class=(class) href={(base) "/resources/" (seg(&n.name))} data-node=(node_id(n)) {
            title { (title) }
            rect x=(x) y=(y) width=(RESOURCE_WIDTH) height=(NODE_HEIGHT) rx="12" {}
            text.name x=(x + 10) y=(y + 17) { (shorten(&n.name, RESOURCE_CHARS)) }
            text.state x=(x + 10) y=(y + 33) { (shorten(&state_line, RESOURCE_CHARS)) }
        }
    }
}

/// A curve from the source's right side to the target's left, straight
/// through the places it passes in the columns between.
fn edge(graph: &Graph, e: &Edge, at: &Geometry) -> Markup {
    let (from, to) = (&graph.nodes[e.from], &graph.nodes[e.to]);
    let start = (
        at.lefts[from.column] + at.node_width(from),
        at.middle(from.row),
    );
    let end = (at.lefts[to.column], at.middle(to.row));
    let mut d = format!("M{},{}", start.0, start.1);
    if to.column <= from.column {
        // Only a cycle: a loop under the two nodes.
        let drop = NODE_HEIGHT;
        d.push_str(&format!(
            " C{},{} {},{} {},{}",
            start.0 + 40,
            start.1 + drop,
            end.0.saturating_sub(40),
            end.1 + drop,
            end.0,
            end.1
        ));
    } else {
        let mut here = start;
        for &(c, r) in &e.via {
            let entry = (at.lefts[c], at.middle(r));
            curve(&mut d, here, entry);
            here = (at.lefts[c] + at.widths[c], entry.1);
            d.push_str(&format!(" L{},{}", here.0, here.1));
        }
        curve(&mut d, here, end);
    }
    let class = format!(
        "edge {}{}",
        e.kind.as_str(),
        if e.trigger { "" } else { " untriggered" }
    );
    let resources = e.resources.join(" ");
    html! {
        path class=(class) d=(d) marker-end="url(#arrow)"
            data-from=(node_id(from)) data-to=(node_id(to)) data-resources=(resources) {
            title {
                (e.resources.join(", ")) ": " (from.name) " → " (to.name) " (" (e.kind.as_str())
                @if !e.trigger { ", does not trigger" }
                ")"
            }
        }
    }
}

/// An S-curve between two points, leaving and arriving level.
fn curve(d: &mut String, from: (u32, u32), to: (u32, u32)) {
    let bend = (to.0.saturating_sub(from.0)) / 2;
    d.push_str(&format!(
        " C{},{} {},{} {},{}",
        from.0 + bend,
        from.1,
        to.0 - bend,
        to.1,
        to.0,
        to.1
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use hangar_core::dashboard::graph::layout;
    use hangar_core::pipeline::parse_pipeline;

    /// Every node lies inside the picture and no two overlap, at the
    /// size the brief asks for (a hundred jobs in a lattice).
    #[test]
    fn nodes_of_a_hundred_jobs_do_not_overlap_in_pixels() {
        let mut yaml = String::from("resources:\n- {name: repo, type: mock, source: {}}\njobs:\n");
        for j in 0..100 {
            yaml.push_str(&format!("- name: job-{j}\n  plan:\n  - get: repo\n"));
            if j >= 8 {
                yaml.push_str(&format!("    passed: [job-{}]\n", j - 8 + (j % 3)));
            }
        }
        let config = parse_pipeline(&yaml).unwrap().config;
        let g = layout(&config, None);
        let html = svg(&g, "/p", &HashMap::new(), &HashMap::new()).into_string();
        let mut boxes = Vec::new();
        for piece in html.split("<rect").skip(1) {
            let attr = |name: &str| -> u32 {
                let at = piece.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
                piece[at..].split('"').next().unwrap().parse().unwrap()
            };
            boxes.push((attr("x"), attr("y"), attr("width"), attr("height")));
        }
        assert_eq!(boxes.len(), g.nodes.len());
        for (i, a) in boxes.iter().enumerate() {
            for b in &boxes[i + 1..] {
                let apart =
                    a.0 + a.2 <= b.0 || b.0 + b.2 <= a.0 || a.1 + a.3 <= b.1 || b.1 + b.3 <= a.1;
                assert!(apart, "{a:?} overlaps {b:?}");
            }
        }
    }
}
