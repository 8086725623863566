//! What `set-pipeline` changes: the resources, resource types, jobs,
//! groups and var sources added, removed or changed between two configs,
//! as data for a CLI to show, and a plain rendering of it like fly's.

use std::fmt::Write;

use serde::Serialize;

use super::PipelineConfig;

/// The sections of a config, in the order fly shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    Groups,
    VarSources,
    Resources,
    ResourceTypes,
    Jobs,
    Display,
    UserData,
}

impl Section {
    /// The section's heading.
    pub fn heading(self) -> &'static str {
        match self {
            Section::Groups => "groups",
            Section::VarSources => "variable sources",
            Section::Resources => "resources",
            Section::ResourceTypes => "resource types",
            Section::Jobs => "jobs",
            Section::Display => "display",
            Section::UserData => "user data",
        }
    }

    /// What one item of the section is called.
    pub fn item(self) -> &'static str {
        match self {
            Section::Groups => "group",
            Section::VarSources => "variable source",
            Section::Resources => "resource",
            Section::ResourceTypes => "resource type",
            Section::Jobs => "job",
            Section::Display => "display configuration",
            Section::UserData => "user data",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    Added,
    Removed,
    Changed,
    /// A group moved in the list of groups (the order of tabs); its
    /// content may be the same.
    Moved,
}

/// One line of an item's JSON, old against new.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DiffLine {
    Same(String),
    Added(String),
    Removed(String),
}

/// One item that changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ItemDiff {
    pub section: Section,
    /// Empty for display and user data, which have no name.
    pub name: String,
    pub change: Change,
    pub lines: Vec<DiffLine>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ConfigDiff {
    pub items: Vec<ItemDiff>,
}

/// Items whose JSON is longer than this many lines on both sides are shown
/// as all removed then all added, so that comparing them stays cheap.
const MAX_LCS_CELLS: usize = 1_000_000;

/// Compares two configs, item by item, matched by name.
pub fn diff(old: &PipelineConfig, new: &PipelineConfig) -> ConfigDiff {
    let mut items = Vec::new();
    named(
        &mut items,
        Section::Groups,
        &old.groups,
        &new.groups,
        |g| &g.name,
        true,
    );
    named(
        &mut items,
        Section::VarSources,
        &old.var_sources,
        &new.var_sources,
        |v| &v.name,
        false,
    );
    named(
        &mut items,
        Section::Resources,
        &old.resources,
        &new.resources,
        |r| &r.name,
        false,
    );
    named(
        &mut items,
        Section::ResourceTypes,
        &old.resource_types,
        &new.resource_types,
        |t| &t.name,
        false,
    );
    named(
        &mut items,
        Section::Jobs,
        &old.jobs,
        &new.jobs,
        |j| &j.name,
        false,
    );
    unnamed(&mut items, Section::Display, &old.display, &new.display);
    unnamed(
        &mut items,
        Section::UserData,
        &old.user_data,
        &new.user_data,
    );
    ConfigDiff { items }
}

fn named<T: Serialize>(
    out: &mut Vec<ItemDiff>,
    section: Section,
    old: &[T],
    new: &[T],
    name: fn(&T) -> &String,
    ordered: bool,
) {
    let new_index: std::collections::HashMap<&str, usize> = new
        .iter()
        .enumerate()
        .rev()
        .map(|(i, t)| (name(t).as_str(), i))
        .collect();
    let old_names: std::collections::HashSet<&str> = old.iter().map(|t| name(t).as_str()).collect();
    for (i, before) in old.iter().enumerate() {
        let n = name(before);
        match new_index.get(n.as_str()) {
            None => out.push(item(section, n, Change::Removed, Some(before), None)),
            Some(&j) => {
                let (a, b) = (lines_of(before), lines_of(&new[j]));
                if a != b {
                    out.push(ItemDiff {
                        section,
                        name: n.clone(),
                        change: Change::Changed,
                        lines: diff_lines(&a, &b),
                    });
                } else if ordered && i != j {
                    out.push(ItemDiff {
                        section,
                        name: n.clone(),
                        change: Change::Moved,
                        lines: a.into_iter().map(DiffLine::Same).collect(),
                    });
                }
            }
        }
    }
    for after in new {
        let n = name(after);
        if !old_names.contains(n.as_str()) {
            out.push(item(section, n, Change::Added, None, Some(after)));
        }
    }
}

