//! Who a container runs as, and who owns the volumes it mounts: the user
//! inside a sandboxed container, the host user of a process container
//! outside the sandbox, and handing volumes to them and back.

use std::fs;
use std::path::Path;
use std::time::Instant;

use hangar_api::containers::ContainerSpec;
use hangar_core::users::Ids;
use hangar_volumes::Owners;

use super::{io_err, isolation, sandbox, store, ContainerError, Inner, Isolation, Record};

impl Inner {
    /// The user a sandboxed container's program runs as, inside it: the
    /// task's `run.user`, else the image's user, else root; a name is looked
    /// up in the container's own `/etc/passwd` (the image's, or for the
    /// process runtime the host's, which the container sees).
    pub(super) fn container_user(
        &self,
        spec: &ContainerSpec,
        rootfs: Option<&Path>,
        image_user: Option<&str>,
    ) -> Result<Option<Ids>, ContainerError> {
        use hangar_core::users::{parse_user, resolve_user};
        let bad = |reason: String| ContainerError::InvalidSpec {
            field: "user".into(),
            reason,
        };
        let named = spec
            .user
            .as_deref()
            .map(parse_user)
            .transpose()
            .map_err(bad)?;
        let image_bad = |e: String| ContainerError::InvalidSpec {
            field: "rootfs_volume".into(),
            reason: format!("image layout: metadata.json: user: {e}"),
        };
        let (named, from_image) = match (named, image_user) {
            (Some(named), _) => (named, false),
            // Root is the default; a `FROM scratch` image may name it
            // without a passwd file to look it up in.
            (None, None | Some("root")) => return Ok(None),
            (None, Some(user)) => (parse_user(user).map_err(image_bad)?, true),
        };
        let passwd = match rootfs {
            Some(r) => fs::read_to_string(r.join("etc/passwd")).ok(),
            None => isolation::host_passwd(),
        };
        let ids = resolve_user(&named, passwd.as_deref()).map_err(if from_image {
            image_bad
        } else {
            bad
        })?;
        if ids.uid >= sandbox::ID_RANGE || ids.gid >= sandbox::ID_RANGE {
            return Err(bad(format!(
                "{}:{} is past the container's {} user ids",
                ids.uid,
                ids.gid,
                sandbox::ID_RANGE
            )));
        }
        Ok(Some(ids))
    }

    /// Gives the volumes a sandboxed container mounts to its users: every
    /// entry moved into the sandbox's range (what the host's root owned,
    /// root inside owns), and the top dir to the container's user (`owner`,
    /// as host ids) alone. A volume stamped as in the range already (an
    /// upload, a copy of a task's output) is not walked; see
    /// [`Self::give_volumes`].
    pub(super) fn give_mounts_in_range(
        &self,
        handle: &str,
        mounts: &[(&str, &Path)],
        owner: Ids,
    ) -> Result<(), ContainerError> {
        let Some(base) = self.sandbox().ids else {
            return Ok(());
        };
        let range = Owners::Range {
            uid: base.uid,
            gid: base.gid,
            len: sandbox::ID_RANGE,
        };
        let changed = self.give_volumes(handle, mounts, range, owner, |source| {
            self.runtime.shift_tree(source, base)
        })?;
        if changed.entries > 0 {
            tracing::info!(%handle, entries_changed = changed.entries, walked = changed.walked, elapsed_ms = changed.elapsed_ms, "gave the container's volumes to its users");
        }
        Ok(())
    }

    /// Gives each volume's entries to `owners` with `give` (a walk of its
    /// tree), skipping the walk of one whose owners stamp says they are
    /// theirs already, and its top dir to `top` (the container's user)
    /// alone; then stamps each with `owners`: the container about to run
    /// writes only as them. A volume another live container mounts is not
    /// stamped, and its stamp goes: that one writes as its own users.
    fn give_volumes(
        &self,
        handle: &str,
        mounts: &[(&str, &Path)],
        owners: Owners,
        top: Ids,
        give: impl Fn(&Path) -> std::io::Result<u64>,
    ) -> Result<Given, ContainerError> {
        let started = Instant::now();
        let mut given = Given::default();
        if mounts.is_empty() {
            return Ok(given);
        }
        // Every live container's record is read: only for one with mounts.
        let shared = self.mounted_by_running(handle);
        for &(volume, source) in mounts {
            let token = self.volumes.owners_token(volume);
            let theirs = self
                .volumes
                .owners(volume)
                .ok()
                .flatten()
                .is_some_and(|stamp| stamp.within(&owners));
            if !theirs {
                given.entries += give(source).map_err(io_err(format!(
                    "give {} to the container's users",
                    source.display()
                )))?;
                given.walked += 1;
            }
            self.runtime
                .own_dir(source, top, 0o700)
                .map_err(io_err(format!(
                    "give {} to the container's user",
                    source.display()
                )))?;
            let stamped = if shared.contains(volume) {
                self.volumes.clear_owners(volume).map(|()| false)
            } else {
                self.volumes.set_owners(&token, owners)
            };
            if let Err(e) = stamped {
                tracing::warn!(%handle, %volume, error = %e, "cannot stamp a volume's owners; the next container walks it");
            }
        }
        given.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(given)
    }

    /// Forgets who owns the volumes a container mounts whose writes the
    /// worker cannot vouch for (a privileged one, one as the worker's own
    /// user): the next container walks them.
    pub(super) fn forget_owners(&self, handle: &str, volumes: &[&str]) {
        for volume in volumes {
            if let Err(e) = self.volumes.clear_owners(volume) {
                tracing::warn!(%handle, %volume, error = %e, "cannot remove a volume's owners stamp");
            }
        }
    }

