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
    if let Some(c) = name.chars().find(|c| is_bidi_or_invisible(*c)) {
        return Verdict::Refuse(format!(
            "character {} is refused: a bidirectional control or an invisible character makes a \
             name read as another on screen (Concourse only warns)",
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

/// Unicode's bidirectional controls (embeddings, overrides, isolates and
/// marks) and the zero-width and invisible format characters: a name
/// holding one shows as something it is not (`U+202E` turns
/// `deploy-gnp.exe` around on screen).
pub fn is_bidi_or_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{061C}'
            | '\u{00AD}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{2069}'
            | '\u{FEFF}'
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidirectional_controls_and_invisible_characters_are_refused() {
        for (name, refused) in [
            ("deploy\u{202E}gnp.exe", true),
            ("a\u{200B}b", true),
            ("\u{FEFF}main", true),
            ("x\u{2066}y\u{2069}", true),
            ("a\u{061C}", true),
            ("soft\u{00AD}hyphen", true),
            ("déploiement", false),
            ("部署", false),
            ("build-and-test", false),
        ] {
            let verdict = check(name);
            assert_eq!(
                matches!(verdict, Verdict::Refuse(_)),
                refused,
                "{name:?}: {verdict:?}"
            );
        }
    }
}
