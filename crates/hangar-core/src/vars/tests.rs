use super::*;
use serde_json::json;

fn vars(v: Value) -> Vars {
    match v {
        Value::Object(m) => Vars::new(vec![m]),
        other => panic!("not a map: {other}"),
    }
}

fn ok(template: Value, v: Value) -> Value {
    interpolate(&template, &vars(v)).unwrap_or_else(|e| panic!("{template}: {e}"))
}

fn err(template: Value, v: Value) -> String {
    match interpolate(&template, &vars(v)) {
        Ok(out) => panic!("{template} interpolated to {out}"),
        Err(e) => e.to_string(),
    }
}

/// text, source, path, fields, spelled back
type RefCase<'a> = (&'a str, Option<&'a str>, &'a str, &'a [&'a str], &'a str);

#[test]
fn references_parse_as_concourse_parses_them() {
    let cases: &[RefCase] = &[
        ("key", None, "key", &[], "key"),
        (
            "key.sub.deeper",
            None,
            "key",
            &["sub", "deeper"],
            "key.sub.deeper",
        ),
        (
            "src:key.field",
            Some("src"),
            "key",
            &["field"],
            "src:key.field",
        ),
        (".:local", Some("."), "local", &[], ".:local"),
        (
            "foo:\"with.dot:colon\".buzz",
            Some("foo"),
            "with.dot:colon",
            &["buzz"],
            "foo:\"with.dot:colon\".buzz",
        ),
        ("\"with:colon\"", None, "with:colon", &[], "\"with:colon\""),
        (
            "secret-name.\"secret.field\"",
            None,
            "secret-name",
            &["secret.field"],
            "secret-name.\"secret.field\"",
        ),
        ("/key/foo", None, "/key/foo", &[], "\"/key/foo\""),
        ("Ω", None, "Ω", &[], "Ω"),
    ];
    for &(text, source, path, fields, spelled) in cases {
        let r = VarRef::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(r.source.as_deref(), source, "{text}");
        assert_eq!(r.path, path, "{text}");
        assert_eq!(r.fields, fields, "{text}");
        assert_eq!(r.to_string(), spelled, "{text}");
    }
    let bad = [
        ("a..b", "invalid var 'a..b': empty field"),
        ("a.", "invalid var 'a.': empty field"),
        ("src:", "invalid var 'src:': empty field"),
        ("\"\"", "invalid var '\"\"': empty field"),
        (
            "\"s\"x:y",
            "invalid var '\"s\"x:y': source must not be quoted",
        ),
    ];
    for (text, message) in bad {
        assert_eq!(VarRef::parse(text).unwrap_err(), message, "{text}");
    }
}

#[test]
fn the_scanner_finds_what_concourses_regular_expression_finds() {
    let cases: &[(&str, &[&str])] = &[
        ("((a))", &["a"]),
        ("x((a))y((b.c))z", &["a", "b.c"]),
        ("(((a)))", &["a"]),
        ("((((a))", &["a"]),
        ("(()", &[]),
        ("(())", &[]),
        ("((a)", &[]),
        ("((a", &[]),
        ("((", &[]),
        ("(( a ))", &[]),
        ("((a b))", &[]),
        ("((a))))", &["a"]),
        ("((a))((b))", &["a", "b"]),
        ("((src:\"x.y\".z))", &["src:\"x.y\".z"]),
        ("((foo@bar.com))", &["foo@bar.com"]),
        ("((ключ))", &["ключ"]),
        ("é((a))é", &["a"]),
        ("((a$b))", &[]),
        ("((a\n))", &[]),
    ];
    for &(s, want) in cases {
        let got: Vec<&str> = scan(s).iter().map(|f| f.inner).collect();
        assert_eq!(got, want, "{s:?}");
    }
}

