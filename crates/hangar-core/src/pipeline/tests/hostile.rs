//! Hostile configs: unsafe names, bombs, and sizes past every bound.

use super::*;

#[test]
fn hostile_names_are_refused() {
    let long = "a".repeat(MAX_NAME_LEN + 1);
    let cases: &[(&str, &str)] = &[
        ("a/b", "'a/b' is not a valid identifier: illegal character '/': names are used as path segments (Concourse only warns)"),
        ("a\\\\b", "'a\\\\b' is not a valid identifier: illegal character '\\\\': names are used as path segments (Concourse only warns)"),
        ("..", "'..' is not a valid identifier: '.' and '..' are refused: names are used as path segments (Concourse only warns)"),
        ("nul\\0", "'nul\\0' is not a valid identifier: illegal character '\\0': names are used as path segments (Concourse only warns)"),
        ("tab\\t", "'tab\\t' is not a valid identifier: illegal character '\\t': names are used as path segments (Concourse only warns)"),
    ];
    for (name, message) in cases {
        let yaml = format!(
            "resources: [{{name: r, type: git}}]\njobs:\n- name: \"{name}\"\n  plan: [{{get: r}}]\n"
        );
        let errs = errors(&yaml);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].ends_with(message), "{errs:?} {message}");
    }
    let yaml = format!(
        "resources: [{{name: r, type: git}}]\njobs:\n- name: {long}\n  plan: [{{get: r}}]\n"
    );
    assert_eq!(
        errors(&yaml),
        [format!(
            "jobs.{}…: '{}…' is not a valid identifier: longer than 128 characters (Concourse has no limit)",
            "a".repeat(64),
            "a".repeat(64)
        )]
    );
    // An empty step name.
    assert_eq!(
        errors(&with_steps("  - task: \"\"\n    file: r/t.yml\n")),
        ["jobs.j.plan.do[1].task(): identifier cannot be an empty string"]
    );
}

#[test]
fn non_string_keys_are_read_as_text_and_complex_keys_refused() {
    assert_eq!(
        errors(&with_steps("  - get: r2\n    resource: r\n    1: x\n")),
        ["jobs.j.plan.do[1]: unknown fields [\"1\"]"]
    );
    let err = errors("? [a]\n: b\n");
    assert_eq!(err.len(), 1);
    assert!(
        err[0].ends_with("a mapping key must be a scalar, not a mapping or a list"),
        "{err:?}"
    );
}

#[test]
fn a_billion_laughs_is_refused() {
    let mut yaml = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for i in 1..10 {
        let prev = i - 1;
        yaml.push_str(&format!(
            "a{i}: &a{i} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
        ));
    }
    yaml.push_str("jobs: [{name: j, plan: [{get: r, params: {x: *a9}}]}]\n");
    let err = errors(&yaml);
    assert_eq!(err.len(), 1);
    assert!(
        err[0].contains("the document holds more than 100000 values once its aliases are expanded"),
        "{err:?}"
    );
}

#[test]
fn ten_thousand_jobs_are_refused_before_any_check() {
    let mut yaml = String::from("resources: [{name: r, type: git}]\njobs:\n");
    for i in 0..10_000 {
        yaml.push_str(&format!("- {{name: j{i}, plan: [{{get: r}}]}}\n"));
    }
    assert_eq!(
        errors(&yaml),
        ["jobs: 10000 entries, more than the limit of 1000 (Concourse has no limit)"]
    );
}

