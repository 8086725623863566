use super::*;
use serde_json::json;

fn read(text: &str) -> Value {
    from_str(text).unwrap_or_else(|e| panic!("{text:?}: {e}"))
}

fn refused(text: &str) -> YamlError {
    match from_str(text) {
        Ok(v) => panic!("{text:?} was read as {v}"),
        Err(e) => e,
    }
}

/// Plain scalars as go-yaml v2 (and so Concourse) resolves them.
#[test]
fn plain_scalars_resolve_by_yaml_1_1_rules() {
    let table: &[(&str, Value)] = &[
        ("yes", json!(true)),
        ("Yes", json!(true)),
        ("on", json!(true)),
        ("y", json!(true)),
        ("TRUE", json!(true)),
        ("no", json!(false)),
        ("off", json!(false)),
        ("N", json!(false)),
        ("~", json!(null)),
        ("null", json!(null)),
        ("", json!(null)),
        ("0755", json!(493)),
        ("0o17", json!(15)),
        ("0x1F", json!(31)),
        ("0b101", json!(5)),
        ("-0b11", json!(-3)),
        ("1_000", json!(1000)),
        ("+12", json!(12)),
        ("-12", json!(-12)),
        ("0", json!(0)),
        ("08", json!(8.0)),
        ("1.5", json!(1.5)),
        (".5", json!(0.5)),
        ("1e3", json!(1000.0)),
        ("18446744073709551615", json!(18446744073709551615u64)),
        ("1e999", json!("1e999")),
        ("1.2.3", json!("1.2.3")),
        ("2001-12-14", json!("2001-12-14")),
        ("yess", json!("yess")),
        ("0x", json!("0x")),
        ("-", json!("-")),
        ("hello world", json!("hello world")),
    ];
    for (text, want) in table {
        assert_eq!(&resolve_plain(text).unwrap(), want, "{text:?}");
    }
}

#[test]
fn quoted_block_and_tagged_scalars_keep_their_text() {
    let v = read(
        "a: 'yes'\nb: \"0755\"\nc: |\n  0755\nd: !!str on\ne: !!int \"12\"\nf: ! 12\ng: !!float 3\n",
    );
    assert_eq!(
        v,
        json!({"a": "yes", "b": "0755", "c": "0755\n", "d": "on", "e": 12, "f": "12", "g": 3.0})
    );
}

#[test]
fn keys_become_text_as_concourse_makes_json_keys() {
    let v = read("1: a\nyes: b\n0x10: c\n");
    assert_eq!(v, json!({"1": "a", "true": "b", "16": "c"}));
}

#[test]
fn merge_keys_copy_keys_the_mapping_does_not_set_itself() {
    let v = read(
        "defaults: &d {A: 1, B: 2}\nmore: &m {B: 3, C: 4}\nparams:\n  <<: [*d, *m]\n  A: own\n",
    );
    assert_eq!(v["params"], json!({"A": "own", "B": 2, "C": 4}));
    let v = read("base: &b {X: 1}\np:\n  X: 2\n  <<: *b\n");
    assert_eq!(
        v["p"],
        json!({"X": 2}),
        "an explicit key wins whatever the order"
    );
    let v = read("p:\n  <<: {X: 1}\n");
    assert_eq!(v["p"], json!({"X": 1}), "an inline mapping merges too");
    let e = refused("p:\n  <<: 3\n");
    assert!(e.message.contains("merge key"), "{e}");
    let e = refused("a: &a [1]\np:\n  <<: *a\n");
    assert!(e.message.contains("merge key"), "{e}");
    // A quoted "<<" is an ordinary key.
    assert_eq!(read("'<<': 1\n"), json!({"<<": 1}));
}

#[test]
fn refusals_say_where_and_why() {
    type Case<'a> = (&'a str, &'a str, Option<(usize, usize)>);
    let cases: &[Case] = &[
        ("a: 1\na: 2\n", "appears twice", Some((2, 1))),
        (
            "a: 1\n---\nb: 2\n",
            "more than one YAML document",
            Some((2, 1)),
        ),
        ("a: !custom x\n", "not supported", Some((1, 12))),
        ("a: !!binary aGk=\n", "not supported", Some((1, 13))),
        ("a: !!int yes\n", "not a valid !!int", Some((1, 10))),
        ("a: .inf\n", "not a number JSON can hold", Some((1, 4))),
        ("? [a]\n: 1\n", "must be a scalar", Some((1, 3))),
        ("~: 1\n", "must not be null", Some((1, 1))),
        ("a: *nowhere\n", "", None),
        ("a: [1, 2\n", "", None),
        ("a:\tb: c\n", "", None),
    ];
    for (text, needle, position) in cases {
        let e = refused(text);
        assert!(e.message.contains(needle), "{text:?}: {e}");
        if let Some(p) = position {
            assert_eq!(e.position, Some(*p), "{text:?}: {e}");
        } else {
            assert!(e.position.is_some(), "{text:?}: {e}");
        }
    }
}

#[test]
fn alias_bombs_and_deep_nesting_are_refused_after_bounded_work() {
    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let prev = format!("*a{}", i - 1);
        let list = [prev.as_str(); 10].join(", ");
        bomb.push_str(&format!("a{i}: &a{i} [{list}]\n"));
    }
    let e = refused(&bomb);
    assert!(e.message.contains("values once its aliases"), "{e}");

    let deep = format!("{}1{}", "[".repeat(65), "]".repeat(65));
    let e = refused(&deep);
    assert!(e.message.contains("deeper than 64"), "{e}");
    let fine = format!("{}1{}", "[".repeat(63), "]".repeat(63));
    read(&fine);
}

#[test]
fn an_empty_document_is_null_and_aliases_copy_values() {
    assert_eq!(read(""), Value::Null);
    assert_eq!(read("# nothing\n"), Value::Null);
    assert_eq!(
        read("a: &x {b: [1, yes]}\nc: *x\n")["c"],
        json!({"b": [1, true]})
    );
}

#[test]
fn numbers_and_values_are_written_as_go_writes_json() {
    let table: &[(Value, &str)] = &[
        (json!(493), "493"),
        (json!(-3), "-3"),
        (json!(8.0), "8"),
        (json!(1.5), "1.5"),
        (json!(1e20), "100000000000000000000"),
        (json!(1e21), "1e+21"),
        (json!(1.5e-7), "1.5e-7"),
        (json!(0.000001), "0.000001"),
        (json!(18446744073709551615u64), "18446744073709551615"),
    ];
    for (n, want) in table {
        let Value::Number(n) = n else { unreachable!() };
        assert_eq!(go_number_text(n), *want);
    }
    assert_eq!(
        go_json(&json!({"b": [1, 2.0, null, true], "a": "<x&y>\u{2028}\n\u{1}"})),
        r#"{"a":"\u003cx\u0026y\u003e\u2028\n\u0001","b":[1,2,null,true]}"#
    );
}
