//! One more process in a container (`intercept`): in the same sandbox as
//! the container's own program. A container whose program has exited (a
//! failed step's, kept for debugging) is entered again (see `reenter`).
//!
//! A runc container gets `runc exec` of its own `process` from the bundle
//! (its user, environment, working directory, capabilities, seccomp and
//! no-new-privileges) with the arguments replaced: nothing of the sandbox is
//! chosen here again. A host program gets what its container's program got
//! when it started: the drop to its user, its environment, its working dir
//! and its cgroup.

use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use hangar_api::intercept::ExecRequest;
use serde_json::Value;

use super::{io_err, isolation, spec, store, write_private, ContainerError, ContainerManager};

/// How to start the process; [`ContainerManager::exec_plan`] makes it.
#[derive(Debug)]
pub struct ExecPlan {
    pub argv: Vec<OsString>,
    /// The process's whole environment.
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// Files the process writes its own pid to before it runs the program
    /// (joining its container's cgroup).
    pub cgroup_procs: Vec<PathBuf>,
    /// A dir of files made for this process only; it goes with the plan,
    /// which its holder keeps until the process has ended.
    pub scratch: Option<PathBuf>,
    /// An exited container entered again: undone when the plan goes.
    pub(super) reentry: Option<super::reenter::Reentry>,
}

impl ExecPlan {
    /// Ends what the plan holds now, on this thread (it blocks): its
    /// scratch files go, and an exited container entered again is left,
    /// free for the next session.
    pub fn finish(mut self) {
        if let Some(d) = self.scratch.take() {
            let _ = std::fs::remove_dir_all(d);
        }
        if let Some(r) = self.reentry.take() {
            r.leave();
        }
    }
}

impl Drop for ExecPlan {
    fn drop(&mut self) {
        if let Some(d) = self.scratch.take() {
            let _ = std::fs::remove_dir_all(d);
        }
        // A reentry's own drop leaves on a thread of its own.
        drop(self.reentry.take());
    }
}

impl ContainerManager {
    /// How to run `req` in container `handle`: beside its program, or,
    /// once that has exited, in the container entered again.
    pub fn exec_plan(&self, handle: &str, req: &ExecRequest) -> Result<ExecPlan, ContainerError> {
        req.check().map_err(|why| ContainerError::InvalidSpec {
            field: "process".into(),
            reason: why,
        })?;
        let inner = &self.inner;
        let not_found = || ContainerError::NotFound {
            handle: handle.to_string(),
        };
        hangar_volumes::validate_handle(handle).map_err(|_| not_found())?;
        let rec = inner.load(handle)?.ok_or_else(not_found)?;
        let exited = inner.status(&rec)?.exit.is_some();
        let mut args = vec![req.path.clone()];
        args.extend(req.args.iter().cloned());
        let reentry = if exited {
            Some(inner.reenter(&rec)?)
        } else {
            None
        };
        if rec.meta.runc {
            let bundle = rec.dir.join(store::BUNDLE_DIR).join("config.json");
            let config: Value = store::read_json(&bundle)
                .map_err(io_err(format!("read {}", bundle.display())))?
                .ok_or_else(|| ContainerError::Corrupt {
                    handle: handle.to_string(),
                    reason: "no bundle".into(),
                })?;
            let no_process = || ContainerError::Corrupt {
                handle: handle.to_string(),
                reason: "the bundle has no process".into(),
            };
            let process = exec_process(&config, args, req).ok_or_else(no_process)?;
            let scratch = rec.dir.join(format!("exec-{}", store::random_suffix()));
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&scratch)
                .map_err(io_err(format!("make {}", scratch.display())))?;
            let mut plan = ExecPlan {
                argv: vec![],
                env: vec![("PATH".into(), isolation::TASK_PATH.into())],
                cwd: rec.dir.clone(),
                cgroup_procs: vec![],
                scratch: Some(scratch.clone()),
                reentry,
            };
            if plan.reentry.is_some() {
                // A bundle of its own in the scratch dir: `runc run` of
                // the container's config with this process.
                let config = super::runc::reentry_config(&config, process, |source| {
                    std::path::Path::new(source).exists()
                })
                .ok_or_else(no_process)?;
                write_private(
                    &scratch.join("config.json"),
                    &serde_json::to_vec_pretty(&config).expect("json"),
                )?;
                plan.argv = inner
                    .runtime
                    .run_runc(handle, &scratch)
                    .map_err(io_err("runc run"))?;
                return Ok(plan);
            }
            let file = scratch.join("process.json");
            write_private(&file, &serde_json::to_vec(&process).expect("json"))?;
            plan.argv = inner
                .runtime
                .exec_runc(handle, &file, &scratch.join("state"))
                .map_err(io_err("runc exec"))?;
            return Ok(plan);
        }
        // A host program: as `Inner::start` ran the container's own.
        let checked = spec::validate_spec_with(&rec.spec, true)?;
        let mut argv = isolation::drop_prefix(&inner.features().isolation, rec.meta.user);
        argv.extend(args.into_iter().map(OsString::from));
        let mut env = super::lifecycle::host_program_env(&rec);
        if req.tty {
            env.push(("TERM".into(), "xterm".into()));
        }
        let cgroup_procs = rec
            .meta
            .cgroup
            .as_ref()
            .map(|cg| {
                inner
                    .runtime
                    .cgroup_procs(cg, rec.spec.cpu_shares.is_some())
            })
            .unwrap_or_default();
        Ok(ExecPlan {
            argv,
            env,
            cwd: rec.dir.join(store::WORK_DIR).join(&checked.dir),
            cgroup_procs,
            scratch: None,
            reentry,
        })
    }
}

