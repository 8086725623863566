//! The volume manager: creation, listing, destruction, properties, streaming.
//!
//! # On-disk layout
//!
//! ```text
//! <root>/volumes/<handle>/meta.json   metadata (see VolumeInfo)
//! <root>/volumes/<handle>/data/       what gets mounted into containers
//! <root>/volumes/<handle>/upper/      overlay children only: their writes
//! <root>/volumes/<handle>/work/       overlay children only: overlayfs workdir
//! <root>/volumes/<handle>/owners      who owns the data's entries, when known (see `owners`)
//! <root>/volumes/.creating-<handle>-<rand>/    a creation in progress
//! <root>/volumes/.destroying-<handle>-<rand>/  a removal in progress
//! ```
//!
//! # Crash safety
//!
//! A volume is built completely (data, metadata, overlay mount) inside a
//! `.creating-*` directory and then renamed to `volumes/<handle>` in one
//! rename(2): a process killed at any point before leaves only a dot
//! directory that is never listed and is removed by the next
//! [`VolumeManager::open`]. Destruction unmounts, renames the volume to a
//! `.destroying-*` directory (it disappears atomically) and only then deletes
//! the tree. Metadata updates write a temp file and rename it over
//! `meta.json`. File data copied into a volume is not fsynced (a process kill
//! cannot lose it; a power loss might leave a listed volume with truncated
//! files).

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::Serialize;

use crate::driver::{naive, names, overlay, DriverKind};
use crate::error::{IoContext, VolumeError};
use crate::meta::{now_millis, validate_handle, StrategyKind, VolumeMeta, META_VERSION};
use crate::os::{Os, RealOs};
use crate::tar_in::{Limits, StreamInReport, Target};
use crate::tar_out::StreamOutSource;
use crate::{paths, tar_in, tar_out, Compression};

/// How a new volume gets its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// An empty directory.
    Empty,
    /// A copy-on-write child of an existing volume: starts with the parent's
    /// content; writes never reach the parent.
    CopyOnWrite { parent: String },
    /// A copy of a directory on the host.
    Import { path: PathBuf },
}

/// Everything [`VolumeManager::create_with`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeSpec {
    pub strategy: Strategy,
    pub properties: BTreeMap<String, String>,
    /// Recorded in metadata; stream-in keeps setuid/setgid bits only for
    /// privileged volumes.
    pub privileged: bool,
}

/// A complete volume as callers see it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VolumeInfo {
    pub handle: String,
    pub parent: Option<String>,
    /// The data directory to bind-mount into containers.
    pub path: PathBuf,
    pub properties: BTreeMap<String, String>,
    /// Always `None` from `create`, `get` and `list` (a size needs a walk
    /// of the tree); use [`VolumeManager::disk_usage`] on demand.
    pub size_bytes: Option<u64>,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    pub privileged: bool,
    pub strategy: StrategyKind,
    /// The driver that made this volume (a deep overlay chain may fall back
    /// to a naive copy).
    pub driver: DriverKind,
}

/// What [`VolumeManager::open`] found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenReport {
    /// Leftovers of interrupted creations, removals and stream-ins that were
    /// deleted.
    pub removed: Vec<PathBuf>,
    /// Overlay children whose mount was missing and has been re-made.
    pub remounted: Vec<String>,
    /// Overlay children that could not be re-mounted, with the reason; they
    /// are still listed but their data dir is empty.
    pub remount_failed: Vec<(String, String)>,
    /// Entries under `volumes/` that are neither volumes nor our temp dirs
    /// (bad names, missing or corrupt metadata); left untouched.
    pub unrecognized: Vec<PathBuf>,
}

/// The worker's volume manager. Cheap to share behind an `Arc`; all methods
/// take `&self` and are blocking.
#[derive(Debug)]
pub struct VolumeManager {
    root: PathBuf,
    volumes: PathBuf,
    driver: DriverKind,
    os: Arc<dyn Os>,
    /// Serializes the commit points: rename into place, destroy, metadata
    /// updates (copies and extraction run outside it).
    commit: Mutex<()>,
    /// Serializes the last part of stream-ins (checks against the volume's
    /// content, merge), so that two archives are never each checked against
    /// a volume without the other.
    stream_commit: Mutex<()>,
    /// The writes each volume had, for its owners stamp (see `owners`).
    pub(crate) writes: crate::owners::Writes,
    report: OpenReport,
}

