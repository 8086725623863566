use super::*;

/// Feeds `chunks` one by one and returns the whole output.
fn stream(secrets: &[&str], chunks: &[&str]) -> String {
    let mut r = Redactor::new(Secrets::new(secrets));
    let mut out = String::new();
    for c in chunks {
        out.push_str(&r.push(c));
        assert!(r.held_len() < 64, "held {}", r.held_len());
    }
    out.push_str(&r.finish());
    out
}

#[test]
fn secrets_are_redacted_whole_and_across_chunks() {
    let cases: &[(&[&str], &[&str], &str)] = &[
        (&["hunter2"], &["pw is hunter2!"], "pw is ((redacted))!"),
        (&["hunter2"], &["pw is hun", "ter2!"], "pw is ((redacted))!"),
        (
            &["hunter2"],
            &["pw is h", "u", "n", "t", "e", "r", "2"],
            "pw is ((redacted))",
        ),
        (
            &["hunter2"],
            &["hunter", "x hunter2"],
            "hunterx ((redacted))",
        ),
        (&["hunter2"], &["hunte"], "hunte"),
        (
            &["hunter2"],
            &["hunter2hunter2"],
            "((redacted))((redacted))",
        ),
        (&["ab", "abcdef"], &["xab", "cdef y"], "x((redacted)) y"),
        (&["ab", "abcdef"], &["xab", "cd y"], "x((redacted))cd y"),
        (&["ab", "abcdef"], &["xabc"], "x((redacted))c"),
        (&["abc", "bcd"], &["abcd"], "((redacted))d"),
        (&["abc", "bcd"], &["xbcd"], "x((redacted))"),
        (&["aaa"], &["aaaaaaa"], "((redacted))((redacted))a"),
        (&[], &["nothing", " here"], "nothing here"),
        (&["x", ""], &["x marks x"], "x marks x"),
        (
            &["héllo wörld"],
            &["say h\u{e9}llo w", "\u{f6}rld!"],
            "say ((redacted))!",
        ),
        (&["日本語"], &["前日本", "語後"], "前((redacted))後"),
        (
            &["-----BEGIN KEY-----\n  abcdef\n-----END KEY-----\n"],
            &["k: -----BEGIN KEY-----\n", "abc", "def\n-----END KEY-----"],
            "k: ((redacted))\n((redacted))\n((redacted))",
        ),
    ];
    for (secrets, chunks, want) in cases {
        assert_eq!(stream(secrets, chunks), *want, "{secrets:?} {chunks:?}");
    }
}

#[test]
fn a_secret_is_redacted_wherever_the_chunks_split_it() {
    let text = "a: s3cr3t-value, b: t0ken, c: s3cr3t-value-longer.";
    let secrets = ["s3cr3t-value", "s3cr3t-value-longer", "t0ken"];
    let want = "a: ((redacted)), b: ((redacted)), c: ((redacted)).";
    for cut in 0..=text.len() {
        assert_eq!(
            stream(&secrets, &[&text[..cut], &text[cut..]]),
            want,
            "cut {cut}"
        );
        for cut2 in cut..=text.len() {
            let chunks = [&text[..cut], &text[cut..cut2], &text[cut2..]];
            assert_eq!(stream(&secrets, &chunks), want, "cuts {cut} {cut2}");
        }
    }
}

#[test]
fn memory_is_bounded_by_the_longest_secret() {
    let long = "k".repeat(40);
    let mut r = Redactor::new(Secrets::new([long.as_str(), "zz"]));
    let mut out = String::new();
    for _ in 0..10_000 {
        out.push_str(&r.push("kkkkkkkkk"));
        assert!(r.held_len() < 40);
    }
    out.push_str(&r.finish());
    assert_eq!(out.matches(REDACTED).count(), 90_000 / 40);
    assert_eq!(out.len(), 2250 * REDACTED.len());
}

#[test]
fn held_bytes_are_input_not_yet_written() {
    let mut r = Redactor::new(Secrets::new(["secret"]));
    assert_eq!(r.push("ab sec"), "ab ");
    assert_eq!(r.held_len(), 3);
    r.reset();
    assert_eq!(r.held_len(), 0);
    assert_eq!(r.push("secret ok"), "((redacted)) ok");
    assert_eq!(r.held_len(), 0);
}

#[test]
fn short_and_duplicate_values_are_skipped() {
    let s = Secrets::new(["a", " b \n", "", "ok", "ok", "\n\n"]);
    assert_eq!(s.redact("a b ok"), "a b ((redacted))");
    assert!(Secrets::new(["x", "é"]).is_empty());
    assert_eq!(Secrets::new(["éé"]).redact("éé"), REDACTED);
}

/// Random texts, secrets and chunkings (seeded): streaming gives what
/// redacting the whole text gives, and no secret survives in the output.
/// The alphabet shares no character with `((redacted))`, so a secret in the
/// output could only be one the redactor missed.
#[test]
fn streaming_equals_whole_and_no_secret_survives_for_random_inputs() {
    const ALPHABET: &[&str] = &["x", "y", "z", "\n", " ", "é", "日"];
    for seed in 0..2000 {
        let mut rng = crate::rng::Rng::new(seed);
        let word = |rng: &mut crate::rng::Rng, len: usize| -> String {
            (0..len)
                .map(|_| ALPHABET[rng.index(ALPHABET.len())])
                .collect()
        };
        let secrets: Vec<String> = (0..rng.range(1, 5))
            .map(|_| {
                let len = rng.range(2, 7) as usize;
                word(&mut rng, len)
            })
            .collect();
        let len = rng.range(0, 60) as usize;
        let text = word(&mut rng, len);
        let s = Secrets::new(&secrets);
        let whole = s.redact(&text);
        let mut r = Redactor::new(s.clone());
        let mut streamed = String::new();
        let mut rest = text.as_str();
        while !rest.is_empty() {
            let mut cut = rng.range(0, rest.len() as u64 + 1) as usize;
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            streamed.push_str(&r.push(&rest[..cut]));
            rest = &rest[cut..];
        }
        streamed.push_str(&r.finish());
        assert_eq!(streamed, whole, "seed {seed}: {secrets:?} in {text:?}");
        for needle in &s.needles {
            assert!(
                !whole.contains(needle.as_str()),
                "seed {seed}: {needle:?} survives in {whole:?} (secrets {secrets:?}, text {text:?})"
            );
        }
    }
}
