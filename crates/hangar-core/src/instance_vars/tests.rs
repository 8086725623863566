use super::*;
use serde_json::json;

#[test]
fn references_parse_as_fly_writes_them() {
    let cases: &[(&str, &str, Value)] = &[
        ("p", "p", json!({})),
        ("p/branch:main", "p", json!({"branch": "main"})),
        ("p/a:1,b:true", "p", json!({"a": 1, "b": true})),
        ("p/a.b:c", "p", json!({"a": {"b": "c"}})),
        ("p/a.b:c,a.d:e", "p", json!({"a": {"b": "c", "d": "e"}})),
        ("p/v:\"x,y\"", "p", json!({"v": "x,y"})),
        ("p/v:[1,2]", "p", json!({"v": [1, 2]})),
        ("p/v:{k: 1, j: 2}", "p", json!({"v": {"j": 2, "k": 1}})),
        ("p/url:http://x/y", "p", json!({"url": "http://x/y"})),
        ("p/v:", "p", json!({"v": ""})),
    ];
    for (text, name, vars) in cases {
        let r = PipelineRef::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(r.name, *name, "{text}");
        assert_eq!(
            Value::Object(r.instance_vars.as_map().clone()),
            *vars,
            "{text}"
        );
        // What it displays reads back as the same reference.
        let again = PipelineRef::parse(&r.to_string()).unwrap();
        assert_eq!(again, r, "{text} -> {r}");
    }
}

#[test]
fn malformed_and_hostile_references_are_refused() {
    let long = format!("p/k:{}", "x".repeat(20_000));
    let many: Vec<String> = (0..40).map(|i| format!("k{i}:1")).collect();
    let many = format!("p/{}", many.join(","));
    let cases: &[(&str, &str)] = &[
        ("", "no pipeline name"),
        ("/a:b", "no pipeline name"),
        ("p/", "no instance vars"),
        ("p/a", "has no ':'"),
        ("p/:1", "must not be empty"),
        ("p/a..b:1", "must not be empty"),
        ("p/a b:1", "not allowed"),
        ("p/a\u{1b}:1", "not allowed"),
        ("p/v:\"unclosed", "unclosed"),
        ("p/v:[1,2", "unclosed"),
        ("p/v:]", "unbalanced"),
        ("p/v:{a: [}", "unclosed"),
        (&long, "more than"),
        (&many, "more than 32 keys"),
    ];
    for (text, want) in cases {
        let e = PipelineRef::parse(text).expect_err(text);
        assert!(e.0.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn flags_read_yaml_values_and_dotted_keys() {
    let v = InstanceVars::from_flags(&["a=1", "b=x", "c.d=true", "c.e=[1, 2]", "s='1'"]).unwrap();
    assert_eq!(
        Value::Object(v.as_map().clone()),
        json!({"a": 1, "b": "x", "c": {"d": true, "e": [1, 2]}, "s": "1"})
    );
    // A later flag replaces an earlier one.
    let v = InstanceVars::from_flags(&["a=1", "a=2"]).unwrap();
    assert_eq!(v.canonical_json(), r#"{"a":2}"#);
    // A value may hold '='.
    let v = InstanceVars::from_flags(&["q=a=b"]).unwrap();
    assert_eq!(v.canonical_json(), r#"{"q":"a=b"}"#);
    for (flag, want) in [
        ("novalue", "has no '='"),
        ("=1", "must not be empty"),
        ("a/b=1", "not allowed"),
        ("a=[", "not valid YAML"),
        ("a=x: y: z", "not valid YAML"),
    ] {
        let e = InstanceVars::from_flags(&[flag]).expect_err(flag);
        assert!(e.0.contains(want), "{flag}: {e}");
    }
}

#[test]
fn canonical_json_sorts_keys_and_bounds_hold() {
    let a = InstanceVars::from_json(r#"{"b":{"y":1,"x":2},"a":"s"}"#).unwrap();
    let b = InstanceVars::from_json(r#"{"a":"s","b":{"x":2,"y":1}}"#).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.canonical_json(), r#"{"a":"s","b":{"x":2,"y":1}}"#);
    assert_eq!(InstanceVars::empty().canonical_json(), "{}");

    let big = json!({"k": "x".repeat(MAX_JSON_BYTES)}).to_string();
    let deep = format!("{}1{}", "{\"a\":".repeat(12), "}".repeat(12));
    for (text, want) in [
        ("[1]", "must be an object, not an array"),
        ("\"s\"", "must be an object, not a string"),
        ("null", "must be an object, not null"),
        ("{", "not valid JSON"),
        (r#"{"":1}"#, "must not be empty"),
        (r#"{"a,b":1}"#, "not allowed"),
        (r#"{"a":{"b.c":1}}"#, "not allowed"),
        (big.as_str(), "more than 4096"),
        (deep.as_str(), "deeper than"),
    ] {
        let e = InstanceVars::from_json(text).expect_err(text);
        assert!(e.0.contains(want), "{text:.40}: {e}");
    }
    let huge = "x".repeat(100_000);
    assert!(InstanceVars::from_json(&huge).is_err());
}

#[test]
fn qualified_flags_split_at_the_last_slash() {
    let table: &[(&str, &str, &str, &str)] = &[
        ("p/j", "p", "{}", "j"),
        ("p/branch:main/j", "p", r#"{"branch":"main"}"#, "j"),
        (
            "p/branch:feature/x/j",
            "p",
            r#"{"branch":"feature/x"}"#,
            "j",
        ),
        ("p/a:1,b.c:true/r", "p", r#"{"a":1,"b":{"c":true}}"#, "r"),
    ];
    for (text, name, vars, job) in table {
        let (pipeline, rest) = split_qualified(text).expect(text);
        assert_eq!(pipeline.name, *name, "{text}");
        assert_eq!(pipeline.instance_vars.canonical_json(), *vars, "{text}");
        assert_eq!(rest, *job, "{text}");
    }
    for (text, want) in [
        ("nojob", "not PIPELINE/NAME"),
        ("p/", "nothing after"),
        ("../j", "pipeline"),
        ("/j", "no pipeline name"),
        ("p/novalue/j", "has no ':'"),
    ] {
        let e = split_qualified(text).expect_err(text);
        assert!(e.0.contains(want), "{text}: {e}");
    }
}

#[test]
fn a_stored_instance_reads_back_as_the_reference_fly_prints() {
    let r = PipelineRef::from_stored("p", r#"{"branch":"main","n":2}"#).unwrap();
    assert_eq!(r.to_string(), "p/branch:main,n:2");
    assert_eq!(PipelineRef::parse_checked(&r.to_string()).unwrap(), r);
    let plain = PipelineRef::from_stored("p", "{}").unwrap();
    assert_eq!(plain.to_string(), "p");
    assert!(PipelineRef::parse_checked("..").is_err());
    assert!(PipelineRef::from_stored("p", "[1]").is_err());
}
