//! Making a container: the checks that refuse a spec before anything is
//! made, then the staging dir, its meta, cgroup, network, root and bundle or
//! work dir, renamed into place, and the start; whatever was made is undone
//! when a step fails.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hangar_api::containers::{Container, ContainerSpec, Runtime};
use hangar_core::users::Ids;

use super::cgroup::{self, Cgroups};
use super::store::{self, Meta, CREATING_PREFIX};
use super::{
    image, io_err, isolation, process, runc, sandbox, spec, write_private, ContainerError, Inner,
    PRIVILEGED_REFUSED, PRIVILEGED_ROOTLESS,
};

impl Inner {
    /// The sandbox of an unprivileged container on this worker: its ids
    /// start at the task base (`--task-user`).
    pub(super) fn sandbox(&self) -> sandbox::Sandbox {
        sandbox::Sandbox {
            ids: Some(self.task_base),
            network: sandbox::NetworkNs::New,
            resolv_conf: self
                .features()
                .rootless
                .as_ref()
                .and_then(|r| r.resolv_conf.clone()),
            pids_limit: self.pids_limit,
            rootless: self.features().rootless.clone(),
        }
    }

    /// Gives container `handle` its network: a namespace of the worker's
    /// task network (and the nameservers it reaches), or runc's own
    /// loopback-only one where the worker has none. Undone by
    /// [`Self::release_network`].
    pub(super) fn attach_network(
        &self,
        handle: &str,
        sandbox: &mut sandbox::Sandbox,
    ) -> Result<(), ContainerError> {
        if self.features().network.is_some() {
            self.runtime
                .attach_network(handle, sandbox)
                .map_err(|reason| ContainerError::Unsupported { reason })?;
        }
        Ok(())
    }

    pub(super) fn release_network(&self, handle: &str) {
        if self.features().network.is_some() {
            self.runtime.release_network(handle);
        }
    }

