//! The set-pipeline diff, as data and as text.

use super::*;

const OLD: &str = r#"
groups:
- {name: a, jobs: [build]}
- {name: b, jobs: [deploy]}
resources:
- {name: repo, type: git, source: {uri: old}}
- {name: gone, type: git}
jobs:
- {name: build, plan: [{get: repo}, {get: gone}]}
- {name: deploy, plan: [{get: repo, passed: [build]}]}
"#;

const NEW: &str = r#"
groups:
- {name: b, jobs: [deploy]}
- {name: a, jobs: [build]}
resources:
- {name: repo, type: git, source: {uri: new}}
jobs:
- {name: build, plan: [{get: repo}]}
- {name: deploy, plan: [{get: repo, passed: [build]}]}
display: {background_image: bg.png}
"#;

#[test]
fn the_diff_names_what_changes() {
    let (old, new) = (ok(OLD).config, ok(NEW).config);
    let d = diff(&old, &new);
    let summary: Vec<(Section, &str, Change)> = d
        .items
        .iter()
        .map(|i| (i.section, i.name.as_str(), i.change))
        .collect();
    assert_eq!(
        summary,
        [
            (Section::Groups, "a", Change::Moved),
            (Section::Groups, "b", Change::Moved),
            (Section::Resources, "repo", Change::Changed),
            (Section::Resources, "gone", Change::Removed),
            (Section::Jobs, "build", Change::Changed),
            (Section::Display, "", Change::Added),
        ]
    );
    assert!(diff(&old, &old).is_empty());
    assert_eq!(diff(&old, &old).render(), "");
}

#[test]
fn the_diff_renders_as_yaml_as_fly_shows_it() {
    let (old, new) = (ok(OLD).config, ok(NEW).config);
    let mut d = diff(&old, &new);
    d.items.retain(|i| i.section != Section::Groups);
    assert_eq!(
        d.render(),
        r#"resources:
  resource repo has changed:
    name: repo
    type: git
    source:
  -   uri: old
  +   uri: new

  resource gone has been removed:
  - name: gone
  - type: git
  - source: {}

jobs:
  job build has changed:
    name: build
    plan:
    - get: repo
  - - get: gone

  display configuration has been added:
  + background_image: bg.png

"#
    );
}

#[test]
fn every_section_is_compared() {
    let old = ok(r#"
var_sources: [{name: v, type: dummy, config: {}}]
resources: [{name: r, type: git}]
jobs: [{name: j, plan: [{get: r}]}]
user_data: {owner: a}
"#)
    .config;
    let new = ok(r#"
resource_types: [{name: t, type: registry-image, source: {}}]
resources: [{name: r, type: git}]
jobs: [{name: j, plan: [{get: r}]}]
user_data: {owner: b}
"#)
    .config;
    let d = diff(&old, &new);
    let summary: Vec<(Section, &str, Change)> = d
        .items
        .iter()
        .map(|i| (i.section, i.name.as_str(), i.change))
        .collect();
    assert_eq!(
        summary,
        [
            (Section::VarSources, "v", Change::Removed),
            (Section::ResourceTypes, "t", Change::Added),
            (Section::UserData, "", Change::Changed),
        ]
    );
    assert_eq!(
        d.items[2].lines,
        [
            DiffLine::Removed("owner: a".into()),
            DiffLine::Added("owner: b".into()),
        ]
    );
}

/// Items too large to compare line by line are shown whole, old then new,
/// so that the diff stays cheap.
#[test]
fn a_huge_item_is_shown_whole() {
    let job = |n: usize| {
        let steps: Vec<Value> = (0..n)
            .map(|i| serde_json::json!({"get": format!("g{i}"), "resource": "r"}))
            .collect();
        serde_json::json!({
            "resources": [{"name": "r", "type": "git"}],
            "jobs": [{"name": "j", "plan": steps}],
        })
    };
    let old = parse_pipeline_value(&job(800)).unwrap().config;
    let new = parse_pipeline_value(&job(801)).unwrap().config;
    let count = |c: &PipelineConfig| {
        crate::yaml_write::to_yaml_ordered(&c.jobs[0])
            .lines()
            .count()
    };
    let (before, after) = (count(&old), count(&new));
    // Past the bound: a line by line comparison would take 2.5M cells.
    assert!(before * after > 1_000_000);
    let d = diff(&old, &new);
    let lines = &d.items[0].lines;
    assert_eq!(lines.len(), before + after);
    assert!(lines[..before]
        .iter()
        .all(|l| matches!(l, DiffLine::Removed(_))));
    assert!(lines[before..]
        .iter()
        .all(|l| matches!(l, DiffLine::Added(_))));
}
