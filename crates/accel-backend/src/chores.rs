//! The responder's per-Pod chores, written once for every manufacturer: the per-Pod and
//! per-container working directories on the host (their names, their creation and mode), taking
//! a gone Pod's directory back, the never-overwrite rule for the variables a slice adds, and the
//! `ld.so.preload` file the sliced containers mount.
//!
//! The layout under the pod-directory root (a hostPath, [`crate::respond::ResponderSetup`]'s
//! `pod_dir_root`) is `<root>/<pod uid>/` for the Pod, and `<root>/<pod uid>/c-<container>/`
//! for one of its containers. A name that is not one plain path component (empty, `.`, holding
//! `/`, `..` or NUL) names no directory: nothing is created for it and nothing is removed, so a
//! hostile or mangled UID can never reach outside its own directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::pod::Container;
use crate::respond::{Mount, PrepareError, ResponderError};

/// Where a sliced container sees the preload file.
pub const CONTAINER_PRELOAD: &str = "/etc/ld.so.preload";
/// The preload file's name in its host directory.
pub const PRELOAD_FILE: &str = "ld.so.preload";
/// The prefix of a container's directory under its Pod's (`c-<container>`).
pub const CONTAINER_PREFIX: &str = "c-";
/// The mode of a directory the container's own processes write, whatever user they run as.
pub const WRITABLE_BY_ANY_USER: u32 = 0o777;

/// Whether `name` is one plain path component: not empty, not `.`, without `/`, `..` or NUL.
pub fn is_component(name: &str) -> bool {
    !name.is_empty() && name != "." && !name.contains(['/', '\0']) && !name.contains("..")
}

/// One container directory found under the root ([`PodDirs::containers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerDir {
    pub pod_uid: String,
    pub container: String,
    pub path: PathBuf,
}

/// The per-Pod working directories under one host directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodDirs {
    root: PathBuf,
}

fn unnamed(root: &Path, what: &str, name: &str) -> ResponderError {
    ResponderError::WorkDir {
        path: root.display().to_string(),
        reason: format!("the {what} {name:?} is not one path component"),
    }
}

impl PodDirs {
    pub fn new(root: impl Into<PathBuf>) -> PodDirs {
        PodDirs { root: root.into() }
    }

    /// The host directory the Pods' directories are made in.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The Pod's directory, `<root>/<pod uid>` (not created).
    pub fn pod(&self, pod_uid: &str) -> Result<PathBuf, ResponderError> {
        if !is_component(pod_uid) {
            return Err(unnamed(&self.root, "pod uid", pod_uid));
        }
        Ok(self.root.join(pod_uid))
    }

    /// One container's directory, `<root>/<pod uid>/c-<container>` (not created).
    pub fn container(&self, pod_uid: &str, container: &str) -> Result<PathBuf, ResponderError> {
        if !is_component(container) {
            return Err(unnamed(&self.root, "container name", container));
        }
        Ok(self
            .pod(pod_uid)?
            .join(format!("{CONTAINER_PREFIX}{container}")))
    }

    /// Creates the Pod's directory (and the root) and returns it.
    pub fn make_pod(&self, pod_uid: &str) -> Result<PathBuf, ResponderError> {
        let dir = self.pod(pod_uid)?;
        make_dir(&dir, None)?;
        Ok(dir)
    }

    /// Every container directory under the root that an earlier run left, in name order:
    /// entries that are not `<pod>/c-<container>` directories are skipped, and an unreadable
    /// root is none.
    pub fn containers(&self) -> Vec<ContainerDir> {
        let mut found = Vec::new();
        let Ok(pods) = std::fs::read_dir(&self.root) else {
            return found;
        };
        for pod in pods.flatten() {
            let pod_uid = pod.file_name().to_string_lossy().into_owned();
            let Ok(containers) = std::fs::read_dir(pod.path()) else {
                continue;
            };
            for entry in containers.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(container) = name.strip_prefix(CONTAINER_PREFIX)
                    && entry.file_type().is_ok_and(|t| t.is_dir())
                {
                    found.push(ContainerDir {
                        pod_uid: pod_uid.clone(),
                        container: container.to_string(),
                        path: entry.path(),
                    });
                }
            }
        }
        found.sort_by(|a, b| (&a.pod_uid, &a.container).cmp(&(&b.pod_uid, &b.container)));
        found
    }

    /// Takes back a gone Pod's directory and everything in it. A directory that is not there
    /// is nothing to do; one that cannot be removed is logged naming it; a UID that is not one
    /// path component removes nothing.
    pub fn reclaim(&self, pod_uid: &str) {
        let Ok(dir) = self.pod(pod_uid) else {
            return;
        };
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!("cannot reclaim {}: {e}", dir.display()),
        }
    }
}