#[test]
fn a_whole_value_var_keeps_its_type() {
    let v = json!({
        "s": "text", "n": 42, "f": 2.5, "t": true, "z": null,
        "l": [1, "two"], "m": {"k": {"deep": [1, 2]}},
    });
    let cases = [
        ("((s))", json!("text")),
        ("((n))", json!(42)),
        ("((f))", json!(2.5)),
        ("((t))", json!(true)),
        ("((z))", json!(null)),
        ("((l))", json!([1, "two"])),
        ("((m))", json!({"k": {"deep": [1, 2]}})),
        ("((m.k))", json!({"deep": [1, 2]})),
        ("((m.k.deep))", json!([1, 2])),
    ];
    for (template, want) in cases {
        assert_eq!(ok(json!(template), v.clone()), want, "{template}");
        // Inside a config too, not only at the top.
        assert_eq!(
            ok(json!({"params": {"X": template}}), v.clone()),
            json!({"params": {"X": want}}),
            "{template}"
        );
    }
}

#[test]
fn a_var_inside_a_longer_string_is_spliced_as_text() {
    let v = json!({"ip": "10.0.0.1", "port": 4222, "pi": 3.5, "user": "nats",
                   "password": "secret", "empty": ""});
    let cases = [
        ("https://((ip))", "https://10.0.0.1"),
        ("((ip)):((port))", "10.0.0.1:4222"),
        (
            "nats://((user)):((password))@((ip)):4222",
            "nats://nats:secret@10.0.0.1:4222",
        ),
        ("((user)):((user))", "nats:nats"),
        ("v((pi))", "v3.5"),
        ("a((empty))b", "ab"),
        (" ((ip))", " 10.0.0.1"),
        ("(((ip)))", "(10.0.0.1)"),
        ("no vars (( here ))", "no vars (( here ))"),
        ("unterminated ((ip", "unterminated ((ip"),
    ];
    for (template, want) in cases {
        assert_eq!(ok(json!(template), v.clone()), json!(want), "{template}");
    }
}

#[test]
fn only_strings_and_numbers_can_be_spliced() {
    let v = json!({"t": true, "z": null, "l": [1], "m": {"a": 1}});
    for (name, kind) in [("t", "bool"), ("z", "null"), ("l", "list"), ("m", "map")] {
        let e = err(json!(format!("x-(({name}))")), v.clone());
        assert!(
            e.starts_with(&format!(
                "cannot interpolate non-primitive value ({kind}) from var: {name}"
            )),
            "{e}"
        );
    }
}

#[test]
fn map_keys_are_interpolated() {
    let v = json!({"iaas": "aws", "n": 7, "t": true, "z": null, "m": {"a": 1}});
    assert_eq!(
        ok(
            json!({"((iaas))_cpi": "props", "((n))": 1, "((t))": 2, "((z))": 3}),
            v.clone()
        ),
        json!({"aws_cpi": "props", "7": 1, "true": 2, "null": 3})
    );
    assert_eq!(
        err(json!({"((m))": 1}), v.clone()),
        "cannot use a map as a map key, from var: m"
    );
    assert_eq!(
        err(json!({"((iaas))": 1, "aws": 2}), v.clone()),
        "two keys of one map become \"aws\" once vars are interpolated"
    );
    assert_eq!(err(json!({"((nope))": 1}), v), "undefined vars: nope");
}

#[test]
fn every_unresolved_var_is_named_in_one_error() {
    let template = json!({
        "((key4))_array": ["((key_in_array))"],
        "((key))": "((key2))",
        "((key3))": 2,
        "dup-key": "((key3))",
        "nested": {"deep": "x-((b.c))-((src:name.field))"},
    });
    assert_eq!(
        err(template, json!({"key3": "foo"})),
        "undefined vars: b.c, key, key2, key4, key_in_array, src:name.field"
    );
}

#[test]
fn other_problems_are_reported_with_the_undefined_vars() {
    let v = json!({"key": {"subkey": "e"}, "s": "text"});
    let cases = [
        (
            json!("((key.nope))"),
            "missing field 'nope' in var: key.nope",
        ),
        (
            json!("((s.field))"),
            "cannot access field 'field' of non-map value (string) from var: s.field",
        ),
        (json!("((a..b))"), "invalid var 'a..b': empty field"),
        (
            json!(["((key.nope))", "((gone))", "((a..b))"]),
            "undefined vars: gone; invalid var 'a..b': empty field; missing field 'nope' in var: key.nope",
        ),
        (json!("((gone.sub))"), "undefined vars: gone.sub"),
    ];
    for (template, want) in cases {
        assert_eq!(err(template.clone(), v.clone()), want, "{template}");
    }
}