    /// The host ids a process container outside the sandbox runs as (see
    /// [`Meta::user`](super::store::Meta::user)); a sandboxed one's are [`Self::container_user`]'s.
    pub(super) fn task_user(&self, spec: &ContainerSpec) -> Result<Option<Ids>, ContainerError> {
        use hangar_core::users::{parse_user, pick_task_ids, resolve_user};
        let bad = |reason: String| ContainerError::InvalidSpec {
            field: "user".into(),
            reason,
        };
        let named = spec
            .user
            .as_deref()
            .map(parse_user)
            .transpose()
            .map_err(bad)?;
        let resolve =
            |named| resolve_user(&named, isolation::host_passwd().as_deref()).map_err(bad);
        match (&self.features().isolation, named) {
            (Isolation::Unavailable(why), _) => Err(ContainerError::Unsupported {
                reason: why.clone(),
            }),
            (Isolation::AsWorker, None) => Ok(None),
            (Isolation::AsWorker, Some(named)) => {
                let ids = resolve(named)?;
                let me = fs::metadata("/proc/self")
                    .map(|m| {
                        (
                            std::os::unix::fs::MetadataExt::uid(&m),
                            std::os::unix::fs::MetadataExt::gid(&m),
                        )
                    })
                    .unwrap_or((u32::MAX, u32::MAX));
                if (ids.uid, ids.gid) == me {
                    Ok(None)
                } else {
                    Err(ContainerError::Unsupported {
                        reason: format!(
                            "user {}:{}: the worker does not run as root and can run process tasks only as its own user ({}:{})",
                            ids.uid, ids.gid, me.0, me.1
                        ),
                    })
                }
            }
            (Isolation::Drop { .. } | Isolation::ExecAs { .. }, Some(named)) => {
                let ids = resolve(named)?;
                if ids.uid == 0 {
                    return Err(bad(
                        "the process runtime does not run tasks as root (uid 0), which would reach the worker's secrets: run the task in an image (runc)".into(),
                    ));
                }
                Ok(Some(ids))
            }
            (Isolation::Drop { .. } | Isolation::ExecAs { .. }, None) => {
                let mut taken = Vec::new();
                for handle in self.handles()? {
                    let Ok(Some(rec)) = self.load(&handle) else {
                        continue;
                    };
                    taken.extend(rec.meta.user);
                    // A volume a running container mounts (a cache two
                    // builds share) stays its user's: the newcomer runs as
                    // the same user rather than take the files from under
                    // it. They share the files anyway.
                    let running = !rec.dir.join(store::RESULT_FILE).exists();
                    let shares = rec
                        .spec
                        .mounts
                        .iter()
                        .any(|m| spec.mounts.iter().any(|n| n.volume == m.volume));
                    if let (true, true, Some(ids)) = (running, shares, rec.meta.user) {
                        return Ok(Some(ids));
                    }
                }
                pick_task_ids(self.task_base, &taken)
                    .map(Some)
                    .ok_or_else(|| ContainerError::NoRoom {
                        reason: format!(
                            "all {} task users from uid {} are taken by containers of this worker",
                            hangar_core::users::TASK_UID_SLOTS,
                            self.task_base.uid
                        ),
                    })
            }
        }
    }

    /// Gives the volumes a container mounts to its user: every entry (so
    /// the task may change its inputs, as it could as root), and the top
    /// dir only it may enter, so other tasks cannot read them. A volume
    /// stamped as the user's already (an upload, a fetched resource) is not
    /// walked.
    pub(super) fn give_mounts(
        &self,
        handle: &str,
        mounts: &[(&str, &Path)],
        ids: Ids,
    ) -> Result<(), ContainerError> {
        let one = Owners::One {
            uid: ids.uid,
            gid: ids.gid,
        };
        let changed = self.give_volumes(handle, mounts, one, ids, |source| {
            self.runtime.chown_tree(source, ids)
        })?;
        // Worth an operator's eye only when it had work to do (a copy-up of
        // every file on overlay): the health self-check runs one every few
        // seconds with nothing to change.
        if changed.entries > 0 {
            tracing::info!(%handle, uid = ids.uid, entries_changed = changed.entries, walked = changed.walked, elapsed_ms = changed.elapsed_ms, "gave the container's volumes to its user");
        } else {
            tracing::debug!(%handle, uid = ids.uid, walked = changed.walked, elapsed_ms = changed.elapsed_ms, "the container's volumes were its user's already");
        }
        Ok(())
    }

    /// Takes back the top dir of each volume an ended container mounted
    /// (root's, mode 0700), unless another container still mounts it: the
    /// container's uid goes to the next container, which must not find
    /// this one's files.
    pub(super) fn reclaim_mounts(&self, rec: &Record) {
        if rec.meta.user.is_none_or(|ids| ids.uid == 0) {
            return;
        }
        let others = self.mounted_by_running(&rec.handle);
        for m in rec
            .spec
            .mounts
            .iter()
            .filter(|m| !others.contains(&m.volume))
        {
            if let Ok(Some(v)) = self.volumes.get(&m.volume) {
                if let Err(e) = self.runtime.own_dir(&v.path, Ids { uid: 0, gid: 0 }, 0o700) {
                    tracing::warn!(handle = %rec.handle, volume = %m.volume, error = %e, "cannot take back a volume from the task user");
                }
            }
        }
    }
}

/// What [`Inner::give_volumes`] did.
#[derive(Debug, Default)]
struct Given {
    /// Entries whose owner changed.
    entries: u64,
    /// Volumes walked (the others were stamped as their users' already).
    walked: usize,
    elapsed_ms: u64,
}