/// Creates `dir` and its parents; with `mode`, sets the directory's own mode (the parents keep
/// the process's default).
pub fn make_dir(dir: &Path, mode: Option<u32>) -> Result<(), ResponderError> {
    std::fs::create_dir_all(dir)
        .and_then(|()| match mode {
            Some(mode) => {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            }
            None => Ok(()),
        })
        .map_err(|e| ResponderError::WorkDir {
            path: dir.display().to_string(),
            reason: e.to_string(),
        })
}

/// Whether the container's own `env:` sets `name`.
pub fn sets_own(container: Option<&Container>, name: &str) -> bool {
    container.is_some_and(|c| c.env.contains_key(name))
}

/// The variables a responder adds, under the never-overwrite rule: a variable the container's
/// own `env:` already sets is left to it.
#[derive(Debug)]
pub struct PodEnv<'a> {
    envs: &'a mut BTreeMap<String, String>,
    container: Option<&'a Container>,
}

impl<'a> PodEnv<'a> {
    pub fn new(envs: &'a mut BTreeMap<String, String>, container: Option<&'a Container>) -> Self {
        PodEnv { envs, container }
    }

    /// Sets `name` unless the container sets it itself; `true` when it was set.
    pub fn set(&mut self, name: impl Into<String>, value: impl Into<String>) -> bool {
        let name = name.into();
        if sets_own(self.container, &name) {
            return false;
        }
        self.envs.insert(name, value.into());
        true
    }
}

/// The preload file kept in `dir` on the host.
pub fn preload_file(dir: &Path) -> PathBuf {
    dir.join(PRELOAD_FILE)
}

/// The read-only mount of `dir`'s preload file at [`CONTAINER_PRELOAD`].
pub fn preload_mount(dir: &Path) -> Mount {
    Mount {
        container_path: CONTAINER_PRELOAD.into(),
        host_path: preload_file(dir).display().to_string(),
        read_only: true,
    }
}

/// The preload file's mode: read by the container's dynamic loader as whatever user the
/// container runs as (the real `/etc/ld.so.preload` is 0644).
pub const PRELOAD_FILE_MODE: u32 = 0o644;

/// Writes `dir`'s preload file naming `library` (where the library appears in the container),
/// one line, atomically, with [`PRELOAD_FILE_MODE`], creating `dir` first.
pub fn stage_preload_file(dir: &Path, library: &str) -> Result<(), PrepareError> {
    stage_preload_lines(dir, &[library])
}