#[test]
fn the_first_source_with_the_name_answers() {
    let vars = Vars::new(vec![
        json!({"a": "flag", "m": {"x": 1}})
            .as_object()
            .unwrap()
            .clone(),
        json!({"a": "file", "b": "file", "m": {"y": 2}})
            .as_object()
            .unwrap()
            .clone(),
    ]);
    assert_eq!(
        interpolate(&json!(["((a))", "((b))", "((m.x))"]), &vars).unwrap(),
        json!(["flag", "file", 1])
    );
    // The first source has `m`: a field missing there is an error, not a
    // reason to look in the next source (as Concourse's MultiVars).
    assert_eq!(
        interpolate(&json!("((m.y))"), &vars)
            .unwrap_err()
            .to_string(),
        "missing field 'y' in var: m.y"
    );
    // No source is named: `((src:a))` is undefined even though `a` is given.
    assert_eq!(
        interpolate(&json!("((src:a))"), &vars)
            .unwrap_err()
            .undefined,
        ["src:a"]
    );
}

#[test]
fn pairs_expand_into_nested_maps_later_pairs_winning() {
    let pair = |name: &str, v: Value| (VarRef::parse(name).unwrap(), v);
    let cases = [
        (vec![pair("a", json!("x"))], json!({"a": "x"})),
        (
            vec![pair("a.b.c", json!("x"))],
            json!({"a": {"b": {"c": "x"}}}),
        ),
        (
            vec![pair("a.b", json!("1")), pair("a.c", json!("2"))],
            json!({"a": {"b": "1", "c": "2"}}),
        ),
        (
            vec![pair("a", json!("x")), pair("a.b", json!("y"))],
            json!({"a": {"b": "y"}}),
        ),
        (
            vec![pair("a.b", json!("y")), pair("a", json!("x"))],
            json!({"a": "x"}),
        ),
        (
            vec![pair("a", json!("1")), pair("a", json!("2"))],
            json!({"a": "2"}),
        ),
        (vec![pair("\"a.b\"", json!("q"))], json!({"a.b": "q"})),
    ];
    for (pairs, want) in cases {
        assert_eq!(Value::Object(Vars::expand(&pairs)), want, "{pairs:?}");
    }
}

#[test]
fn values_are_never_interpolated_again() {
    let v = json!({"a": "((b))", "b": "secret", "m": {"k": "((b))"}, "c": "((a))"});
    assert_eq!(ok(json!("((a))"), v.clone()), json!("((b))"));
    assert_eq!(
        ok(json!("x-((a))-((b))"), v.clone()),
        json!("x-((b))-secret")
    );
    assert_eq!(ok(json!("((c))"), v.clone()), json!("((a))"));
    assert_eq!(ok(json!("((m))"), v.clone()), json!({"k": "((b))"}));
    assert_eq!(ok(json!({"((a))": 1}), v), json!({"((b))": 1}));
}

