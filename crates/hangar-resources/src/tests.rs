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
            "error: unknown resource type \"svn\" (known: git, mock)\n",
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
            "error: invalid request: source: unknown field `branchh`, expected `uri` or `branch` at line 1 column 31\n",
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
            "{\"source\":{\"uri\":\"/r\"},\"version\":{\"ref\":\"abcd\"},\"params\":{\"depth\":1}}",
            "error: invalid request: params: unknown field `depth`, there are no fields at line 1 column 65\n",
        ),
        (
            "git",
            "out",
            &["/tmp"],
            "{\"source\":{\"uri\":\"/r\"}}",
            "error: git: out (pushing) is not supported yet\n",
        ),
        // mock
        (
            "mock",
            "check",
            &[],
            "{\"source\":{\"version\":[\"v1\"]}}",
            "error: invalid request: source: unknown field `version`, expected one of `versions`, `files`, `fail` at line 1 column 20\n",
        ),
        (
            "mock",
            "check",
            &[],
            "{\"source\":{\"versions\":[]}}",
            "error: source.versions: must not be empty (leave it out for [\"v1\"])\n",
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
            "error: source.files: \"../escape\" must not have '..', '.' or empty parts\n",
        ),
        (
            "mock",
            "in",
            &["/nonexistent/dest"],
            "{\"source\":{\"files\":{\"/etc/passwd\":\"x\"}},\"version\":{\"version\":\"v1\"}}",
            "error: source.files: \"/etc/passwd\" must be a relative path\n",
        ),
        (
            "mock",
            "in",
            &["/nonexistent/dest"],
            "{\"source\":{\"files\":{\"a//b\":\"x\"}},\"version\":{\"version\":\"v1\"}}",
            "error: source.files: \"a//b\" must not have '..', '.' or empty parts\n",
        ),
        (
            "mock",
            "in",
            &["/nonexistent/dest"],
            "{\"source\":{\"files\":{\"version\":\"x\"}},\"version\":{\"version\":\"v1\"}}",
            "error: source.files: \"version\" is the file in writes the version to; choose another name\n",
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
        (r#"{"source":{}}"#.to_string(), r#"[{"version":"v1"}]"#),
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
            "metadata": [{"name": "version", "value": "v7"}],
        })
    );
    assert_eq!(std::fs::read_to_string(dest.join("version")).unwrap(), "v7");
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
            r#"{"source":{}}"#,
            r#"{"metadata":[],"version":{"version":"v1"}}"#,
        ),
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
            (code, out.as_str(), err.as_str()),
            (0, format!("{expected}\n").as_str(), ""),
            "{stdin}"
        );
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
