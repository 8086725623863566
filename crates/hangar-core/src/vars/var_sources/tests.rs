use serde_json::json;

use super::*;
use crate::vars::interpolate_with;

fn source(name: &str, t: &str, config: Value) -> VarSource {
    VarSource {
        name: name.into(),
        source_type: t.into(),
        config,
    }
}

#[test]
fn dummy_sources_resolve_in_dependency_order() {
    let sources = vec![
        source(
            "b",
            "dummy",
            json!({"vars": {"token": "((a:root))-b", "m": {"k": "v"}}}),
        ),
        source("a", "dummy", json!({"vars": {"root": "r00t"}})),
    ];
    let vars = SourceVars::resolve(&sources).unwrap();
    let out = interpolate_with(&json!(["((b:token))", "((b:m.k))", "((a:root))"]), &vars).unwrap();
    assert_eq!(out, json!(["r00t-b", "v", "r00t"]));
    let err = interpolate_with(
        &json!(["((b:m.x))", "((c:x))", "((b:nope))", "((plain))"]),
        &vars,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "undefined vars: b:nope, plain; missing field 'x' in var: b:m.x; missing source 'c' in var: c:x"
    );
}

#[test]
fn unsupported_types_loops_and_long_chains_are_refused() {
    let err = SourceVars::resolve(&[source("v", "vault", json!({"url": "x"}))]).unwrap_err();
    assert!(
        err.starts_with("var_sources.v: var source type \"vault\" is not supported by hangar"),
        "{err}"
    );
    let looped = [
        source("a", "dummy", json!({"vars": {"x": "((b:x))"}})),
        source("b", "dummy", json!({"vars": {"x": "((a:x))"}})),
    ];
    assert_eq!(
        SourceVars::resolve(&looped).unwrap_err(),
        "var_sources: could not resolve inter-dependent var sources: a, b"
    );
    // s0 <- s1 <- ... : a chain of MAX_CHAIN resolves, one more does not.
    let chain = |n: usize| -> Vec<VarSource> {
        (0..n)
            .rev()
            .map(|i| {
                let v = if i == 0 {
                    "end".to_string()
                } else {
                    format!("((s{}:x))", i - 1)
                };
                source(&format!("s{i}"), "dummy", json!({"vars": {"x": v}}))
            })
            .collect()
    };
    let vars = SourceVars::resolve(&chain(MAX_CHAIN)).unwrap();
    assert_eq!(
        interpolate_with(&json!(format!("((s{}:x))", MAX_CHAIN - 1)), &vars).unwrap(),
        json!("end")
    );
    assert_eq!(
        SourceVars::resolve(&chain(MAX_CHAIN + 1)).unwrap_err(),
        format!("var_sources: a chain of var sources reading each other's vars is longer than {MAX_CHAIN}: s{MAX_CHAIN}")
    );
    assert_eq!(
        SourceVars::resolve(&[source("p", "dummy", json!({"vars": {"x": "((plain))"}}))])
            .unwrap_err(),
        "var_sources.p: undefined vars: plain"
    );
    assert_eq!(
        SourceVars::resolve(&[source("d", "dummy", json!({"vars": {}, "x": 1}))]).unwrap_err(),
        "var_sources.d: unknown field \"x\" of a dummy var source (it takes only `vars`)"
    );
}
