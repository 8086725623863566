use super::*;

/// Runs an action and returns (exit code, stdout, stderr).
fn call(type_name: &str, action: &str, args: &[&str], stdin: &str) -> (i32, String, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = run(
        type_name,
        action,
        &args,
        stdin.as_bytes(),
        &mut out,
        &mut err,
    );
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn bad_requests_are_refused_with_the_field_named() {
    let big = format!(
        "{{\"source\":{{}},\"pad\":\"{}\"}}",
        "x".repeat(MAX_REQUEST_BYTES as usize)
    );
    // (type, action, args, stdin, stderr)
    let cases: &[(&str, &str, &[&str], &str, &str)] = &[
        (
            "svn",
            "check",
            &[],
            "{}",
            "error: unknown resource type \"svn\" (known: docker-image, git, mock, registry-image, time)\n",
        ),
        (
            "mock",
            "push",
            &[],
            "{}",
            "error: unknown action \"push\" (one of check, in, out)\n",
        ),
        (
            "mock",
            "check",
            &["/tmp"],
            "{}",
            "error: usage: check takes no arguments\n",
        ),
        ("mock", "in", &[], "{}", "error: usage: in <dest-dir>\n"),
        ("git", "out", &["a", "b"], "{}", "error: usage: out <src-dir>\n"),
        (
            "mock",
            "in",
            &[""],
            "{}",
            "error: usage: in needs a directory, not \"\"\n",
        ),
        (
            "mock",
            "check",
            &[],
            " \n",
            "error: no request on stdin (expected a JSON object)\n",
        ),
        (
            "mock",
            "check",
            &[],
            "{\"source\":",
            "error: invalid request: source: EOF while parsing a value at line 1 column 10\n",
        ),
        (
            "mock",
            "check",
            &[],
            "{\"source\":{}} {}",
            "error: invalid request: trailing characters at line 1 column 15\n",
        ),
        (
            "mock",
            "check",
            &[],
            &big,
            "error: the request is larger than 1048576 bytes\n",
        ),
        (
            "mock",
            "check",
            &[],
            "[]",
            "error: invalid request: invalid length 0, expected struct CheckRequest with 2 elements at line 1 column 2\n",
        ),
        (
            "mock",
            "check",
            &[],
            "{\"source\":{},\"extra\":1}",
            "error: invalid request: unknown field `extra`, expected `source` or `version` at line 1 column 20\n",
        ),
        // git
        (
            "git",
            "check",
            &[],
            "{\"source\":{}}",
            "error: invalid request: source: missing field `uri` at line 1 column 12\n",
        ),
        (
            "git",
            "check",
            &[],
            "{\"source\":{\"uri\":\"/r\",\"branchh\":\"main\"}}",
            "error: invalid request: source: unknown field `branchh`, expected one of `uri`, \
             `branch`, `private_key`, `private_key_user`, `username`, `password`, `paths`, \
             `ignore_paths`, `tag_filter`, `disable_ci_skip`, `commit_filter`, \
             `skip_ssl_verification`, `git_config`, `fetch_tags`, `private_key_passphrase`, \
             `tag_regex`, `tag_behaviour`, `submodule_credentials`, `gpg_keyserver`, \
             `git_crypt_key`, `https_tunnel`, `commit_verification_keys`, \
             `commit_verification_key_ids`, `version_depth`, `search_remote_refs`, \
             `sparse_paths` at line 1 column 31\n",
        ),
        (
            "git",
            "check",
            &[],
            "{\"source\":{\"uri\":42}}",
            "error: invalid request: source.uri: invalid type: integer `42`, expected a string at line 1 column 19\n",
        ),
        (
            "git",
            "check",
            &[],
            "{\"source\":{\"uri\":\"--upload-pack=touch /tmp/x\"}}",
            "error: source.uri: \"--upload-pack=touch /tmp/x\" must not start with '-'\n",
        ),
        (
            "git",
            "check",
            &[],
            "{\"source\":{\"uri\":\"\"}}",
            "error: source.uri: must not be empty\n",
        ),
        (
            "git",
            "check",
            &[],
            "{\"source\":{\"uri\":\"/r\",\"branch\":\"-f\"}}",
            "error: source.branch: \"-f\" is not a branch name (starts with '-')\n",
        ),
        (
            "git",
            "check",
            &[],
            "{\"source\":{\"uri\":\"/r\"},\"version\":{\"ref\":\"HEAD~1\"}}",
            "error: version.ref: \"HEAD~1\" is not a commit sha (4 to 64 hex digits)\n",
        ),
        (
            "git",
            "in",
            &["/nonexistent/dest"],
            "{\"source\":{\"uri\":\"/r\"},\"version\":{\"ref\":\"abc\"}}",
            "error: version.ref: \"abc\" is not a commit sha (4 to 64 hex digits)\n",
        ),
        (
            "git",
            "in",
            &["/nonexistent/dest"],
            "{\"source\":{\"uri\":\"/r\"},\"version\":{\"sha\":\"abcd\"}}",
            "error: invalid request: version: unknown field `sha`, expected `ref` at line 1 column 39\n",
        ),
        (
            "git",
            "in",
            &["/nonexistent/dest"],
            "{\"source\":{\"uri\":\"/r\"}}",
            "error: invalid request: missing field `version` at line 1 column 23\n",
        ),
        (
            "git",
            "in",
            &["/nonexistent/dest"],
            "{\"source\":{\"uri\":\"/r\"},\"version\":{\"ref\":\"abcd\"},\"params\":{\"depth\":-1}}",
            "error: invalid request: params.depth: invalid value: integer `-1`, expected u32 at line 1 column 68\n",
        ),
        (
            "git",
            "out",
            &["/tmp"],
            "{\"source\":{\"uri\":\"/r\"}}",
            "error: params.repository: required (the input directory to push)\n",
        ),
        // mock
        (
            "mock",
            "check",
            &[],
            "{\"source\":{\"version\":[\"v1\"]}}",
            "error: invalid request: source: unknown field `version`, expected one of \
             `mirror_self`, `initial_version`, `no_initial_version`, `force_version`, \
             `create_files`, `check_delay`, `check_failure`, `metadata`, `log`, `versions`, \
             `files`, `fail` at line 1 column 20\n",
        ),
        (
            "mock",
            "check",
            &[],
            "{\"source\":{\"versions\":[]}}",
            "error: source.versions: must not be empty (leave it out for Concourse's \
             initial_version, \"mock\" by default)\n",
        ),
        (
            "mock",
            "check",
            &[],
            "{\"source\":{\"versions\":[\"v1\",\"\"]}}",
            "error: source.versions[1]: a version must not be empty\n",
        ),
        (
            "mock",
            "check",
            &[],
            "{\"source\":{\"versions\":[\"v1\",2]}}",
            "error: invalid request: source.versions[1]: invalid type: integer `2`, expected a string at line 1 column 29\n",
        ),
        (
            "mock",
            "check",
            &[],
            "{\"source\":{\"fail\":\"yes\"}}",
            "error: invalid request: source.fail: invalid type: string \"yes\", expected a boolean at line 1 column 23\n",
        ),
        (
            "mock",
            "in",
            &["/nonexistent/dest"],
            "{\"source\":{\"files\":{\"../escape\":\"x\"}},\"version\":{\"version\":\"v1\"}}",
            "error: source.files: \"../escape\" must not have '..' parts: a file is written \
             below in's directory, never outside it\n",
        ),
        (
            "mock",
            "in",
            &["/nonexistent/dest"],
            "{\"source\":{},\"version\":{\"version\":\"\"}}",
            "error: version.version: a version must not be empty\n",
        ),
        (
            "mock",
            "in",
            &["/nonexistent/dest"],
            "{\"source\":{},\"version\":null}",
            "error: invalid request: version: invalid type: null, expected struct Version at line 1 column 27\n",
        ),
        (
            "mock",
            "out",
            &["/nonexistent/src"],
            "{\"source\":{}}",
            "error: out: /nonexistent/src is not a directory\n",
        ),
    ];
    let mut failures = Vec::new();
    for (type_name, action, args, stdin, expected) in cases {
        let (code, out, err) = call(type_name, action, args, stdin);
        if code != 1 || !out.is_empty() || err != *expected {
            failures.push(format!(
                "{type_name} {action} {args:?} <<< {}\n  expected: {expected:?}\n  got: {code} {out:?} {err:?}",
                shorten(stdin)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn mock_check_lists_versions_oldest_first() {
    let source = r#""source":{"versions":["v1","v2","v3"]}"#;
    // (stdin, stdout)
    let cases = [
        (r#"{"source":{}}"#.to_string(), r#"[{"version":"mock"}]"#),
        (
            format!("{{{source}}}"),
            r#"[{"version":"v1"},{"version":"v2"},{"version":"v3"}]"#,
        ),
        (
            format!("{{{source},\"version\":null}}"),
            r#"[{"version":"v1"},{"version":"v2"},{"version":"v3"}]"#,
        ),
        (
            format!("{{{source},\"version\":{{\"version\":\"v2\"}}}}"),
            r#"[{"version":"v2"},{"version":"v3"}]"#,
        ),
        (
            format!("{{{source},\"version\":{{\"version\":\"v3\"}}}}"),
            r#"[{"version":"v3"}]"#,
        ),
        (
            format!("{{{source},\"version\":{{\"version\":\"gone\"}}}}"),
            r#"[{"version":"v3"}]"#,
        ),
    ];
    for (stdin, expected) in cases {
        let (code, out, err) = call("mock", "check", &[], &stdin);
        assert_eq!(
            (code, out.as_str(), err.as_str()),
            (0, format!("{expected}\n").as_str(), ""),
            "{stdin}"
        );
    }
}

#[test]
fn mock_in_writes_the_version_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("dest");
    let stdin = r#"{"source":{"files":{"a.txt":"hello","sub/dir/b.txt":"deep"}},"version":{"version":"v7"},"params":{}}"#;
    let (code, out, err) = call("mock", "in", &[dest.to_str().unwrap()], stdin);
    assert_eq!(code, 0, "{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({
            "version": {"version": "v7"},
            "metadata": [],
        })
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("version")).unwrap(),
        "v7\n"
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("a.txt")).unwrap(),
        "hello"
    );
    assert_eq!(
        std::fs::read_to_string(dest.join("sub/dir/b.txt")).unwrap(),
        "deep"
    );
    assert!(
        err.starts_with("mock: fetched version \"v7\" with 2 file(s)"),
        "{err}"
    );
}

#[test]
fn mock_fails_when_told_to() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("dest");
    let dest = dest.to_str().unwrap();
    let (code, out, err) = call(
        "mock",
        "in",
        &[dest],
        r#"{"source":{"fail":true},"version":{"version":"v1"}}"#,
    );
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (1, "", "error: mock: in fails because source.fail is true\n")
    );
    assert!(!dir.path().join("dest").exists());
    let (code, out, err) = call(
        "mock",
        "out",
        &[dir.path().to_str().unwrap()],
        r#"{"source":{"fail":true}}"#,
    );
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (
            1,
            "",
            "error: mock: out fails because source.fail is true\n"
        )
    );
    // check still answers: failing is for fetching and pushing.
    let (code, _, _) = call("mock", "check", &[], r#"{"source":{"fail":true}}"#);
    assert_eq!(code, 0);
}

