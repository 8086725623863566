use super::*;

const MINIMAL: &str = "platform: linux\nrun:\n  path: echo\n";

const FULL: &str = r#"
platform: linux
image_resource:
  type: registry-image
  source: {repository: busybox, tag: "1.36"}
  params: {format: rootfs}
  version: {digest: "sha256:abcd"}
rootfs_uri: /var/lib/hangar/rootfs/busybox
inputs:
- name: repo
- name: other-repo
  path: src/other
  optional: true
outputs:
- name: built
- name: report
  path: out/report
caches:
- path: .cache/go
params:
  GREETING: hello
  COUNT: 3
  RATIO: 1.5
  DEBUG: true
  EMPTY: ""
run:
  path: sh
  args: [-c, "echo $GREETING"]
  dir: repo
  user: builder
container_limits:
  memory: 512MB
  cpu: 512
"#;

fn err(yaml: &str) -> String {
    match parse_task_config(yaml) {
        Ok(config) => panic!("accepted {yaml:?}: {config:?}"),
        Err(e) => e.to_string(),
    }
}

/// `MINIMAL` with `extra` appended at the top level.
fn with(extra: &str) -> String {
    format!("{MINIMAL}{extra}")
}

#[test]
fn a_minimal_config_takes_the_defaults() {
    let config = parse_task_config(MINIMAL).unwrap();
    assert_eq!(
        config,
        TaskConfig {
            platform: "linux".into(),
            image_resource: None,
            rootfs_uri: None,
            inputs: vec![],
            outputs: vec![],
            caches: vec![],
            params: BTreeMap::new(),
            run: RunConfig {
                path: "echo".into(),
                args: vec![],
                dir: None,
                user: None,
            },
            container_limits: ContainerLimits::default(),
        }
    );
    assert_eq!(config.memory_limit_bytes(), None);
}

#[test]
fn a_full_config_keeps_every_field() {
    let config = parse_task_config(FULL).unwrap();
    let image = config.image_resource.as_ref().unwrap();
    assert_eq!(image.type_name, "registry-image");
    assert_eq!(image.source["repository"], "busybox");
    assert_eq!(image.source["tag"], "1.36");
    assert_eq!(image.params.as_ref().unwrap()["format"], "rootfs");
    assert_eq!(image.version.as_ref().unwrap()["digest"], "sha256:abcd");
    assert_eq!(
        config.rootfs_uri.as_deref(),
        Some("/var/lib/hangar/rootfs/busybox")
    );
    assert_eq!(
        config.inputs,
        [
            TaskInput {
                name: "repo".into(),
                path: None,
                optional: false
            },
            TaskInput {
                name: "other-repo".into(),
                path: Some("src/other".into()),
                optional: true
            },
        ]
    );
    assert_eq!(config.input_path("repo"), Some("repo"));
    assert_eq!(config.input_path("other-repo"), Some("src/other"));
    assert_eq!(config.input_path("built"), None);
    assert_eq!(config.output_path("built"), Some("built"));
    assert_eq!(config.output_path("report"), Some("out/report"));
    assert_eq!(config.output_path("repo"), None);
    assert_eq!(config.caches[0].path, ".cache/go");
    let params: Vec<(&str, &str)> = config
        .params
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        params,
        [
            ("COUNT", "3"),
            ("DEBUG", "true"),
            ("EMPTY", ""),
            ("GREETING", "hello"),
            ("RATIO", "1.5"),
        ]
    );
    assert_eq!(config.run.args, ["-c", "echo $GREETING"]);
    assert_eq!(config.run.dir.as_deref(), Some("repo"));
    assert_eq!(config.run.user.as_deref(), Some("builder"));
    assert_eq!(config.memory_limit_bytes(), Some(512 * 1024 * 1024));
    assert_eq!(config.container_limits.cpu, Some(512));
}

#[test]
fn a_config_survives_a_round_trip_through_json_and_yaml() {
    let config = parse_task_config(FULL).unwrap();
    let json = serde_json::to_string(&config).unwrap();
    assert_eq!(serde_json::from_str::<TaskConfig>(&json).unwrap(), config);
    // JSON is YAML: the text a plan carries reads back the same.
    assert_eq!(parse_task_config(&json).unwrap(), config);
    assert_eq!(
        parse_task_value(serde_json::to_value(&config).unwrap()).unwrap(),
        config
    );
}

#[test]
fn memory_limits_accept_bytes_and_sizes_with_units() {
    let cases: &[(&str, u64)] = &[
        ("1", 1),
        ("1048576", 1 << 20),
        ("'100'", 100),
        ("512MB", 512 << 20),
        ("512mb", 512 << 20),
        ("512M", 512 << 20),
        ("512MiB", 512 << 20),
        ("1GiB", 1 << 30),
        ("1G", 1 << 30),
        ("1gb", 1 << 30),
        ("64k", 64 << 10),
        ("1024G", 1 << 40),
        ("4096G", 1 << 42),
    ];
    for (text, bytes) in cases {
        let yaml = with(&format!("container_limits: {{memory: {text}}}\n"));
        let config = parse_task_config(&yaml).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(config.memory_limit_bytes(), Some(*bytes), "{text}");
    }
}

#[test]
fn parse_memory_size_refuses_what_is_not_a_size() {
    for text in [
        "", "MB", "12XB", "1.G", ".5G", "1..5G", "1 ", " 1G", "1  G", "-1G", "1GG", "1Bi", "1iB",
        "1e3", "1G ", "１G", "1B", "1.5G", "1 GB", "1TB", "1T", "1P", "+1G",
    ] {
        assert!(parse_memory_size(text).is_err(), "{text:?} was accepted");
    }
    assert_eq!(parse_memory_size("1Ki"), Ok(1024));
    assert!(parse_memory_size("99999999999999999999").is_err());
    assert!(parse_memory_size("17179869184G").is_err());
}