/// The container's own OCI `process` with `args`, on a terminal when the
/// request asks (with its size, and a `TERM` when the image sets none).
fn exec_process(config: &Value, args: Vec<String>, req: &ExecRequest) -> Option<Value> {
    let mut process = config.get("process")?.clone();
    let obj = process.as_object_mut()?;
    obj.insert("args".into(), args.into());
    obj.insert("terminal".into(), req.tty.into());
    obj.remove("consoleSize");
    if req.tty {
        if let (Some(cols), Some(rows)) = (req.cols, req.rows) {
            obj.insert(
                "consoleSize".into(),
                serde_json::json!({"height": rows, "width": cols}),
            );
        }
        let env = obj.entry("env").or_insert_with(|| Value::Array(vec![]));
        if let Some(list) = env.as_array_mut() {
            if !list
                .iter()
                .any(|e| e.as_str().is_some_and(|e| e.starts_with("TERM=")))
            {
                list.push("TERM=xterm".into());
            }
        }
    }
    Some(process)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(tty: bool) -> ExecRequest {
        ExecRequest {
            path: "sh".into(),
            args: vec!["-c".into(), "id".into()],
            tty,
            cols: tty.then_some(100),
            rows: tty.then_some(30),
        }
    }

    #[test]
    fn an_exec_keeps_everything_of_the_containers_process_but_its_arguments() {
        let config = serde_json::json!({"process": {
            "args": ["/bin/task"], "user": {"uid": 1000, "gid": 1000},
            "cwd": "/tmp/build/work", "env": ["PATH=/bin", "SECRET_PARAM=x"],
            "capabilities": {"bounding": ["CAP_CHOWN"]}, "noNewPrivileges": true,
            "terminal": false,
        }});
        let out = exec_process(&config, vec!["sh".into()], &req(false)).unwrap();
        assert_eq!(out["args"], serde_json::json!(["sh"]));
        assert_eq!(out["user"], config["process"]["user"]);
        assert_eq!(out["cwd"], "/tmp/build/work");
        assert_eq!(out["capabilities"], config["process"]["capabilities"]);
        assert_eq!(out["noNewPrivileges"], true);
        assert_eq!(out["env"], config["process"]["env"]);
        assert_eq!(out["terminal"], false);
        assert!(out.get("consoleSize").is_none());
    }

    #[test]
    fn a_terminal_gets_its_size_and_a_term() {
        let config = serde_json::json!({"process": {"args": ["x"], "env": ["PATH=/bin"]}});
        let out = exec_process(&config, vec!["sh".into()], &req(true)).unwrap();
        assert_eq!(out["terminal"], true);
        assert_eq!(
            out["consoleSize"],
            serde_json::json!({"height": 30, "width": 100})
        );
        assert_eq!(out["env"], serde_json::json!(["PATH=/bin", "TERM=xterm"]));
        // The image's own TERM stays.
        let config = serde_json::json!({"process": {"args": ["x"], "env": ["TERM=vt100"]}});
        let out = exec_process(&config, vec!["sh".into()], &req(true)).unwrap();
        assert_eq!(out["env"], serde_json::json!(["TERM=vt100"]));
        assert!(exec_process(&serde_json::json!({}), vec![], &req(true)).is_none());
    }
}
