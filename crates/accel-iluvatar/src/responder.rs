//! The Iluvatar responder. Exclusive, shared and visibility grants are exactly
//! `IX_VISIBLE_DEVICES=<UUIDs>` — no device node, no mount: ix-container-runtime (the
//! RuntimeClass `iluvatar`, or the engine's default runtime) turns the variable into
//! `/dev/iluvatar<N>`, `/dev/itrctl` and the corex libraries (spec §4.2).
//!
//! A slice is NVIDIA's HAMi-core CUDA-12 build, corex being CUDA-compatible (spec §4.3): beside
//! the variable, `CUDA_DEVICE_SM_LIMIT` (the cores percentage, 100 unless asked),
//! `CUDA_DEVICE_MEMORY_LIMIT_<i>=<MiB>m` per granted accelerator in ascending index,
//! `CUDA_DEVICE_MEMORY_SHARED_CACHE`, and `LIBCUDA_LOG_LEVEL=0` unless the container's own `env:`
//! sets it; five mounts — the host lock directory, the `ld.so.preload` and `libvgpu.so` from the
//! flat `<library-dir>/iluvatar/`, the container's cache directory and `/dev/shm`; the lock and
//! per-container directories made 0777. The preloaded library hooks corex's `libcuda.so.1`,
//! which only ix-container-runtime puts in the container, so a sliced Pod must run under the
//! RuntimeClass. The worker's mutating webhook gives it to a queued Pod that names no class when a
//! RuntimeClass of that name exists (accel-core's `admission::runtime_class`); a sliced Pod that
//! still does not run under it (the class does not exist, the Pod named another, or it skipped
//! the webhook) is refused here, at Allocate, saying why and what the webhook would have done.

use std::path::{Path, PathBuf};

use accel_backend::chores::{self, PodDirs, PodEnv, WRITABLE_BY_ANY_USER};
use accel_backend::respond::{
    Answer, Injection, Mount, PrepareError, Responder, ResponderError, ResponderSetup,
};
use accel_backend::vendor_runtime::{slice_mib, visible_devices};
use accel_core::ledger::Family;

/// The visible-devices variable ix-container-runtime reads.
pub const VISIBLE_DEVICES: &str = "IX_VISIBLE_DEVICES";
/// The library's directory under the library directory: flat, one build for every corex.
pub const LIBRARY_SUBDIR: &str = "iluvatar";
/// HAMi-core's file name.
pub const PRELOAD_LIBRARY: &str = "libvgpu.so";
/// Where the library appears in a sliced container.
pub const CONTAINER_LIBRARY: &str = "/usr/local/vgpu/libvgpu.so";
/// The cross-process lock directory, the same path on the host and in the container.
pub const LOCK_DIR: &str = "/tmp/vgpulock";
/// The container's cache directory, and the cache HAMi-core keeps in it.
pub const CONTAINER_CACHE_DIR: &str = "/tmp/vgpu";
pub const SHARED_CACHE: &str = "/tmp/vgpu/cudevshr.cache";
/// Shared memory, mounted through.
pub const SHM: &str = "/dev/shm";

/// The Iluvatar responder of one node.
#[derive(Debug, Clone)]
pub struct IluvatarResponder {
    pub pod_dirs: PodDirs,
    /// The host library directory (`<library-dir>`), whose `iluvatar/` holds the files sliced
    /// containers mount.
    pub library_dir: PathBuf,
    /// The host lock directory the mount names ([`LOCK_DIR`] on a node; tests point it
    /// elsewhere).
    pub lock_dir: PathBuf,
    /// Where the lock directory is made: `lock_dir`, or preflight's scratch copy of it.
    pub lock_made_at: PathBuf,
    /// The RuntimeClass a sliced Pod must run under; `None`: none configured (the vendor
    /// runtime is then the engine's default), nothing required.
    pub runtime_class: Option<String>,
}

impl IluvatarResponder {
    pub fn from_setup(setup: ResponderSetup) -> Self {
        IluvatarResponder {
            pod_dirs: PodDirs::new(setup.pod_dir_root),
            library_dir: setup.library_dir,
            lock_dir: PathBuf::from(LOCK_DIR),
            lock_made_at: match &setup.scratch {
                Some(scratch) => scratch.join(LOCK_DIR.trim_start_matches('/')),
                None => PathBuf::from(LOCK_DIR),
            },
            runtime_class: setup.runtime_class,
        }
    }

