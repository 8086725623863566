//! Many rows read as one text value (`string_agg` on both databases) and
//! taken apart here.
//!
//! Through sqlx's `Any` driver each column of each row costs allocations;
//! tens of thousands of rows of a handle or two cost more to fetch than to
//! find. Packed, they are one value: fields end with a space, and a handle
//! is preceded by its length in bytes (`OCTET_LENGTH`, on SQLite since
//! 3.43), so it may hold anything, spaces included; bytes rather
//! than characters because a PostgreSQL database in `SQL_ASCII` counts
//! characters as bytes.

/// The text up to the next space, which `rest` then skips.
pub(crate) fn next_field<'a>(rest: &mut &'a str) -> Option<&'a str> {
    let (field, after) = rest.split_once(' ')?;
    *rest = after;
    Some(field)
}

/// Splits `text` after its first `n` bytes; `None` when it is shorter or
/// byte `n` is inside a character.
pub(crate) fn take_bytes(text: &str, n: usize) -> Option<(&str, &str)> {
    text.is_char_boundary(n).then(|| text.split_at(n))
}

/// A handle and its parent, packed by [`HANDLE_AND_PARENT`].
pub(crate) fn handle_and_parent(rest: &mut &str) -> Option<(String, Option<String>)> {
    let handle_len: usize = next_field(rest)?.parse().ok()?;
    let parent_len = match next_field(rest)? {
        "-" => None,
        n => Some(n.parse::<usize>().ok()?),
    };
    let (handle, after) = take_bytes(rest, handle_len)?;
    let (parent, after) = match parent_len {
        None => (None, after),
        Some(n) => {
            let (p, after) = take_bytes(after, n)?;
            (Some(p), after)
        }
    };
    if handle.is_empty() || parent.is_some_and(str::is_empty) {
        return None;
    }
    *rest = after;
    Some((handle.to_string(), parent.map(str::to_string)))
}

/// SQL packing a row's `handle` and `parent_handle` for [`handle_and_parent`].
pub(crate) const HANDLE_AND_PARENT: &str = "CAST(OCTET_LENGTH(handle) AS TEXT) || ' ' \
     || COALESCE(CAST(OCTET_LENGTH(parent_handle) AS TEXT), '-') || ' ' || handle || COALESCE(parent_handle, '')";

/// A bounded excerpt of text that did not decode, for the error.
pub(crate) fn malformed(what: &str, rest: &str) -> String {
    format!(
        "malformed {what} {:?}",
        rest.chars().take(200).collect::<String>()
    )
}
