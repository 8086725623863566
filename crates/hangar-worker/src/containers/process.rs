//! The process runtime: the program runs on the host in `<dir>/work`, each
//! volume a symlink there. Read-only mounts are not enforced; what keeps the
//! program from the worker is its user and PID namespace (see `isolation`).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::spec::CheckedSpec;

/// Makes `work` with a symlink per mount (`work/<path>` -> the volume's data
/// dir, parents created) and returns the program's working directory.
///
/// The links are relative: the wrapper enters the working dir as root, and
/// the task's user may be unable to pass through the dirs above the work
/// dir (quickstart's data dir is 0700), which is the point.
pub(crate) fn prepare_work_dir(
    work: &Path,
    checked: &CheckedSpec,
    sources: &[PathBuf],
) -> io::Result<PathBuf> {
    fs::create_dir_all(work)?;
    for (mount, source) in checked.mounts.iter().zip(sources) {
        let link = work.join(&mount.path);
        if let Some(parent) = link.parent() {
            fs::create_dir_all(parent)?;
        }
        let from = link.parent().unwrap_or(work);
        std::os::unix::fs::symlink(super::isolation::relative_to(from, source), &link)?;
    }
    Ok(if checked.dir.is_empty() {
        work.to_path_buf()
    } else {
        work.join(&checked.dir)
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hangar_api::containers::{ContainerSpec, Mount, Runtime};

    use super::*;
    use crate::containers::spec::validate_spec;

    #[test]
    fn mounts_become_symlinks_to_the_volume_data_dirs_with_parents_made() {
        let tmp = tempfile::tempdir().unwrap();
        let vol = tmp.path().join("vol");
        fs::create_dir(&vol).unwrap();
        fs::write(vol.join("f"), "x").unwrap();
        let spec = ContainerSpec {
            handle: "t".into(),
            runtime: Runtime::Process,
            rootfs_volume: None,
            path: "true".into(),
            args: vec![],
            env: BTreeMap::new(),
            dir: Some("cache/go".into()),
            mounts: vec![Mount {
                volume: "v".into(),
                path: "cache/go".into(),
                read_only: false,
            }],
            memory_limit_bytes: None,
            cpu_shares: None,
            user: None,
            privileged: false,
        };
        let checked = validate_spec(&spec).unwrap();
        let work = tmp.path().join("work");
        let cwd = prepare_work_dir(&work, &checked, std::slice::from_ref(&vol)).unwrap();
        assert_eq!(cwd, work.join("cache/go"));
        assert_eq!(
            fs::read_link(work.join("cache/go")).unwrap(),
            Path::new("../../vol")
        );
        assert_eq!(fs::read_to_string(cwd.join("f")).unwrap(), "x");
    }
}