/// The largest pipeline allowed is checked in work linear in its size:
/// names are looked up, only glob patterns scan the jobs.
#[test]
fn the_largest_pipeline_is_checked_in_linear_work() {
    let mut jobs = Vec::new();
    for i in 0..MAX_JOBS {
        let passed = if i == 0 {
            serde_json::json!([])
        } else {
            serde_json::json!([format!("j{}", i - 1)])
        };
        jobs.push(
            serde_json::json!({"name": format!("j{i}"), "plan": [{"get": "r", "passed": passed}]}),
        );
    }
    let mut value = serde_json::json!({
        "resources": [{"name": "r", "type": "git"}],
        "jobs": jobs,
        "groups": [{"name": "all", "jobs": ["*"]}],
    });
    let read = read::read_config(&value);
    assert!(read.errors.is_empty());
    let (mut errors, mut warnings) = (vec![], vec![]);
    let mut v = validate::Validator::new(&read.config, &mut errors, &mut warnings);
    v.run();
    // One pattern, matched against each job once.
    assert_eq!(v.glob_matches, MAX_JOBS);
    assert_eq!(errors, vec![]);

    // Glob patterns in passed are bounded by the work they would take.
    for job in value["jobs"].as_array_mut().unwrap().iter_mut().skip(1) {
        job["plan"][0]["passed"] = serde_json::json!(["j0*", "j0?"]);
    }
    let Err(err) = parse_pipeline_value(&value) else {
        panic!("accepted 1999 glob patterns");
    };
    assert_eq!(
        err.errors[0].message,
        "1999 glob patterns in passed and groups, each matched against 1000 jobs, is more than 1000000 matches; name the jobs instead"
    );
}

#[test]
fn deep_nesting_is_refused_past_the_limit_and_read_at_it() {
    let nested = |levels: usize| {
        let mut step = serde_json::json!({"get": "r"});
        for _ in 1..levels {
            step = serde_json::json!({"do": [step]});
        }
        serde_json::json!({
            "resources": [{"name": "r", "type": "git"}],
            "jobs": [{"name": "j", "plan": [step]}],
        })
    };
    // Through YAML too: the reader's own depth bound is not what stops it.
    let yaml = serde_json::to_string(&nested(MAX_STEP_DEPTH)).unwrap();
    assert_eq!(ok(&yaml).config.jobs[0].steps().len(), MAX_STEP_DEPTH);

    let err = parse_pipeline_value(&nested(MAX_STEP_DEPTH + 1)).unwrap_err();
    assert_eq!(err.errors.len(), 1);
    assert_eq!(
        err.errors[0].to_string(),
        format!(
            "jobs.j.plan.do[0]{}: steps are nested deeper than 16 levels",
            ".do[0]".repeat(MAX_STEP_DEPTH)
        )
    );
}

#[test]
fn a_name_at_the_length_limit_is_accepted() {
    let name = "a".repeat(MAX_NAME_LEN);
    let yaml = format!(
        "resources: [{{name: r, type: git}}]\njobs:\n- name: {name}\n  plan: [{{get: r}}]\n"
    );
    assert_eq!(ok(&yaml).config.jobs[0].name, name);
}

#[test]
fn too_many_steps_are_refused_once() {
    let steps: Vec<Value> = (0..MAX_STEPS + 5)
        .map(|i| serde_json::json!({"get": format!("g{i}"), "resource": "r"}))
        .collect();
    let value = serde_json::json!({
        "resources": [{"name": "r", "type": "git"}],
        "jobs": [{"name": "j", "plan": [{"in_parallel": steps}]}],
    });
    let err = parse_pipeline_value(&value).unwrap_err();
    assert_eq!(
        err.errors.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["jobs.j.plan.do[0].in_parallel.steps[19999]: the pipeline holds more than 20000 steps, hooks included"]
    );
}

#[test]
fn an_oversized_config_is_refused_before_parsing() {
    let yaml = " ".repeat(MAX_CONFIG_BYTES + 1);
    assert_eq!(
        errors(&yaml),
        ["the config is 4194305 bytes, more than the limit of 4194304"]
    );
}

#[test]
fn unknown_top_level_keys_hold_anchors_and_are_dropped() {
    let yaml = r#"
shared: &get-repo {get: r, trigger: true}
resources: [{name: r, type: git}]
jobs:
- name: j
  plan: [*get-repo]
"#;
    let c = ok(yaml).config;
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json.get("shared"), None);
    assert_eq!(
        json["jobs"][0]["plan"][0],
        serde_json::json!({"get": "r", "trigger": true})
    );
}

