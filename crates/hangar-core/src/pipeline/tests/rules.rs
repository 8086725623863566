//! The rules of a config, one table row per rule, with exact messages.

use super::*;

#[test]
fn broken_configs_are_refused_with_every_problem_named() {
    let cases: &[(&str, &[&str])] = &[
        (
            "jobs: []",
            &["jobs: pipeline must contain at least one job"],
        ),
        (
            "- a list",
            &["expected a pipeline config (a mapping), got a list"],
        ),
        (
            &with_steps("  - get: nope\n"),
            &["jobs.j.plan.do[1].get(nope): unknown resource 'nope'"],
        ),
        (
            &with_steps("  - put: r\n  - put: out\n    resource: missing\n"),
            &["jobs.j.plan.do[2].put(out): unknown resource 'missing'"],
        ),
        (
            &with_steps("  - get: r\n"),
            &["jobs.j.plan.do[1].get(r): repeated name"],
        ),
        (
            &with_steps("  - get: other\n    resource: r\n    passed: [nobody, j]\n"),
            &[
                "jobs.j.plan.do[1].get(other).passed: no matching job(s) for 'nobody'",
                "jobs: pipeline contains a cycle that starts at Job 'j'",
            ],
        ),
        (
            &with_steps("  - task: t\n"),
            &["jobs.j.plan.do[1].task(t): must specify either `file:` or `config:`"],
        ),
        (
            &with_steps(
                "  - task: t\n    file: r/t.yml\n    config: {platform: linux, run: {path: x}}\n",
            ),
            &["jobs.j.plan.do[1].task(t): must specify one of `file:` or `config:`, not both"],
        ),
        (
            &with_steps("  - task: t\n    config: {platform: linux, run: {path: [x]}}\n"),
            &["jobs.j.plan.do[1].task(t).config.run.path: invalid type: sequence, expected a string"],
        ),
        (
            &with_steps("  - task: t\n    file: r/t.yml\n    privileged: yes-please\n"),
            &["jobs.j.plan.do[1].task(t).privileged: expected true or false, got a string"],
        ),
        (
            &with_steps("  - task: t\n    file: r/t.yml\n    hermetic: true\n"),
            &["jobs.j.plan.do[1].task(t).hermetic: not supported: hangar cannot cut a task off the network yet (Concourse does so on containerd workers only, and warns otherwise)"],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    put: r\n"),
            &["jobs.j.plan.do[1]: a step has one of get, put, task, set_pipeline, load_var, in_parallel, do, try; this one has put, get. Concourse would read it as a put step with unknown fields [\"get\"]"],
        ),
        (
            &with_steps("  - attempts: 2\n"),
            &["jobs.j.plan.do[1]: no core step type declared (e.g. get, put, task, etc.)"],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    bogus: 1\n    also: 2\n"),
            &["jobs.j.plan.do[1]: unknown fields [\"also\" \"bogus\"]"],
        ),
        (
            &with_steps("  - load_var: v\n    file: r/v\n    tags: [x]\n"),
            &["jobs.j.plan.do[1]: unknown fields [\"tags\"]"],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    attempts: 0\n    timeout: 5 minutes\n"),
            &[
                "jobs.j.plan.do[1].attempts: must be greater than 0",
                "jobs.j.plan.do[1].timeout: invalid duration '5 minutes'",
            ],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    timeout: ((t))\n"),
            &["jobs.j.plan.do[1].timeout: invalid duration '((t))'"],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    version: newest\n"),
            &["jobs.j.plan.do[1].get(r2).version: 'newest' is none of latest, every or a version (a mapping); Concourse would take it as latest"],
        ),
        (
            &with_steps("  - get: r2\n    resource: r\n    version: {ref: 1}\n"),
            &["jobs.j.plan.do[1].get(r2).version.ref: the value of a version is a string, got a number"],
        ),
        (
            &with_steps("  - aggregate:\n    - get: r2\n      resource: r\n"),
            &["jobs.j.plan.do[1].aggregate: aggregate was removed in Concourse v7, which refuses it too; use in_parallel"],
        ),
        (
            &with_steps("  - put: r\n    inputs: some\n"),
            &["jobs.j.plan.do[1].put(r).inputs: expected all, detect or a list of artifact names, got 'some'"],
        ),
        (
            &with_steps("  - put: r\n    inputs: [r, nowhere]\n"),
            &["jobs.j.plan.do[1].put(r).inputs: no step of the job produces the artifact 'nowhere' (Concourse would fail the build when the step runs)"],
        ),
        (
            &with_steps("  - task: t\n    image: missing\n    config: {platform: linux, inputs: [{name: src}], run: {path: x}}\n"),
            &[
                "jobs.j.plan.do[1].task(t).image: no step of the job produces the artifact 'missing' (Concourse would fail the build when the step runs)",
                "jobs.j.plan.do[1].task(t).config.inputs: no step of the job produces the artifact 'src' (Concourse would fail the build when the step runs)",
            ],
        ),
        (
            &with_steps("  - task: t\n    file: r/t.yml\n    output_mapping: {out: ../up}\n  - put: r\n    inputs: [\"..\"]\n"),
            &[
                "jobs.j.plan.do[1].task(t).output_mapping: '../up' is not a valid artifact name: illegal character '/': names are used as path segments (Concourse only warns)",
                "jobs.j.plan.do[2].put(r).inputs: '..' is not a valid artifact name: '.' and '..' are refused: names are used as path segments (Concourse only warns)",
            ],
        ),
        (
            &with_steps("  - load_var: v\n    file: elsewhere/v\n    format: toml\n"),
            &["jobs.j.plan.do[1].load_var(v).format: 'toml' is not one of json, yaml, yml, trim, raw"],
        ),
        (
            &with_steps("  - load_var: v\n    file: r/v\n  - load_var: v\n"),
            &[
                "jobs.j.plan.do[2].load_var(v): repeated var name",
                "jobs.j.plan.do[2].load_var(v): no file specified",
            ],
        ),
        (
            &with_steps("  - set_pipeline: p\n    file: pipeline.yml\n"),
            &["jobs.j.plan.do[1].set_pipeline(p).file: 'pipeline.yml' is not a file of an artifact (artifact/path/to/file)"],
        ),
        (
            &with_steps("  - in_parallel: 3\n"),
            &["jobs.j.plan.do[1].in_parallel: expected a list of steps or a mapping (steps, limit, fail_fast), got a number"],
        ),
        (
            &with_steps("  - do:\n    - try:\n        get: x\n"),
            &["jobs.j.plan.do[1].do[0].try.get(x): unknown resource 'x'"],
        ),
        (
            &with_steps("  - try: {bogus: 1}\n    ensure: {get: r, trigger: maybe}\n"),
            &[
                "jobs.j.plan.do[1].try: no core step type declared (e.g. get, put, task, etc.)",
                "jobs.j.plan.do[1].ensure.get(r).trigger: expected true or false, got a string",
            ],
        ),
        (
            &with_steps("    on_failure: {put: nope}\n"),
            &["jobs.j.plan.do[0].on_failure.put(nope): unknown resource 'nope'"],
        ),
        (
            "resources: [{name: r, type: git, source: {}}]\njobs:\n- name: j\n  plan: [{get: r}]\n  ensure: {put: x}\n",
            &["jobs.j.plan.ensure.put(x): unknown resource 'x'"],
        ),
        (
            "resources: [{name: r, type: git}, {name: r, type: git}, {name: u, source: {}}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "resources.u: has no type",
                "resources.u.source: unknown field \"source\"",
            ][..1],
        ),
        (
            "resources: [{name: r, type: git}, {name: r, type: git}, {name: u, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "resources: resources[0] and resources[1] have the same name ('r')",
                "resources.u: resource 'u' is not used",
            ],
        ),
        (
            "resources: [{name: r, type: git, check_every: often, bogus: 1}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "resources.r: unknown field \"bogus\"",
                "resources.r.check_every: \"often\" is not a duration (a number with a unit ns, us, ms, s, m or h, such as \"24h\" or \"1h30m\")",
            ],
        ),
        (
            "resource_types: [{name: a, type: b, source: {}}, {name: b, type: a, source: {}}]\nresources: [{name: r, type: a}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "resources.r.type: resource type \"a\": its types form a cycle (a -> b -> a)",
                "resource_types.a: resource type \"a\": its types form a cycle (a -> b -> a)",
                "resource_types.b: resource type \"b\": its types form a cycle (b -> a -> b)",
            ],
        ),
        (
            "resource_types: [{name: Slack, type: registry-image, source: {}, privileged: [true]}]\nresources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "resource_types.Slack.privileged: expected true or false, got a list",
            ],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n- name: j\n  plan: [{get: r}]\n- name: empty\n",
            &[
                "jobs: jobs[0] and jobs[1] have the same name ('j')",
                "jobs.empty.plan: a job needs at least one step (Concourse would run builds that do nothing)",
            ],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  build_logs_to_retain: -1\n  build_log_retention: {builds: 2, minimum_succeeded_builds: 3, days: -2}\n  plan: [{get: r}]\n",
            &[
                "jobs.j: has negative build_logs_to_retain: -1",
                "jobs.j: has negative build_log_retention.days: -2",
            ],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  build_log_retention: {builds: 2, minimum_succeeded_builds: 3}\n  plan: [{get: r}]\n",
            &["jobs.j: has build_log_retention.minimum_succeeded_builds: 3 greater than build_log_retention.builds: 2"],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  build_logs_to_retain: 5\n  build_log_retention: {builds: 2}\n  plan: [{get: r}]\n",
            &["jobs.j: can't use both build_log_retention and build_logs_to_retain"],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  max_in_flight: many\n  plan: [{get: r}]\n",
            &["jobs.j.max_in_flight: expected a whole number, got a string"],
        ),
        (
            "resources: [{name: r, type: git}]\ngroups:\n- {name: g, jobs: [nope, \"x*\", \"[\"], resources: [missing]}\n- {name: g}\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "groups.g: no jobs match 'nope' for group 'g'",
                "groups.g: no jobs match 'x*' for group 'g'",
                "groups.g: invalid glob expression '[' for group 'g': an unclosed '['",
                "groups.g: group 'g' has unknown resource 'missing'",
                "groups: group 'g' appears 2 times. Duplicate names are not allowed.",
                "groups: job 'j' belongs to no group",
            ],
        ),
        (
            "var_sources: [{name: v, type: conjur, config: {}}, {name: v, type: vault, config: 3}]\nresources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "var_sources: var_sources[0] and var_sources[1] have the same name ('v')",
                "var_sources.v: unknown credential manager type: conjur (a pipeline takes vault, dummy, ssm, secretsmanager, idtoken)",
                "var_sources.v: var source type \"vault\" is not supported by hangar: only dummy var sources are resolved (hangar has no ssm, secretsmanager or idtoken backend, and reads Vault only as web's credential manager, not per pipeline); `hangar web --vault-url`, `--credentials-kubernetes` or `--credentials-dir` serve ((vars)) without a source",
                "var_sources.v.config: expected the credential manager's config (a mapping), got a number",
            ],
        ),
        (
            "var_sources: [{name: v, type: ssm, config: {region: x}}, {name: d, type: dummy, config: {vars: {a: b}, path: x}}, {name: e, type: dummy, config: {vars: [a]}}]\nresources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &[
                "var_sources.v: var source type \"ssm\" is not supported by hangar: only dummy var sources are resolved (hangar has no ssm, secretsmanager or idtoken backend, and reads Vault only as web's credential manager, not per pipeline); `hangar web --vault-url`, `--credentials-kubernetes` or `--credentials-dir` serve ((vars)) without a source",
                "var_sources.d.config: unknown field \"path\" of a dummy var source (it takes only `vars`)",
                "var_sources.e.config: `vars` of a dummy var source must be a mapping",
            ],
        ),
        (
            "var_sources:\n- {name: a, type: dummy, config: {vars: {token: ((b:token))}}}\n- {name: b, type: dummy, config: {vars: {token: ((a:token))}}}\n- {name: c, type: dummy, config: {vars: {token: ((nowhere:t))}}}\n- {name: d, type: dummy, config: {vars: {token: ((e:t))}}}\n- {name: e, type: dummy, config: {vars: {t: x}}}\nresources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &["var_sources: failed to order by dependency: could not resolve inter-dependent var sources: a, b, c"],
        ),
        (
            "var_sources:\n- {name: s0, type: dummy, config: {vars: {x: end}}}\n- {name: s1, type: dummy, config: {vars: {x: ((s0:x))}}}\n- {name: s2, type: dummy, config: {vars: {x: ((s1:x))}}}\n- {name: s3, type: dummy, config: {vars: {x: ((s2:x))}}}\n- {name: s4, type: dummy, config: {vars: {x: ((s3:x))}}}\n- {name: s5, type: dummy, config: {vars: {x: ((s4:x))}}}\n- {name: s6, type: dummy, config: {vars: {x: ((s5:x))}}}\n- {name: s7, type: dummy, config: {vars: {x: ((s6:x))}}}\n- {name: s8, type: dummy, config: {vars: {x: ((s7:x))}}}\nresources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &["var_sources: a chain of var sources reading each other's vars is longer than 8: s8"],
        ),
        (
            "display: {background_image: \"ftp://example.com/x.png\"}\nresources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &["display: background_image scheme must be either http, https or relative"],
        ),
        (
            "prototypes: []\nresources: [{name: r, type: git}]\njobs:\n- name: j\n  plan: [{get: r}]\n",
            &["prototypes: not supported: prototypes are experimental in Concourse and hangar has none"],
        ),
        (
            "resources: {r: {type: git}}\njobs: [{name: j, plan: {get: r}}]\n",
            &[
                "resources: expected a list, got a mapping",
                "jobs.j.plan.do: expected a list of steps, got a mapping",
            ],
        ),
    ];
    for (yaml, expected) in cases {
        assert_eq!(errors(yaml), *expected, "{yaml}");
    }
}

