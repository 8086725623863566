//! How a volume travels from one worker to another: which compression
//! pays for the link between them.

/// The tar stream's encoding for a copy from a worker at `source_host` to
/// one at `target_host` (the hosts of their API addresses):
///
/// - none when both are the same host or both on loopback: the bytes
///   cross memory, and compressing them only costs CPU;
/// - zstd (level 1) otherwise: it compresses faster than a network link
///   carries the bytes for anything compressible, and passes what is not
///   (images, archives) through in raw blocks at a small cost. gzip, the
///   old choice, compresses at a fraction of a disk's speed and was the
///   slowest part of every copy.
pub fn copy_encoding(source_host: &str, target_host: &str) -> &'static str {
    let same = source_host.eq_ignore_ascii_case(target_host);
    if same || (is_loopback(source_host) && is_loopback(target_host)) {
        "none"
    } else {
        "zstd"
    }
}

fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_copy_across_hosts_is_compressed() {
        let table = [
            ("127.0.0.1", "127.0.0.1", "none"),
            ("127.0.0.1", "127.0.0.2", "none"),
            ("localhost", "[::1]", "none"),
            ("10.0.0.5", "10.0.0.5", "none"),
            ("Worker-1.svc", "worker-1.svc", "none"),
            ("10.0.0.5", "10.0.0.6", "zstd"),
            ("127.0.0.1", "10.0.0.6", "zstd"),
            ("w1.cluster.local", "w2.cluster.local", "zstd"),
            // Not an address, and not "localhost": a name that only
            // resembles loopback is another host.
            ("127.0.0.1.example.com", "127.0.0.1", "zstd"),
        ];
        for (source, target, expected) in table {
            assert_eq!(
                copy_encoding(source, target),
                expected,
                "{source} → {target}"
            );
        }
    }
}