enum Plan {
    Empty,
    Copy { from: PathBuf },
    Layered { lowers: Vec<PathBuf> },
}

impl VolumeManager {
    /// Open (creating if needed) the volume store under `root` with the real
    /// OS. Cleans leftovers of interrupted operations and re-mounts overlay
    /// children whose mounts are gone (after a reboot); see
    /// [`VolumeManager::open_report`].
    pub fn open(root: &Path, driver: DriverKind) -> Result<Self, VolumeError> {
        Self::open_with_os(root, driver, Arc::new(RealOs))
    }

    /// [`VolumeManager::open`] with an explicit OS seam (tests use
    /// [`crate::os::fake::FakeOs`]).
    pub fn open_with_os(
        root: &Path,
        driver: DriverKind,
        os: Arc<dyn Os>,
    ) -> Result<Self, VolumeError> {
        let volumes = root.join("volumes");
        fs::create_dir_all(&volumes).ctx_path("create", &volumes)?;
        let root = fs::canonicalize(root).ctx_path("resolve", root)?;
        let volumes = root.join("volumes");
        if driver == DriverKind::Overlay {
            if !os.can_mount() {
                return Err(VolumeError::Unsupported {
                    reason: "the overlay driver needs root to mount".into(),
                });
            }
            if let Some(problem) = overlay::path_problem(&root) {
                return Err(VolumeError::Unsupported {
                    reason: format!("overlay driver at {}: {problem}", root.display()),
                });
            }
        }
        let mut mgr = VolumeManager {
            root,
            volumes,
            driver,
            os,
            commit: Mutex::new(()),
            stream_commit: Mutex::new(()),
            writes: Default::default(),
            report: OpenReport::default(),
        };
        mgr.report = mgr.recover()?;
        let r = &mgr.report;
        tracing::info!(
            root = %mgr.root.display(),
            driver = %driver,
            removed = r.removed.len(),
            remounted = r.remounted.len(),
            remount_failed = r.remount_failed.len(),
            unrecognized = r.unrecognized.len(),
            "volume manager opened"
        );
        Ok(mgr)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn driver(&self) -> DriverKind {
        self.driver
    }

    /// What the last [`VolumeManager::open`] cleaned and re-mounted.
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// Create an unprivileged volume. See [`VolumeManager::create_with`].
    pub fn create(
        &self,
        handle: &str,
        strategy: Strategy,
        properties: BTreeMap<String, String>,
    ) -> Result<VolumeInfo, VolumeError> {
        self.create_with(
            handle,
            VolumeSpec {
                strategy,
                properties,
                privileged: false,
            },
        )
    }

    /// Create a volume. Crash-safe (see the module docs); an existing handle
    /// is [`VolumeError::AlreadyExists`]; a missing parent is
    /// [`VolumeError::ParentNotFound`].
    pub fn create_with(&self, handle: &str, spec: VolumeSpec) -> Result<VolumeInfo, VolumeError> {
        validate_handle(handle)?;
        let dir = self.dir(handle);
        if exists(&dir)? {
            return Err(VolumeError::AlreadyExists {
                handle: handle.into(),
            });
        }
        let staging = self.volumes.join(format!(
            "{}{handle}-{}",
            names::CREATING,
            uuid::Uuid::new_v4().simple()
        ));
        let mut driver = self.driver;
        // Taken before the parent is copied: the child keeps the parent's
        // owners stamp only if nothing wrote the parent meanwhile.
        let inherit = match &spec.strategy {
            Strategy::CopyOnWrite { parent } => Some(self.owners_token(parent)),
            _ => None,
        };
        let (plan, parent, kind) = match spec.strategy {
            Strategy::Empty => (Plan::Empty, None, StrategyKind::Empty),
            Strategy::Import { path } => {
                let path = fs::canonicalize(&path).unwrap_or(path);
                match fs::metadata(&path) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => {
                        return Err(VolumeError::InvalidPath {
                            path: path.display().to_string(),
                            reason: "import source is not a directory".into(),
                        })
                    }
                    Err(e) => {
                        return Err(VolumeError::InvalidPath {
                            path: path.display().to_string(),
                            reason: format!("import source cannot be read: {e}"),
                        })
                    }
                }
                (Plan::Copy { from: path }, None, StrategyKind::Import)
            }
            Strategy::CopyOnWrite { parent } => {
                validate_handle(&parent)?;
                let parent_meta =
                    self.read_meta(&parent)?
                        .ok_or_else(|| VolumeError::ParentNotFound {
                            handle: handle.into(),
                            parent: parent.clone(),
                        })?;
                let plan = match driver {
                    DriverKind::Overlay => {
                        let lowers = self.layers_of(&parent)?;
                        if overlay::fits(&overlay::mount_for(&staging, lowers.clone())) {
                            Plan::Layered { lowers }
                        } else {
                            tracing::warn!(handle, %parent, layers = lowers.len(),
                                "ancestor chain too long for one overlay mount; copying the parent instead");
                            driver = DriverKind::Naive;
                            self.copy_plan(&parent, &parent_meta)?
                        }
                    }
                    DriverKind::Naive => self.copy_plan(&parent, &parent_meta)?,
                };
                (plan, Some(parent), StrategyKind::CopyOnWrite)
            }
        };
        let meta = VolumeMeta {
            version: META_VERSION,
            handle: handle.into(),
            parent,
            strategy: kind,
            driver,
            privileged: spec.privileged,
            properties: spec.properties,
            created_at: now_millis(),
        };
        self.os
            .create_dir(&staging)
            .ctx_path("create staging dir", &staging)?;
        if let Err(e) = self.build_and_commit(&staging, &dir, &plan, &meta, inherit.as_ref()) {
            self.discard(&staging);
            return Err(e);
        }
        if let Err(e) = self.os.sync_dir(&self.volumes) {
            // The rename happened; the volume exists for this process.
            tracing::warn!(handle, error = %e, "fsync of volumes dir failed after create");
        }
        tracing::debug!(handle, driver = %meta.driver, "volume created");
        Ok(self.info(&meta))
    }

