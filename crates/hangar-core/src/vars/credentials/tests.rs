use std::collections::BTreeMap;

use serde_json::json;

use super::*;
use crate::vars::{find_refs, interpolate_with};

fn r(text: &str) -> VarRef {
    VarRef::parse(text).unwrap()
}

#[test]
fn var_references_parse_as_concourse_parses_them() {
    let cases: &[(&str, Option<&str>, &str, &[&str])] = &[
        ("name", None, "name", &[]),
        ("name.field", None, "name", &["field"]),
        ("name.field.sub", None, "name", &["field", "sub"]),
        ("\"quoted.name\".field", None, "quoted.name", &["field"]),
        ("source:name.field", Some("source"), "name", &["field"]),
        ("source:\"a:b\".c", Some("source"), "a:b", &["c"]),
    ];
    for (text, source, path, fields) in cases {
        let parsed = r(text);
        assert_eq!(parsed.source.as_deref(), *source, "{text}");
        assert_eq!(parsed.path, *path, "{text}");
        assert_eq!(parsed.fields, *fields, "{text}");
    }
    for bad in ["name.", ".x", "s:", "\"s\":x", "a..b"] {
        assert!(VarRef::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn path_managers_try_pipeline_then_team() {
    assert_eq!(
        vault_paths("/concourse", "main", Some("deploy"), "token").unwrap(),
        ["/concourse/main/deploy/token", "/concourse/main/token"]
    );
    assert_eq!(
        vault_paths("/concourse/", "main", None, "token").unwrap(),
        ["/concourse/main/token"]
    );
    assert_eq!(
        path_candidates("t", Some("p"), "n").unwrap(),
        [vec!["t", "p", "n"], vec!["t", "n"]]
    );
}

#[test]
fn names_that_would_leave_their_directory_are_refused() {
    let cases: &[(&str, Option<&str>, &str, &str)] = &[
        (
            "main",
            None,
            "..",
            "var \"..\" is '.' or '..': it cannot name a credential",
        ),
        (
            "main",
            None,
            ".",
            "var \".\" is '.' or '..': it cannot name a credential",
        ),
        (
            "main",
            None,
            "a/b",
            "var \"a/b\" holds a path separator: it cannot name a credential",
        ),
        (
            "main",
            None,
            "a\\b",
            "var \"a\\\\b\" holds a path separator: it cannot name a credential",
        ),
        (
            "main",
            None,
            "",
            "var \"\" is empty: it cannot name a credential",
        ),
        (
            "main",
            None,
            "a\nb",
            "var \"a\\nb\" holds a control character: it cannot name a credential",
        ),
        (
            "..",
            None,
            "x",
            "team \"..\" is '.' or '..': it cannot name a credential",
        ),
        (
            "main",
            Some("../x"),
            "x",
            "pipeline \"../x\" holds a path separator: it cannot name a credential",
        ),
    ];
    for (team, pipeline, name, want) in cases {
        assert_eq!(
            path_candidates(team, *pipeline, name).unwrap_err(),
            *want,
            "{team} {pipeline:?} {name}"
        );
    }
    let long = "x".repeat(254);
    assert!(path_candidates("main", None, &long)
        .unwrap_err()
        .ends_with("is longer than 253 bytes: it cannot name a credential"));
    assert!(path_candidates("main", None, &"x".repeat(253)).is_ok());
}

#[test]
fn kubernetes_tries_the_pipeline_secret_then_the_team_secret() {
    let secret = |ns: &str, name: &str| KubeSecret {
        namespace: ns.into(),
        name: name.into(),
    };
    assert_eq!(
        kube_candidates(DEFAULT_NAMESPACE_PREFIX, "main", Some("deploy"), "token").unwrap(),
        [
            secret("concourse-main", "deploy.token"),
            secret("concourse-main", "token")
        ]
    );
    assert_eq!(
        kube_candidates("ci-", "main", None, "token").unwrap(),
        [secret("ci-main", "token")]
    );
    for (prefix, team, name, want) in [
        ("concourse-", "main", "Token", "var \"Token\": secret name \"Token\" is not a valid Kubernetes secret name (lowercase letters, digits, '-' and '.')"),
        ("concourse-", "main", "a/b", "var \"a/b\": secret name \"a/b\" is not a valid Kubernetes secret name (lowercase letters, digits, '-' and '.')"),
        ("concourse-", "main", "..", "var \"..\": secret name \"..\" is not a valid Kubernetes secret name (lowercase letters, digits, '-' and '.')"),
        ("concourse-", "main", "a?x=1", "var \"a?x=1\": secret name \"a?x=1\" is not a valid Kubernetes secret name (lowercase letters, digits, '-' and '.')"),
        ("concourse-", "Main", "x", "namespace \"concourse-Main\" (prefix \"concourse-\" and team \"Main\") is not a valid Kubernetes namespace name"),
        ("con/", "main", "x", "namespace \"con/main\" (prefix \"con/\" and team \"main\") is not a valid Kubernetes namespace name"),
    ] {
        assert_eq!(kube_candidates(prefix, team, None, name).unwrap_err(), want);
    }
}

#[test]
fn a_kubernetes_secret_gives_its_value_key_or_its_fields() {
    let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let with_value = data(&[("value", "s3cret"), ("user", "admin")]);
    let no_value = data(&[("user", "admin"), ("password", "pw")]);
    assert_eq!(
        kube_value(&with_value, &r("creds")).unwrap(),
        json!("s3cret")
    );
    assert_eq!(
        kube_value(&with_value, &r("creds.user")).unwrap(),
        json!("admin")
    );
    assert_eq!(
        kube_value(&no_value, &r("creds")).unwrap(),
        json!({"user": "admin", "password": "pw"})
    );
    assert_eq!(
        kube_value(&no_value, &r("creds.password")).unwrap(),
        json!("pw")
    );
    assert_eq!(
        kube_value(&no_value, &r("creds.token")).unwrap_err(),
        "missing field 'token' in var: creds.token"
    );
    assert_eq!(
        kube_value(&no_value, &r("creds.user.x")).unwrap_err(),
        "cannot access field 'x' of non-map value (string) from var: creds.user.x"
    );
}

#[test]
fn a_file_is_the_value_or_a_mapping_of_fields() {
    assert_eq!(file_value("s3cret\n", &r("a")).unwrap(), json!("s3cret"));
    assert_eq!(file_value("s3cret\r\n", &r("a")).unwrap(), json!("s3cret"));
    assert_eq!(
        file_value("line1\nline2\n\n", &r("a")).unwrap(),
        json!("line1\nline2\n")
    );
    assert_eq!(file_value("user: x\n", &r("a")).unwrap(), json!("user: x"));
    assert_eq!(
        file_value("user: x\npass: 'y'\n", &r("a.pass")).unwrap(),
        json!("y")
    );
    assert_eq!(
        file_value(r#"{"user": "x", "n": {"deep": 3}}"#, &r("a.n.deep")).unwrap(),
        json!(3)
    );
    assert_eq!(
        file_value("user: x\n", &r("a.pass")).unwrap_err(),
        "missing field 'pass' in var: a.pass"
    );
    assert_eq!(
        file_value("just text", &r("a.pass")).unwrap_err(),
        "var a.pass: its file is not a YAML or JSON mapping, so it has no fields"
    );
    assert!(file_value("a: [", &r("a.x"))
        .unwrap_err()
        .starts_with("var a.x: its file is not a YAML or JSON mapping, so it has no fields: "));
}

#[test]
fn resolved_vars_interpolate_and_list_their_secrets() {
    let template = json!({"k": "((creds.user)):((pw))", "whole": "((map))", "left": "((nope))"});
    let refs = find_refs(&template).unwrap();
    assert_eq!(
        refs.iter().map(ToString::to_string).collect::<Vec<_>>(),
        ["creds.user", "map", "nope", "pw"]
    );
    let mut resolved = Resolved::default();
    resolved.insert(&r("creds.user"), json!("admin"));
    resolved.insert(&r("pw"), json!("hunter22"));
    resolved.insert(&r("map"), json!({"a": ["x1", 42, true]}));
    let err = interpolate_with(&template, &resolved).unwrap_err();
    assert_eq!(err.to_string(), "undefined vars: nope");
    resolved.insert(&r("nope"), json!("yes"));
    assert_eq!(
        interpolate_with(&template, &resolved).unwrap(),
        json!({"k": "admin:hunter22", "whole": {"a": ["x1", 42, true]}, "left": "yes"})
    );
    resolved.insert_invalid(
        &r("creds.nope"),
        "missing field 'nope' in var: creds.nope".into(),
    );
    assert_eq!(
        interpolate_with(&json!(["((creds.nope))", "((other))"]), &resolved)
            .unwrap_err()
            .to_string(),
        "undefined vars: other; missing field 'nope' in var: creds.nope"
    );
    let mut secrets = resolved.secret_values();
    secrets.sort();
    assert_eq!(secrets, ["42", "admin", "hunter22", "x1", "yes"]);
    assert_eq!(
        find_refs(&json!(["((a..b))", "((ok))"])).unwrap_err(),
        ["invalid var 'a..b': empty field"]
    );
}