/// Writes `dir`'s preload file naming `libraries`, one a line in the order given (Ascend's
/// names the driver's `libdcmi.so` twice before the slicing runtime), as
/// [`stage_preload_file`] does.
pub fn stage_preload_lines(dir: &Path, libraries: &[&str]) -> Result<(), PrepareError> {
    let failed = |source: std::io::Error| PrepareError {
        path: dir.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    let text: String = libraries.iter().map(|l| format!("{l}\n")).collect();
    accel_host::atomic::write_atomic_mode(&preload_file(dir), text.as_bytes(), PRELOAD_FILE_MODE)
        .map_err(|e| failed(std::io::Error::other(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(env: &[(&str, &str)]) -> Container {
        Container {
            name: "main".into(),
            limits: BTreeMap::new(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn only_one_plain_component_names_a_directory() {
        for good in ["uid-1", "0b5e-11ef", "a.b", "c"] {
            assert!(is_component(good), "{good}");
        }
        for bad in ["", ".", "..", "a/b", "/", "a..b", "x\0y", "../x"] {
            assert!(!is_component(bad), "{bad:?}");
        }
    }

    #[test]
    fn directories_are_named_pod_then_c_container() {
        let dirs = PodDirs::new("/r");
        assert_eq!(dirs.pod("u1").unwrap(), Path::new("/r/u1"));
        assert_eq!(
            dirs.container("u1", "main").unwrap(),
            Path::new("/r/u1/c-main")
        );
        assert!(matches!(
            dirs.pod("../etc"),
            Err(ResponderError::WorkDir { .. })
        ));
        assert!(dirs.container("u1", "..").is_err());
        assert!(dirs.container("..", "main").is_err());
        assert!(dirs.container("u1", "a/b").is_err());
    }

    #[test]
    fn make_pod_creates_the_root_and_the_pods_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = PodDirs::new(tmp.path().join("pods"));
        let made = dirs.make_pod("u1").unwrap();
        assert_eq!(made, tmp.path().join("pods/u1"));
        assert!(made.is_dir());
        assert!(dirs.make_pod("a/b").is_err());
        assert!(!tmp.path().join("pods/a").exists());
    }

    #[test]
    fn make_dir_sets_the_mode_of_the_leaf_only_when_asked() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let leaf = tmp.path().join("a/b/run");
        make_dir(&leaf, Some(WRITABLE_BY_ANY_USER)).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&leaf), 0o777);
        assert_ne!(mode(&tmp.path().join("a/b")), 0o777);
        let plain = tmp.path().join("plain");
        make_dir(&plain, None).unwrap();
        assert!(plain.is_dir());
        assert_ne!(mode(&plain), 0o777);
        // A file in the way is the working-directory refusal, naming the path.
        std::fs::write(tmp.path().join("file"), b"").unwrap();
        match make_dir(&tmp.path().join("file/x"), None) {
            Err(ResponderError::WorkDir { path, .. }) => assert!(path.ends_with("file/x")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reclaim_removes_the_pods_directory_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("pods");
        let dirs = PodDirs::new(&root);
        for uid in ["u1", "u2"] {
            std::fs::create_dir_all(root.join(uid).join("c-main")).unwrap();
            std::fs::write(root.join(uid).join("c-main/f"), b"x").unwrap();
        }
        dirs.reclaim("u1");
        assert!(!root.join("u1").exists());
        assert!(root.join("u2/c-main/f").is_file());
        // Gone already, or never there: nothing to do.
        dirs.reclaim("u1");
        dirs.reclaim("never");
        // Names that would reach the root or outside it remove nothing.
        for bad in ["", ".", "..", "../pods", "u2/.."] {
            dirs.reclaim(bad);
        }
        assert!(root.join("u2/c-main/f").is_file());
        assert!(tmp.path().exists());
    }

    #[test]
    fn containers_lists_what_an_earlier_run_left() {
        let tmp = tempfile::tempdir().unwrap();
        let dirs = PodDirs::new(tmp.path());
        for dir in ["u2/c-side", "u1/c-main", "u1/other", "u1/c-main/c-nested"] {
            std::fs::create_dir_all(tmp.path().join(dir)).unwrap();
        }
        std::fs::write(tmp.path().join("u1/c-file"), b"").unwrap();
        std::fs::write(tmp.path().join("stray"), b"").unwrap();
        let found: Vec<(String, String)> = dirs
            .containers()
            .into_iter()
            .map(|c| {
                assert_eq!(
                    c.path,
                    tmp.path()
                        .join(&c.pod_uid)
                        .join(format!("c-{}", c.container))
                );
                (c.pod_uid, c.container)
            })
            .collect();
        assert_eq!(
            found,
            vec![
                ("u1".to_string(), "main".to_string()),
                ("u2".to_string(), "side".to_string())
            ]
        );
        assert!(
            PodDirs::new(tmp.path().join("absent"))
                .containers()
                .is_empty()
        );
    }

    #[test]
    fn a_variable_the_container_sets_is_never_overwritten() {
        let own = container(&[("LOG_LEVEL", "3")]);
        let mut envs = BTreeMap::new();
        let mut env = PodEnv::new(&mut envs, Some(&own));
        assert!(!env.set("LOG_LEVEL", "0"));
        assert!(env.set("ORDER", "PCI_BUS_ID"));
        assert_eq!(envs.get("ORDER").map(String::as_str), Some("PCI_BUS_ID"));
        assert!(!envs.contains_key("LOG_LEVEL"));
        // Without the container's spec every variable is set.
        let mut envs = BTreeMap::new();
        assert!(PodEnv::new(&mut envs, None).set("LOG_LEVEL", "0"));
        assert_eq!(envs["LOG_LEVEL"], "0");
        assert!(sets_own(Some(&own), "LOG_LEVEL"));
        assert!(!sets_own(Some(&own), "ORDER"));
        assert!(!sets_own(None, "LOG_LEVEL"));
    }

    #[test]
    fn the_preload_file_names_the_library_and_is_mounted_read_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("preload/amd");
        stage_preload_file(&dir, "/usr/local/x/libx.so").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("ld.so.preload")).unwrap(),
            "/usr/local/x/libx.so\n"
        );
        // Any user in the container must read it: the loader of a non-root process skips a
        // preload file it cannot read, and the slice would run without its library.
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(preload_file(&dir))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644);
        // Staging again replaces the file.
        stage_preload_file(&dir, "/usr/local/y/liby.so").unwrap();
        assert_eq!(
            std::fs::read_to_string(preload_file(&dir)).unwrap(),
            "/usr/local/y/liby.so\n"
        );
        let mount = preload_mount(&dir);
        assert_eq!(mount.container_path, "/etc/ld.so.preload");
        assert_eq!(
            mount.host_path,
            dir.join("ld.so.preload").display().to_string()
        );
        assert!(mount.read_only);
        // A directory that cannot be made is the prepare error, naming it.
        std::fs::write(tmp.path().join("file"), b"").unwrap();
        let err = stage_preload_file(&tmp.path().join("file/sub"), "/l.so").unwrap_err();
        assert!(err.path.ends_with("file/sub"));
    }
}