    fn copy_plan(&self, parent: &str, meta: &VolumeMeta) -> Result<Plan, VolumeError> {
        let data = self.dir(parent).join(names::DATA);
        if meta.is_layered() && !self.os.is_mounted(&data).ctx_path("check mount", &data)? {
            return Err(VolumeError::io(
                format!("copy parent volume {parent:?}"),
                io::Error::other("its overlay is not mounted"),
            ));
        }
        Ok(Plan::Copy { from: data })
    }

    fn build_and_commit(
        &self,
        staging: &Path,
        dir: &Path,
        plan: &Plan,
        meta: &VolumeMeta,
        inherit: Option<&crate::owners::OwnersToken>,
    ) -> Result<(), VolumeError> {
        let handle = meta.handle.as_str();
        match plan {
            Plan::Empty => naive::make_empty(self.os.as_ref(), staging)
                .ctx(|| format!("create data dir of volume {handle:?}"))?,
            Plan::Copy { from } => {
                naive::copy_into(self.os.as_ref(), staging, from)
                    .ctx(|| format!("copy {} into volume {handle:?}", from.display()))?;
            }
            Plan::Layered { .. } => overlay::make_layout(self.os.as_ref(), staging)
                .ctx(|| format!("create overlay dirs of volume {handle:?}"))?,
        }
        self.os
            .write_file(&staging.join(names::META), &meta.to_json())
            .ctx(|| format!("write metadata of volume {handle:?}"))?;
        if let Plan::Layered { lowers } = plan {
            let m = overlay::mount_for(staging, lowers.clone());
            self.os
                .mount_overlay(&m)
                .ctx(|| format!("mount overlay of volume {handle:?} ({})", m.options()))?;
        }
        if let Some(owners) = inherit.and_then(|token| self.inherited_owners(token)) {
            Self::write_owners_into(staging, owners)
                .ctx(|| format!("stamp the owners of volume {handle:?}"))?;
        }
        let _guard = self.lock();
        if let Some(parent) = &meta.parent {
            if !exists(&self.dir(parent).join(names::META))? {
                return Err(VolumeError::ParentNotFound {
                    handle: handle.into(),
                    parent: parent.clone(),
                });
            }
        }
        if exists(dir)? {
            return Err(VolumeError::AlreadyExists {
                handle: handle.into(),
            });
        }
        self.os
            .rename(staging, dir)
            .ctx(|| format!("move volume {handle:?} into place"))
    }

