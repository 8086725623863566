//! `hangar execute -o` into one directory twice: a link the first output
//! left there cannot make the second one land outside the directory.

use std::path::Path;
use std::process::Output;

use crate::common::{has, Cluster};

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn write(dir: &Path, name: &str, content: &str) {
    std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
    std::fs::write(dir.join(name), content).unwrap();
}

/// Step 1 leaves `up -> b/b/.../../..`, inside while `b` is missing; step 2
/// makes `b` a link to `.`, which would turn `up` into the way to `/`; step
/// 3 is an honest second output.
const TASK: &str = r#"
platform: linux
inputs: [{name: src}]
outputs: [{name: out}]
run:
  path: sh
  args:
  - -c
  - |
    case "$(cat src/step)" in
      1) ln -s b/b/b/b/b/b/b/b/b/b/b/b/b/b/b/b/../../../../../../../../../../../../../../../.. out/up ;;
      2) ln -s . out/b ;;
      3) echo three > out/three.txt ;;
    esac
"#;

fn listing(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let what = match std::fs::read_link(&p) {
                Ok(t) => format!("-> {}", t.display()),
                Err(_) => "file".into(),
            };
            (p.file_name().unwrap().to_string_lossy().into_owned(), what)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn a_second_output_into_one_dir_cannot_use_a_link_the_first_left_to_escape() {
    let c = Cluster::start();
    let _w = c.worker("worker-o1");
    c.wait_until("the worker runs", |ws| has(ws, "worker-o1", "running"));
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "task.yml", TASK);
    let execute = |step: &str| {
        write(dir.path(), "src/step", step);
        c.cli_in(
            dir.path(),
            &[
                "execute", "-c", "task.yml", "-i", "src=src", "-o", "out=out",
            ],
        )
    };
    let first = execute("1");
    let (out, err) = text(&first);
    assert!(first.status.success(), "{out}\n{err}");
    let out_dir = dir.path().join("out");
    let before = listing(&out_dir);
    assert_eq!(before.len(), 1, "{before:?}");

    let second = execute("2");
    let (out, err) = text(&second);
    assert!(!second.status.success(), "{out}\n{err}");
    assert!(
        err.contains("refused archive entry \"up\"") && err.contains("already in the volume"),
        "{err}"
    );
    assert_eq!(listing(&out_dir), before, "the output dir is unchanged");

    let third = execute("3");
    let (out, err) = text(&third);
    assert!(third.status.success(), "{out}\n{err}");
    assert_eq!(
        std::fs::read_to_string(out_dir.join("three.txt")).unwrap(),
        "three\n"
    );
}
