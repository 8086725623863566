//! An input or output at `path: .`, as Concourse has it: the working
//! directory itself is that artifact, and the task's other artifacts are
//! mounted inside it; an absolute path is below the working directory. Run through `hangar execute` on a real web and
//! worker (the process runtime, sandboxed on a root worker).

// Tests block freely: each runs on a thread of its own, and these drive
// processes and wait for them.
#![allow(clippy::disallowed_methods)]

use std::path::Path;

use crate::common::{has, text, Cluster};

fn write(dir: &Path, name: &str, content: &str) {
    std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
    std::fs::write(dir.join(name), content).unwrap();
}

/// The input is the working directory; an output and another input sit
/// inside it.
const INPUT_AT_DOT: &str = r#"
platform: linux
inputs:
- {name: repo, path: .}
- {name: tools}
outputs: [{name: out}]
run:
  path: sh
  args:
  - -c
  - |
    set -e
    echo "pwd=$(pwd)"
    echo "readme=$(cat README)"
    echo "tool=$(cat tools/tool.sh)"
    cd lib && echo "entered=$(cat code.txt)" && cd ..
    echo "found=$(find . -name code.txt)"
    echo "made by the task" > out/result.txt
"#;

/// The output is the working directory: what the task writes at the top
/// is the output, with an input mounted inside it.
const OUTPUT_AT_DOT: &str = r#"
platform: linux
inputs: [{name: repo}]
outputs: [{name: all, path: .}]
run:
  path: sh
  args: [-c, "cp repo/README copied.txt && echo top > top.txt"]
"#;

/// An absolute output path is joined onto the working directory, as
/// Concourse joins it.
const ABSOLUTE_OUTPUT: &str = r#"
platform: linux
outputs: [{name: arts, path: /tmp/artifacts}]
run:
  path: sh
  args: [-c, "echo joined > tmp/artifacts/f.txt"]
"#;

#[test]
fn an_artifact_at_the_working_directory_is_that_directory() {
    let c = Cluster::start();
    let _w = c.worker("worker-dot");
    c.wait_until("the worker runs", |ws| has(ws, "worker-dot", "running"));
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "input.yml", INPUT_AT_DOT);
    write(d, "output.yml", OUTPUT_AT_DOT);
    write(d, "repo/README", "hello from the repo");
    write(d, "repo/lib/code.txt", "the code");
    write(d, "tools/tool.sh", "a tool");

    let run = c.cli_in(
        d,
        &[
            "execute",
            "-c",
            "input.yml",
            "-i",
            "repo=repo",
            "-i",
            "tools=tools",
            "-o",
            "out=got",
        ],
    );
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    for line in [
        "pwd=/tmp/build/work",
        "readme=hello from the repo",
        "tool=a tool",
        "entered=the code",
        "found=./lib/code.txt",
    ] {
        assert!(out.contains(line), "{line}:\n{out}\n{err}");
    }
    assert_eq!(
        std::fs::read_to_string(d.join("got/result.txt")).unwrap(),
        "made by the task\n"
    );
    // The input was the task's copy: the uploaded directory is unchanged.
    assert!(!d.join("repo/out").exists() && !d.join("repo/tools").exists());

    let run = c.cli_in(
        d,
        &[
            "execute",
            "-c",
            "output.yml",
            "-i",
            "repo=repo",
            "-o",
            "all=all",
        ],
    );
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    assert_eq!(
        std::fs::read_to_string(d.join("all/top.txt")).unwrap(),
        "top\n"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("all/copied.txt")).unwrap(),
        "hello from the repo"
    );
    // The input mounted inside it is not part of the output.
    assert!(!d.join("all/repo/README").exists());

    write(d, "absolute.yml", ABSOLUTE_OUTPUT);
    let run = c.cli_in(d, &["execute", "-c", "absolute.yml", "-o", "arts=arts"]);
    let (out, err) = text(&run);
    assert!(run.status.success(), "{out}\n{err}");
    assert_eq!(
        std::fs::read_to_string(d.join("arts/f.txt")).unwrap(),
        "joined\n"
    );
}