    /// Best-effort removal of a failed creation (a crash leaves it for
    /// `open`).
    fn discard(&self, staging: &Path) {
        if let Err(e) = self.remove_tree(staging) {
            tracing::warn!(path = %staging.display(), error = %e, "could not clean up failed volume creation");
        }
    }

    /// Unmount everything below `path`, then delete it.
    fn remove_tree(&self, path: &Path) -> Result<(), VolumeError> {
        for m in self
            .os
            .mounts_under(path)
            .ctx_path("list mounts under", path)?
        {
            self.os.unmount(&m).ctx_path("unmount", &m)?;
        }
        self.os.remove_dir_all(path).ctx_path("remove", path)
    }

    /// All complete volumes, sorted by handle.
    pub fn list(&self) -> Result<Vec<VolumeInfo>, VolumeError> {
        Ok(self.metas()?.iter().map(|m| self.info(m)).collect())
    }

    /// One volume; `Ok(None)` if it does not exist.
    pub fn get(&self, handle: &str) -> Result<Option<VolumeInfo>, VolumeError> {
        validate_handle(handle)?;
        Ok(self.read_meta(handle)?.map(|m| self.info(&m)))
    }

    /// Bytes allocated on disk by this volume's own layer: the whole data
    /// dir for plain volumes, only the upper dir (its changes) for overlay
    /// children. Walks the tree.
    pub fn disk_usage(&self, handle: &str) -> Result<u64, VolumeError> {
        let meta = self.require(handle)?;
        let layer = self.dir(handle).join(if meta.is_layered() {
            names::UPPER
        } else {
            names::DATA
        });
        crate::fsutil::disk_usage(&layer).ctx_path("measure", &layer)
    }

    /// Destroy a volume. Missing is `Ok`; live children are
    /// [`VolumeError::HasChildren`]; an overlay is unmounted first (busy
    /// mounts fail with an I/O error and leave the volume intact).
    pub fn destroy(&self, handle: &str) -> Result<(), VolumeError> {
        validate_handle(handle)?;
        let trash = {
            let _guard = self.lock();
            let dir = self.dir(handle);
            if !exists(&dir)? {
                return Ok(());
            }
            let children: Vec<String> = self
                .metas()?
                .into_iter()
                .filter(|m| m.parent.as_deref() == Some(handle))
                .map(|m| m.handle)
                .collect();
            if !children.is_empty() {
                return Err(VolumeError::HasChildren {
                    handle: handle.into(),
                    children,
                });
            }
            let data = dir.join(names::DATA);
            if self.os.is_mounted(&data).ctx_path("check mount", &data)? {
                self.os
                    .unmount(&data)
                    .ctx(|| format!("unmount overlay of volume {handle:?}"))?;
            }
            let trash = self.volumes.join(format!(
                "{}{handle}-{}",
                names::DESTROYING,
                uuid::Uuid::new_v4().simple()
            ));
            self.os
                .rename(&dir, &trash)
                .ctx(|| format!("move volume {handle:?} out of the way"))?;
            trash
        };
        if let Err(e) = self.os.sync_dir(&self.volumes) {
            tracing::warn!(handle, error = %e, "fsync of volumes dir failed after destroy");
        }
        // If this fails the volume is already gone from every listing; the
        // `.destroying-*` dir is removed by the next `open`.
        self.forget_writes(handle);
        self.remove_tree(&trash)?;
        tracing::debug!(handle, "volume destroyed");
        Ok(())
    }

