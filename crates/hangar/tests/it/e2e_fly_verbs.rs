//! fly's verbs and aliases end to end, against a real web and worker:
//! `sp`, `up`, `tj -w`, `js` with the latest build's status, `ep`/`hp`
//! seen by a stranger, `ap` (`archive-pipeline`) and set-pipeline
//! bringing it back, `vp` (`validate-pipeline`) with and without
//! `--strict` and `-o`, and the errors a wrong URL or a stopped web give.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use crate::common::{has, text, Cluster};

const PIPELINE: &str = r#"
jobs:
- name: build
  plan:
  - task: hello
    config:
      platform: linux
      run: {path: sh, args: [-c, "echo hello from ((who))"]}
"#;

/// A task with a cache that says whether it found it filled.
const CACHED: &str = r#"
jobs:
- name: build
  plan:
  - task: fill
    config:
      platform: linux
      caches: [{path: deps}]
      run:
        path: sh
        args: [-c, "if [ -f deps/seen ]; then echo cache-was-warm; else echo cache-was-cold; fi; touch deps/seen"]
"#;

fn ok(c: &Cluster, args: &[&str]) -> String {
    let o = c.cli(args);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{args:?}: {out}\n{err}");
    out
}

#[test]
fn e2e_fly_verbs_answer_by_their_aliases_and_say_what_they_found() {
    let c = Cluster::start();
    let _w = c.worker("verbs-w1");
    c.wait_until("the worker runs", |ws| has(ws, "verbs-w1", "running"));
    let file = c.dir.path().join("p.yml");
    std::fs::write(&file, PIPELINE).unwrap();
    let file = file.to_str().unwrap();

    // validate-pipeline: no target needed; vars filled with -v, -o prints.
    let out = ok(&c, &["vp", "-c", file]);
    assert_eq!(out, "looks good\n");
    let out = ok(&c, &["validate-pipeline", "-c", file, "-v", "who=vp", "-o"]);
    assert!(out.contains("hello from vp"), "{out}");
    let warned = c.dir.path().join("warned.yml");
    std::fs::write(&warned, PIPELINE.replace("name: build", "name: Build_It")).unwrap();
    let warned = warned.to_str().unwrap();
    let o = c.cli(&["vp", "-c", warned]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("WARNING: ") && out.ends_with("looks good\n"),
        "{out}"
    );
    let o = c.cli(&["vp", "-c", warned, "--strict"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("which --strict makes fail"), "{err}");
    let broken = c.dir.path().join("broken.yml");
    std::fs::write(&broken, "jobs:\n- name: j\n  plan:\n  - get: nowhere\n").unwrap();
    let o = c.cli(&["vp", "-c", broken.to_str().unwrap()]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("ERROR: ") && err.contains("nowhere"), "{err}");

    // format-pipeline: Concourse's key order; -w writes it back; a broken
    // file is refused and left alone.
    let messy = c.dir.path().join("messy.yml");
    std::fs::write(
        &messy,
        "jobs:\n- plan:\n  - config: {run: {path: \"true\"}, platform: linux}\n    task: t\n  name: j\n",
    )
    .unwrap();
    let messy = messy.to_str().unwrap();
    let want = "jobs:\n- name: j\n  plan:\n  - task: t\n    config:\n      platform: linux\n      run:\n        path: \"true\"\n";
    assert_eq!(ok(&c, &["fp", "-c", messy]), want);
    ok(&c, &["format-pipeline", "-c", messy, "-w"]);
    assert_eq!(std::fs::read_to_string(messy).unwrap(), want);
    let before = std::fs::read_to_string(&broken).unwrap();
    let o = c.cli(&["fp", "-c", broken.to_str().unwrap(), "-w"]);
    assert!(!o.status.success(), "{:?}", text(&o));
    assert_eq!(std::fs::read_to_string(&broken).unwrap(), before);

    // sp, up, tj -w, js: the latest build's status in the jobs listing.
    ok(&c, &["sp", "-p", "p", "-c", file, "-v", "who=fly", "-n"]);
    // get-pipeline in Concourse's order: a job's name before its plan.
    let got = ok(&c, &["gp", "-p", "p"]);
    assert!(
        got.starts_with("jobs:\n- name: build\n  plan:\n  - task: hello\n"),
        "{got}"
    );
    let out = ok(&c, &["js", "-p", "p"]);
    let header = out.lines().next().unwrap_or_default();
    for column in ["name", "paused", "status", "next"] {
        assert!(header.contains(column), "{out}");
    }
    assert!(
        out.lines().nth(1).unwrap_or_default().contains("n/a"),
        "{out}"
    );
    ok(&c, &["up", "-p", "p"]);
    let out = ok(&c, &["tj", "-j", "p/build", "-w"]);
    assert!(out.contains("hello from fly"), "{out}");
    let out = ok(&c, &["js", "-p", "p"]);
    let row = out.lines().nth(1).unwrap_or_default().to_string();
    assert!(
        row.split_whitespace().collect::<Vec<_>>()[..4] == ["build", "no", "succeeded", "n/a"],
        "{out}"
    );

    // ep/hp: a stranger reads an exposed pipeline's jobs, and not once it
    // is hidden again (the same answer as for a missing one).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let anonymous =
        hangar_client::Client::new(&c.url, "", std::time::Duration::from_secs(10)).unwrap();
    let stranger = || rt.block_on(anonymous.jobs("main", "p"));
    assert!(stranger().is_err(), "a hidden pipeline reads as missing");
    assert_eq!(ok(&c, &["ep", "-p", "p"]), "exposed 'p'\n");
    let jobs = stranger().expect("an exposed pipeline's jobs");
    assert_eq!(jobs[0].name, "build");
    assert_eq!(ok(&c, &["hp", "-p", "p"]), "hid 'p'\n");
    match stranger() {
        Err(e) => assert!(e.to_string().contains("not found"), "{e}"),
        Ok(jobs) => panic!("hidden again, yet read: {jobs:?}"),
    }

    // ap: archived, it neither builds nor unpauses, and leaves the
    // listing; set again, it comes back paused with its history.
    let out = ok(&c, &["ap", "-p", "p", "-n"]);
    assert!(out.starts_with("archived 'p'"), "{out}");
    let o = c.cli(&["tj", "-j", "p/build"]);
    assert!(
        !o.status.success(),
        "an archived pipeline built: {:?}",
        text(&o)
    );
    let o = c.cli(&["up", "-p", "p"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("is archived"), "{err}");
    assert!(!ok(&c, &["ps"]).contains(" p "), "listed while archived");
    let all = ok(&c, &["ps", "--include-archived"]);
    assert!(
        all.lines()
            .any(|l| l.contains(" p ") && l.trim_end().ends_with("yes")),
        "{all}"
    );
    ok(&c, &["sp", "-p", "p", "-c", file, "-v", "who=again", "-n"]);
    ok(&c, &["up", "-p", "p"]);
    let out = ok(&c, &["tj", "-j", "p/build", "-w"]);
    assert!(out.contains("hello from again"), "{out}");
    let builds: serde_json::Value =
        serde_json::from_str(&ok(&c, &["builds", "-j", "p/build", "--json"])).unwrap();
    assert_eq!(
        builds.as_array().map(Vec::len),
        Some(2),
        "history kept: {builds}"
    );

    // op: the listing in the order set; --alphabetical; an unknown name
    // refused, the order as it was.
    let q = c.dir.path().join("q.yml");
    std::fs::write(&q, PIPELINE.replace("((who))", "q")).unwrap();
    ok(
        &c,
        &["sp", "-p", "a-first", "-c", q.to_str().unwrap(), "-n"],
    );
    let listed = |c: &Cluster| -> Vec<String> {
        let v: serde_json::Value = serde_json::from_str(&ok(c, &["ps", "--json"])).unwrap();
        v.as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(&c), ["p", "a-first"]);
    ok(&c, &["op", "-p", "a-first"]);
    assert_eq!(listed(&c), ["a-first", "p"]);
    ok(&c, &["order-pipelines", "--alphabetical"]);
    assert_eq!(listed(&c), ["a-first", "p"]);
    ok(&c, &["op", "-p", "p"]);
    let o = c.cli(&["op", "-p", "a-first", "-p", "nope"]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("not found"), "{:?}", text(&o));
    assert_eq!(listed(&c), ["p", "a-first"]);

    // ctc: a task's cache, warm on the second run, cold after it is
    // cleared.
    let cached = c.dir.path().join("cached.yml");
    std::fs::write(&cached, CACHED).unwrap();
    ok(
        &c,
        &["sp", "-p", "cached", "-c", cached.to_str().unwrap(), "-n"],
    );
    ok(&c, &["up", "-p", "cached"]);
    let run = |c: &Cluster| ok(c, &["tj", "-j", "cached/build", "-w"]);
    let first = run(&c);
    assert!(first.contains("cache-was-cold"), "{first}");
    let second = run(&c);
    assert!(
        second.contains("cache-was-warm"),
        "{second}\n{}",
        ok(&c, &["volumes"])
    );
    let out = ok(
        &c,
        &[
            "ctc",
            "-j",
            "cached/build",
            "-s",
            "fill",
            "-c",
            "other",
            "-n",
        ],
    );
    assert_eq!(out, "0 caches removed\n");
    assert!(run(&c).contains("cache-was-warm"), "a path not named stays");
    let out = ok(
        &c,
        &["clear-task-cache", "-j", "cached/build", "-s", "fill", "-n"],
    );
    assert_eq!(out, "1 caches removed\n");
    assert!(run(&c).contains("cache-was-cold"));
    let o = c.cli(&["ctc", "-j", "cached/nope", "-s", "fill", "-n"]);
    assert!(!o.status.success(), "{:?}", text(&o));

    // Errors that say what to do.
    let o = c.cli(&["ps", "--url", c.url.trim_start_matches("http://")]);
    let (_, err) = text(&o);
    assert!(err.contains(&format!("did you mean {}", c.url)), "{err}");
    let o = c.cli(&["ps", "--url", "http://127.0.0.1:1"]);
    let (_, err) = text(&o);
    assert_eq!(
        err.matches("Connection refused").count(),
        1,
        "the cause once: {err}"
    );
    assert!(err.contains("is web running there?"), "{err}");
}

const FETCHED: &str = r#"
resources:
- name: r
  type: mock
  source: {metadata: [{name: m, value: v}]}
jobs:
- name: build
  plan:
  - get: r
"#;

/// `crc` (`clear-resource-cache`): a get found in the cache the second
/// time is fetched again once its resource's caches are cleared; a version
/// filter that matches nothing removes nothing.
#[test]
fn e2e_clear_resource_cache_makes_the_next_get_fetch_again() {
    let c = Cluster::start();
    let _w = c.worker("crc-w1");
    c.wait_until("the worker runs", |ws| has(ws, "crc-w1", "running"));
    let file = c.dir.path().join("p.yml");
    std::fs::write(&file, FETCHED).unwrap();
    ok(&c, &["sp", "-p", "p", "-c", file.to_str().unwrap(), "-n"]);
    ok(&c, &["up", "-p", "p"]);
    let run = |c: &Cluster| {
        let o = c.cli(&["tj", "-j", "p/build", "-w"]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{out}\n{err}");
        format!("{out}\n{err}")
    };
    let first = run(&c);
    assert!(first.contains("fetched version"), "{first}");
    let second = run(&c);
    assert!(second.contains("found in the cache"), "{second}");

    let out = ok(&c, &["crc", "-r", "p/r", "-v", "no-such-field:x", "-n"]);
    assert_eq!(out, "0 caches removed\n");
    assert!(
        run(&c).contains("found in the cache"),
        "an unmatched version stays"
    );
    let out = ok(&c, &["clear-resource-cache", "-r", "p/r", "-n"]);
    assert_eq!(out, "1 caches removed\n");
    let third = run(&c);
    assert!(
        third.contains("fetched version") && !third.contains("found in the cache"),
        "{third}"
    );
    let o = c.cli(&["crc", "-r", "p/nope", "-n"]);
    assert!(!o.status.success());
    assert!(
        text(&o).1.contains("resource nope not found"),
        "{:?}",
        text(&o)
    );
}
