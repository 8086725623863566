//! The base resource types a pipeline needs that no worker has: a warning
//! when it is set (a worker with them may still join), not a refusal.

use std::collections::{BTreeMap, BTreeSet};

use super::{ConfigWarning, PipelineConfig, ResourceType};
use crate::lifecycle::human_ms;

/// The base type at the root of `name`'s chain of the pipeline's custom
/// types, as `resource_types::chain` walks it (a type of its own name
/// overrides the base type); `None` for a cycle, which the checks refuse.
fn base_of<'a>(types: &'a [ResourceType], name: &'a str) -> Option<&'a str> {
    let mut current = name;
    let mut seen = BTreeSet::new();
    while let Some(t) = types.iter().find(|t| t.name == current) {
        if !seen.insert(t.name.as_str()) {
            return None;
        }
        if t.resource_type == t.name {
            return Some(&t.resource_type);
        }
        current = &t.resource_type;
    }
    Some(current)
}

/// One warning for each base type the pipeline's resources and resource
/// types need that is not in `worker_types` (the types of the workers
/// that could run them), naming what needs it: its checks and steps fail
/// once they have waited `bound_ms` for a worker with it.
pub fn types_no_worker_has(
    config: &PipelineConfig,
    worker_types: &BTreeSet<String>,
    bound_ms: i64,
) -> Vec<ConfigWarning> {
    let mut needs: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let types = &config.resource_types;
    let users = config
        .resources
        .iter()
        .map(|r| (format!("resource {}", r.name), r.resource_type.as_str()))
        .chain(types.iter().map(|t| {
            (
                format!("resource type {}", t.name),
                t.resource_type.as_str(),
            )
        }));
    for (user, of) in users {
        let base = base_of(types, of);
        if let Some(base) = base.filter(|b| !worker_types.contains(*b)) {
            needs.entry(base).or_default().push(user);
        }
    }
    needs
        .into_iter()
        .map(|(base, users)| ConfigWarning {
            kind: "pipeline".into(),
            message: format!(
                "no worker has resource type {base} (needed by {}): their checks and steps \
                 fail after waiting {} unless a worker with it joins",
                users.join(", "),
                human_ms(bound_ms)
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::parse_pipeline;

    fn warnings(yaml: &str, workers: &[&str]) -> Vec<String> {
        let config = parse_pipeline(yaml).unwrap().config;
        let have = workers.iter().map(|s| s.to_string()).collect();
        types_no_worker_has(&config, &have, 60_000)
            .into_iter()
            .map(|w| {
                assert_eq!(w.kind, "pipeline");
                w.message
            })
            .collect()
    }

    #[test]
    fn a_type_nobody_has_is_named_with_what_needs_it() {
        let yaml = "
resource_types:
- name: slack
  type: docker-image
  source: {repository: slack}
- name: git
  type: git
  source: {repository: newer-git}
resources:
- {name: a, type: mokc, source: {}}
- {name: b, type: mokc, source: {}}
- {name: c, type: git, source: {}}
- {name: d, type: slack, source: {}}
- {name: e, type: time, source: {}}
jobs:
- name: j
  plan: [{get: a}, {get: b}, {get: c}, {get: d}, {get: e}]
";
        assert_eq!(
            warnings(yaml, &["git", "time"]),
            [
                "no worker has resource type docker-image (needed by resource d, resource type \
                 slack): their checks and steps fail after waiting 1m unless a worker with it \
                 joins",
                "no worker has resource type mokc (needed by resource a, resource b): their \
                 checks and steps fail after waiting 1m unless a worker with it joins",
            ]
        );
        assert!(warnings(yaml, &["git", "time", "mokc", "docker-image"]).is_empty());
        assert_eq!(
            warnings(yaml, &["docker-image", "mokc", "time"]),
            [
                "no worker has resource type git (needed by resource c, resource type git): \
                 their checks and steps fail after waiting 1m unless a worker with it joins"
            ]
        );
    }
}