#[test]
fn mock_out_echoes_a_version() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().to_str().unwrap();
    let cases = [
        (
            r#"{"source":{"versions":["a","b"]},"params":null}"#,
            r#"{"metadata":[],"version":{"version":"b"}}"#,
        ),
        (
            r#"{"source":{},"params":{"version":"v9"}}"#,
            r#"{"metadata":[],"version":{"version":"v9"}}"#,
        ),
    ];
    for (stdin, expected) in cases {
        let (code, out, err) = call("mock", "out", &[src], stdin);
        assert_eq!(
            (code, out.as_str()),
            (0, format!("{expected}\n").as_str()),
            "{stdin}: {err}"
        );
        assert!(err.starts_with("mock: pushing version"), "{err}");
    }
    let (code, _, err) = call(
        "mock",
        "out",
        &[src],
        r#"{"source":{},"params":{"versoin":"v9"}}"#,
    );
    assert_eq!(code, 1);
    assert!(
        err.starts_with("error: invalid request: params: unknown field `versoin`"),
        "{err}"
    );
}

/// Concourse's mock resource (`concourse/mock-resource`: its README,
/// `types.go` and `cmd/{check,in,out}`), one row per field or rule: the
/// request, and the answer or a fragment of the refusal.
#[test]
fn mock_check_follows_concourse_s_mock() {
    // (what, request, Ok(answer) or Err(fragment of stderr))
    let cases: &[(&str, &str, Result<&str, &str>)] = &[
        ("no version: the initial version", r#"{"source":{}}"#, Ok(r#"[{"version":"mock"}]"#)),
        (
            "initial_version",
            r#"{"source":{"initial_version":"first"}}"#,
            Ok(r#"[{"version":"first"}]"#),
        ),
        (
            "an empty initial_version is the default",
            r#"{"source":{"initial_version":""}}"#,
            Ok(r#"[{"version":"mock"}]"#),
        ),
        (
            "no_initial_version",
            r#"{"source":{"no_initial_version":true}}"#,
            Ok("[]"),
        ),
        (
            "the given version is echoed (check-resource --from)",
            r#"{"source":{"no_initial_version":true},"version":{"version":"foo"}}"#,
            Ok(r#"[{"version":"foo"}]"#),
        ),
        (
            "with privileged",
            r#"{"source":{},"version":{"version":"foo","privileged":"true"}}"#,
            Ok(r#"[{"privileged":"true","version":"foo"}]"#),
        ),
        (
            "force_version wins over the given one",
            r#"{"source":{"force_version":"pinned"},"version":{"version":"foo"}}"#,
            Ok(r#"[{"version":"pinned"}]"#),
        ),
        (
            "check_failure",
            r#"{"source":{"check_failure":"nope"}}"#,
            Err("error: intentionally failing to check: nope\n"),
        ),
        (
            "check_delay",
            r#"{"source":{"check_delay":"10ms"}}"#,
            Ok(r#"[{"version":"mock"}]"#),
        ),
        (
            "a negative check_delay is none",
            r#"{"source":{"check_delay":"-5m"}}"#,
            Ok(r#"[{"version":"mock"}]"#),
        ),
        (
            "a malformed check_delay",
            r#"{"source":{"check_delay":"soon"}}"#,
            Err("error: source.check_delay: \"soon\" is not a duration"),
        ),
        (
            "log and mirror_self do not change check",
            r#"{"source":{"log":"hello","mirror_self":true}}"#,
            Ok(r#"[{"version":"mock"}]"#),
        ),
        (
            "hangar's versions with Concourse's",
            r#"{"source":{"versions":["a"],"force_version":"b"}}"#,
            Err("error: source.versions (hangar's list of versions) cannot be given with force_version"),
        ),
        (
            "an unknown field",
            r#"{"source":{"intial_version":"x"}}"#,
            Err("error: invalid request: source: unknown field `intial_version`, expected one of"),
        ),
        (
            "an unknown version field",
            r#"{"source":{},"version":{"version":"a","ref":"b"}}"#,
            Err("unknown field `ref`, expected `version` or `privileged`"),
        ),
        (
            "a version that is not a string",
            r#"{"source":{"initial_version":1}}"#,
            Err("source.initial_version: invalid type: integer `1`, expected a string"),
        ),
        (
            "a version with a control character",
            "{\"source\":{\"force_version\":\"a\\u0007\"}}",
            Err("error: source.force_version: \"a\\u{7}\" is not a version"),
        ),
    ];
    let mut failures = Vec::new();
    for (what, stdin, want) in cases {
        let (code, out, err) = call("mock", "check", &[], stdin);
        let ok = match want {
            Ok(answer) => code == 0 && out == format!("{answer}\n"),
            Err(fragment) => code == 1 && out.is_empty() && err.contains(fragment),
        };
        if !ok {
            failures.push(format!("{what}: {stdin}\n  got {code} {out:?} {err:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // log goes to stderr.
    let (_, _, err) = call("mock", "check", &[], r#"{"source":{"log":"hello"}}"#);
    assert_eq!(err, "mock: hello\n");
}

#[test]
fn mock_in_follows_concourse_s_mock() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("dest");
    let stdin = r#"{
        "source": {
            "create_files": {
                "file1.yml": "foo: bar\n",
                "/abs/inside.txt": "joined below dest",
                "sub//dir/./x.json": {"b": [1, "<&>"], "a": null},
                "vars.yml": "token: START_VARsecretEND_VAR",
                "replaced": "from source"
            },
            "files": {"hangar.txt": "own field"},
            "metadata": [{"name": "foo", "value": "bar"}, {"name": "baz", "value": "qux"}],
            "log": "fetching"
        },
        "version": {"version": "v1", "privileged": "true"},
        "params": {"create_files_via_params": {"replaced": "from params", "extra": 42}}
    }"#;
    let (code, out, err) = call("mock", "in", &[dest.to_str().unwrap()], stdin);
    assert_eq!(code, 0, "{err}");
    let answer: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({
            "version": {"version": "v1", "privileged": "true"},
            "metadata": [{"name": "foo", "value": "bar"}, {"name": "baz", "value": "qux"}],
        })
    );
    assert!(err.starts_with("mock: fetching\n"), "{err}");
    let read = |p: &str| std::fs::read_to_string(dest.join(p)).unwrap();
    let files: &[(&str, &str)] = &[
        ("version", "v1\n"),
        ("file1.yml", "foo: bar\n"),
        ("abs/inside.txt", "joined below dest"),
        (
            "sub/dir/x.json",
            r#"{"a":null,"b":[1,"\u003c\u0026\u003e"]}"#,
        ),
        ("vars.yml", "token: ((secret))"),
        ("replaced", "from params"),
        ("extra", "42"),
        ("hangar.txt", "own field"),
    ];
    for (path, content) in files {
        assert_eq!(read(path), *content, "{path}");
    }

    // Refusals, before anything is written.
    let refused: &[(&str, &str)] = &[
        (
            r#"{"source":{"mirror_self":true},"version":{"version":"v1"}}"#,
            "error: source.mirror_self: hangar's built-in mock runs as a program of the worker",
        ),
        (
            r#"{"source":{},"version":{"version":"v1"},"params":{"mirror_self_via_params":true}}"#,
            "error: params.mirror_self_via_params: hangar's built-in mock",
        ),
        (
            r#"{"source":{"create_files":{"a/../../out":"x"}},"version":{"version":"v1"}}"#,
            "error: source.create_files: \"a/../../out\" must not have '..' parts",
        ),
        (
            r#"{"source":{},"version":{"version":"v1"},"params":{"create_files_via_params":{"..":"x"}}}"#,
            "error: params.create_files_via_params: \"..\" must not have '..' parts",
        ),
        (
            r#"{"source":{"create_files":{"/":"x"}},"version":{"version":"v1"}}"#,
            "error: source.create_files: \"/\" names no file",
        ),
        (
            r#"{"source":{},"version":{"version":"v1"},"params":{"create_files":{}}}"#,
            "error: invalid request: params: unknown field `create_files`, expected \
             `mirror_self_via_params` or `create_files_via_params`",
        ),
        (
            r#"{"source":{"metadata":[{"name":"a"}]},"version":{"version":"v1"}}"#,
            "error: invalid request: source.metadata[0]: missing field `value`",
        ),
    ];
    for (stdin, fragment) in refused {
        let fresh = dir.path().join("fresh");
        let (code, out, err) = call("mock", "in", &[fresh.to_str().unwrap()], stdin);
        assert!(
            code == 1 && out.is_empty() && err.starts_with(fragment),
            "{stdin}: {code} {err}"
        );
        assert!(!fresh.exists(), "{stdin}");
    }
}

#[test]
fn mock_out_follows_concourse_s_mock() {
    let dir = tempfile::tempdir().unwrap();
    // The put's source dir: each input a link to its volume, as the worker
    // lays it out.
    let volume = dir.path().join("volume");
    std::fs::create_dir_all(volume.join("sub")).unwrap();
    std::fs::write(volume.join("sub/version"), "from-file\n").unwrap();
    std::fs::write(volume.join("big"), "x".repeat(5000)).unwrap();
    std::fs::write(dir.path().join("secret"), "outside").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret"), volume.join("escape")).unwrap();
    let src = dir.path().join("put");
    std::fs::create_dir(&src).unwrap();
    std::os::unix::fs::symlink(&volume, src.join("repo")).unwrap();
    let src = src.to_str().unwrap();
    let cases: &[(&str, Result<&str, &str>)] = &[
        (
            r#"{"source":{},"params":{"version":"v2"}}"#,
            Ok(r#"{"metadata":[],"version":{"version":"v2"}}"#),
        ),
        (
            // Read whole, newline and all, as Concourse's type reads it.
            r#"{"source":{"metadata":[{"name":"m","value":"1"}]},"params":{"file":"repo/sub/version"}}"#,
            Ok(r#"{"metadata":[{"name":"m","value":"1"}],"version":{"version":"from-file\n"}}"#),
        ),
        (
            r#"{"source":{},"params":{"version":"v3","file":"repo/sub/version"}}"#,
            Ok(r#"{"metadata":[],"version":{"version":"v3"}}"#),
        ),
        (
            r#"{"source":{}}"#,
            Err("error: no version specified: give params.version or params.file\n"),
        ),
        (
            r#"{"source":{},"params":{"file":"repo/missing"}}"#,
            Err("error: params.file: \"repo/missing\": No such file or directory"),
        ),
        (
            r#"{"source":{},"params":{"file":"repo/../../secret"}}"#,
            Err("error: params.file: \"repo/../../secret\" must not have '..' parts"),
        ),
        (
            r#"{"source":{},"params":{"file":"repo/escape"}}"#,
            Err("error: params.file: \"repo/escape\" leads out of its input through a link"),
        ),
        (
            r#"{"source":{},"params":{"file":"repo/sub"}}"#,
            Err("error: params.file: \"repo/sub\" is not a regular file"),
        ),
        (
            r#"{"source":{},"params":{"file":"repo/big"}}"#,
            Err("error: params.file: \"repo/big\" is larger than 4096 bytes"),
        ),
        (
            r#"{"source":{},"params":{"version":"v1","print_env":"yes"}}"#,
            Err("error: invalid request: params.print_env: invalid type: string \"yes\", expected a boolean"),
        ),
    ];
    let mut failures = Vec::new();
    for (stdin, want) in cases {
        let (code, out, err) = call("mock", "out", &[src], stdin);
        let ok = match want {
            Ok(answer) => code == 0 && out == format!("{answer}\n"),
            Err(fragment) => code == 1 && out.is_empty() && err.starts_with(fragment),
        };
        if !ok {
            failures.push(format!("{stdin}\n  got {code} {out:?} {err:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // print_env logs the action's environment (the test's own here).
    let (code, _, err) = call(
        "mock",
        "out",
        &[src],
        r#"{"source":{},"params":{"version":"v1","print_env":true}}"#,
    );
    assert_eq!(code, 0, "{err}");
    let path = std::env::var("PATH").unwrap_or_default();
    assert!(err.contains(&format!("env: PATH={path}\n")), "{err}");
}

#[test]
fn a_failed_write_of_the_answer_is_an_error() {
    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::Error::new(
                std::io::ErrorKind::BrokenPipe,
                "closed",
            ))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut err = Vec::new();
    let code = run(
        "mock",
        "check",
        &[],
        &b"{\"source\":{}}"[..],
        Broken,
        &mut err,
    );
    assert_eq!(code, 1);
    assert_eq!(
        String::from_utf8(err).unwrap(),
        "error: write the answer: closed\n"
    );
}

mod registry_image {
    //! The `registry-image` type against a real registry (Debian's
    //! `docker-registry`, started per test; see `hangar_images::testing`).

    use super::*;
    use hangar_images::testing::{
        config_json, Compression, Registry, TarBuilder, TestImage, TestLayer,
    };

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn image() -> TestImage {
        TestImage {
            config: config_json(&["PATH=/bin", "HOME=/root"], "nobody", "amd64"),
            layers: vec![
                TestLayer::new(
                    TarBuilder::new()
                        .dir("bin/")
                        .file_mode("bin/tool", 0o755, b"tool")
                        .file("old", b"old")
                        .finish(),
                    Compression::Gzip,
                ),
                TestLayer::new(
                    TarBuilder::new().file(".wh.old", b"").finish(),
                    Compression::Zstd,
                ),
            ],
            docker: false,
        }
    }

    #[test]
    fn docker_registry_check_then_in_writes_concourses_layout() {
        let rt = runtime();
        let registry = rt.block_on(Registry::start_with_auth("u", "p"));
        let (pushed, _) = rt.block_on(registry.push_image("tools", Some("1.0"), &image()));
        let source = serde_json::json!({
            "repository": format!("{}/tools", registry.addr),
            "tag": "1.0",
            "username": "u",
            "password": "p",
            "insecure": true,
        });

        let request = serde_json::json!({"source": source, "version": null}).to_string();
        let (code, out, err) = call("registry-image", "check", &[], &request);
        assert_eq!(code, 0, "{err}");
        let answer: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(answer, serde_json::json!([{"digest": pushed}]));

        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("dest");
        let request = serde_json::json!({
            "source": source,
            "version": {"digest": pushed},
            "params": {"format": "rootfs"},
        })
        .to_string();
        let (code, out, err) = call("registry-image", "in", &[dest.to_str().unwrap()], &request);
        assert_eq!(code, 0, "{err}");
        let answer: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            answer,
            serde_json::json!({
                "version": {"digest": pushed},
                "metadata": [
                    {"name": "repository", "value": format!("{}/tools", registry.addr)},
                    {"name": "tag", "value": "1.0"},
                ],
            })
        );
        assert_eq!(
            std::fs::read(dest.join("rootfs/bin/tool")).unwrap(),
            b"tool"
        );
        assert!(!dest.join("rootfs/old").exists(), "the whiteout removed it");
        assert_eq!(
            std::fs::read_to_string(dest.join("metadata.json")).unwrap(),
            "{\"cmd\":null,\"entrypoint\":null,\"env\":[\"PATH=/bin\",\"HOME=/root\"],\"user\":\"nobody\"}\n"
        );
        assert_eq!(
            std::fs::read_to_string(dest.join("digest")).unwrap(),
            pushed
        );
        assert_eq!(std::fs::read_to_string(dest.join("tag")).unwrap(), "1.0");
        // Progress goes to the log, the answer alone to stdout.
        assert!(
            err.contains("registry-image: manifest sha256:") && err.contains("2 layer(s)"),
            "{err}"
        );
        assert!(err.contains("registry-image: layer 1/2"), "{err}");
        assert!(err.contains("applied (zstd"), "{err}");
        assert!(!err.contains("\"p\""), "{err}");

        // A wrong password: the configuration's error, said so.
        let mut wrong = source.clone();
        wrong["password"] = "nope".into();
        let request = serde_json::json!({"source": wrong}).to_string();
        let (code, _, err) = call("registry-image", "check", &[], &request);
        assert_eq!(code, 1);
        assert!(
            err.contains("401") && err.contains("(configuration or image error)"),
            "{err}"
        );
    }

    #[test]
    fn docker_registry_unreachable_is_said_to_be_infrastructure_and_attempted_again() {
        let port = hangar_images::testing::free_port();
        let request = serde_json::json!({
            "source": {"repository": format!("127.0.0.1:{port}/x"), "insecure": true},
        })
        .to_string();
        let (code, out, err) = call("registry-image", "check", &[], &request);
        // Said to the worker by its exit code: tried on another worker.
        assert_eq!(code, crate::EXIT_INFRASTRUCTURE);
        assert_eq!(out, "");
        assert!(
            err.contains("unreachable") && err.contains("(infrastructure error)"),
            "{err}"
        ); // Attempted three times, as Concourse's type retries transient
           // errors.
        assert!(
            err.contains("attempt 1 of 3 failed") && err.contains("attempt 2 of 3 failed"),
            "{err}"
        );
        assert!(!err.contains("attempt 3 of 3 failed"), "{err}");
    }

    #[test]
    fn unsupported_fields_are_refused_by_name() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let cases: &[(&str, &[&str], String, &str)] = &[
            (
                "check",
                &[],
                r#"{"source":{"repository":"r","aws_region":"eu"}}"#.into(),
                "source.aws_region: registry-image in hangar does not support it (ECR",
            ),
            (
                "check",
                &[],
                r#"{"source":{"repository":"r","tag_regex":".*"}}"#.into(),
                "source.tag_regex",
            ),
            (
                "check",
                &[],
                r#"{"source":{"repository":"r","colour":1}}"#.into(),
                "unknown field `colour`",
            ),
            (
                "check",
                &[],
                r#"{"source":{"tag":"x"}}"#.into(),
                "missing field `repository`",
            ),
            (
                "check",
                &[],
                r#"{"source":{"repository":"r","tag":""}}"#.into(),
                "source.tag: must not be empty",
            ),
            (
                "in",
                &["/nonexistent-dest"],
                format!(
                    r#"{{"source":{{"repository":"r"}},"version":{{"digest":"{digest}"}},"params":{{"format":"oci"}}}}"#
                ),
                "params.format: \"oci\" is not supported",
            ),
            (
                "in",
                &["/nonexistent-dest"],
                format!(
                    r#"{{"source":{{"repository":"r"}},"version":{{"digest":"{digest}"}},"params":{{"skip_download":true}}}}"#
                ),
                "unknown field `skip_download`",
            ),
            (
                "out",
                &["/tmp"],
                r#"{"source":{"repository":"r"}}"#.into(),
                "out (pushing an image) is not supported",
            ),
        ];
        for (action, args, stdin, expected) in cases {
            let (code, out, err) = call("registry-image", action, args, stdin);
            assert_eq!(code, 1, "{stdin}");
            assert_eq!(out, "");
            assert!(err.contains(expected), "{stdin}: {err}");
        }
    }
}

mod docker_image {
    //! The `docker-image` type against a real registry: what Concourse's
    //! docker-image writes, fetched as registry-image fetches.

    use super::*;
    use hangar_images::testing::{
        config_json, Compression, Registry, TarBuilder, TestImage, TestLayer,
    };

    fn image() -> TestImage {
        TestImage {
            config: config_json(&["PATH=/bin"], "nobody", "amd64"),
            layers: vec![TestLayer::new(
                TarBuilder::new()
                    .dir("bin/")
                    .file_mode("bin/tool", 0o755, b"tool")
                    .finish(),
                Compression::Gzip,
            )],
            docker: true,
        }
    }

    #[test]
    fn docker_registry_check_then_in_writes_the_image_and_docker_images_files() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let registry = rt.block_on(Registry::start_with_auth("u", "p"));
        let (pushed, _) = rt.block_on(registry.push_image("tools", Some("1.0"), &image()));
        // As docker-image's users write it: the tag a YAML number, the
        // registry insecure through a CIDR.
        let source = serde_json::json!({
            "repository": format!("{}/tools", registry.addr),
            "tag": 1.0,
            "username": "u",
            "password": "p",
            "insecure_registries": ["127.0.0.0/8"],
        });
        let request = serde_json::json!({"source": source}).to_string();
        let (code, out, err) = call("docker-image", "check", &[], &request);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            serde_json::from_str::<Value>(&out).unwrap(),
            serde_json::json!([{"digest": pushed}])
        );

        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("dest");
        let request = serde_json::json!({
            "source": source,
            "version": {"digest": pushed},
            "params": {"rootfs": true},
        })
        .to_string();
        let (code, out, err) = call("docker-image", "in", &[dest.to_str().unwrap()], &request);
        assert_eq!(code, 0, "{err}");
        let answer: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(answer["version"], serde_json::json!({"digest": pushed}));
        assert_eq!(
            std::fs::read(dest.join("rootfs/bin/tool")).unwrap(),
            b"tool"
        );
        assert!(std::fs::read_to_string(dest.join("metadata.json"))
            .unwrap()
            .contains("\"user\":\"nobody\""));
        assert_eq!(
            std::fs::read_to_string(dest.join("digest")).unwrap(),
            pushed
        );
        assert_eq!(std::fs::read_to_string(dest.join("tag")).unwrap(), "1.0");
        let image_id = std::fs::read_to_string(dest.join("image-id")).unwrap();
        assert!(
            image_id.starts_with("sha256:") && image_id != pushed,
            "the config's digest, not the manifest's: {image_id}"
        );
        // rootfs.tar holds the same tree.
        let mut names = Vec::new();
        let mut archive = tar::Archive::new(std::fs::File::open(dest.join("rootfs.tar")).unwrap());
        for entry in archive.entries().unwrap() {
            names.push(entry.unwrap().path().unwrap().display().to_string());
        }
        assert!(names.iter().any(|n| n.ends_with("bin/tool")), "{names:?}");

        // skip_download: the names alone, no image.
        let light = dir.path().join("light");
        let request = serde_json::json!({
            "source": source,
            "version": {"digest": pushed},
            "params": {"skip_download": true},
        })
        .to_string();
        let (code, _, err) = call("docker-image", "in", &[light.to_str().unwrap()], &request);
        assert_eq!(code, 0, "{err}");
        assert_eq!(
            std::fs::read_to_string(light.join("digest")).unwrap(),
            pushed
        );
        assert!(!light.join("rootfs").exists());

        // Without the registry named insecure, TLS is asked of a plain
        // HTTP registry and fails.
        let mut secure = source.clone();
        secure
            .as_object_mut()
            .unwrap()
            .remove("insecure_registries");
        let request = serde_json::json!({"source": secure}).to_string();
        let (code, _, _) = call("docker-image", "check", &[], &request);
        assert_ne!(code, 0);
    }

    #[test]
    fn unsupported_fields_are_refused_by_name_and_nothing_is_written() {
        let digest = format!("sha256:{}", "a".repeat(64));
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("dest");
        let d = dest.to_str().unwrap();
        let cases: &[(&str, &[&str], String, &str)] = &[
            (
                "check",
                &[],
                r#"{"source":{"repository":"r","aws_access_key_id":"k"}}"#.into(),
                "source.aws_access_key_id: docker-image in hangar does not support it (ECR",
            ),
            (
                "check",
                &[],
                r#"{"source":{"repository":"r","email":"a@b"}}"#.into(),
                "source.email",
            ),
            (
                "check",
                &[],
                r#"{"source":{"repository":"r","insecure_registries":["nonsense/x"]}}"#.into(),
                "neither host[:port] nor a CIDR",
            ),
            (
                "check",
                &[],
                r#"{"source":{"repository":"r","tag":[1]}}"#.into(),
                "source.tag: must be a string",
            ),
            (
                "check",
                &[],
                r#"{"source":{"repository":"r","ca_certs":["PEM"]}}"#.into(),
                "source.ca_certs",
            ),
            (
                "in",
                &[d],
                format!(
                    r#"{{"source":{{"repository":"r"}},"version":{{"digest":"{digest}"}},"params":{{"save":true}}}}"#
                ),
                "params.save",
            ),
            (
                "in",
                &[d],
                format!(
                    r#"{{"source":{{"repository":"r"}},"version":{{"digest":"{digest}"}},"params":{{"load":true}}}}"#
                ),
                "unknown field `load`",
            ),
            (
                "out",
                &["/tmp"],
                r#"{"source":{"repository":"r"},"params":{"build":"."}}"#.into(),
                "out (building and pushing with a Docker daemon) is not supported",
            ),
        ];
        for (action, args, stdin, expected) in cases {
            let (code, out, err) = call("docker-image", action, args, stdin);
            assert_eq!(code, 1, "{stdin}");
            assert_eq!(out, "");
            assert!(err.contains(expected), "{stdin}: {err}");
            assert!(!dest.join("rootfs").exists(), "{stdin}");
        }
    }
}
