//! Job name patterns of `passed` and groups.

use super::*;

#[test]
fn globs_match_as_concourse_patterns_do() {
    let cases: &[(&str, &str, bool)] = &[
        ("*", "anything", true),
        ("deploy-*", "deploy-prod", true),
        ("deploy-*", "deploy-", true),
        ("deploy-*", "test", false),
        ("*-prod", "deploy-prod", true),
        ("a*b*c", "aXbYc", true),
        ("a*b*c", "aXbY", false),
        ("?", "a", true),
        ("?", "ab", false),
        ("[ab]x", "bx", true),
        ("[^ab]x", "bx", false),
        ("[!ab]x", "cx", true),
        ("[a-c]", "b", true),
        ("[a-c]", "d", false),
        ("a\\*", "a*", true),
        ("a\\*", "ab", false),
    ];
    for (pattern, name, matches) in cases {
        let g = glob::Glob::compile(pattern).unwrap();
        assert_eq!(g.matches(name), *matches, "{pattern} {name}");
    }
    let braces: &[(&str, &str, bool)] = &[
        ("{unit,deploy}-*", "unit-a", true),
        ("{unit,deploy}-*", "deploy-b", true),
        ("{unit,deploy}-*", "lint-c", false),
        ("a{b,{c,d}}e", "ade", true),
        ("a{,x}", "a", true),
        ("\\{a\\}", "{a}", true),
    ];
    for (pattern, name, matches) in braces {
        let g = glob::Glob::compile_with_braces(pattern).unwrap();
        assert_eq!(g.matches(name), *matches, "{pattern} {name}");
    }
    // In passed, braces are plain characters, as in Go's path.Match.
    assert!(glob::Glob::compile("{a,b}").unwrap().matches("{a,b}"));
    assert_eq!(
        glob::Glob::compile_with_braces("{a,b").unwrap_err(),
        "an unclosed '{'"
    );
    assert_eq!(
        glob::Glob::compile_with_braces("{a,b}{c,d}{e,f}{g,h}{i,j}{k,l}").unwrap_err(),
        "its '{…}' alternatives expand to more than 32 patterns"
    );
    assert_eq!(
        glob::Glob::compile("[z-a]").unwrap_err(),
        "the range z-a is backwards"
    );
}