#[test]
fn passed_must_name_jobs_that_use_the_resource() {
    let yaml = r#"
resources: [{name: r, type: git}, {name: s, type: git}]
jobs:
- name: a
  plan: [{get: s}]
- name: b
  plan: [{get: r, passed: [a]}]
- name: c
  plan: [{get: r, passed: ["[ab]"]}]
"#;
    assert_eq!(
        errors(yaml),
        [
            "jobs.b.plan.do[0].get(r).passed: job 'a' does not interact with resource 'r'",
            "jobs.c.plan.do[0].get(r).passed: job 'a' does not interact with resource 'r'",
        ]
    );
}

#[test]
fn a_cycle_of_passed_is_refused_and_a_chain_is_not() {
    let chain = r#"
resources: [{name: r, type: git}]
jobs:
- {name: a, plan: [{get: r}]}
- {name: b, plan: [{get: r, passed: [a]}]}
- {name: c, plan: [{get: r, passed: [a, b]}]}
"#;
    ok(chain);
    let cycle = r#"
resources: [{name: r, type: git}]
jobs:
- {name: a, plan: [{get: r, passed: [c]}]}
- {name: b, plan: [{get: r, passed: [a]}]}
- {name: c, plan: [{get: r, passed: [b]}]}
"#;
    assert_eq!(
        errors(cycle),
        ["jobs: pipeline contains a cycle that starts at Job 'a'"]
    );
}

