//! An artifact made by a task on one worker and read by a task on another:
//! the reading worker pulls it straight from the maker (web hands it a
//! grant for that volume) and gets every byte, mode and link.

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use crate::common::{has, Cluster, ADMIN};
use hangar_api::builds::{Build, BuildEventKind, CreateBuild};
use hangar_client::Client;

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// Every event of a build that ended (waiting for its end as it comes).
fn run_to_end(client: &Client, id: i64) -> (Build, Vec<hangar_api::builds::BuildEvent>) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut events = Vec::new();
    loop {
        let after = events
            .last()
            .map_or(0, |e: &hangar_api::builds::BuildEvent| e.id);
        let page = block(client.build_events(id, after, 2_000)).unwrap();
        let done = page.status.is_final() && page.events.is_empty();
        events.extend(page.events);
        if done {
            return (block(client.build(id)).unwrap(), events);
        }
        assert!(
            Instant::now() < deadline,
            "build {id} did not end: {events:?}"
        );
    }
}

#[test]
fn an_output_made_on_one_worker_is_read_on_another_whole() {
    let c = Cluster::start();
    let _maker = c.worker_with("maker", &c.work_dir("maker"), &["--tag", "maker"]);
    let _reader = c.worker_with("reader", &c.work_dir("reader"), &["--tag", "reader"]);
    c.wait_until("both run", |ws| {
        has(ws, "maker", "running") && has(ws, "reader", "running")
    });
    // A few MiB of random bytes (several chunks of the stream), a tree, an
    // executable, a link: the reader prints what it got, as the maker did.
    let listing = "cd out && find . | sort && sha256sum big.bin dir/small.txt && \
                   ls -l run.sh | cut -c1-10 && readlink link";
    let make = format!(
        "head -c 5000000 /dev/urandom > out/big.bin && mkdir out/dir && \
         echo small > out/dir/small.txt && printf '#!/bin/sh\\n' > out/run.sh && \
         chmod 755 out/run.sh && ln -s dir/small.txt out/link && echo MADE && ({listing})"
    );
    let plan = serde_json::json!([
        {"task": "make", "tags": ["maker"], "config": {"platform": "linux",
            "outputs": [{"name": "out"}],
            "run": {"path": "sh", "args": ["-c", make]}}},
        {"task": "read", "tags": ["reader"], "config": {"platform": "linux",
            "inputs": [{"name": "out"}],
            "run": {"path": "sh", "args": ["-c", format!("echo READ && ({listing})")]}}},
    ]);
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let build = block(client.create_build(&CreateBuild {
        resource_types: serde_json::Value::Null,
        name: Some("pull".into()),
        plan,
        artifacts: Default::default(),
    }))
    .unwrap();
    let (build, events) = run_to_end(&client, build.id);
    let text = |step: &str| -> String {
        events
            .iter()
            .filter(|e| e.kind == BuildEventKind::Log && e.step.as_deref() == Some(step))
            .map(|e| e.payload.as_str())
            .collect()
    };
    assert_eq!(build.status.as_str(), "succeeded", "{events:?}");
    let made = text("0");
    let read = text("1");
    let after = |log: &str, mark: &str| log.split_once(mark).map(|(_, rest)| rest.to_string());
    let made = after(&made, "MADE").expect("the maker's listing");
    let read = after(&read, "READ").expect("the reader's listing");
    assert!(
        made.contains("big.bin") && made.contains("-rwxr-xr-x"),
        "{made}"
    );
    assert_eq!(read, made, "what the reader got differs from what was made");
    assert!(
        events.iter().any(|e| e
            .payload
            .contains("copying input out from worker maker to reader")),
        "the input was not copied between the workers: {events:?}"
    );
    // Pulled by the reader from the maker, not relayed through web.
    assert_eq!(
        c.log_lines("reader", "pulled volume from another worker"),
        1
    );
    assert_eq!(c.log_lines("maker", "refused a stream-out"), 0);
}
