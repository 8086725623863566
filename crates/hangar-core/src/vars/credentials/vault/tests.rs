use serde_json::json;

use super::*;

fn r(text: &str) -> VarRef {
    VarRef::parse(text).unwrap()
}

fn lookup(prefix: &str, templates: &[&str], shared: Option<&str>) -> VaultLookup {
    let templates: Vec<String> = templates.iter().map(|t| t.to_string()).collect();
    VaultLookup::new(prefix, &templates, shared).unwrap()
}

#[test]
fn the_default_templates_try_the_pipeline_path_then_the_team_path() {
    let l = lookup("/concourse", &[], None);
    assert_eq!(
        l.candidates("main", Some("deploy"), "token").unwrap(),
        ["concourse/main/deploy/token", "concourse/main/token"]
    );
}

#[test]
fn a_build_without_a_pipeline_skips_templates_naming_the_pipeline() {
    let l = lookup("/concourse/", &[], None);
    assert_eq!(
        l.candidates("main", None, "token").unwrap(),
        ["concourse/main/token"]
    );
}

#[test]
fn the_shared_path_is_tried_after_the_templates() {
    let l = lookup("/ci", &[], Some("shared"));
    assert_eq!(
        l.candidates("t", Some("p"), "n").unwrap(),
        ["ci/t/p/n", "ci/t/n", "ci/shared/n"]
    );
}

#[test]
fn custom_templates_are_tried_in_their_order_with_spaces_allowed_in_actions() {
    let l = lookup(
        "/kv",
        &[
            "/{{ .Team }}-x/{{.Secret}}",
            "/all/{{.Pipeline}}/{{.Secret}}",
        ],
        None,
    );
    assert_eq!(
        l.candidates("t", Some("p"), "n").unwrap(),
        ["kv/t-x/n", "kv/all/p/n"]
    );
    assert_eq!(l.candidates("t", None, "n").unwrap(), ["kv/t-x/n"]);
}

#[test]
fn templates_with_unknown_actions_or_parent_segments_are_refused() {
    let cases: &[(&str, &str)] = &[
        ("/{{.Team}}/{{.Foo}}", "{{.Foo}} is not one of"),
        ("/{{.Team}}/{{.Secret}", "unclosed {{"),
        ("/{{.Team}}}}", "}} without {{"),
        ("/../{{.Secret}}", "holds '..'"),
        ("  ", "is empty"),
    ];
    for (template, why) in cases {
        let err = VaultLookup::new("/concourse", &[template.to_string()], None).unwrap_err();
        assert!(err.contains(why), "{template}: {err}");
    }
    assert!(VaultLookup::new("/", &[], None)
        .unwrap_err()
        .contains("prefix"));
    assert!(VaultLookup::new("/c", &[], Some("../x"))
        .unwrap_err()
        .contains("shared path"));
}

#[test]
fn var_names_that_are_not_one_path_segment_are_refused() {
    let l = lookup("/concourse", &[], Some("shared"));
    let long = "x".repeat(254);
    for (team, name, why) in [
        ("main", "..", "is '.' or '..'"),
        ("main", "a/b", "path separator"),
        ("main", long.as_str(), "longer than 253"),
        ("a/b", "n", "path separator"),
    ] {
        let err = l.candidates(team, Some("p"), name).unwrap_err();
        assert!(err.contains(why), "{team} {name}: {err}");
    }
    assert!(l.candidates("main", Some(".."), "n").is_err());
}

#[test]
fn kv2_paths_put_data_after_the_mount() {
    assert_eq!(
        kv2_data_path("secret/main/x", "secret/").as_deref(),
        Some("secret/data/main/x")
    );
    assert_eq!(
        kv2_data_path("a/b/main/x", "a/b/").as_deref(),
        Some("a/b/data/main/x")
    );
    assert_eq!(kv2_data_path("secretx/main", "secret/"), None);
    assert_eq!(kv2_data_path("secret", "secret/"), None);
    assert_eq!(kv2_data_path("secret/x", ""), None);
}

#[test]
fn a_secret_is_its_value_key_or_else_all_its_keys() {
    let with_value = json!({"value": "v", "other": "o"});
    let with_value = with_value.as_object().unwrap();
    assert_eq!(secret_value(with_value, &r("s")).unwrap(), json!("v"));
    // Fields of a secret with a `value` key are the value's (Concourse).
    assert!(secret_value(with_value, &r("s.other"))
        .unwrap_err()
        .contains("non-map"));
    let nested = json!({"value": {"user": "u"}});
    assert_eq!(
        secret_value(nested.as_object().unwrap(), &r("s.user")).unwrap(),
        json!("u")
    );
    let map = json!({"user": "u", "password": "p"});
    let map = map.as_object().unwrap();
    assert_eq!(
        secret_value(map, &r("s")).unwrap(),
        json!({"user": "u", "password": "p"})
    );
    assert_eq!(secret_value(map, &r("s.password")).unwrap(), json!("p"));
    assert!(secret_value(map, &r("s.missing"))
        .unwrap_err()
        .contains("missing field 'missing'"));
}
