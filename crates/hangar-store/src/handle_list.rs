//! A list of handles bound as one parameter: a JSON array of strings, which
//! the database unpacks itself (`json_each` on SQLite,
//! `json_array_elements_text` on PostgreSQL).
//!
//! `sqlx::Any` binds no arrays, and an `IN ($1, …, $1000)` list costs one
//! bind per handle, a statement per thousand handles and, on PostgreSQL, a
//! new prepared statement for each length. One JSON parameter is one
//! statement whatever the count, with the same text every time; JSON's
//! escaping carries any handle, quotes and all, as itself.

use crate::db::Backend;

/// `handles` as a JSON array of strings.
pub(crate) fn json_list<S: AsRef<str>>(handles: &[S]) -> String {
    let list: Vec<&str> = handles.iter().map(AsRef::as_ref).collect();
    // Serialising a list of strings cannot fail.
    serde_json::to_string(&list).unwrap_or_else(|_| "[]".to_string())
}

/// A condition that `column` is one of the handles in the JSON array bound
/// as `$param`. On PostgreSQL the array becomes one `= ANY(…)` index scan;
/// SQLite probes the column's index once per element.
pub(crate) fn in_list(backend: Backend, column: &str, param: usize) -> String {
    match backend {
        Backend::Postgres => format!(
            "{column} = ANY(ARRAY(SELECT json_array_elements_text(CAST(${param} AS json))))"
        ),
        Backend::Sqlite => format!("{column} IN (SELECT value FROM json_each(${param}))"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_handle_is_carried_as_itself() {
        let cases: &[(&[&str], &str)] = &[
            (&[], "[]"),
            (&["a"], r#"["a"]"#),
            (&["a b", "c\"d"], r#"["a b","c\"d"]"#),
            (
                &["back\\slash", "new\nline"],
                r#"["back\\slash","new\nline"]"#,
            ),
            (
                &["é", "'); DROP TABLE volumes; --"],
                r#"["é","'); DROP TABLE volumes; --"]"#,
            ),
        ];
        for (handles, json) in cases {
            assert_eq!(json_list(handles), *json, "{handles:?}");
        }
    }
}