#[test]
fn every_section_has_its_bound() {
    let cases: &[(&str, usize, Value)] = &[
        ("groups", MAX_GROUPS, serde_json::json!({"name": "g"})),
        (
            "var_sources",
            MAX_VAR_SOURCES,
            serde_json::json!({"name": "v", "type": "dummy", "config": {}}),
        ),
        (
            "resources",
            MAX_RESOURCES,
            serde_json::json!({"name": "r", "type": "git"}),
        ),
        (
            "resource_types",
            crate::resource_types::MAX_RESOURCE_TYPES,
            serde_json::json!({"name": "t", "type": "registry-image", "source": {}}),
        ),
    ];
    for (section, max, item) in cases {
        let value = serde_json::json!({ *section: vec![item.clone(); max + 1] });
        let err = parse_pipeline_value(&value).unwrap_err();
        assert_eq!(
            err.errors[0].to_string(),
            format!(
                "{section}: {} entries, more than the limit of {max} (Concourse has no limit)",
                max + 1
            )
        );
    }
}

#[test]
fn hostile_names_are_refused_in_every_section_and_step() {
    let yaml = r#"
groups: [{name: "g/1", jobs: [j]}]
var_sources: [{name: "..", type: dummy, config: {}}]
resources: [{name: "r/x", type: git}]
jobs:
- name: j
  plan:
  - get: "a\\b"
    resource: "r/x"
  - task: "t\u0000"
    file: "a\\b/t.yml"
  - set_pipeline: p
    file: "a\\b/p.yml"
    team: ../admin
"#;
    assert_eq!(
        errors(yaml),
        [
            "groups.g/1: 'g/1' is not a valid identifier: illegal character '/': names are used as path segments (Concourse only warns)",
            "resources.r/x: 'r/x' is not a valid identifier: illegal character '/': names are used as path segments (Concourse only warns)",
            "var_sources...: '..' is not a valid identifier: '.' and '..' are refused: names are used as path segments (Concourse only warns)",
            "jobs.j.plan.do[0].get(a\\\\b): 'a\\\\b' is not a valid identifier: illegal character '\\\\': names are used as path segments (Concourse only warns)",
            "jobs.j.plan.do[1].task(t\\0): 't\\0' is not a valid identifier: illegal character '\\0': names are used as path segments (Concourse only warns)",
            "jobs.j.plan.do[1].task(t\\0).file: 'a\\\\b' is not a valid artifact name: illegal character '\\\\': names are used as path segments (Concourse only warns)",
            "jobs.j.plan.do[2].set_pipeline(p).team: '../admin' is not a valid identifier: illegal character '/': names are used as path segments (Concourse only warns)",
            "jobs.j.plan.do[2].set_pipeline(p).file: 'a\\\\b' is not a valid artifact name: illegal character '\\\\': names are used as path segments (Concourse only warns)",
        ]
    );
}

#[test]
fn names_given_outside_a_config_follow_the_config_s_rule() {
    let long = "a".repeat(crate::pipeline::MAX_NAME_LEN + 1);
    let max = "a".repeat(crate::pipeline::MAX_NAME_LEN);
    // (name, accepted)
    let cases: &[(&str, bool)] = &[
        ("main-pipeline", true),
        ("Upper", true), // Concourse warns; accepted
        ("123", true),   // Concourse warns; accepted
        (&max, true),
        (&long, false),
        ("", false),
        (".", false),
        ("..", false),
        ("a/b", false),
        ("a\\b", false),
        ("a\0b", false),
        ("a\nb", false),
    ];
    for (name, accepted) in cases {
        let got = crate::pipeline::check_name("pipeline", name);
        assert_eq!(got.is_ok(), *accepted, "{name:?}: {got:?}");
        if let Err(e) = got {
            assert!(e.starts_with("pipeline "), "{e}");
        }
    }
}
