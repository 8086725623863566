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
use nix::sys::signal::Signal;

fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// A one-off build of `plan`, with no uploaded artifacts.
fn submit(client: &Client, name: &str, plan: serde_json::Value) -> Build {
    block(client.create_build(&CreateBuild {
        resource_types: serde_json::Value::Null,
        name: Some(name.into()),
        plan,
        artifacts: Default::default(),
        team: None,
    }))
    .unwrap()
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
    let build = submit(&client, "pull", plan);
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

fn tar_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append_data(&mut h, name, *data).unwrap();
    }
    b.into_inner().unwrap()
}

fn names_in(tar_bytes: &[u8]) -> Vec<String> {
    let mut names: Vec<String> = tar::Archive::new(tar_bytes)
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .filter(|n| n.ends_with(".txt"))
        .collect();
    names.sort();
    names
}

/// An upload in each encoding its content type names arrives whole, and
/// a download in each encoding asked for; an upload of another type is
/// refused with 415 and makes no volume.
#[test]
fn uploads_and_downloads_travel_plain_gzipped_or_zstd_compressed() {
    let c = Cluster::start();
    let _w = c.worker_with("w", &c.work_dir("w"), &["--tag", "w"]);
    c.wait_until("it runs", |ws| has(ws, "w", "running"));
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let plain = tar_of(&[("a.txt", b"alpha"), ("d/b.txt", b"beta")]);
    let gzipped = {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &plain).unwrap();
        gz.finish().unwrap()
    };
    let zstd = zstd::encode_all(&plain[..], 1).unwrap();
    let tags = vec!["w".to_string()];
    for (encoding, body) in [("none", &plain), ("gzip", &gzipped), ("zstd", &zstd)] {
        let artifact = block(client.upload_artifact_encoded(
            None,
            "linux",
            &tags,
            encoding,
            reqwest::Body::from(body.clone()),
        ))
        .unwrap_or_else(|e| panic!("{encoding}: {e}"));
        let plan = serde_json::json!([{"task": "show", "tags": ["w"], "config": {
            "platform": "linux", "inputs": [{"name": "in"}], "outputs": [{"name": "out"}],
            "run": {"path": "sh", "args": ["-c", "cat in/a.txt in/d/b.txt && cp -r in/. out/"]}}}]);
        let build = block(client.create_build(&CreateBuild {
            resource_types: serde_json::Value::Null,
            name: Some(format!("upload-{encoding}")),
            plan,
            artifacts: [("in".to_string(), artifact.handle)].into(),
            team: None,
        }))
        .unwrap();
        let (build, events) = run_to_end(&client, build.id);
        assert_eq!(build.status.as_str(), "succeeded", "{encoding}: {events:?}");
        let log: String = events
            .iter()
            .filter(|e| e.kind == BuildEventKind::Log)
            .map(|e| e.payload.as_str())
            .collect();
        assert!(log.contains("alphabeta"), "{encoding}: {log}");
        for download in ["none", "gzip", "zstd"] {
            // One runtime for the answer and its body, whose connection
            // is that runtime's.
            let (content_type, bytes) = block(async {
                let resp = client
                    .download_artifact_encoded(build.id, "out", download)
                    .await
                    .unwrap();
                let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
                (content_type, resp.bytes().await.unwrap())
            });
            let tar_bytes = match download {
                "none" => bytes.to_vec(),
                "gzip" => {
                    let mut out = Vec::new();
                    std::io::Read::read_to_end(
                        &mut flate2::read::GzDecoder::new(&bytes[..]),
                        &mut out,
                    )
                    .unwrap();
                    out
                }
                _ => zstd::decode_all(&bytes[..]).unwrap(),
            };
            assert_eq!(
                names_in(&tar_bytes),
                ["a.txt", "d/b.txt"],
                "uploaded {encoding}, downloaded {download} ({content_type})"
            );
            assert_eq!(content_type, hangar_api::builds::tar_content_type(download));
        }
    }
    let before = block(client.volumes(Some("w"))).unwrap().len();
    let refused = block(
        reqwest::Client::new()
            .post(format!("{}/api/v1/artifacts?tags=w", c.url))
            .bearer_auth(ADMIN)
            .header("content-type", "application/json")
            .body(plain.clone())
            .send(),
    )
    .unwrap();
    assert_eq!(
        refused.status(),
        reqwest::StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(block(client.volumes(Some("w"))).unwrap().len(), before);
}

