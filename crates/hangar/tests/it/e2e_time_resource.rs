//! The built-in `time` type end to end: a real web and worker, a pipeline
//! whose job is triggered by a `time` resource on a one-second interval.
//! The job gets builds by itself, each with a time as its input version,
//! and its task reads the files `in` wrote.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use crate::common::{has, json_of, text, wait_for, Cluster};

/// `2024-06-03T12:00:00Z` or `2024-06-03T12:00:00.123Z`: what the type
/// writes in UTC.
fn is_utc_time(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    b.len() >= 20
        && digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && b[10] == b'T'
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19)
        && s.ends_with('Z')
        && (b.len() == 20 || (b[19] == b'.' && digits(20..b.len() - 1)))
}

#[test]
fn a_time_resource_triggers_its_job_with_a_time_as_the_version() {
    let c = Cluster::start();
    let _w = c.worker("worker-t");
    c.wait_until("the worker runs", |ws| has(ws, "worker-t", "running"));
    let dir = c.dir.path();
    std::fs::write(
        dir.join("pipeline.yml"),
        r#"
resources:
- name: tick
  type: time
  source: {interval: 1s}
  check_every: 1s
jobs:
- name: on-tick
  plan:
  - get: tick
    trigger: true
  - task: show
    config:
      platform: linux
      inputs: [{name: tick}]
      run: {path: sh, args: [-c, "cat tick/timestamp; echo; cat tick/epoch"]}
"#,
    )
    .unwrap();
    let set = c.cli_in(
        dir,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            "pipeline.yml",
            "--non-interactive",
        ],
    );
    assert!(set.status.success(), "{:?}", text(&set));
    let unpause = c.cli(&["unpause-pipeline", "-p", "p"]);
    assert!(unpause.status.success(), "{:?}", text(&unpause));

    // The first check's version triggers a build, which succeeds.
    let build = wait_for(
        "a finished build of on-tick",
        Duration::from_secs(60),
        || {
            let builds = json_of(&c, &["builds", "-j", "p/on-tick", "--json"]);
            builds.as_array().and_then(|all| {
                all.iter()
                    .rev()
                    .find(|b| b["status"] != "pending" && b["status"] != "started")
                    .cloned()
            })
        },
    );
    assert_eq!(build["status"], "succeeded", "{build}");
    let inputs = build["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 1, "{build}");
    assert_eq!(inputs[0]["resource"], "tick");
    let time = inputs[0]["version"]["time"].as_str().unwrap().to_string();
    assert!(is_utc_time(&time), "{time}");
    assert_eq!(
        inputs[0]["version"].as_object().unwrap().len(),
        1,
        "{build}"
    );

    // The task read what `in` wrote: the time as Go prints it, and epoch.
    let watched = c.cli(&["watch", "-b", &build["id"].to_string()]);
    let (out, err) = text(&watched);
    assert!(watched.status.success(), "{out}\n{err}");
    // (Its output follows the log of the get, which names the version.)
    assert!(out.contains(&format!("time: {time}\n")), "{out}");
    let (date, clock) = (&time[..10], &time[11..19]);
    let lines: Vec<&str> = out.lines().collect();
    let stamp = lines
        .iter()
        .position(|l| l.starts_with(&format!("{date} {clock}")))
        .unwrap_or_else(|| panic!("no timestamp in {out}"));
    assert!(lines[stamp].ends_with(" +0000 UTC"), "{out}");
    let epoch: i64 = lines[stamp + 1].parse().unwrap();
    assert!(epoch > 1_700_000_000, "{out}");

    // A second later the next check has a newer version.
    let versions = wait_for("a second version", Duration::from_secs(30), || {
        let v = json_of(&c, &["resource-versions", "-r", "p/tick", "--json"]);
        (v.as_array().unwrap().len() >= 2).then_some(v)
    });
    let times: Vec<&str> = versions
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"]["time"].as_str().unwrap())
        .collect();
    assert!(times.iter().all(|t| is_utc_time(t)), "{times:?}");
    assert!(times.contains(&time.as_str()), "{times:?}");
    assert_ne!(times[0], times[1]);
}
