//! Which names hangar accepts for workers (and, later, teams and pipelines).

use std::fmt;

/// The longest worker name accepted. Kubernetes pod names can be longer, but a
/// StatefulSet pod name is `<set>-<ordinal>` and DNS labels stop at 63.
pub const MAX_NAME_LEN: usize = 63;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidName {
    pub name: String,
    pub reason: &'static str,
}

impl fmt::Display for InvalidName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Hostile names may hold control characters: show them escaped.
        write!(f, "invalid name {:?}: {}", self.name, self.reason)
    }
}

impl std::error::Error for InvalidName {}

/// At most 64 characters of a hostile string, for messages.
pub fn shorten(s: &str) -> String {
    const MAX: usize = 64;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        let mut short: String = s.chars().take(MAX).collect();
        short.push('…');
        short
    }
}

/// A worker name is 1 to 63 characters of ASCII letters, digits, `-`, `_` and
/// `.`, and starts and ends with a letter or digit: it appears in URLs, file
/// names and log lines, so nothing in it may need quoting.
pub fn validate_worker_name(name: &str) -> Result<(), InvalidName> {
    validate_label(name)
}

/// The rule for every short label hangar stores: worker names, tags,
/// platforms, teams and resource type names.
pub fn validate_label(name: &str) -> Result<(), InvalidName> {
    let fail = |reason| {
        Err(InvalidName {
            name: name.chars().take(MAX_NAME_LEN + 8).collect(),
            reason,
        })
    };
    if name.is_empty() {
        return fail("must not be empty");
    }
    if name.len() > MAX_NAME_LEN {
        return fail("longer than 63 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return fail("only letters, digits, '-', '_' and '.' are allowed");
    }
    let first = name.as_bytes()[0];
    let last = name.as_bytes()[name.len() - 1];
    if !first.is_ascii_alphanumeric() || !last.is_ascii_alphanumeric() {
        return fail("must start and end with a letter or digit");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_names_follow_the_table() {
        let long = "a".repeat(64);
        let max = "a".repeat(63);
        let cases: &[(&str, bool)] = &[
            ("worker-0", true),
            ("w", true),
            ("workers-worker-10", true),
            ("node_1.example.com", true),
            (&max, true),
            ("", false),
            (&long, false),
            ("-leading", false),
            ("trailing.", false),
            ("has space", false),
            ("slash/inside", false),
            ("..", false),
            ("ünicode", false),
            ("new\nline", false),
            ("semi;colon", false),
        ];
        for (name, ok) in cases {
            assert_eq!(validate_worker_name(name).is_ok(), *ok, "name {name:?}");
        }
    }

    #[test]
    fn an_invalid_name_error_says_why_and_escapes_the_name() {
        let err = validate_worker_name("bad\nname").unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid name \"bad\\nname\": only letters, digits, '-', '_' and '.' are allowed"
        );
    }
}