    /// The flat host directory of the library and its preload file.
    pub fn library_home(library_dir: &Path) -> PathBuf {
        library_dir.join(LIBRARY_SUBDIR)
    }

    /// The answer for one container.
    pub fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        let mut injection = visible_devices(VISIBLE_DEVICES, answer.seats)?;
        if answer.family == Some(Family::Sliced) {
            self.slice(answer, &mut injection)?;
        }
        Ok(injection)
    }

    fn slice(&self, answer: &Answer<'_>, injection: &mut Injection) -> Result<(), ResponderError> {
        let container = answer.container.map_or("main", |c| c.name.as_str());
        if answer.seats.is_empty() {
            return Err(ResponderError::Refused(format!(
                "no allocated accelerator found for sliced container {container:?}"
            )));
        }
        if let Some(class) = &self.runtime_class
            && answer.pod.runtime_class.as_deref() != Some(class.as_str())
        {
            let runs_under = match answer.pod.runtime_class.as_deref() {
                // The webhook attaches the class to a queued Pod naming none, once it exists.
                None => format!(
                    "no runtimeClassName; the webhook attaches {class} to a queued Pod only when a RuntimeClass {class} exists"
                ),
                Some(other) => format!("{other:?}"),
            };
            return Err(ResponderError::Refused(format!(
                "a sliced Iluvatar Pod must run with runtimeClassName: {class}: the slice's libvgpu.so hooks corex's libcuda.so.1, which only ix-container-runtime puts in the container (Pod {}/{} runs under {runs_under})",
                answer.pod.namespace, answer.pod.name,
            )));
        }
        let cache_dir = self
            .pod_dirs
            .container(&answer.pod.uid, container)?
            .join("tmp")
            .join("vgpu");
        for dir in [&self.lock_made_at, &cache_dir] {
            chores::make_dir(dir, Some(WRITABLE_BY_ANY_USER))?;
        }
        if let Some(container_dir) = cache_dir.parent().and_then(Path::parent) {
            chores::make_dir(container_dir, Some(WRITABLE_BY_ANY_USER))?;
        }
        let mut env = PodEnv::new(&mut injection.envs, answer.container);
        env.set(
            "CUDA_DEVICE_SM_LIMIT",
            answer.cores_percentage.unwrap_or(100).to_string(),
        );
        for (position, seat) in answer.seats.iter().enumerate() {
            env.set(
                format!("CUDA_DEVICE_MEMORY_LIMIT_{position}"),
                format!("{}m", slice_mib(seat, answer.slice_units)?),
            );
        }
        env.set("CUDA_DEVICE_MEMORY_SHARED_CACHE", SHARED_CACHE);
        env.set("LIBCUDA_LOG_LEVEL", "0");
        let home = Self::library_home(&self.library_dir);
        let mount = |container_path: &str, host_path: &Path, read_only| Mount {
            container_path: container_path.to_string(),
            host_path: host_path.display().to_string(),
            read_only,
        };
        injection.mounts = vec![
            mount(LOCK_DIR, &self.lock_dir, false),
            chores::preload_mount(&home),
            mount(CONTAINER_LIBRARY, &home.join(PRELOAD_LIBRARY), true),
            mount(CONTAINER_CACHE_DIR, &cache_dir, false),
            mount(SHM, Path::new(SHM), false),
        ];
        Ok(())
    }
}

impl Responder for IluvatarResponder {
    fn respond(&self, answer: &Answer<'_>) -> Result<Injection, ResponderError> {
        IluvatarResponder::respond(self, answer)
    }

    fn answers_alike(&self) -> bool {
        true
    }

    /// Nothing to write: the `ld.so.preload` beside the library (one line,
    /// [`CONTAINER_LIBRARY`]) is the image's asset, staged with the library by the init
    /// container into the library directory, which the daemon sees read-only under the host
    /// root. `doctor` checks both are there.
    fn prepare_slicing(&self) -> Result<(), PrepareError> {
        Ok(())
    }

    fn reclaim(&self, pod_uid: &str) {
        self.pod_dirs.reclaim(pod_uid);
    }
}
