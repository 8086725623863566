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
attempts: 5
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
            attempts: DEFAULT_ATTEMPTS,
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
    assert_eq!(config.attempts, 5);
}

#[test]
fn a_config_survives_a_round_trip_through_json_and_yaml() {
    let config = parse_task_config(FULL).unwrap();
    let json = serde_json::to_string(&config).unwrap();
    assert_eq!(serde_json::from_str::<TaskConfig>(&json).unwrap(), config);
    let yaml = serde_yaml::to_string(&config).unwrap();
    assert_eq!(parse_task_config(&yaml).unwrap(), config);
}

#[test]
fn memory_limits_accept_bytes_and_sizes_with_units() {
    let cases: &[(&str, u64)] = &[
        ("1", 1),
        ("1048576", 1 << 20),
        ("'100'", 100),
        ("100B", 100),
        ("512MB", 512 << 20),
        ("512mb", 512 << 20),
        ("512M", 512 << 20),
        ("512 MiB", 512 << 20),
        ("1GiB", 1 << 30),
        ("1G", 1 << 30),
        ("1gb", 1 << 30),
        ("1.5G", 3 << 29),
        ("64k", 64 << 10),
        ("1TiB", 1 << 40),
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
        "1e3", "1G ", "１G",
    ] {
        assert!(parse_memory_size(text).is_err(), "{text:?} was accepted");
    }
    assert_eq!(parse_memory_size("1Ki"), Ok(1024));
    assert!(parse_memory_size("99999999999999999999P").is_err());
}

#[test]
fn attempts_default_to_three_and_accept_one_to_ten() {
    for n in [1, 3, 10] {
        let config = parse_task_config(&with(&format!("attempts: {n}\n"))).unwrap();
        assert_eq!(config.attempts, n);
    }
}