fn unnamed<T: Serialize>(
    out: &mut Vec<ItemDiff>,
    section: Section,
    old: &Option<T>,
    new: &Option<T>,
) {
    let (a, b) = (
        old.as_ref().map(lines_of).unwrap_or_default(),
        new.as_ref().map(lines_of).unwrap_or_default(),
    );
    if a == b {
        return;
    }
    let change = match (old, new) {
        (None, _) => Change::Added,
        (_, None) => Change::Removed,
        _ => Change::Changed,
    };
    out.push(ItemDiff {
        section,
        name: String::new(),
        change,
        lines: diff_lines(&a, &b),
    });
}

fn item<T: Serialize>(
    section: Section,
    name: &str,
    change: Change,
    before: Option<&T>,
    after: Option<&T>,
) -> ItemDiff {
    let a = before.map(lines_of).unwrap_or_default();
    let b = after.map(lines_of).unwrap_or_default();
    ItemDiff {
        section,
        name: name.to_string(),
        change,
        lines: diff_lines(&a, &b),
    }
}

/// An item as block YAML, its fields in Concourse's order, as fly shows
/// a diff.
fn lines_of<T: Serialize>(t: &T) -> Vec<String> {
    crate::pipeline::to_yaml(t)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A line diff by longest common subsequence.
fn diff_lines(a: &[String], b: &[String]) -> Vec<DiffLine> {
    if a.len().saturating_mul(b.len()) > MAX_LCS_CELLS {
        return a
            .iter()
            .map(|l| DiffLine::Removed(l.clone()))
            .chain(b.iter().map(|l| DiffLine::Added(l.clone())))
            .collect();
    }
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[at(i, j)] = if a[i] == b[j] {
                lcs[at(i + 1, j + 1)] + 1
            } else {
                lcs[at(i + 1, j)].max(lcs[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(n.max(m));
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(DiffLine::Same(a[i].clone()));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[at(i + 1, j)] >= lcs[at(i, j + 1)]) {
            // Removals first, as fly shows a changed line.
            out.push(DiffLine::Removed(a[i].clone()));
            i += 1;
        } else {
            out.push(DiffLine::Added(b[j].clone()));
            j += 1;
        }
    }
    out
}

impl ConfigDiff {
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Plain text, as fly prints it (without colours): per section a
    /// heading, per item what happened to it, then its JSON with `+` and
    /// `-` before the lines that come and go.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut section = None;
        for item in &self.items {
            if section != Some(item.section)
                && !matches!(item.section, Section::Display | Section::UserData)
            {
                let _ = writeln!(out, "{}:", item.section.heading());
            }
            section = Some(item.section);
            let what = match item.change {
                Change::Added => "has been added",
                Change::Removed => "has been removed",
                Change::Changed => "has changed",
                Change::Moved => "has moved",
            };
            if item.name.is_empty() {
                let _ = writeln!(out, "  {} {what}:", item.section.item());
            } else {
                let _ = writeln!(out, "  {} {} {what}:", item.section.item(), item.name);
            }
            for line in &item.lines {
                let _ = match line {
                    DiffLine::Same(l) => writeln!(out, "    {l}"),
                    DiffLine::Added(l) => writeln!(out, "  + {l}"),
                    DiffLine::Removed(l) => writeln!(out, "  - {l}"),
                };
            }
            out.push('\n');
        }
        out
    }
}
