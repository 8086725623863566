//! How a build's log reads on its page: one section per step (in the
//! order of the build's steps, the build's own lines first), each line
//! with the moment it was written, and times in words relative to now.

/// A step's part of the log: `step` is `None` for the build's own lines
/// (its status, its errors); `entries` are indexes into the events given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub step: Option<String>,
    pub entries: Vec<usize>,
}

/// Groups events (each named by its step, or none) into sections: the
/// build's own lines first if any, then each of `steps` in order (empty
/// ones too: a step that has not written yet still has its place), then
/// steps the events name that `steps` does not (written before the step's
/// record was read), in order of their first line.
pub fn sections<'a>(steps: &[&'a str], events: &[Option<&'a str>]) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    if events.iter().any(Option::is_none) {
        out.push(Section {
            step: None,
            entries: Vec::new(),
        });
    }
    out.extend(steps.iter().map(|s| Section {
        step: Some(s.to_string()),
        entries: Vec::new(),
    }));
    for (i, step) in events.iter().enumerate() {
        let at = match out.iter().position(|s| s.step.as_deref() == *step) {
            Some(at) => at,
            None => {
                out.push(Section {
                    step: step.map(str::to_string),
                    entries: Vec::new(),
                });
                out.len() - 1
            }
        };
        out[at].entries.push(i);
    }
    out
}

/// Which chunks of one step's output begin a line (and so get a
/// timestamp): the first, and each after a chunk that ended one. Output
/// arrives in chunks that may end mid-line; a stamp there would split the
/// line.
pub fn line_starts<'a>(chunks: impl IntoIterator<Item = &'a str>) -> Vec<bool> {
    let mut at_start = true;
    chunks
        .into_iter()
        .map(|c| {
            let starts = at_start;
            if !c.is_empty() {
                at_start = c.ends_with('\n');
            }
            starts
        })
        .collect()
}

/// A chunk of output cut into its lines, each with whether it gets a
/// stamp: a line that begins in this chunk does (the first piece only when
/// the chunk `starts_line`); the rest of a line the last chunk began does
/// not. The pieces keep their newlines and join back into the chunk.
pub fn line_pieces(chunk: &str, starts_line: bool) -> Vec<(bool, &str)> {
    let mut out = Vec::new();
    let mut rest = chunk;
    let mut first = true;
    while !rest.is_empty() {
        let end = rest.find('\n').map_or(rest.len(), |i| i + 1);
        out.push((if first { starts_line } else { true }, &rest[..end]));
        rest = &rest[end..];
        first = false;
    }
    out
}

/// A moment's time of day, UTC, `HH:MM:SS`: a log line's stamp.
pub fn clock_words(unix_ms: i64) -> String {
    let secs = unix_ms.div_euclid(1000).rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600,
        (secs % 3600) / 60,
        secs % 60
    )
}

/// How long ago `then` was, seen at `now`, in a word or two: `just now`,
/// `12s ago`, `5m ago`, `3h ago`, `2d ago`; a moment ahead (clocks of two
/// nodes) reads `just now`.
pub fn ago_words(then: i64, now: i64) -> String {
    let s = (now - then) / 1000;
    match s {
        ..=4 => "just now".into(),
        5..=59 => format!("{s}s ago"),
        60..=3599 => format!("{}m ago", s / 60),
        3600..=86_399 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_fall_into_their_steps_sections_in_the_steps_order() {
        let steps = ["0", "1", "1.get", "2"];
        let events = [
            Some("1"),
            None,
            Some("0"),
            Some("1"),
            Some("9"),
            Some("1.get"),
        ];
        let got = sections(&steps, &events);
        let view: Vec<(Option<&str>, &[usize])> = got
            .iter()
            .map(|s| (s.step.as_deref(), s.entries.as_slice()))
            .collect();
        assert_eq!(
            view,
            [
                (None, &[1][..]),
                (Some("0"), &[2][..]),
                (Some("1"), &[0, 3][..]),
                (Some("1.get"), &[5][..]),
                (Some("2"), &[][..]),
                (Some("9"), &[4][..]),
            ]
        );
        // No build lines: no build section.
        assert_eq!(sections(&["0"], &[Some("0")])[0].step.as_deref(), Some("0"));
        assert!(sections(&[], &[]).is_empty());
    }

    #[test]
    fn a_stamp_goes_where_a_line_begins() {
        // (chunks, which begin a line)
        let cases: [(&[&str], &[bool]); 5] = [
            (&["a\n", "b\n"], &[true, true]),
            (&["par", "tial\n", "next"], &[true, false, true]),
            (&["a\nb", "c\n"], &[true, false]),
            (&["", "x\n"], &[true, true]),
            (&[], &[]),
        ];
        for (chunks, want) in cases {
            assert_eq!(line_starts(chunks.iter().copied()), want, "{chunks:?}");
        }
    }

    #[test]
    fn a_chunk_is_stamped_line_by_line() {
        type Pieces<'a> = &'a [(bool, &'a str)];
        let cases: [(&str, bool, Pieces); 5] = [
            ("a\nb\n", true, &[(true, "a\n"), (true, "b\n")]),
            ("tail\nnext", false, &[(false, "tail\n"), (true, "next")]),
            ("partial", true, &[(true, "partial")]),
            ("\n", false, &[(false, "\n")]),
            ("", true, &[]),
        ];
        for (chunk, starts, want) in cases {
            let got = line_pieces(chunk, starts);
            assert_eq!(got, want, "{chunk:?}");
            assert_eq!(got.iter().map(|p| p.1).collect::<String>(), chunk);
        }
    }

    #[test]
    fn times_read_as_a_clock_and_as_words() {
        assert_eq!(clock_words(0), "00:00:00");
        assert_eq!(clock_words(1_700_000_000_000), "22:13:20");
        assert_eq!(clock_words(-1000), "23:59:59");
        let now = 1_000_000_000;
        let cases = [
            (now + 5_000, "just now"),
            (now, "just now"),
            (now - 4_999, "just now"),
            (now - 5_000, "5s ago"),
            (now - 59_999, "59s ago"),
            (now - 60_000, "1m ago"),
            (now - 3_600_000, "1h ago"),
            (now - 86_400_000, "1d ago"),
            (now - 3 * 86_400_000, "3d ago"),
        ];
        for (then, want) in cases {
            assert_eq!(ago_words(then, now), want, "{then}");
        }
    }
}
