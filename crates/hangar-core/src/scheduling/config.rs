//! What the scheduler reads from a pipeline's config: a job's inputs by
//! name, and which jobs a new version or a finished build concerns.

use serde_json::{Map, Value};

use crate::pipeline::{GetVersion, Job, PipelineConfig};

/// A job's get, with names where [`super::Input`] has ids.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedInput {
    pub name: String,
    pub resource: String,
    /// Passed jobs, patterns expanded.
    pub passed: Vec<String>,
    pub version: NamedVersion,
    pub trigger: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NamedVersion {
    Latest,
    Every,
    /// The get's `version:`, else its resource's `version:`.
    Pinned(Map<String, Value>),
}

/// The inputs of `job`, one per get (hooks included; get names are unique
/// within a job).
pub fn job_inputs(config: &PipelineConfig, job: &Job) -> Vec<NamedInput> {
    let mut out: Vec<NamedInput> = Vec::new();
    for get in job.inputs() {
        let resource = config.resource(get.resource_name());
        let version = match (&get.version, resource.and_then(|r| r.version.as_ref())) {
            (Some(GetVersion::Pinned(v)), _) => NamedVersion::Pinned(v.clone()),
            (_, Some(pin)) => NamedVersion::Pinned(pin.clone()),
            (Some(GetVersion::Every), None) => NamedVersion::Every,
            (Some(GetVersion::Latest) | None, None) => NamedVersion::Latest,
        };
        out.push(NamedInput {
            name: get.name.clone(),
            resource: get.resource_name().to_string(),
            passed: config
                .passed_jobs(get)
                .into_iter()
                .map(str::to_string)
                .collect(),
            version,
            trigger: get.trigger,
        });
    }
    out
}

/// Jobs with a get of `resource` (without `passed`, a new version is
/// theirs to take; with it, they are scheduled again anyway).
pub fn jobs_reading(config: &PipelineConfig, resource: &str) -> Vec<String> {
    config
        .jobs
        .iter()
        .filter(|j| j.inputs().iter().any(|g| g.resource_name() == resource))
        .map(|j| j.name.clone())
        .collect()
}

/// Jobs with an input `passed` through `job`: a build of `job` that
/// succeeded may give them versions.
pub fn jobs_downstream_of(config: &PipelineConfig, job: &str) -> Vec<String> {
    config
        .jobs
        .iter()
        .filter(|j| {
            j.inputs()
                .iter()
                .any(|g| config.passed_jobs(g).contains(&job))
        })
        .map(|j| j.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::parse_pipeline;

    const PIPELINE: &str = r#"
resources:
- {name: src, type: mock, source: {}}
- {name: lib, type: mock, source: {}, version: {ref: v1}}
- {name: img, type: mock, source: {}}
jobs:
- name: unit
  plan:
  - get: src
    trigger: true
  - get: lib
  - task: t
    config: {platform: linux, run: {path: "true"}}
- name: integration-a
  plan:
  - get: src
    passed: [unit]
    version: every
    trigger: true
- name: ship
  plan:
  - get: src
    passed: ["integration-*", unit]
  - get: tools
    resource: img
    version: {ref: pinned}
  on_failure:
    get: src-again
    resource: src
"#;

    fn config() -> PipelineConfig {
        parse_pipeline(PIPELINE).expect("valid pipeline").config
    }

    #[test]
    fn inputs_carry_passed_patterns_pins_and_every() {
        let c = config();
        let pin = |k: &str| {
            let mut m = Map::new();
            m.insert("ref".into(), Value::String(k.into()));
            NamedVersion::Pinned(m)
        };
        let unit = job_inputs(&c, c.job("unit").unwrap());
        assert_eq!(
            unit.iter()
                .map(|i| (i.name.as_str(), i.version.clone(), i.trigger))
                .collect::<Vec<_>>(),
            vec![
                ("src", NamedVersion::Latest, true),
                // The resource's pin applies to its gets.
                ("lib", pin("v1"), false),
            ]
        );
        let a = job_inputs(&c, c.job("integration-a").unwrap());
        assert_eq!(a[0].version, NamedVersion::Every);
        assert_eq!(a[0].passed, vec!["unit"]);
        let ship = job_inputs(&c, c.job("ship").unwrap());
        // The pattern expands; the hook's get is an input of its own.
        assert_eq!(
            ship.iter().map(|i| i.name.as_str()).collect::<Vec<_>>(),
            vec!["src", "tools", "src-again"]
        );
        assert_eq!(ship[0].passed, vec!["unit", "integration-a"]);
        assert_eq!(ship[1].resource, "img");
        assert_eq!(ship[1].version, pin("pinned"));
    }

    #[test]
    fn who_a_version_or_a_build_concerns() {
        let c = config();
        assert_eq!(
            jobs_reading(&c, "src"),
            vec!["unit", "integration-a", "ship"]
        );
        assert_eq!(jobs_reading(&c, "img"), vec!["ship"]);
        assert!(jobs_reading(&c, "nothing").is_empty());
        assert_eq!(
            jobs_downstream_of(&c, "unit"),
            vec!["integration-a", "ship"]
        );
        assert_eq!(jobs_downstream_of(&c, "integration-a"), vec!["ship"]);
        assert!(jobs_downstream_of(&c, "ship").is_empty());
    }
}