/// The worker a build's step ran (or runs) on, once it is placed.
fn worker_of(client: &Client, build: i64, step: &str) -> String {
    wait_for_step(client, build, step, |s| s.worker.clone())
}

fn wait_for_step<T>(
    client: &Client,
    build: i64,
    step: &str,
    f: impl Fn(&hangar_api::builds::BuildStep) -> Option<T>,
) -> T {
    crate::common::wait_for(
        &format!("step {step} of build {build}"),
        Duration::from_secs(60),
        || {
            let b = block(client.build(build)).unwrap();
            b.steps.iter().find(|s| s.step_id == step).and_then(&f)
        },
    )
}

/// A pull in flight whose source worker dies: the pull fails as the
/// source's, the step is retried, the input (made by a get) is fetched
/// again on another worker, and the build ends green with the bytes.
/// The source is frozen before the pull reaches it, so the pull is
/// certainly in flight when it is killed.
#[test]
fn a_pull_whose_source_dies_in_flight_fetches_the_input_again_elsewhere() {
    // A TTL that outlasts the test: the frozen maker is stalled by its
    // death (its presence closing), not by its silence.
    let c = Cluster::start_with(&["--heartbeat-ttl", "5m"]);
    let makers = [
        c.worker_with("maker-1", &c.work_dir("maker-1"), &["--tag", "maker"]),
        c.worker_with("maker-2", &c.work_dir("maker-2"), &["--tag", "maker"]),
    ];
    let _reader = c.worker_with("reader", &c.work_dir("reader"), &["--tag", "reader"]);
    c.wait_until("all run", |ws| {
        ["maker-1", "maker-2", "reader"]
            .iter()
            .all(|n| has(ws, n, "running"))
    });
    let plan = serde_json::json!([
        {"get": "thing", "type": "mock", "tags": ["maker"],
            "source": {"versions": ["v1"], "files": {"payload.txt": "the payload"}}},
        // Time to freeze the maker between the get and the read.
        {"task": "pause", "tags": ["reader"], "config": {"platform": "linux",
            "run": {"path": "sh", "args": ["-c", "sleep 2"]}}},
        {"task": "read", "tags": ["reader"], "config": {"platform": "linux",
            "inputs": [{"name": "thing"}],
            "run": {"path": "sh", "args": ["-c", "echo GOT $(cat thing/payload.txt)"]}}},
    ]);
    let client = Client::new(&c.url, ADMIN, Duration::from_secs(30)).unwrap();
    let build = submit(&client, "pull-source-dies", plan);
    let source = worker_of(&client, build.id, "0");
    let maker = &makers[usize::from(source == "maker-2")];
    wait_for_step(&client, build.id, "1", |s| s.worker.as_ref().map(|_| ()));
    // Frozen, its socket still accepts the reader's connection and
    // answers nothing; the pull hangs on it until it is killed.
    maker.signal(Signal::SIGSTOP);
    let copying = format!("copying input thing from worker {source} to reader");
    crate::common::wait_for("the pull to start", Duration::from_secs(60), || {
        let page = block(client.build_events(build.id, 0, 0)).unwrap();
        page.events
            .iter()
            .any(|e| e.payload.contains(&copying))
            .then_some(())
    });
    std::thread::sleep(Duration::from_millis(200));
    maker.signal(Signal::SIGKILL);
    maker.signal(Signal::SIGCONT);

    let (build, events) = run_to_end(&client, build.id);
    let log: String = events.iter().map(|e| format!("{}\n", e.payload)).collect();
    assert_eq!(build.status.as_str(), "succeeded", "{log}");
    assert!(log.contains("GOT the payload"), "{log}");
    // The pull broke off as the source's failure, and the step was retried.
    assert!(
        log.contains(&format!("worker {source} could not be reached"))
            && log.contains("retrying task read (attempt 2 of 3)"),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "input thing was on worker {source}, which is gone or stalled; fetching thing again"
        )),
        "{log}"
    );
    let other = if source == "maker-1" {
        "maker-2"
    } else {
        "maker-1"
    };
    assert!(
        log.contains(&format!(
            "copying input thing from worker {other} to reader"
        )),
        "{log}"
    );
    // The copy that brought the input was the reader's pull; the one that
    // broke off logged no success.
    assert_eq!(
        c.log_lines("reader", "pulled volume from another worker"),
        1
    );
    assert!(!log.contains("disappeared"), "{log}");
}