    /// Set one property (atomically rewrites the metadata).
    pub fn set_property(&self, handle: &str, key: &str, value: &str) -> Result<(), VolumeError> {
        validate_handle(handle)?;
        if key.is_empty() {
            return Err(VolumeError::InvalidPath {
                path: key.into(),
                reason: "property key is empty".into(),
            });
        }
        let _guard = self.lock();
        let mut meta = self.require(handle)?;
        meta.properties.insert(key.into(), value.into());
        let dir = self.dir(handle);
        let tmp = dir.join(names::META_TMP);
        self.os
            .write_file(&tmp, &meta.to_json())
            .ctx(|| format!("write metadata of volume {handle:?}"))?;
        self.os
            .rename(&tmp, &dir.join(names::META))
            .ctx(|| format!("replace metadata of volume {handle:?}"))
    }

    /// Extract a tar (optionally gzip) stream into `subpath` of the volume
    /// (`""` = its root), merging with existing content. Hostile archives are
    /// refused without changing the volume; see [`crate::tar_in`].
    pub fn stream_in(
        &self,
        handle: &str,
        subpath: &str,
        reader: impl Read,
        compression: Compression,
        limits: &Limits,
    ) -> Result<StreamInReport, VolumeError> {
        self.stream_in_as(handle, subpath, reader, compression, limits, None)
    }