#[test]
fn refused_configs_say_what_is_wrong_and_where() {
    let long_name = "a".repeat(64);
    let cases: Vec<(String, &str)> = vec![
        // Unknown fields, at the top and nested.
        (
            with("colour: blue\n"),
            "task config: unknown field \"colour\", expected one of platform, image_resource, \
             rootfs_uri, inputs, outputs, caches, params, run, container_limits",
        ),
        (
            "platform: linux\nrun:\n  paht: echo\n".into(),
            "task config: run: unknown field \"paht\", expected one of path, args, dir, user (Concourse ignores an unknown field below the top level; hangar refuses it so a misspelt field is not silently dropped)",
        ),
        (
            with("inputs:\n- name: a\n- name: b\n  optinal: true\n"),
            "task config: inputs[1]: unknown field \"optinal\", expected one of name, path, optional (Concourse ignores an unknown field below the top level; hangar refuses it so a misspelt field is not silently dropped)",
        ),
        (
            with("caches:\n- path: a\n  name: b\n"),
            "task config: caches[0]: unknown field \"name\", expected path or ttl (Concourse ignores an unknown field below the top level; hangar refuses it so a misspelt field is not silently dropped)",
        ),
        (
            with("container_limits: {memory: 1G, cpus: 2}\n"),
            "task config: container_limits: unknown field \"cpus\", expected memory or cpu (Concourse ignores an unknown field below the top level; hangar refuses it so a misspelt field is not silently dropped)",
        ),
        // Missing and mistyped fields.
        ("run: {path: echo}\n".into(), "task config: platform: missing field"),
        (
            with("inputs:\n- path: x\n"),
            "task config: inputs[0].name: missing field",
        ),
        (
            "platform: linux\nrun: {path: [echo]}\n".into(),
            "task config: run.path: invalid type: sequence, expected a string",
        ),
        (
            "platform: linux\nrun: {path: echo, args: [-n, 1]}\n".into(),
            "task config: run.args[1]: invalid type: integer `1`, expected a string",
        ),
        (
            "platform: linux\nrun: echo\n".into(),
            "task config: run: invalid type: string \"echo\", expected a mapping (path, args, dir, user)",
        ),
        (
            "platform:\nrun: {path: echo}\n".into(),
            "task config: platform: invalid type: null, expected a string",
        ),
        (
            with("inputs: {name: a}\n"),
            "task config: inputs: invalid type: map, expected a sequence",
        ),
        (
            with("attempts: 2\n"),
            "task config: unknown field \"attempts\", expected one of platform, image_resource, \
             rootfs_uri, inputs, outputs, caches, params, run, container_limits (attempts is a \
             field of the task step in Concourse, not of its config: put it on the step)",
        ),
        (
            "- platform\n".into(),
            "task config: invalid type: sequence, expected a mapping (the task config)",
        ),
        ("".into(), "task config: the document is empty"),
        ("# just a comment\n".into(), "task config: the document is empty"),
        // Empty required strings.
        (
            "platform: ''\nrun: {path: echo}\n".into(),
            "task config: platform: must not be empty",
        ),
        (
            "platform: linux\nrun: {path: '  '}\n".into(),
            "task config: run.path: \"  \" is blank (Concourse would try to run it and fail): \
             leave run.path out to run the image's ENTRYPOINT/CMD",
        ),
        // Names.
        (
            with("inputs:\n- name: ok\n- name: bad name\n"),
            "task config: inputs[1].name: \"bad name\" is not a valid name: hangar takes 1 to 63 \
             letters, digits, '_', '.' or '-', starting with a letter or digit, because an \
             artifact's name is also a step's name and part of URLs (Concourse takes any \
             non-empty name).",
        ),
        (
            with("outputs:\n- name: .hidden\n"),
            "task config: outputs[0].name: \".hidden\" is not a valid name: hangar takes 1 to 63 \
             letters, digits, '_', '.' or '-', starting with a letter or digit, because an \
             artifact's name is also a step's name and part of URLs (Concourse takes any \
             non-empty name).",
        ),
        (
            with(&format!("outputs:\n- name: {long_name}\n")),
            "task config: outputs[0].name: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" \
             is not a valid name: hangar takes 1 to 63 letters, digits, '_', '.' or '-', \
             starting with a letter or digit, because an artifact's name is also a step's name \
             and part of URLs (Concourse takes any non-empty name).",
        ),
        (
            with("inputs:\n- name: ''\n"),
            "task config: inputs[0].name: \"\" is not a valid name: hangar takes 1 to 63 \
             letters, digits, '_', '.' or '-', starting with a letter or digit, because an \
             artifact's name is also a step's name and part of URLs (Concourse takes any \
             non-empty name).",
        ),
        // Duplicates.
        (
            with("outputs:\n- name: out\n- name: out\n  path: other\n"),
            "task config: outputs[1].name: \"out\" is already the name of outputs[0] \
             (Concourse would keep only the last output of that name and drop the other's files)",
        ),
        (
            with("inputs:\n- name: a\n  path: dir\n- name: b\n  path: ./dir/\n"),
            "task config: inputs[1].path: \"./dir/\" is already the path of inputs[0] \
             (Concourse would mount one input over the other, and the task would see only the \
             last)",
        ),
        (
            with("outputs:\n- name: a\n  path: dir\n- name: b\n  path: dir\n"),
            "task config: outputs[1].path: \"dir\" is already the path of outputs[0]",
        ),
        (
            with("outputs:\n- name: out\ncaches:\n- path: out\n"),
            "task config: caches[0].path: \"out\" is already the path of outputs[0]",
        ),
        (
            with("inputs:\n- name: src\ncaches:\n- path: src/\n"),
            "task config: caches[0].path: \"src/\" is already the path of inputs[0]",
        ),
        (
            with("caches:\n- path: c\n- path: c\n"),
            "task config: caches[1].path: \"c\" is already the path of caches[0]",
        ),
        // Paths.
        (
            with("inputs:\n- name: a\n  path: ../up\n"),
            "task config: inputs[0].path: \"../up\" must not contain \"..\": Concourse silently \
             deletes every \"..\" from a path (so \"../x\" would be \"x\"), hangar refuses so a \
             path means what it says",
        ),
        (
            with("outputs:\n- name: a\n  path: x/../../y\n"),
            "task config: outputs[0].path: \"x/../../y\" must not contain \"..\": Concourse \
             silently deletes every \"..\" from a path (so \"../x\" would be \"x\"), hangar \
             refuses so a path means what it says",
        ),
        (
            with("caches:\n- path: /\n"),
            "task config: caches[0].path: \".\" must name a directory below the working directory: \
             a cache at the working directory itself would keep every input and output inside it",
        ),
        (
            with("caches:\n- path: ./\n"),
            "task config: caches[0].path: \"./\" must name a directory below the working directory: \
             a cache at the working directory itself would keep every input and output inside it",
        ),
        (
            with("caches:\n- path: ''\n"),
            "task config: caches[0].path: must not be empty",
        ),
        (
            "platform: linux\nrun: {path: echo, dir: ../x}\n".into(),
            "task config: run.dir: \"../x\" must not contain \"..\": Concourse silently deletes \
             every \"..\" from a path (so \"../x\" would be \"x\"), hangar refuses so a path \
             means what it says",
        ),
        (
            "platform: linux\nrun: {path: echo, dir: /x}\n".into(),
            "task config: run.dir: \"/x\" is absolute: hangar places the task's working \
             directory only below the task's working directory, so the path must be relative to \
             it (Concourse would use the absolute path as it is; a process task has no container \
             of its own, where that path would be the worker's)",
        ),
        // Memory.
        (
            with("container_limits: {memory: 12XB}\n"),
            "task config: container_limits.memory: \"12XB\" is not a memory size: Concourse takes a whole \
             number of bytes, or one with the unit K, M or G in any case, optionally followed by \
             i and/or B, all powers of 1024 (\"512MB\", \"1GiB\", \"64k\")",
        ),
        (
            with("container_limits: {memory: lots}\n"),
            "task config: container_limits.memory: \"lots\" is not a memory size: Concourse takes a whole \
             number of bytes, or one with the unit K, M or G in any case, optionally followed by \
             i and/or B, all powers of 1024 (\"512MB\", \"1GiB\", \"64k\")",
        ),
        (
            with("container_limits: {memory: -5}\n"),
            "task config: container_limits.memory: -5 is negative",
        ),
        (
            with("container_limits: {memory: 2TiB}\n"),
            "task config: container_limits.memory: \"2TiB\" is not a memory size: Concourse \
             takes a whole number of bytes, or one with the unit K, M or G in any case, \
             optionally followed by i and/or B, all powers of 1024 (\"512MB\", \"1GiB\", \
             \"64k\") (Concourse has no T or P: 1024G is 1T)",
        ),
        // Params.
        (
            with("params:\n  A=B: x\n"),
            "task config: params: \"A=B\" cannot be an environment variable name (empty, or \
             holds '=' or NUL)",
        ),
        (
            with("params: [A, B]\n"),
            "task config: params: invalid type: sequence, expected a mapping of names to values",
        ),
        // image_resource and rootfs_uri.
        (
            with("image_resource: {type: 'bad type', source: {}}\n"),
            "task config: image_resource.type: \"bad type\" is not a valid resource type name \
             (only letters, digits, '-', '_' and '.' are allowed)",
        ),
        (
            with("image_resource: {type: git, source: {}, tag: x}\n"),
            "task config: image_resource: unknown field \"tag\", expected one of name, type, source, params, version, tags (Concourse ignores an unknown field below the top level; hangar refuses it so a misspelt field is not silently dropped)",
        ),
        (
            with("rootfs_uri: ''\n"),
            "task config: rootfs_uri: must not be empty",
        ),
        // YAML itself.
        (
            "platform: linux\nrun:\n  path: echo\n    args: [x]\n".into(),
            "task config: line 4 column 9: mapping values are not allowed in this context",
        ),
        (
            "platform: linux\nplatform: darwin\nrun: {path: echo}\n".into(),
            "task config: line 2 column 1: the key \"platform\" appears twice in this mapping; Concourse would keep the last one silently, hangar refuses so a repeated key cannot hide a value",
        ),
        (
            with("params: *nowhere\n"),
            "task config: line 4 column 9: while parsing node, found unknown anchor",
        ),
        (
            with("params: !custom {A: b}\n"),
            "task config: line 4 column 17: the YAML tag \"!custom\" is not supported (only \
             !!str, !!int, !!float, !!bool, !!null, !!map and !!seq)",
        ),
        (
            format!("{MINIMAL}---\n{MINIMAL}"),
            "task config: line 4 column 1: the file holds more than one YAML document (---); Concourse would read the first and ignore the rest, hangar refuses so nothing is dropped",
        ),
    ];
    let mut failures = Vec::new();
    for (yaml, expected) in &cases {
        let got = err(yaml);
        if got != *expected {
            failures.push(format!(
                "yaml:\n{yaml}\n  expected: {expected}\n  got:      {got}\n"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn errors_expose_the_field_path_and_the_message() {
    assert_eq!(
        err("platform: linux\nrun:\n  path: a\n  path: b\n"),
        "task config: line 4 column 3: the key \"path\" appears twice in this mapping; \
         Concourse would keep the last one silently, hangar refuses so a repeated key cannot \
         hide a value"
    );
    let e = parse_task_config("platform: linux\ninputs:\n- path: x\n").unwrap_err();
    assert_eq!(e.field_path(), Some("inputs[0].name"));
    assert_eq!(e.message(), "missing field");
    assert_eq!(e.place(), &Place::Field("inputs[0].name".into()));
    let e = parse_task_config("platform: linux\nrun: [").unwrap_err();
    assert_eq!(e.place(), &Place::Position { line: 3, column: 1 }, "{e}");
    assert_eq!(e.field_path(), None);
}

#[test]
fn hostile_unknown_field_names_are_escaped_and_cut() {
    let key = format!("\"bad\\n{}`, expected x\"", "k".repeat(100));
    let got = err(&with(&format!("{key}: 1\n")));
    assert!(
        got.starts_with("task config: unknown field \"bad\\nkkkk"),
        "{got}"
    );
    assert!(got.contains("kkk…\", expected one of platform,"), "{got}");
    assert!(!got.contains('\n'), "{got}");
}

#[test]
fn a_document_over_one_mebibyte_is_refused_before_parsing() {
    // Not even valid YAML: it must not be looked at.
    let big = format!("{MINIMAL}#{}", "[".repeat(MAX_CONFIG_BYTES));
    assert_eq!(
        err(&big),
        format!(
            "task config: the document is {} bytes, more than the limit of 1048576",
            big.len()
        )
    );
    // Just under the limit is parsed.
    let padding = MAX_CONFIG_BYTES - MINIMAL.len() - 1;
    let fits = format!("{MINIMAL}#{}", "x".repeat(padding));
    assert_eq!(fits.len(), MAX_CONFIG_BYTES);
    assert!(parse_task_config(&fits).is_ok());
}

#[test]
fn an_alias_bomb_is_refused_quickly() {
    // Billion laughs: nine levels of ten aliases each.
    let mut bomb = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for level in 1..10 {
        let prev = format!("*a{}", level - 1);
        let row = [prev.as_str(); 10].join(", ");
        bomb.push_str(&format!("a{level}: &a{level} [{row}]\n"));
    }
    bomb.push_str(MINIMAL);
    // A wide one: few levels, each alias expanding a large anchored list,
    // which a parser's own repetition limit might let through.
    let wide_items = vec!["x"; 20_000].join(", ");
    let wide_aliases = vec!["*w"; 20_000].join(", ");
    let wide = format!("w: &w [{wide_items}]\nb: [{wide_aliases}]\n{MINIMAL}");
    assert!(wide.len() < MAX_CONFIG_BYTES);

    for doc in [bomb, wide] {
        let got = err(&doc);
        assert!(
            got.ends_with(
                ": the document holds more than 100000 values once its aliases are expanded"
            ),
            "{got}"
        );
    }
}

#[test]
fn deep_nesting_is_refused_past_the_depth_limit() {
    let nest = |n: usize| format!("{MINIMAL}params: {}{}\n", "[".repeat(n), "]".repeat(n));
    let got = err(&nest(100));
    assert!(got.contains("nested deeper than 64 levels"), "{got}");
    // Far deeper, the parser's own limit answers first; refused either way.
    let got = err(&nest(100_000));
    assert!(got.contains("recursion limit exceeded"), "{got}");
}

#[test]
fn a_few_aliases_are_fine() {
    let yaml = "platform: linux\nrun: {path: &p echo}\nparams: {SAME: *p}\n";
    let config = parse_task_config(yaml).unwrap();
    assert_eq!(config.params["SAME"], "echo");
}

#[test]
fn artifact_names_follow_the_pattern() {
    let max = "a".repeat(63);
    let long = "a".repeat(64);
    let cases: &[(&str, bool)] = &[
        ("repo", true),
        ("R2-d2_v1.0", true),
        ("0", true),
        (&max, true),
        ("", false),
        (&long, false),
        ("-x", false),
        ("_x", false),
        (".x", false),
        ("a b", false),
        ("a/b", false),
        ("ü", false),
    ];
    for (name, ok) in cases {
        assert_eq!(is_valid_artifact_name(name), *ok, "{name:?}");
    }
}

#[test]
fn validate_checks_configs_built_in_code() {
    let mut config = parse_task_config(MINIMAL).unwrap();
    assert!(config.validate().is_ok());
    config.platform = " ".into();
    assert_eq!(
        config.validate().unwrap_err().to_string(),
        "task config: platform: must not be empty"
    );
}

/// Each row is a Concourse rule from concourse-ci.org/tasks.html (and its
/// `atc/task.go`): what a params value in the YAML reaches the task as.
#[test]
fn params_reach_the_task_as_concourse_passes_them() {
    let table: &[(&str, &str)] = &[
        ("KEY:", ""),
        ("KEY: ~", ""),
        ("KEY: ''", ""),
        ("KEY: yes", "true"),
        ("KEY: off", "false"),
        ("KEY: 'yes'", "yes"),
        ("KEY: 0755", "493"),
        ("KEY: '0755'", "0755"),
        ("KEY: 0x10", "16"),
        ("KEY: 1_000", "1000"),
        ("KEY: 1.0", "1"),
        ("KEY: 1.50", "1.5"),
        ("KEY: 1e21", "1e+21"),
        ("KEY: 12345678901234567890", "12345678901234567890"),
        ("KEY: {b: 2, a: [x, yes]}", r#"{"a":["x",true],"b":2}"#),
        ("KEY: [1, '<&>']", r#"[1,"\u003c\u0026\u003e"]"#),
        ("KEY: |\n    line one\n    line two", "line one\nline two\n"),
        ("KEY: 2024-01-02", "2024-01-02"),
    ];
    for (line, want) in table {
        let config = parse_task_config(&with(&format!("params:\n  {line}\n")))
            .unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(config.params["KEY"], *want, "{line:?}");
    }
    // `params:` with nothing is no params, as in Concourse.
    assert!(parse_task_config(&with("params:\n"))
        .unwrap()
        .params
        .is_empty());
}

#[test]
fn merge_keys_in_params_take_shared_defaults() {
    let yaml = "platform: linux\nrun: {path: env}\nx-common: &common {A: a, B: b}\n";
    // An unknown top-level field still refuses the config...
    assert!(err(yaml).contains("unknown field \"x-common\""));
    // ...so defaults live where Concourse users put them: in the params.
    let yaml = "platform: linux\nrun: {path: env}\nparams:\n  <<: {A: a, B: b}\n  B: own\n";
    let config = parse_task_config(yaml).unwrap();
    assert_eq!(config.params["A"], "a");
    assert_eq!(config.params["B"], "own");
}

#[test]
fn an_output_may_share_an_inputs_name_and_path() {
    // Concourse's idiom for changing an input in place.
    let config = parse_task_config(&with(
        "inputs:\n- name: repo\noutputs:\n- name: repo\n- name: built\n  path: repo/out\n",
    ))
    .unwrap();
    assert_eq!(config.input_path("repo"), Some("repo"));
    assert_eq!(config.output_path("repo"), Some("repo"));
    // Same path, another name.
    parse_task_config(&with(
        "inputs:\n- name: src\n  path: work\noutputs:\n- name: result\n  path: ./work/\n",
    ))
    .unwrap();
    // Same name, another path: the output replaces the artifact afterwards.
    parse_task_config(&with(
        "inputs:\n- name: repo\noutputs:\n- name: repo\n  path: changed\n",
    ))
    .unwrap();
}

#[test]
fn cache_ttls_are_go_durations_of_at_least_a_second() {
    let config = parse_task_config(&with("caches:\n- path: c\n  ttl: 1h30m\n")).unwrap();
    assert_eq!(
        config.caches[0].ttl(),
        Some(std::time::Duration::from_secs(5400))
    );
    for (ttl, needle) in [
        ("500ms", "is less than 1s"),
        ("-5m", "is less than 1s"),
        ("forever", "is not a duration"),
        ("5", "expected a string"),
        ("5x", "is not a duration"),
        ("1d", "is not a duration"),
    ] {
        let e = err(&with(&format!("caches:\n- path: c\n  ttl: {ttl}\n")));
        assert!(
            e.contains("caches[0].ttl") && e.contains(needle),
            "{ttl}: {e}"
        );
    }
    let table: &[(&str, u64)] = &[
        ("0", 0),
        ("1s", 1_000_000_000),
        ("1.5s", 1_500_000_000),
        ("300ms", 300_000_000),
        ("2h45m", 9_900_000_000_000),
        ("1us", 1_000),
        ("1µs", 1_000),
        ("10ns", 10),
    ];
    for (text, nanos) in table {
        assert_eq!(
            parse_go_duration(text).unwrap(),
            std::time::Duration::from_nanos(*nanos),
            "{text}"
        );
    }
}

#[test]
fn image_resource_takes_concourse_fields_and_runs_without_an_image_from_the_step() {
    let config = parse_task_config(&with(
        "image_resource:\n  name: build-image\n  type: registry-image\n  tags: [big]\n",
    ))
    .unwrap();
    let image = config.image_resource.as_ref().unwrap();
    assert_eq!(image.name.as_deref(), Some("build-image"));
    assert_eq!(image.tags, ["big"]);
    assert!(image.source.is_empty());
    // The engine fetches the image; a step's own image would win over it.
    config.check_runnable(false).unwrap();
    config.check_runnable(true).unwrap();
    parse_task_config(MINIMAL)
        .unwrap()
        .check_runnable(false)
        .unwrap();
    let e = err(&with(
        "image_resource: {type: registry-image, tags: ['a b']}\n",
    ));
    assert!(e.contains("image_resource.tags[0]"), "{e}");
    // Concourse puts `privileged` on the step (a pipeline's task step,
    // fly execute's --privileged), never in the task config, whose unknown
    // fields it refuses: so does hangar.
    let e = err(&with("privileged: true\n"));
    assert!(e.contains("privileged"), "{e}");
}

#[test]
fn container_limits_read_as_concourse_reads_them() {
    let memory: &[(&str, Option<u64>)] = &[
        ("1073741824", Some(1 << 30)),
        ("1GB", Some(1 << 30)),
        ("1gb", Some(1 << 30)),
        ("1G", Some(1 << 30)),
        ("1Gi", Some(1 << 30)),
        ("1GiB", Some(1 << 30)),
        ("512M", Some(512 << 20)),
        ("64KB", Some(64 << 10)),
        ("1.5e9", Some(1_500_000_000)),
        ("0", None),
        ("~", None),
    ];
    for (text, want) in memory {
        let config = parse_task_config(&with(&format!("container_limits: {{memory: {text}}}\n")))
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(config.memory_limit_bytes(), *want, "{text}");
    }
    let cpu: &[(&str, Option<u64>)] = &[
        ("512", Some(512)),
        ("512.9", Some(512)),
        ("0", None),
        ("~", None),
        // The kernel's range, as the kernel brings Concourse's value into it.
        ("1", Some(2)),
        ("262145", Some(262_144)),
    ];
    for (text, want) in cpu {
        let config = parse_task_config(&with(&format!("container_limits: {{cpu: {text}}}\n")))
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(config.cpu_shares(), *want, "{text}");
    }
    for (text, needle) in [
        ("'512'", "expected a number of CPU shares"),
        ("-1", "-1 is negative"),
        ("-1.5", "is not a number of CPU shares"),
    ] {
        let e = err(&with(&format!("container_limits: {{cpu: {text}}}\n")));
        assert!(
            e.contains("container_limits.cpu") && e.contains(needle),
            "{text}: {e}"
        );
    }
}

#[test]
fn an_empty_user_is_none_and_rootfs_uri_takes_raw_paths_and_docker_images() {
    let config = parse_task_config("platform: linux\nrun: {path: id, user: ''}\n").unwrap();
    assert_eq!(config.run_user(), None);
    let config = parse_task_config("platform: linux\nrun: {path: id, user: '1000'}\n").unwrap();
    assert_eq!(config.run_user(), Some("1000"));
    parse_task_config(&with("rootfs_uri: raw:///var/rootfs\n")).unwrap();
    let config = parse_task_config(&with("rootfs_uri: docker:///busybox\n")).unwrap();
    assert_eq!(
        config.rootfs_image().unwrap().source["repository"],
        "busybox"
    );
    let e = err(&with("rootfs_uri: oci:///images/busybox\n"));
    assert!(e.contains("rootfs_uri") && e.contains("raw:///path"), "{e}");
}

/// A task file as they are found in public Concourse repositories: YAML
/// 1.1 scalars, a param with no value, an anchor and a merge key, an output
/// that is its input changed in place, a cache with a ttl.
#[test]
fn a_real_world_task_file_is_read_whole() {
    let yaml = r#"---
platform: linux

image_resource:
  type: registry-image
  source:
    repository: golang
    tag: 1.22

inputs:
  - name: source-code
  - name: version
    optional: yes

outputs:
  - name: source-code

caches:
  - path: gopath/pkg/mod
    ttl: 168h

params:
  CGO_ENABLED: 0
  GOFLAGS: -mod=mod
  GITHUB_TOKEN:
  VERBOSE: on
  FILE_MODE: 0644
  EXTRA_ARGS: [--race, --count=1]

run:
  path: bash
  args:
    - -exc
    - |
      cd source-code
      go test ./...
  dir: .

container_limits:
  memory: 2GB
  cpu: 1024
"#;
    let config = parse_task_config(yaml).unwrap();
    assert_eq!(config.params["CGO_ENABLED"], "0");
    assert_eq!(config.params["GITHUB_TOKEN"], "");
    assert_eq!(config.params["VERBOSE"], "true");
    assert_eq!(config.params["FILE_MODE"], "420");
    assert_eq!(config.params["EXTRA_ARGS"], r#"["--race","--count=1"]"#);
    assert!(config.inputs[1].optional);
    assert_eq!(config.output_path("source-code"), Some("source-code"));
    assert_eq!(
        config.caches[0].ttl(),
        Some(std::time::Duration::from_secs(168 * 3600))
    );
    assert_eq!(config.memory_limit_bytes(), Some(2 << 30));
    assert_eq!(config.cpu_shares(), Some(1024));
    let source = &config.image_resource.as_ref().unwrap().source;
    assert_eq!(source["tag"], serde_json::json!(1.22));
}

/// What a case of [`concourse_task_configs_table`] expects.
enum Want {
    /// Accepted, and the config passes the check.
    Read(fn(&TaskConfig) -> bool),
    /// Refused with a message holding this fragment.
    Refused(&'static str),
}

/// Task configs as Concourse reads them (its `atc/task.go`,
/// `atc/container_limits.go`, `atc/exec/task_step.go`, their tests, and
/// the task docs), each with what hangar does: Concourse's reading where
/// hangar can honour it, else a refusal that says where and why hangar
/// differs (docs/task-configs.md). The comment on a row says what
/// Concourse does when hangar differs.
#[test]
fn concourse_task_configs_table() {
    use Want::{Read, Refused};
    let m = |extra: &str| with(extra);
    let limits = |l: &str| with(&format!("container_limits: {l}\n"));
    let memory = |t: &str| limits(&format!("{{memory: {t}}}"));
    let cpu = |t: &str| limits(&format!("{{cpu: {t}}}"));
    fn mem_is(c: &TaskConfig, bytes: u64) -> bool {
        c.memory_limit_bytes() == Some(bytes)
    }
    let long_digits = "9".repeat(10_000);
    let many_inputs: String = (0..20_000)
        .map(|i| format!("- name: in{i}\n"))
        .collect::<String>();
    let cases: Vec<(&str, String, Want)> = vec![
        // The 16 disagreements of issue 31, in its order.
        (
            "empty run.path: the image's ENTRYPOINT/CMD runs",
            "platform: linux\nrun: {path: ''}\n".into(),
            Read(|c| c.runs_image_entrypoint()),
        ),
        (
            "run missing: likewise",
            "platform: linux\n".into(),
            Read(|c| c.runs_image_entrypoint() && c.run.args.is_empty()),
        ),
        (
            "run without path, with args: args follow the image's command",
            "platform: linux\nrun: {args: [-v]}\n".into(),
            Read(|c| c.runs_image_entrypoint() && c.run.args == ["-v"]),
        ),
        (
            // Concourse ignores it.
            "an unknown nested field",
            "platform: linux\nrun: {path: echo, arg: [x]}\n".into(),
            Refused("run: unknown field \"arg\", expected one of path, args, dir, user (Concourse ignores an unknown field below the top level"),
        ),
        (
            "cpu: 1 runs with the kernel's minimum of 2 shares",
            cpu("1"),
            Read(|c| c.cpu_shares() == Some(2)),
        ),
        (
            "an input named twice at one path is mounted once",
            m("inputs:\n- name: repo\n- name: repo\n"),
            Read(|c| c.inputs.len() == 1 && c.input_path("repo") == Some("repo")),
        ),
        (
            "an input named twice at two paths is mounted at both",
            m("inputs:\n- name: repo\n- name: repo\n  path: src/repo\n"),
            Read(|c| c.inputs.len() == 2),
        ),
        (
            "the same input required once and optional once is required",
            m("inputs:\n- name: repo\n  optional: true\n- name: repo\n  path: ./repo/\n"),
            Read(|c| c.inputs.len() == 1 && !c.inputs[0].optional),
        ),
        (
            // Concourse joins it onto the working directory, as hangar.
            "an absolute input path",
            m("inputs:\n- name: repo\n  path: /go/src/repo\n"),
            Read(|c| c.inputs[0].mount_path() == "go/src/repo"),
        ),
        (
            "an absolute output path",
            m("outputs:\n- name: out\n  path: /tmp/artifacts\n"),
            Read(|c| c.outputs[0].mount_path() == "tmp/artifacts"),
        ),
        (
            "an absolute cache path",
            m("caches:\n- path: /root/.m2\n"),
            Read(|c| c.caches[0].path == "root/.m2"),
        ),
        (
            // Concourse runs the task there.
            "an absolute run.dir",
            "platform: linux\nrun: {path: ls, dir: /src}\n".into(),
            Refused("run.dir: \"/src\" is absolute: hangar places the task's working directory only below"),
        ),
        (
            // Concourse takes any non-empty name.
            "an input name with a slash",
            m("inputs:\n- name: src/repo\n"),
            Refused("give the directory as its path (`name: repo`, `path: src/repo`)"),
        ),
        (
            // Concourse deletes every "..": "../up" is "up".
            "a .. in an input path",
            m("inputs:\n- name: repo\n  path: ../up\n"),
            Refused("inputs[0].path: \"../up\" must not contain \"..\": Concourse silently deletes every \"..\""),
        ),
        (
            "a docker:// rootfs_uri is fetched as registry-image would",
            m("rootfs_uri: docker:///busybox#1.36\n"),
            Read(|c| {
                let image = c.rootfs_image().unwrap();
                image.type_name == "registry-image"
                    && image.source["repository"] == "busybox"
                    && image.source["tag"] == "1.36"
            }),
        ),
        (
            "memory 1TB: Concourse's units stop at G",
            memory("1TB"),
            Refused("\"1TB\" is not a memory size: Concourse takes a whole number of bytes, or one with the unit K, M or G"),
        ),
        (
            "a fractional memory",
            memory("1.5GB"),
            Refused("(no fractions: 1536M is 1.5G)"),
        ),
        (
            "a spaced memory",
            memory("'1 GB'"),
            Refused("(no space before the unit)"),
        ),
        (
            "attempts in the config",
            m("attempts: 3\n"),
            Refused("unknown field \"attempts\", expected one of platform"),
        ),
        // Concourse's own tests and docs.
        (
            "the valid config of Concourse's test",
            "platform: beos\n\ninputs: []\n\nrun: {path: a/file}\n".into(),
            Read(|c| c.platform == "beos" && c.run.path == "a/file"),
        ),
        (
            "a misspelt top-level field",
            "platform: beos\n\nintputs: []\n\nrun: {path: a/file}\n".into(),
            Refused("unknown field \"intputs\""),
        ),
        (
            "inputs given as strings",
            "platform: beos\ninputs: ['a/b/c']\noutputs: ['a/b/c']\nrun: {path: a/file}\n".into(),
            Refused("inputs[0]: invalid type: string \"a/b/c\", expected a mapping (name, path, optional)"),
        ),
        (
            "platform missing",
            "run: {path: a/file}\n".into(),
            Refused("platform: missing field"),
        ),
        (
            "platform empty",
            "platform: ''\nrun: {path: a/file}\n".into(),
            Refused("platform: must not be empty"),
        ),
        (
            "an input without a name",
            m("inputs:\n- name: concourse\n- path: x\n"),
            Refused("inputs[1].name: missing field"),
        ),
        (
            "an output with an empty name",
            m("outputs:\n- name: ''\n"),
            Refused("outputs[0].name: \"\" is not a valid name"),
        ),
        ("limits: cpu 1024, memory 1KB", limits("{cpu: 1024, memory: 1KB}"), Read(|c| c.cpu_shares() == Some(1024) && c.memory_limit_bytes() == Some(1024))),
        ("memory 209715200 as a number", memory("209715200"), Read(|c| c.memory_limit_bytes() == Some(209_715_200))),
        ("cpu 355 alone", cpu("355"), Read(|c| c.cpu_shares() == Some(355) && c.memory_limit_bytes().is_none())),
        ("memory abc1000kb", memory("abc1000kb"), Refused("\"abc1000kb\" is not a memory size")),
        ("cpu as a word", cpu("str1ng-cpu-l1mit"), Refused("container_limits.cpu: invalid type: string \"str1ng-cpu-l1mit\", expected a number of CPU shares")),
        ("memory 1KB", memory("1KB"), Read(|c| mem_is(c, 1 << 10))),
        ("memory 1MB", memory("1MB"), Read(|c| mem_is(c, 1 << 20))),
        ("memory 1GB", memory("1GB"), Read(|c| mem_is(c, 1 << 30))),
        ("memory 1KiB", memory("1KiB"), Read(|c| mem_is(c, 1 << 10))),
        ("memory 1MiB", memory("1MiB"), Read(|c| mem_is(c, 1 << 20))),
        ("memory 1GiB", memory("1GiB"), Read(|c| mem_is(c, 1 << 30))),
        ("memory 1kb", memory("1kb"), Read(|c| mem_is(c, 1 << 10))),
        ("memory 1kib", memory("1kib"), Read(|c| mem_is(c, 1 << 10))),
        ("memory 1K", memory("1K"), Read(|c| mem_is(c, 1 << 10))),
        ("memory 1m", memory("1m"), Read(|c| mem_is(c, 1 << 20))),
        ("memory 1Gi", memory("1Gi"), Read(|c| mem_is(c, 1 << 30))),
        ("memory '1024' as text", memory("'1024'"), Read(|c| mem_is(c, 1024))),
        ("memory with leading zeros", memory("00512MB"), Read(|c| mem_is(c, 512 << 20))),
        ("memory 0 is no limit", memory("0"), Read(|c| c.memory_limit_bytes().is_none())),
        ("memory null is no limit", memory("~"), Read(|c| c.memory_limit_bytes().is_none())),
        ("memory as a fraction of a number is cut", memory("1536.9"), Read(|c| mem_is(c, 1536))),
        ("memory 1B", memory("1B"), Refused("\"1B\" is not a memory size")),
        ("memory 1GBB", memory("1GBB"), Refused("\"1GBB\" is not a memory size")),
        ("memory empty", memory("''"), Refused("\"\" is not a memory size")),
        ("memory -1 as text", memory("'-1'"), Refused("\"-1\" is not a memory size")),
        ("memory -1", memory("-1"), Refused("container_limits.memory: -1 is negative")),
        ("memory 1PB", memory("1PB"), Refused("(Concourse has no T or P: 1024G is 1T)")),
        (
            // Concourse reads a boolean as no limit.
            "memory true",
            memory("true"),
            Refused("true is not a memory size (Concourse would read it as no limit"),
        ),
        (
            // Concourse's arithmetic wraps round to a small limit.
            "memory past 2^64 bytes",
            memory("17179869184G"),
            Refused("\"17179869184G\" is too large"),
        ),
        ("cpu 0 is no limit", cpu("0"), Read(|c| c.cpu_shares().is_none())),
        ("cpu past the kernel's maximum", cpu("1000000"), Read(|c| c.cpu_shares() == Some(262_144))),
        ("cpu 1.9 is cut to 1, then 2 shares", cpu("1.9"), Read(|c| c.cpu_shares() == Some(2))),
        ("cpu negative", cpu("-1"), Refused("container_limits.cpu: -1 is negative")),
        ("cpu as a boolean", cpu("true"), Refused("expected a number of CPU shares")),
        ("cpu as text", cpu("'512'"), Refused("expected a number of CPU shares")),
        ("cache ttl 24h", m("caches:\n- path: some-path\n  ttl: 24h\n"), Read(|c| c.caches[0].ttl() == Some(std::time::Duration::from_secs(86_400)))),
        ("cache without ttl", m("caches:\n- path: some-path\n"), Read(|c| c.caches[0].ttl.is_none())),
        ("cache ttl 500ms", m("caches:\n- path: some-path\n  ttl: 500ms\n"), Refused("is less than 1s")),
        ("cache ttl notaduration", m("caches:\n- path: some-path\n  ttl: notaduration\n"), Refused("\"notaduration\" is not a duration")),
        ("param true", m("params: {testParam: true}\n"), Read(|c| c.params["testParam"] == "true")),
        ("param int", m("params: {testParam: 1059262}\n"), Read(|c| c.params["testParam"] == "1059262")),
        ("param u64 max", m("params: {testParam: 18446744073709551615}\n"), Read(|c| c.params["testParam"] == "18446744073709551615")),
        ("param float notation", m("params: {testParam: 1.8446744e+19}\n"), Read(|c| c.params["testParam"] == "18446744000000000000")),
        ("param quoted float notation", m("params: {testParam: '1.8446744e+19'}\n"), Read(|c| c.params["testParam"] == "1.8446744e+19")),
        ("param float", m("params: {testParam: 1059262.123123123}\n"), Read(|c| c.params["testParam"] == "1059262.123123123")),
        ("param map", m("params:\n  testParam:\n    foo: bar\n"), Read(|c| c.params["testParam"] == r#"{"foo":"bar"}"#)),
        ("param empty", m("params:\n  testParam:\n"), Read(|c| c.params["testParam"].is_empty())),
        // Concourse's readings of empty and null values.
        ("an empty input path is the name", m("inputs:\n- name: repo\n  path: ''\n"), Read(|c| c.input_path("repo") == Some("repo") && c.inputs[0].path.is_none())),
        ("an empty output path is the name", m("outputs:\n- name: out\n  path: ''\n"), Read(|c| c.output_path("out") == Some("out"))),
        ("an empty run.dir is the working directory", "platform: linux\nrun: {path: ls, dir: ''}\n".into(), Read(|c| c.run.dir.is_none())),
        ("run.dir . is the working directory", "platform: linux\nrun: {path: ls, dir: .}\n".into(), Read(|c| c.run.dir.as_deref() == Some("."))),
        ("run: null", "platform: linux\nrun:\n".into(), Read(|c| c.runs_image_entrypoint())),
        ("run.path: null", "platform: linux\nrun: {path: ~, args: [x]}\n".into(), Read(|c| c.runs_image_entrypoint())),
        ("inputs, outputs, caches and limits null", m("inputs:\noutputs:\ncaches:\ncontainer_limits:\n"), Read(|c| c.inputs.is_empty() && c.outputs.is_empty() && c.caches.is_empty() && c.container_limits.is_empty())),
        ("image_resource source and tags null", m("image_resource: {type: registry-image, source: ~, tags: ~}\n"), Read(|c| c.image_resource.as_ref().unwrap().source.is_empty())),
        // rootfs_uri.
        ("rootfs_uri raw:///", m("rootfs_uri: raw:///var/rootfs\n"), Read(|c| c.rootfs_image().is_none())),
        ("rootfs_uri a bare path", m("rootfs_uri: /var/rootfs\n"), Read(|c| c.rootfs_image().is_none())),
        (
            "rootfs_uri docker with a registry",
            m("rootfs_uri: docker://registry.example.com:5000/team/image#v2\n"),
            Read(|c| {
                let source = c.rootfs_image().unwrap().source;
                source["repository"] == "registry.example.com:5000/team/image" && source["tag"] == "v2"
            }),
        ),
        ("rootfs_uri docker without a tag", m("rootfs_uri: docker:///library/ubuntu\n"), Read(|c| { let s = c.rootfs_image().unwrap().source; s["repository"] == "library/ubuntu" && !s.contains_key("tag") })),
        ("rootfs_uri docker without a repository", m("rootfs_uri: docker:///\n"), Refused("\"docker:///\" names no repository")),
        ("rootfs_uri docker with ..", m("rootfs_uri: docker:///a/../b\n"), Refused("has an empty, '.' or '..' part")),
        (
            // Concourse hands it to Garden.
            "rootfs_uri of another scheme",
            m("rootfs_uri: oci:///images/busybox\n"),
            Refused("Concourse hands a oci:// URI to its Garden backend"),
        ),
        ("rootfs_uri with a newline", m("rootfs_uri: \"raw:///a\\nb\"\n"), Refused("rootfs_uri: must not contain control characters")),
        // Where hangar refuses what Concourse takes, beyond the issue's list.
        (
            // Concourse mounts the second over the first.
            "two inputs at one path",
            m("inputs:\n- name: a\n  path: dir\n- name: b\n  path: dir/\n"),
            Refused("is already the path of inputs[0] (Concourse would mount one input over the other"),
        ),
        (
            // Concourse keeps the last.
            "an output named twice",
            m("outputs:\n- name: out\n- name: out\n  path: elsewhere\n"),
            Refused("(Concourse would keep only the last output of that name"),
        ),
        ("an output name with a slash", m("outputs:\n- name: a/b\n"), Refused("outputs[0].name: \"a/b\" is not a valid name")),
        ("an input at the working directory", m("inputs:\n- name: repo\n  path: .\n- name: other\n"), Read(|c| c.inputs[0].mount_path() == "." && c.inputs[1].mount_path() == "other")),
        ("an output at the working directory", m("outputs:\n- name: out\n  path: ./\n"), Read(|c| c.outputs[0].path.as_deref() == Some("./"))),
        ("two artifacts at the working directory", m("inputs:\n- name: a\n  path: .\n- name: b\n  path: ./\n"), Refused("inputs[1].path: \"./\" is already the path of inputs[0]")),
        ("privileged in the config", m("privileged: true\n"), Refused("(privileged is a field of the task step in Concourse, not of its config: put it on the step)")),
        ("an unknown field in an input", m("inputs:\n- name: a\n  optinal: true\n"), Refused("inputs[0]: unknown field \"optinal\"")),
        ("an unknown field in image_resource", m("image_resource: {type: registry-image, privileged: true}\n"), Refused("image_resource: unknown field \"privileged\"")),
        ("a blank run.path", "platform: linux\nrun: {path: ' '}\n".into(), Refused("run.path: \" \" is blank")),
        // Malformed, hostile and oversized.
        ("a list, not a mapping", "- platform: linux\n".into(), Refused("task config: invalid type: sequence, expected a mapping (the task config)")),
        ("run as a list", "platform: linux\nrun: [echo, hi]\n".into(), Refused("run: invalid type: sequence, expected a mapping (path, args, dir, user)")),
        ("an input as a list", m("inputs:\n- [repo]\n"), Refused("inputs[0]: invalid type: sequence, expected a mapping (name, path, optional)")),
        ("container_limits as a list", m("container_limits: [1G]\n"), Refused("container_limits: invalid type: sequence, expected a mapping (memory, cpu)")),
        ("a scalar document", "linux\n".into(), Refused("invalid type: string \"linux\", expected a mapping (the task config)")),
        ("an empty document", "".into(), Refused("the document is empty")),
        ("YAML that does not parse", "platform: [linux\n".into(), Refused("task config: line ")),
        ("a key given twice", "platform: linux\nplatform: beos\n".into(), Refused("the key \"platform\" appears twice")),
        ("a NUL in a param", m("params: {A: \"x\\0y\"}\n"), Refused("params.A: must not contain a NUL character")),
        ("a NUL in an arg", "platform: linux\nrun: {path: echo, args: [\"a\\0\"]}\n".into(), Refused("run: path and args must not contain a NUL character")),
        ("a control character in a path", m("inputs:\n- name: a\n  path: \"x\\ty\"\n"), Refused("must not contain control characters")),
        ("an env name with =", m("params: {\"A=B\": x}\n"), Refused("cannot be an environment variable name")),
        ("a 64-character name", m(&format!("inputs:\n- name: {}\n", "a".repeat(64))), Refused("is not a valid name")),
        ("a memory of 10,000 digits", memory(&long_digits), Refused("is too large")),
        ("cpu past u64", cpu("1e30"), Refused("is not a number of CPU shares")),
        (
            "a hostile unknown field name is cut and escaped",
            m(&format!("\"x\\n{}\": 1\n", "y".repeat(500))),
            Refused("unknown field \"x\\nyyyy"),
        ),
        ("20,000 inputs are read in time", m(&format!("inputs:\n{many_inputs}")), Read(|c| c.inputs.len() == 20_000)),
        (
            "a document over the size limit",
            format!("{MINIMAL}#{}", "x".repeat(MAX_CONFIG_BYTES)),
            Refused("more than the limit of 1048576"),
        ),
    ];
    let mut failures = Vec::new();
    for (what, yaml, want) in &cases {
        let got = parse_task_config(yaml);
        match (want, &got) {
            (Read(check), Ok(config)) if check(config) => {}
            (Refused(fragment), Err(e)) if e.to_string().contains(fragment) => {}
            _ => failures.push(format!(
                "{what}:\n  yaml: {}\n  got: {got:?}",
                crate::names::shorten(yaml)
            )),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn a_task_without_run_path_needs_an_image() {
    let config = parse_task_config("platform: linux\n").unwrap();
    let e = config.check_runnable(false).unwrap_err().to_string();
    assert!(
        e.starts_with("task config: run.path: No executable defined for task."),
        "{e}"
    );
    // An image of the step's, an image_resource or a docker:// rootfs_uri
    // may have one; a raw root filesystem has no image config.
    config.check_runnable(true).unwrap();
    let raw = parse_task_config("platform: linux\nrootfs_uri: raw:///images/busybox\n").unwrap();
    assert!(raw.check_runnable(false).is_err());
    for extra in [
        "image_resource: {type: registry-image, source: {repository: busybox}}\n",
        "rootfs_uri: docker:///busybox\n",
    ] {
        parse_task_config(&format!("platform: linux\n{extra}"))
            .unwrap()
            .check_runnable(false)
            .unwrap();
    }
}

/// Concourse's `getOciEntrypoint`: what a task without `run.path` runs.
#[test]
fn a_task_without_run_path_runs_the_image_s_entrypoint_then_cmd_then_its_args() {
    let args = ["--task-arg".to_string()];
    type Command<'a> = (&'a str, &'a [&'a str]);
    let table: &[(&str, Result<Command, &str>)] = &[
        (
            r#"{"entrypoint": ["/bin/app", "serve"], "cmd": ["--port", "80"]}"#,
            Ok(("/bin/app", &["serve", "--port", "80", "--task-arg"])),
        ),
        (
            r#"{"cmd": ["sh", "-c", "true"]}"#,
            Ok(("sh", &["-c", "true", "--task-arg"])),
        ),
        (
            r#"{"entrypoint": ["/init"], "cmd": null, "env": ["A=b"], "user": "x"}"#,
            Ok(("/init", &["--task-arg"])),
        ),
        (r#"{"env": []}"#, Err("No executable defined for task.")),
        (
            r#"{"entrypoint": [], "cmd": []}"#,
            Err("No executable defined for task."),
        ),
        (
            r#"{"cmd": "sh"}"#,
            Err("error parsing metadata.json from rootfs"),
        ),
        ("not json", Err("error parsing metadata.json from rootfs")),
    ];
    for (metadata, want) in table {
        let got = image_command(metadata.as_bytes(), &args);
        match (want, &got) {
            (Ok((path, rest)), Ok((p, a))) if p == path && a == rest => {}
            (Err(fragment), Err(e)) if e.contains(fragment) => {}
            _ => panic!("{metadata}: {got:?}"),
        }
    }
}