#[test]
fn refused_configs_say_what_is_wrong_and_where() {
    let long_name = "a".repeat(64);
    let cases: Vec<(String, &str)> = vec![
        // Unknown fields, at the top and nested.
        (
            with("colour: blue\n"),
            "task config: unknown field \"colour\", expected one of platform, image_resource, \
             rootfs_uri, inputs, outputs, caches, params, run, container_limits, attempts",
        ),
        (
            "platform: linux\nrun:\n  paht: echo\n".into(),
            "task config: run: unknown field \"paht\", expected one of path, args, dir, user",
        ),
        (
            with("inputs:\n- name: a\n- name: b\n  optinal: true\n"),
            "task config: inputs[1]: unknown field \"optinal\", expected one of name, path, optional",
        ),
        (
            with("caches:\n- path: a\n  name: b\n"),
            "task config: caches[0]: unknown field \"name\", expected path",
        ),
        (
            with("container_limits: {memory: 1G, cpus: 2}\n"),
            "task config: container_limits: unknown field \"cpus\", expected memory or cpu",
        ),
        // Missing and mistyped fields.
        (
            "platform: linux\nrun:\n  args: [x]\n".into(),
            "task config: run.path: missing field",
        ),
        ("run: {path: echo}\n".into(), "task config: platform: missing field"),
        ("platform: linux\n".into(), "task config: run: missing field"),
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
            with("attempts: -1\n"),
            "task config: attempts: invalid value: integer `-1`, expected u32",
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
            "platform: linux\nrun: {path: ''}\n".into(),
            "task config: run.path: must not be empty",
        ),
        // Names.
        (
            with("inputs:\n- name: ok\n- name: bad name\n"),
            "task config: inputs[1].name: \"bad name\" is not a valid name (1 to 63 letters, \
             digits, '_', '.' or '-', starting with a letter or digit)",
        ),
        (
            with("outputs:\n- name: .hidden\n"),
            "task config: outputs[0].name: \".hidden\" is not a valid name (1 to 63 letters, \
             digits, '_', '.' or '-', starting with a letter or digit)",
        ),
        (
            with(&format!("outputs:\n- name: {long_name}\n")),
            "task config: outputs[0].name: \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" \
             is not a valid name (1 to 63 letters, digits, '_', '.' or '-', starting with a \
             letter or digit)",
        ),
        (
            with("inputs:\n- name: ''\n"),
            "task config: inputs[0].name: \"\" is not a valid name (1 to 63 letters, digits, \
             '_', '.' or '-', starting with a letter or digit)",
        ),
        // Duplicates.
        (
            with("inputs:\n- name: repo\n- name: repo\n  path: other\n"),
            "task config: inputs[1].name: \"repo\" is already the name of inputs[0]",
        ),
        (
            with("inputs:\n- name: repo\noutputs:\n- name: repo\n  path: out\n"),
            "task config: outputs[0].name: \"repo\" is already the name of inputs[0]",
        ),
        (
            with("inputs:\n- name: a\n  path: dir\n- name: b\n  path: ./dir/\n"),
            "task config: inputs[1].path: \"./dir/\" is already the path of inputs[0]",
        ),
        (
            with("inputs:\n- name: a\n  path: out\noutputs:\n- name: out\n"),
            "task config: outputs[0].name: \"out\" is already the path of inputs[0]",
        ),
        (
            with("outputs:\n- name: out\ncaches:\n- path: out\n"),
            "task config: caches[0].path: \"out\" is already the path of outputs[0]",
        ),
        (
            with("caches:\n- path: c\n- path: c\n"),
            "task config: caches[1].path: \"c\" is already the path of caches[0]",
        ),
        // Paths.
        (
            with("inputs:\n- name: a\n  path: ../up\n"),
            "task config: inputs[0].path: \"../up\" must not contain \"..\"",
        ),
        (
            with("outputs:\n- name: a\n  path: x/../../y\n"),
            "task config: outputs[0].path: \"x/../../y\" must not contain \"..\"",
        ),
        (
            with("caches:\n- path: /abs\n"),
            "task config: caches[0].path: \"/abs\" is absolute; it must be relative to the \
             task's working directory",
        ),
        (
            with("inputs:\n- name: a\n  path: /etc\n"),
            "task config: inputs[0].path: \"/etc\" is absolute; it must be relative to the \
             task's working directory",
        ),
        (
            with("caches:\n- path: ./\n"),
            "task config: caches[0].path: \"./\" must name a directory below the working directory",
        ),
        (
            with("caches:\n- path: ''\n"),
            "task config: caches[0].path: must not be empty",
        ),
        (
            "platform: linux\nrun: {path: echo, dir: ../x}\n".into(),
            "task config: run.dir: \"../x\" must not contain \"..\"",
        ),
        (
            "platform: linux\nrun: {path: echo, dir: /x}\n".into(),
            "task config: run.dir: \"/x\" is absolute; it must be relative to the task's \
             working directory",
        ),
        // Memory.
        (
            with("container_limits: {memory: 12XB}\n"),
            "task config: container_limits.memory: \"12XB\" is not a memory size (bytes, or a \
             number with a unit K, M, G or T, e.g. \"512MB\" or \"1GiB\"; units are powers of \
             1024)",
        ),
        (
            with("container_limits: {memory: lots}\n"),
            "task config: container_limits.memory: \"lots\" is not a memory size (bytes, or a \
             number with a unit K, M, G or T, e.g. \"512MB\" or \"1GiB\"; units are powers of \
             1024)",
        ),
        (
            with("container_limits: {memory: -5}\n"),
            "task config: container_limits.memory: -5 is negative",
        ),
        (
            with("container_limits: {memory: 1.5}\n"),
            "task config: container_limits.memory: invalid type: floating point `1.5`, expected \
             a number of bytes or a size like \"512MB\"",
        ),
        (
            with("container_limits: {memory: 0}\n"),
            "task config: container_limits.memory: must be greater than 0 (leave it out for no \
             limit)",
        ),
        (
            with("container_limits: {memory: 0MB}\n"),
            "task config: container_limits.memory: must be greater than 0 (leave it out for no \
             limit)",
        ),
        (
            with("container_limits: {memory: 2TiB}\n"),
            "task config: container_limits.memory: 2199023255552 bytes is more than the limit \
             of 1 TiB",
        ),
        // Params.
        (
            with("params:\n  OK: yes\n  NESTED: {a: b}\n"),
            "task config: params.NESTED: nested values are not allowed: a param is a string, \
             number or boolean",
        ),
        (
            with("params:\n  LIST: [a, b]\n"),
            "task config: params.LIST: nested values are not allowed: a param is a string, \
             number or boolean",
        ),
        (
            with("params:\n  UNSET:\n"),
            "task config: params.UNSET: has no value: write \"\" for an empty string",
        ),
        (
            with("params:\n  A=B: x\n"),
            "task config: params: \"A=B\" cannot be an environment variable name (empty, or \
             holds '=' or NUL)",
        ),
        (
            with("params: [A, B]\n"),
            "task config: params: invalid type: sequence, expected a mapping of names to \
             strings, numbers or booleans",
        ),
        // Attempts.
        (
            with("attempts: 0\n"),
            "task config: attempts: 0 is out of range (1 to 10)",
        ),
        (
            with("attempts: 11\n"),
            "task config: attempts: 11 is out of range (1 to 10)",
        ),
        // image_resource and rootfs_uri.
        (
            with("image_resource: {type: registry-image}\n"),
            "task config: image_resource.source: missing field",
        ),
        (
            with("image_resource: {type: 'bad type', source: {}}\n"),
            "task config: image_resource.type: \"bad type\" is not a valid resource type name \
             (only letters, digits, '-', '_' and '.' are allowed)",
        ),
        (
            with("image_resource: {type: git, source: {}, tag: x}\n"),
            "task config: image_resource: unknown field \"tag\", expected one of type, source, \
             params, version",
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
            "task config: line 1 column 1: the mapping here has the key \"platform\" twice",
        ),
        (
            with("params: *nowhere\n"),
            "task config: line 4 column 9: unknown anchor",
        ),
        (
            with("params: !custom {A: b}\n"),
            "task config: line 4 column 9: YAML tags (!name) are not supported",
        ),
        (
            format!("{MINIMAL}---\n{MINIMAL}"),
            "task config: deserializing from YAML containing more than one document is not \
             supported",
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
        "task config: line 3 column 3: the mapping here has the key \"path\" twice"
    );
    let e = parse_task_config("platform: linux\nrun:\n  args: [x]\n").unwrap_err();
    assert_eq!(e.field_path(), Some("run.path"));
    assert_eq!(e.message(), "missing field");
    assert_eq!(e.place(), &Place::Field("run.path".into()));
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
    // which serde_yaml's own repetition limit lets through.
    let wide_items = vec!["x"; 20_000].join(", ");
    let wide_aliases = vec!["*w"; 20_000].join(", ");
    let wide = format!("w: &w [{wide_items}]\nb: [{wide_aliases}]\n{MINIMAL}");
    assert!(wide.len() < MAX_CONFIG_BYTES);

    for doc in [bomb, wide] {
        let started = std::time::Instant::now();
        let got = err(&doc);
        assert!(
            got.ends_with(
                ": the document holds more than 100000 values once its aliases are expanded"
            ),
            "{got}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
    }
}

#[test]
fn deep_nesting_is_refused_by_the_recursion_limit() {
    let deep = format!(
        "{MINIMAL}params: {}{}\n",
        "[".repeat(1000),
        "]".repeat(1000)
    );
    let got = err(&deep);
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
    config.attempts = 0;
    assert_eq!(
        config.validate().unwrap_err().to_string(),
        "task config: attempts: 0 is out of range (1 to 10)"
    );
}