    pub(super) fn create(
        self: &Arc<Self>,
        spec: ContainerSpec,
    ) -> Result<Container, ContainerError> {
        // First of all: a privileged container runs as real root, which
        // only `--allow-privileged` allows; refused, nothing is made.
        if spec.privileged && !self.allow_privileged {
            return Err(ContainerError::Unsupported {
                reason: PRIVILEGED_REFUSED.into(),
            });
        }
        if spec.privileged && self.features().rootless.is_some() {
            return Err(ContainerError::Unsupported {
                reason: PRIVILEGED_ROOTLESS.into(),
            });
        }
        // runc runs every container in the sandbox: an image's, and a
        // process container's over the host's system dirs.
        let is_runc = spec.runtime == Runtime::Runc
            || (spec.runtime == Runtime::Process && self.sandbox_process);
        let checked = spec::validate_spec_with(&spec, !is_runc)?;
        if is_runc && self.features().runc.is_none() {
            return Err(ContainerError::Unsupported {
                reason: "runtime runc: no runc binary on PATH or in /usr/sbin (install the runc package)".into(),
            });
        }
        let handle = spec.handle.clone();
        let _ops = self.lock();
        let dir = self.dir(&handle);
        if fs::symlink_metadata(&dir).is_ok() {
            return Err(ContainerError::AlreadyExists { handle });
        }
        let volume_dir = |volume: &str, field: String| -> Result<PathBuf, ContainerError> {
            match self.volumes.get(volume)? {
                Some(v) => Ok(v.path),
                None => Err(ContainerError::VolumeNotFound {
                    volume: volume.to_string(),
                    field,
                }),
            }
        };
        // A rootfs volume in Concourse's image layout gives its `rootfs/`
        // and the image's config; any other is the root itself.
        let (rootfs, image_config) = match &spec.rootfs_volume {
            Some(v) if spec.runtime == Runtime::Runc => {
                let (root, config) = image::open(&volume_dir(v, "rootfs_volume".into())?)?;
                (Some(root), config)
            }
            Some(v) => (
                Some(volume_dir(v, "rootfs_volume".into())?),
                image::ImageConfig::default(),
            ),
            None => (None, image::ImageConfig::default()),
        };
        let sources = checked
            .mounts
            .iter()
            .enumerate()
            .map(|(i, m)| volume_dir(&m.volume, format!("mounts[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        let mut sandbox = self.sandbox();
        if spec.privileged {
            // Allowed above: real root with every capability (root on
            // this worker), no user namespace, no seccomp filter.
            sandbox.ids = None;
        }
        // The user inside the container, and the host ids its mounts go to.
        let (container_user, user) = if is_runc {
            let inside =
                self.container_user(&spec, rootfs.as_deref(), image_config.user.as_deref())?;
            let host = match sandbox.ids {
                Some(base) if self.features().root => {
                    let inside = inside.unwrap_or(Ids { uid: 0, gid: 0 });
                    Some(Ids {
                        uid: sandbox::shifted(inside.uid, base.uid),
                        gid: sandbox::shifted(inside.gid, base.gid),
                    })
                }
                _ => None,
            };
            (inside, host)
        } else {
            let user = self.task_user(&spec)?;
            (user, user)
        };

        // The cgroup: required for a memory limit, for CPU shares and for
        // runc; otherwise made when possible (it lets destroy find every
        // process).
        // A rootless worker's runc runs without one where it was delegated
        // none.
        let rootless = self.features().rootless.is_some();
        let required = spec.memory_limit_bytes.is_some()
            || spec.cpu_shares.is_some()
            || (is_runc && !rootless);
        let unsupported = |why: &str| ContainerError::Unsupported {
            reason: if is_runc {
                format!("runtime runc needs a memory cgroup: {why}")
            } else if spec.memory_limit_bytes.is_some() {
                format!("memory_limit_bytes cannot be enforced on this worker: {why}")
            } else {
                cpu_unsupported(spec.cpu_shares, why)
            },
        };
        let features = self.features();
        if let (Some(_), Ok(_), Err(why)) =
            (spec.cpu_shares, &features.cgroups, &features.cpu_shares)
        {
            return Err(ContainerError::Unsupported {
                reason: cpu_unsupported(spec.cpu_shares, why),
            });
        }
        let mut cgroup = match &features.cgroups {
            Ok(version) => Some(Cgroups::reference(
                *version,
                &format!("{handle}-{}", store::random_suffix()),
            )),
            Err(why) if required => return Err(unsupported(why)),
            Err(_) => None,
        };

        let staging = self.root.join(format!(
            "{CREATING_PREFIX}{handle}-{}",
            store::random_suffix()
        ));
        // What was begun of the host's side, undone in reverse when a later
        // step fails.
        let (mut cgroup_begun, mut network_begun, mut root_begun) = (false, false, false);
        let made = (|| -> Result<(), ContainerError> {
            fs::create_dir(&staging).map_err(io_err(format!("create {}", staging.display())))?;
            isolation::set_mode(&staging, 0o711)
                .map_err(io_err(format!("protect {}", staging.display())))?;
            let mut meta = Meta {
                started_at: store::now_millis(),
                cgroup: cgroup.clone(),
                runc: is_runc,
                user,
            };
            // The cgroup is named on disk before it exists, so open can
            // remove it if the worker dies right here.
            self.write_meta(&staging, &meta)?;
            if let Some(cg) = &cgroup {
                cgroup_begun = true;
                if let Err(why) =
                    self.runtime
                        .make_cgroup(cg, spec.memory_limit_bytes, spec.cpu_shares)
                {
                    if required {
                        return Err(unsupported(&why));
                    }
                    tracing::debug!(%handle, error = %why, "running without a cgroup");
                    cgroup = None;
                    meta.cgroup = None;
                    self.write_meta(&staging, &meta)?;
                }
            }
            match &cgroup {
                cg if is_runc && (cg.is_some() || rootless) => {
                    // Only now, past every check: a refused spec holds no
                    // network.
                    network_begun = true;
                    self.attach_network(&handle, &mut sandbox)?;
                    let bundle = staging.join(store::BUNDLE_DIR);
                    fs::create_dir(&bundle)
                        .map_err(io_err(format!("create {}", bundle.display())))?;
                    let binds: Vec<runc::BindMount> = checked
                        .mounts
                        .iter()
                        .zip(&sources)
                        .map(|(m, source)| runc::BindMount {
                            path: m.path.clone(),
                            source: source.clone(),
                            read_only: m.read_only,
                        })
                        .collect();
                    let cgroups_path = cg
                        .as_ref()
                        .map(|cg| format!("/{}/{}", cg.path, cgroup::RUNC_CHILD));
                    root_begun = true;
                    let (root, host_dirs, env) = self.prepare_root(
                        &handle,
                        &spec,
                        rootfs.as_deref(),
                        &image_config,
                        &sandbox,
                    )?;
                    let config = runc::config_json(
                        &spec,
                        &checked,
                        &root,
                        &host_dirs,
                        &binds,
                        cgroups_path.as_deref(),
                        container_user,
                        &env,
                        &sandbox,
                    );
                    let path = bundle.join("config.json");
                    write_private(&path, &serde_json::to_vec_pretty(&config).expect("json"))?;
                }
                _ => {
                    let work = staging.join(store::WORK_DIR);
                    let cwd = process::prepare_work_dir(&work, &checked, &sources)
                        .map_err(io_err(format!("prepare {}", work.display())))?;
                    fs::create_dir_all(&cwd)
                        .map_err(io_err(format!("create {}", cwd.display())))?;
                    if let Some(ids) = user {
                        self.runtime
                            .chown_tree(&work, ids)
                            .and_then(|_| self.runtime.own_dir(&work, ids, 0o700))
                            .map_err(io_err(format!("give {} to the task user", work.display())))?;
                    }
                }
            }
            let mounts: Vec<(&str, &Path)> = checked
                .mounts
                .iter()
                .map(|m| m.volume.as_str())
                .zip(sources.iter().map(PathBuf::as_path))
                .collect();
            match (user, is_runc) {
                (Some(ids), true) => self.give_mounts_in_range(&handle, &mounts, ids)?,
                (Some(ids), false) if ids.uid != 0 => self.give_mounts(&handle, &mounts, ids)?,
                // Privileged, root, the worker's own user: writes the
                // worker cannot vouch for.
                _ => {
                    let volumes: Vec<&str> = mounts.iter().map(|(v, _)| *v).collect();
                    self.forget_owners(&handle, &volumes);
                }
            }
            // The spec holds the task's params: for the worker's eyes only.
            write_private(
                &staging.join(store::SPEC_FILE),
                &serde_json::to_vec_pretty(&spec).expect("json"),
            )?;
            fs::rename(&staging, &dir).map_err(io_err(format!("rename into {}", dir.display())))
        })();
        if let Err(e) = made {
            if root_begun && features.roots {
                self.runtime.release_root(&handle);
            }
            if network_begun {
                self.release_network(&handle);
            }
            if let (true, Some(cg)) = (cgroup_begun, &cgroup) {
                if let Err(e) = self.runtime.remove_cgroup(cg, Duration::ZERO) {
                    tracing::warn!(error = %e, "cannot remove the cgroup of a container that was not made");
                }
            }
            // What is left is a leftover the next open removes.
            if let Err(e) = fs::remove_dir_all(&staging) {
                tracing::warn!(path = %staging.display(), error = %e, "cannot remove a container's staging dir");
            }
            return Err(e);
        }
        let rec = self.load(&handle)?.ok_or_else(|| ContainerError::Corrupt {
            handle: handle.clone(),
            reason: "vanished right after creation".into(),
        })?;
        match self.start(&rec, &checked) {
            Ok(()) => Ok(self.container(&rec, None)),
            Err(e) => {
                self.remove(&rec.handle, &rec.dir, Some(&rec.meta));
                if let Err(e) = fs::remove_dir_all(&rec.dir) {
                    tracing::warn!(%handle, error = %e, "cannot remove the container that failed to start");
                }
                Err(e)
            }
        }
    }

    /// The root a sandboxed container gets, where runc can reach it: the
    /// image's rootfs (shifted into the sandbox's range) bind-mounted, or
    /// for the `process` runtime a root of mount points for the host's
    /// system dirs, which it returns too; and the container's environment.
    #[allow(clippy::type_complexity)]
    pub(super) fn prepare_root(
        &self,
        handle: &str,
        spec: &ContainerSpec,
        rootfs: Option<&Path>,
        image_config: &image::ImageConfig,
        sandbox: &sandbox::Sandbox,
    ) -> Result<(PathBuf, Vec<PathBuf>, Vec<(String, String)>), ContainerError> {
        let unsupported = |e: io::Error| ContainerError::Unsupported {
            reason: format!("cannot prepare the container's root: {e}"),
        };
        match rootfs {
            Some(rootfs) => {
                if let (Some(base), true) = (sandbox.ids, self.features().root) {
                    let started = Instant::now();
                    let changed =
                        self.runtime
                            .shift_image(rootfs, base)
                            .map_err(io_err(format!(
                                "give {} to the sandbox's users",
                                rootfs.display()
                            )))?;
                    if changed > 0 {
                        tracing::info!(%handle, entries_changed = changed, elapsed_ms = started.elapsed().as_millis() as u64, "gave an image's files to the sandbox's users");
                    }
                }
                let root = if self.features().roots {
                    self.runtime
                        .mount_image_root(handle, rootfs)
                        .map_err(unsupported)?
                } else {
                    rootfs.to_path_buf()
                };
                Ok((root, vec![], image::merge_env(&image_config.env, &spec.env)))
            }
            None => {
                if !self.features().roots {
                    return Err(ContainerError::Unsupported {
                        reason: "the process runtime's sandbox needs a worker running as root"
                            .into(),
                    });
                }
                let (root, host_dirs) = self
                    .runtime
                    .make_host_root(handle, sandbox.ids.filter(|_| self.features().root))
                    .map_err(unsupported)?;
                // Built from nothing: the task's params over a minimal base,
                // never the worker's own environment.
                let base = [
                    ("PATH".to_string(), isolation::TASK_PATH.to_string()),
                    ("HOME".to_string(), runc::WORK_DIR.to_string()),
                ];
                Ok((root, host_dirs, image::merge_env(&base, &spec.env)))
            }
        }
    }

    pub(super) fn write_meta(&self, dir: &Path, meta: &Meta) -> Result<(), ContainerError> {
        let path = dir.join(store::META_FILE);
        store::write_atomic(&path, &serde_json::to_vec_pretty(meta).expect("json"))
            .map_err(io_err(format!("write {}", path.display())))
    }
}

/// Why a container's CPU shares cannot be applied here.
pub(super) fn cpu_unsupported(shares: Option<u64>, why: &str) -> String {
    let shares = shares.map(|s| format!(" ({s} shares)")).unwrap_or_default();
    format!(
        "container_limits.cpu{shares} cannot be applied on this worker: {why} (remove the limit, or run the task on a worker with a writable cpu cgroup)"
    )
}