#[test]
fn hostile_input_is_bounded() {
    // A large value used many times: refused once the budget is spent,
    // without building the result.
    let big = "x".repeat(1 << 20);
    let many = "((big))".repeat(100);
    let e = err(json!(many), json!({"big": big}));
    assert!(e.contains("more than 8388608 bytes"), "{e}");
    let e = err(
        Value::Array(vec![json!("((big))"); 100]),
        json!({"big": {"k": "x".repeat(1 << 20)}}),
    );
    assert!(e.contains("more than 8388608 bytes"), "{e}");
    // Within the budget it works.
    assert_eq!(
        ok(json!("((big))((big))"), json!({"big": "y".repeat(1000)})),
        json!("y".repeat(2000))
    );

    // Nesting deeper than the limit.
    let mut deep = json!("((a))");
    for _ in 0..(MAX_DEPTH + 5) {
        deep = json!([deep]);
    }
    let e = err(deep.clone(), json!({"a": 1}));
    assert!(e.contains("nested deeper than 128 levels"), "{e}");
    // find_unresolved walks any depth.
    assert_eq!(find_unresolved(&deep), ["a"]);

    // Unterminated, unbalanced and odd text is left alone.
    for s in ["((", "))", "((((((((", "(()(()((a)", "((\u{0}))", "((\"))"] {
        let got = interpolate(&json!(s), &vars(json!({"a": 1, "\"": 2})));
        match got {
            Ok(v) => assert_eq!(v, json!(s), "{s:?}"),
            Err(e) => assert!(!e.to_string().is_empty(), "{s:?}"),
        }
    }
    assert_eq!(
        ok(json!("((a))\u{fffd}(("), json!({"a": 1})),
        json!("1\u{fffd}((")
    );
    // A very long run of opening parentheses scans in linear time.
    let long = "(".repeat(1 << 20);
    assert_eq!(ok(json!(long.clone()), json!({})), json!(long));
}

#[test]
fn find_unresolved_names_each_leftover_once() {
    let v = json!({
        "params": {"TOKEN": "((secret.password))", "URL": "https://((host))/((host))"},
        "((key))": ["((src:x.\"a.b\"))", 1, null, true],
        "plain": "no vars here (( x ))",
        "bad": "((a..b))",
    });
    assert_eq!(
        find_unresolved(&v),
        ["a..b", "host", "key", "secret.password", "src:x.\"a.b\""]
    );
    assert!(find_unresolved(&json!({"a": "b", "c": [1, 2]})).is_empty());
}

#[test]
fn a_template_without_vars_comes_back_unchanged() {
    let t = json!({"platform": "linux", "run": {"path": "sh", "args": ["-c", "echo ((", "x))"]},
                   "params": {"N": 1, "B": false, "Z": null}});
    assert_eq!(ok(t.clone(), json!({})), t);
}

#[test]
fn set_pipeline_interpolation_leaves_undefined_vars_as_written() {
    let template = json!({
        "given": "((a))",
        "nested": "x-((b.c))-((missing))",
        "sourced": "((vault:secret.key))",
        "whole": "((missing.field))",
        "((k))": 1,
    });
    let got = interpolate_leaving_undefined(
        &template,
        &vars(json!({"a": {"x": 1}, "b": {"c": "C"}, "k": "key"})),
    )
    .unwrap();
    assert_eq!(
        got,
        json!({
            "given": {"x": 1},
            "nested": "x-C-((missing))",
            "sourced": "((vault:secret.key))",
            "whole": "((missing.field))",
            "key": 1,
        })
    );
    // Other problems are still refused.
    let e =
        interpolate_leaving_undefined(&json!({"s": "x-((a))"}), &vars(json!({"a": {"map": true}})))
            .unwrap_err();
    assert!(e.undefined.is_empty());
    assert_eq!(e.problems.len(), 1, "{e}");
    assert!(
        e.problems[0].starts_with("cannot interpolate non-primitive value (map)"),
        "{e}"
    );
}

#[test]
fn local_vars_stay_for_the_run_and_are_not_unresolved_before_it() {
    let vars = Vars::new(vec![json!({"a": "A"}).as_object().unwrap().clone()]);
    let template = json!({"x": "((a))-((.:v.f))", "y": "((.:w))", "z": "((b))"});
    let err = interpolate_keeping_local(&template, &vars).unwrap_err();
    assert_eq!(err.undefined, vec!["b".to_string()]);
    let template = json!({"x": "((a))-((.:v.f))", "y": "((.:w))"});
    assert_eq!(
        interpolate_keeping_local(&template, &vars).unwrap(),
        json!({"x": "A-((.:v.f))", "y": "((.:w))"})
    );
    assert_eq!(
        find_unresolved_except_local(&json!(["((.:v))", "((b))", "((src:c))"])),
        vec!["b".to_string(), "src:c".to_string()]
    );
    assert!(VarRef::parse(".:v.f").unwrap().is_local());
    assert!(!VarRef::parse("v").unwrap().is_local());
}