    /// [`VolumeManager::stream_in`], every entry it makes owned by `owner`
    /// (uid, gid; as root) rather than by whom the archive names: a fresh
    /// volume given to a task's user as it is filled, not by a second walk
    /// of its tree.
    pub fn stream_in_as(
        &self,
        handle: &str,
        subpath: &str,
        reader: impl Read,
        compression: Compression,
        limits: &Limits,
        owner: Option<(u32, u32)>,
    ) -> Result<StreamInReport, VolumeError> {
        let meta = self.require(handle)?;
        let sub = paths::parse_subpath(subpath)?;
        let dir = self.dir(handle);
        let data = self.mounted_data(&meta)?;
        // Staging must be on the filesystem of the data dir so the final
        // renames work: inside the mount for overlay children.
        let stage_parent = if meta.is_layered() { &data } else { &dir };
        let staging = stage_parent.join(format!(
            "{}{}",
            names::STREAM_STAGING,
            uuid::Uuid::new_v4().simple()
        ));
        fs::create_dir(&staging).ctx_path("create stream-in staging dir", &staging)?;
        let write = match self.begin_write(handle) {
            Ok(write) => write,
            Err(e) => {
                let _ = fs::remove_dir(&staging);
                return Err(e);
            }
        };
        // A volume with nothing in it, filled with one owner's entries,
        // is that owner's after (see `owners`): looked at once the write has
        // begun, so a write before it is seen or still under way.
        // Only root gives entries an owner (else they are the worker's).
        let empty = owner.is_some()
            && crate::fsutil::running_as_root()
            && sub.is_empty()
            && fs::read_dir(&data).is_ok_and(|mut d| {
                d.all(|e| {
                    e.is_ok_and(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .starts_with(names::STREAM_STAGING)
                    })
                })
            });
        let target = Target {
            staging: &staging,
            data: &data,
            sub: &sub,
            privileged: meta.privileged,
            owner,
            commit: &self.stream_commit,
        };
        let result = tar_in::stream_in(reader, compression, limits, &target);
        let vouched = owner
            .filter(|_| empty && result.is_ok())
            .map(|(uid, gid)| crate::owners::Owners::One { uid, gid });
        self.end_write(write, vouched);
        if let Err(e) = fs::remove_dir_all(&staging) {
            tracing::warn!(path = %staging.display(), error = %e, "could not remove stream-in staging dir");
        }
        match &result {
            Ok(r) => tracing::debug!(
                handle,
                subpath,
                entries = r.entries,
                bytes = r.archive_bytes,
                "streamed in"
            ),
            Err(e) => tracing::info!(handle, subpath, error = %e, "stream-in refused or failed"),
        }
        result
    }

    /// Write a tar (optionally gzip) of the volume's data, or of `subpath`
    /// inside it (a directory's contents, or a single file), to `writer`.
    /// Returns the number of bytes written.
    pub fn stream_out(
        &self,
        handle: &str,
        subpath: &str,
        writer: impl Write,
        compression: Compression,
    ) -> Result<u64, VolumeError> {
        self.stream_out_source(handle, subpath)?
            .write_to(writer, compression)
    }

    /// The checks of [`VolumeManager::stream_out`] alone (volume there,
    /// subpath valid and present, reached through real directories), for
    /// callers that must answer before the first byte of the archive.
    pub fn stream_out_source(
        &self,
        handle: &str,
        subpath: &str,
    ) -> Result<StreamOutSource, VolumeError> {
        let meta = self.require(handle)?;
        let sub = paths::parse_subpath(subpath)?;
        let data = self.mounted_data(&meta)?;
        tar_out::source(&data, sub)
    }

    /// The content of one regular file of the volume, read whole, at most
    /// `limit` bytes (see [`crate::read_file`] for what is refused).
    pub fn read_file(
        &self,
        handle: &str,
        subpath: &str,
        limit: u64,
    ) -> Result<Vec<u8>, VolumeError> {
        let meta = self.require(handle)?;
        let data = self.mounted_data(&meta)?;
        crate::read_file::read_file(&data, subpath, limit)
    }

    /// Paths on disk that are not complete volumes: temp dirs of
    /// interrupted creations/removals/stream-ins, and unrecognized entries.
    pub fn leftovers(&self) -> Result<Vec<PathBuf>, VolumeError> {
        let mut out = Vec::new();
        for (name, path) in self.entries()? {
            if name.starts_with('.') || validate_handle(&name).is_err() {
                out.push(path);
                continue;
            }
            match VolumeMeta::read(&path, &name) {
                Ok(Some(meta)) => out.extend(self.stream_leftovers(&meta)?),
                Ok(None) | Err(_) => out.push(path),
            }
        }
        out.sort();
        Ok(out)
    }

    // ------------------------------------------------------------ internals

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.commit.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn dir(&self, handle: &str) -> PathBuf {
        self.volumes.join(handle)
    }

    fn info(&self, m: &VolumeMeta) -> VolumeInfo {
        VolumeInfo {
            handle: m.handle.clone(),
            parent: m.parent.clone(),
            path: self.dir(&m.handle).join(names::DATA),
            properties: m.properties.clone(),
            size_bytes: None,
            created_at: m.created_at,
            privileged: m.privileged,
            strategy: m.strategy,
            driver: m.driver,
        }
    }

    fn read_meta(&self, handle: &str) -> Result<Option<VolumeMeta>, VolumeError> {
        VolumeMeta::read(&self.dir(handle), handle)
    }

    fn require(&self, handle: &str) -> Result<VolumeMeta, VolumeError> {
        validate_handle(handle)?;
        self.read_meta(handle)?
            .ok_or_else(|| VolumeError::NotFound {
                handle: handle.into(),
            })
    }

    /// The data dir, checking an overlay child's mount is in place.
    fn mounted_data(&self, meta: &VolumeMeta) -> Result<PathBuf, VolumeError> {
        let data = self.dir(&meta.handle).join(names::DATA);
        if meta.is_layered() && !self.os.is_mounted(&data).ctx_path("check mount", &data)? {
            return Err(VolumeError::io(
                format!("use volume {:?}", meta.handle),
                io::Error::other("its overlay is not mounted"),
            ));
        }
        Ok(data)
    }

    /// (name, path) of everything directly under `volumes/`.
    fn entries(&self) -> Result<Vec<(String, PathBuf)>, VolumeError> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.volumes).ctx_path("list", &self.volumes)? {
            let entry = entry.ctx_path("list", &self.volumes)?;
            out.push((
                entry.file_name().to_string_lossy().into_owned(),
                entry.path(),
            ));
        }
        out.sort();
        Ok(out)
    }

    /// Metadata of every complete volume, sorted by handle.
    fn metas(&self) -> Result<Vec<VolumeMeta>, VolumeError> {
        let mut out = Vec::new();
        for (name, path) in self.entries()? {
            if validate_handle(&name).is_err() {
                continue;
            }
            match VolumeMeta::read(&path, &name) {
                Ok(Some(m)) => out.push(m),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(handle = %name, error = %e, "skipping volume with unreadable metadata")
                }
            }
        }
        Ok(out)
    }

    /// The lower layers a child of `handle` stacks on, top-most first.
    fn layers_of(&self, handle: &str) -> Result<Vec<PathBuf>, VolumeError> {
        let mut out = Vec::new();
        let mut cur = Some(handle.to_string());
        while let Some(h) = cur {
            if out.len() > 500 {
                return Err(VolumeError::CorruptMeta {
                    handle: handle.into(),
                    reason: "ancestor chain is longer than 500 or cyclic".into(),
                });
            }
            let meta = self
                .read_meta(&h)?
                .ok_or_else(|| VolumeError::CorruptMeta {
                    handle: handle.into(),
                    reason: format!("ancestor volume {h:?} is missing"),
                })?;
            if meta.is_layered() {
                out.push(self.dir(&h).join(names::UPPER));
                cur = meta.parent;
            } else {
                out.push(self.dir(&h).join(names::DATA));
                cur = None;
            }
        }
        Ok(out)
    }

    fn stream_leftovers(&self, meta: &VolumeMeta) -> Result<Vec<PathBuf>, VolumeError> {
        let dir = self.dir(&meta.handle);
        let data = dir.join(names::DATA);
        let mut places = vec![dir];
        if meta.is_layered() && self.os.is_mounted(&data).unwrap_or(false) {
            places.push(data);
        }
        let mut out = Vec::new();
        for place in places {
            let iter = match fs::read_dir(&place) {
                Ok(it) => it,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(VolumeError::io(format!("list {}", place.display()), e)),
            };
            for entry in iter {
                let entry = entry.ctx_path("list", &place)?;
                if entry
                    .file_name()
                    .to_string_lossy()
                    .starts_with(names::STREAM_STAGING)
                {
                    out.push(entry.path());
                }
            }
        }
        Ok(out)
    }

    /// Startup recovery; see [`OpenReport`].
    fn recover(&self) -> Result<OpenReport, VolumeError> {
        let mut report = OpenReport::default();
        let mut metas = Vec::new();
        for (name, path) in self.entries()? {
            if name.starts_with(names::CREATING) || name.starts_with(names::DESTROYING) {
                self.remove_tree(&path)?;
                tracing::info!(path = %path.display(), "removed leftover of an interrupted operation");
                report.removed.push(path);
                continue;
            }
            if validate_handle(&name).is_err() || !path.is_dir() {
                report.unrecognized.push(path);
                continue;
            }
            match VolumeMeta::read(&path, &name) {
                Ok(Some(m)) => metas.push(m),
                Ok(None) | Err(_) => {
                    tracing::warn!(path = %path.display(), "volume dir without readable metadata left alone");
                    report.unrecognized.push(path);
                }
            }
        }
        for meta in metas.iter().filter(|m| m.is_layered()) {
            let dir = self.dir(&meta.handle);
            let data = dir.join(names::DATA);
            if self.os.is_mounted(&data).ctx_path("check mount", &data)? {
                continue;
            }
            let parent = meta
                .parent
                .as_deref()
                .expect("layered volumes have a parent");
            let result = self.layers_of(parent).and_then(|lowers| {
                let m = overlay::mount_for(&dir, lowers);
                self.os
                    .mount_overlay(&m)
                    .ctx(|| format!("mount overlay ({})", m.options()))
            });
            match result {
                Ok(()) => report.remounted.push(meta.handle.clone()),
                Err(e) => {
                    tracing::error!(handle = %meta.handle, error = %e, "could not re-mount volume");
                    report
                        .remount_failed
                        .push((meta.handle.clone(), e.to_string()));
                }
            }
        }
        for meta in &metas {
            for path in self.stream_leftovers(meta)? {
                self.os.remove_dir_all(&path).ctx_path("remove", &path)?;
                report.removed.push(path);
            }
        }
        Ok(report)
    }
}

fn exists(path: &Path) -> Result<bool, VolumeError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(VolumeError::io(format!("stat {}", path.display()), e)),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_manager_can_be_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<super::VolumeManager>();
        assert_send_sync::<super::VolumeInfo>();
        assert_send_sync::<crate::VolumeError>();
    }
}