#[test]
fn warnings_are_concourses() {
    let cases: &[(&str, &[&str])] = &[
        (
            "resources: [{name: My-Repo, type: git}]\njobs:\n- name: \"123\"\n  plan: [{get: My-Repo}]\n",
            &[
                "resources.My-Repo: 'My-Repo' is not a valid identifier: must start with a lowercase letter or a number",
                "jobs.123: '123' is not a valid identifier: cannot be just numbers",
                "jobs.123.plan.do[0].get(My-Repo): 'My-Repo' is not a valid identifier: must start with a lowercase letter or a number",
            ],
        ),
        (
            &with_steps("  - task: \"run tests\"\n    file: r/t.yml\n"),
            &["jobs.j.plan.do[1].task(run tests): 'run tests' is not a valid identifier: illegal character ' '"],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  build_logs_to_retain: 3\n  plan: [{get: r}]\n",
            &["jobs.j.build_logs_to_retain is deprecated. Use build_log_retention instead."],
        ),
        (
            "resources: [{name: r, type: git}]\njobs:\n- name: j\n  serial: true\n  max_in_flight: 3\n  plan: [{get: r}]\n",
            &["jobs.j: max_in_flight is ignored: serial runs one build of the job at a time"],
        ),
        (
            &with_steps("  - task: t\n    image: r\n    config:\n      platform: linux\n      image_resource: {type: registry-image, source: {repository: busybox}}\n      run: {path: x}\n"),
            &["jobs.j.plan.do[1].task(t): specifies image: on the step but also specifies an image under config: - the image: on the step takes precedence"],
        ),
        ("résumé: {}\nresources: [{name: r, type: git}]\njobs: [{name: ünïcode, plan: [{get: r}]}]\n", &[]),
    ];
    for (yaml, expected) in cases {
        assert_eq!(warnings(yaml), *expected, "{yaml}");
    }
    let v = ok(&with_steps("  - task: \"Up\"\n    file: r/t.yml\n"));
    assert_eq!(v.warnings[0].kind, "invalid_identifier");
}
