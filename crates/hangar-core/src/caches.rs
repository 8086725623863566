//! The keys under which workers hold caches, so a later step can find (and
//! placement can prefer) a worker that already has what the step needs.

use serde_json::Value;

/// A fetched resource version: the same type, source and version are the
/// same bytes, whichever build fetched them.
pub fn resource_cache_key(resource_type: &str, source: &Value, version: &Value) -> String {
    // serde_json's maps are sorted by key, so equal JSON has equal text.
    let text = format!("{resource_type}\u{0}{source}\u{0}{version}");
    format!("{resource_type}@{}", digest(text.as_bytes()))
}

/// A task cache: one directory of one step of one job, kept across builds.
pub fn task_cache_key(scope: &str, path: &str) -> String {
    format!("{scope}:{}", digest(path.as_bytes()))
}

/// 128 bits of two FNV-1a passes: a stable name, not a security boundary
/// (keys only choose which cache to reuse; contents are never trusted by key).
fn digest(bytes: &[u8]) -> String {
    let fnv = |seed: u64| {
        bytes.iter().fold(seed, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    format!(
        "{:016x}{:016x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x6c62_272e_07bb_0142)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn equal_json_gives_equal_keys_and_any_difference_another() {
        let a = resource_cache_key(
            "git",
            &json!({"uri": "u", "branch": "main"}),
            &json!({"ref": "abc"}),
        );
        let b = resource_cache_key(
            "git",
            &json!({"branch": "main", "uri": "u"}),
            &json!({"ref": "abc"}),
        );
        let c = resource_cache_key(
            "git",
            &json!({"uri": "u", "branch": "main"}),
            &json!({"ref": "abd"}),
        );
        let d = resource_cache_key(
            "mock",
            &json!({"uri": "u", "branch": "main"}),
            &json!({"ref": "abc"}),
        );
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, d);
        assert!(a.starts_with("git@") && a.len() == 4 + 32, "{a}");
        assert_ne!(
            task_cache_key("job/t", "go"),
            task_cache_key("job/t", "npm")
        );
        assert_eq!(task_cache_key("job/t", "go"), task_cache_key("job/t", "go"));
    }
}
