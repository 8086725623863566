//! Names in a pipeline: what hangar refuses (names that would be unsafe as
//! URL segments or directory names) and what Concourse only warns about
//! (names that are not valid identifiers).

use super::MAX_NAME_LEN;

/// What the rules say of a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Valid,
    /// Concourse's `invalid_identifier` warning, with its reason.
    Warn(String),
    /// Refused, with why.
    Refuse(String),
}

/// Concourse's identifier letters: lowercase and other non-cased letters
/// (Unicode Ll, Lt, Lm, Lo) and ASCII digits.
fn is_identifier_start(c: char) -> bool {
    c.is_ascii_digit() || (c.is_alphabetic() && !c.is_uppercase())
}

fn is_identifier_char(c: char) -> bool {
    is_identifier_start(c) || matches!(c, '-' | '_' | '.')
}

pub(crate) fn check(name: &str) -> Verdict {
    if name.is_empty() {
        return Verdict::Refuse("identifier cannot be an empty string".into());
    }
    if name.chars().count() > MAX_NAME_LEN {
        return Verdict::Refuse(format!(
            "longer than {MAX_NAME_LEN} characters (Concourse has no limit)"
        ));
    }
    if name == "." || name == ".." {
        return Verdict::Refuse(
            "'.' and '..' are refused: names are used as path segments (Concourse only warns)"
                .into(),
        );
    }
    if let Some(c) = name
        .chars()
        .find(|c| matches!(c, '/' | '\\') || c.is_control())
    {
        return Verdict::Refuse(format!(
            "illegal character {}: names are used as path segments (Concourse only warns)",
            show_char(c)
        ));
    }
    if name.bytes().all(|b| b.is_ascii_digit()) {
        return Verdict::Warn("cannot be just numbers".into());
    }
    let mut chars = name.chars();
    let first = chars.next().unwrap_or(' ');
    if !is_identifier_start(first) {
        return Verdict::Warn("must start with a lowercase letter or a number".into());
    }
    if let Some(c) = chars.find(|c| !is_identifier_char(*c)) {
        return Verdict::Warn(format!("illegal character '{c}'"));
    }
    Verdict::Valid
}

fn show_char(c: char) -> String {
    format!("'{}'", c.escape_debug())
}

/// A name as messages show it: control characters escaped, at most 64
/// characters.
pub(crate) fn show(name: &str) -> String {
    let escaped: String = name.chars().flat_map(char::escape_debug).collect();
    crate::names::shorten(&escaped)
}
