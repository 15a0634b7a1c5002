//! The container engine's own configuration under the host root, read for the `auto` injection
//! strategy (seed 000, "Exclusive and shared"): whether the engine resolves CDI requests and
//! where it loads specs from, its default runtime handler and whether that is NVIDIA's, and the
//! NVIDIA CDI device names those spec directories carry ([`EngineFacts`]).
//!
//! containerd: `/etc/containerd/config.toml` (version 2 and 3 layouts) and the files its
//! `imports` name (globs in the file name, each merged over what came before, as containerd
//! does). CRI-O: `/etc/crio/crio.conf`, then `/etc/crio/crio.conf.d/*.conf` in name order.
//! Everything is read through [`Host`] and nothing is written. [`LiveEngine`] keeps the facts
//! current for a running daemon: it reads them again when any file or directory the last read
//! touched has changed (the vendor's CDI spec is often generated after the daemon started). This module decides no channel;
//! `responder::choose_channel` does, per container.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::cdi;
use accel_host::{EntryKind, Host, HostError, Modified};
use toml::Table;

use crate::responder::{EngineFacts, EngineSource};

/// containerd's configuration file.
pub const CONTAINERD_CONFIG: &str = "etc/containerd/config.toml";
/// containerd's configuration directory unless `GPUSTACK_CONTAINERD_CONFIG_DIR` says otherwise.
pub const DEFAULT_CONTAINERD_DIR: &str = "/etc/containerd";
/// CRI-O's configuration file and its drop-in directory.
pub const CRIO_CONFIG: &str = "etc/crio/crio.conf";
pub const CRIO_DROP_INS: &str = "etc/crio/crio.conf.d";
/// The engines' sockets, to tell which one runs when both are configured.
const CONTAINERD_SOCKET: &str = "run/containerd/containerd.sock";
const CRIO_SOCKET: &str = "var/run/crio/crio.sock";
/// Where both engines load CDI specs from when their configuration names no directories.
const DEFAULT_CDI_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];
/// The CRI plugin's table in containerd 1.x (version 2) and 2.x (version 3) configurations.
const CRI_V2: &str = "io.containerd.grpc.v1.cri";
const CRI_V3: &str = "io.containerd.cri.v1.runtime";

/// Why the engine's configuration could not be read (`auto` then falls back to `envvar`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error(
        "no container engine configuration under the host root ({CONTAINERD_CONFIG}, {CRIO_CONFIG})"
    )]
    NotFound,
    #[error("both containerd and CRI-O are configured and neither socket tells which one runs")]
    Ambiguous,
    #[error("/{path}: {reason}")]
    Unreadable { path: String, reason: String },
}

/// Which engine a configuration is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Containerd,
    CriO,
}

/// What the engine's configuration says, before the specs are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineConfig {
    pub engine: Engine,
    pub cdi_enabled: bool,
    /// Host paths the engine loads CDI specs from.
    pub cdi_spec_dirs: Vec<String>,
    pub default_runtime: String,
    /// The default runtime is NVIDIA's (`nvidia*`, or a binary named `nvidia-container-runtime*`).
    pub default_runtime_is_vendor: bool,
}

/// The facts `auto` reads, from the engine's configuration and the NVIDIA specs in its CDI
/// directories; every fall-back this implies is logged once here.
pub fn engine_facts(host: &dyn Host) -> EngineFacts {
    engine_facts_in(host, Path::new(DEFAULT_CONTAINERD_DIR))
}

/// [`engine_facts`] with containerd's configuration read from `containerd_dir`
/// (`GPUSTACK_CONTAINERD_CONFIG_DIR`, a host path read under the host root).
pub fn engine_facts_in(host: &dyn Host, containerd_dir: &Path) -> EngineFacts {
    let config = match read_config_in(host, containerd_dir) {
        Ok(config) => config,
        Err(e) => {
            tracing::warn!("nvidia injection (auto): falls back to envvar: {e}");
            return EngineFacts::default();
        }
    };
    let specs = cdi::vendor_specs(host, &config.cdi_spec_dirs);
    for path in &specs.unreadable {
        tracing::warn!("nvidia injection (auto): CDI spec {path} could not be read; ignored");
    }
    let facts = EngineFacts {
        readable: true,
        default_runtime_is_vendor: config.default_runtime_is_vendor,
        cdi_enabled: config.cdi_enabled,
        cdi_devices: if config.cdi_enabled {
            specs.qualified()
        } else {
            Default::default()
        },
    };
    tracing::info!(
        engine = ?config.engine,
        default_runtime = %config.default_runtime,
        cdi_enabled = config.cdi_enabled,
        cdi_spec_dirs = ?config.cdi_spec_dirs,
        cdi_specs = ?specs.specs,
        "nvidia injection (auto): container engine read"
    );
    if config.default_runtime_is_vendor {
        tracing::info!(
            "nvidia injection (auto): envvar, the default runtime {} is NVIDIA's",
            config.default_runtime
        );
    } else if !config.cdi_enabled {
        tracing::info!("nvidia injection (auto): envvar, the engine does not resolve CDI requests");
    } else if specs.specs.is_empty() {
        tracing::info!(
            "nvidia injection (auto): envvar, no NVIDIA CDI spec in {:?}",
            config.cdi_spec_dirs
        );
    }
    facts
}

/// The engine's facts kept current for `auto`: every path the last read touched (files read,
/// directories listed, paths looked for and not found) is remembered with its modification
/// time and length, and [`current`](EngineSource::current) compares them (one `stat` each)
/// and reads everything again when any differs. A spec generated, rewritten or removed, a
/// drop-in added, a configuration that appears: the next container is answered on the node as
/// it is then.
pub struct LiveEngine {
    host: Arc<dyn Host>,
    containerd_dir: PathBuf,
    read: Mutex<Read>,
}

/// One read: the facts and the state of every path it touched.
struct Read {
    facts: Arc<EngineFacts>,
    stamps: Vec<(String, Option<Modified>)>,
}

impl LiveEngine {
    /// Reads the engine's facts under `host` (containerd's configuration in `containerd_dir`).
    pub fn new(host: Arc<dyn Host>, containerd_dir: impl Into<PathBuf>) -> LiveEngine {
        let containerd_dir = containerd_dir.into();
        let read = Self::read(host.as_ref(), &containerd_dir);
        LiveEngine {
            host,
            containerd_dir,
            read: Mutex::new(read),
        }
    }

    fn read(host: &dyn Host, containerd_dir: &Path) -> Read {
        let watched = Watched {
            host,
            touched: Mutex::new(BTreeSet::new()),
        };
        let facts = engine_facts_in(&watched, containerd_dir);
        let touched = watched
            .touched
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        let stamps = touched
            .into_iter()
            .map(|path| {
                let stamp = host.modified(&path);
                (path, stamp)
            })
            .collect();
        Read {
            facts: Arc::new(facts),
            stamps,
        }
    }

    /// The paths the last read touched, host-relative (for tests and the log).
    pub fn watched(&self) -> Vec<String> {
        let read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        read.stamps.iter().map(|(p, _)| p.clone()).collect()
    }
}

impl EngineSource for LiveEngine {
    fn current(&self) -> Arc<EngineFacts> {
        let mut read = self.read.lock().unwrap_or_else(PoisonError::into_inner);
        let changed = read
            .stamps
            .iter()
            .find(|(path, stamp)| self.host.modified(path) != *stamp);
        if let Some((path, _)) = changed {
            tracing::info!(
                "nvidia injection (auto): /{path} changed; reading the container engine's configuration and CDI specs again"
            );
            *read = Self::read(self.host.as_ref(), &self.containerd_dir);
        }
        read.facts.clone()
    }
}

impl std::fmt::Debug for LiveEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveEngine")
            .field("root", &self.host.root())
            .field("containerd_dir", &self.containerd_dir)
            .finish_non_exhaustive()
    }
}

/// A [`Host`] that remembers every path asked of it.
struct Watched<'a> {
    host: &'a dyn Host,
    touched: Mutex<BTreeSet<String>>,
}

impl Watched<'_> {
    fn touch(&self, path: &str) {
        let path = path.trim_start_matches('/').trim_end_matches('/');
        self.touched
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_string());
    }
}

impl Host for Watched<'_> {
    fn root(&self) -> &Path {
        self.host.root()
    }

    fn read(&self, path: &str) -> Result<Vec<u8>, HostError> {
        self.touch(path);
        self.host.read(path)
    }

    fn list(&self, path: &str) -> Result<Vec<String>, HostError> {
        self.touch(path);
        self.host.list(path)
    }

    fn read_link(&self, path: &str) -> Result<PathBuf, HostError> {
        self.touch(path);
        self.host.read_link(path)
    }

    fn exists(&self, path: &str) -> bool {
        self.touch(path);
        self.host.exists(path)
    }

    fn modified(&self, path: &str) -> Option<Modified> {
        self.host.modified(path)
    }

    fn entry_kind(&self, path: &str) -> Result<EntryKind, HostError> {
        self.touch(path);
        self.host.entry_kind(path)
    }
}

/// The engine's configuration: containerd when its file exists, else CRI-O; both configured, the
/// socket present says which.
pub fn read_config(host: &dyn Host) -> Result<EngineConfig, EngineError> {
    read_config_in(host, Path::new(DEFAULT_CONTAINERD_DIR))
}

/// [`read_config`] with containerd's `config.toml` in `containerd_dir` (a host path).
pub fn read_config_in(host: &dyn Host, containerd_dir: &Path) -> Result<EngineConfig, EngineError> {
    let containerd_file = containerd_dir.join("config.toml");
    let containerd_file = containerd_file.to_string_lossy();
    let containerd_file = containerd_file.trim_start_matches('/');
    let containerd_config = |host: &dyn Host| containerd_config(host, containerd_file);
    let containerd = host.exists(containerd_file);
    let crio = host.exists(CRIO_CONFIG) || host.exists(CRIO_DROP_INS);
    match (containerd, crio) {
        (false, false) => Err(EngineError::NotFound),
        (true, false) => containerd_config(host),
        (false, true) => crio_config(host),
        (true, true) => match (host.exists(CONTAINERD_SOCKET), host.exists(CRIO_SOCKET)) {
            (true, false) => containerd_config(host),
            (false, true) => crio_config(host),
            _ => Err(EngineError::Ambiguous),
        },
    }
}

fn read_toml(host: &dyn Host, path: &str) -> Result<Table, EngineError> {
    let path = path.trim_start_matches('/');
    let unreadable = |reason: String| EngineError::Unreadable {
        path: path.to_string(),
        reason,
    };
    let text = host
        .read_to_string(path)
        .map_err(|e| unreadable(e.to_string()))?;
    text.parse::<Table>()
        .map_err(|e| unreadable(e.message().to_string()))
}

/// `over` merged into `base`: tables merge key by key, any other value replaces.
fn merge(base: &mut Table, over: Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// The value at a dotted path of table names.
fn at<'a>(table: &'a Table, path: &[&str]) -> Option<&'a toml::Value> {
    let (last, parents) = path.split_last()?;
    let mut current = table;
    for key in parents {
        current = current.get(*key)?.as_table()?;
    }
    current.get(*last)
}

fn strings(value: Option<&toml::Value>) -> Option<Vec<String>> {
    value?.as_array().map(|items| {
        items
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    })
}

/// The files an `imports` entry names: a literal path, or a glob in its file name part.
fn expand(host: &dyn Host, pattern: &str) -> Vec<String> {
    let pattern = pattern.trim_start_matches('/');
    let (dir, name) = match pattern.rsplit_once('/') {
        Some((dir, name)) => (dir, name),
        None => ("", pattern),
    };
    if !name.contains('*') {
        return vec![pattern.to_string()];
    }
    let (prefix, suffix) = name.split_once('*').unwrap_or((name, ""));
    let mut files: Vec<String> = host
        .list(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|f| {
            f.len() >= prefix.len() + suffix.len() && f.starts_with(prefix) && f.ends_with(suffix)
        })
        .map(|f| format!("{dir}/{f}"))
        .collect();
    files.sort();
    files
}

fn is_nvidia(name: &str, binary: Option<&str>) -> bool {
    let binary_is_nvidia = binary
        .and_then(|b| Path::new(b).file_name())
        .and_then(|f| f.to_str())
        .is_some_and(|f| f.starts_with("nvidia-container-runtime"));
    name.starts_with("nvidia") || binary_is_nvidia
}

fn containerd_config(host: &dyn Host, file: &str) -> Result<EngineConfig, EngineError> {
    let mut config = read_toml(host, file)?;
    let imports = strings(config.get("imports")).unwrap_or_default();
    for pattern in imports {
        for file in expand(host, &pattern) {
            let drop_in = read_toml(host, &file)?;
            merge(&mut config, drop_in);
        }
    }
    let version = config
        .get("version")
        .and_then(toml::Value::as_integer)
        .unwrap_or(1);
    // containerd 2.x (configuration version 3) resolves CDI unless told not to; 1.x only when
    // `enable_cdi` is set.
    let (cri, cdi_default) = if version >= 3 {
        (CRI_V3, true)
    } else {
        (CRI_V2, false)
    };
    let plugin = |rest: &[&str]| {
        let mut path = vec!["plugins", cri];
        path.extend_from_slice(rest);
        at(&config, &path).cloned()
    };
    let cdi_enabled = plugin(&["enable_cdi"])
        .and_then(|v| v.as_bool())
        .unwrap_or(cdi_default);
    let cdi_spec_dirs = strings(plugin(&["cdi_spec_dirs"]).as_ref())
        .unwrap_or_else(|| DEFAULT_CDI_DIRS.map(str::to_string).to_vec());
    let default_runtime = plugin(&["containerd", "default_runtime_name"])
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "runc".to_string());
    let binary = plugin(&[
        "containerd",
        "runtimes",
        &default_runtime,
        "options",
        "BinaryName",
    ]);
    let default_runtime_is_vendor = is_nvidia(
        &default_runtime,
        binary.as_ref().and_then(toml::Value::as_str),
    );
    Ok(EngineConfig {
        engine: Engine::Containerd,
        cdi_enabled,
        cdi_spec_dirs,
        default_runtime,
        default_runtime_is_vendor,
    })
}

fn crio_config(host: &dyn Host) -> Result<EngineConfig, EngineError> {
    let mut config = if host.exists(CRIO_CONFIG) {
        read_toml(host, CRIO_CONFIG)?
    } else {
        Table::new()
    };
    let mut drop_ins: Vec<String> = host
        .list(CRIO_DROP_INS)
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.ends_with(".conf"))
        .collect();
    drop_ins.sort();
    for file in drop_ins {
        let drop_in = read_toml(host, &format!("{CRIO_DROP_INS}/{file}"))?;
        merge(&mut config, drop_in);
    }
    let runtime = |rest: &[&str]| {
        let mut path = vec!["crio", "runtime"];
        path.extend_from_slice(rest);
        at(&config, &path).cloned()
    };
    // CRI-O resolves CDI requests always (since 1.23); only the spec directories are set.
    let cdi_spec_dirs = strings(runtime(&["cdi_spec_dirs"]).as_ref())
        .unwrap_or_else(|| DEFAULT_CDI_DIRS.map(str::to_string).to_vec());
    let default_runtime = runtime(&["default_runtime"])
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "runc".to_string());
    let binary = runtime(&["runtimes", &default_runtime, "runtime_path"]);
    let default_runtime_is_vendor = is_nvidia(
        &default_runtime,
        binary.as_ref().and_then(toml::Value::as_str),
    );
    Ok(EngineConfig {
        engine: Engine::CriO,
        cdi_enabled: true,
        cdi_spec_dirs,
        default_runtime,
        default_runtime_is_vendor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_host::FsHost;

    const UUID: &str = "GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e";
    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/nvidia/cdi/salilkadam-infrastructure__nvidia-575.64.03.yaml"
    );

    fn host(files: &[(&str, &str)]) -> (tempfile::TempDir, FsHost) {
        let root = tempfile::tempdir().unwrap();
        for (path, text) in files {
            let full = root.path().join(path);
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(full, text).unwrap();
        }
        let host = FsHost::new(root.path());
        (root, host)
    }

    fn fixture() -> String {
        std::fs::read_to_string(FIXTURE).expect("the CDI fixture is missing (../shared)")
    }

    #[test]
    fn containerd_v2_with_cdi_on_and_the_vendor_spec() {
        let spec = fixture();
        let (_root, host) = host(&[
            (
                CONTAINERD_CONFIG,
                r#"version = 2
[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi"]
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "runc"
"#,
            ),
            ("etc/cdi/nvidia.yaml", &spec),
            // Not in the engine's spec dirs: not loaded.
            (
                "var/run/cdi/late.json",
                r#"{"kind":"nvidia.com/gpu","devices":[{"name":"GPU-late"}]}"#,
            ),
        ]);
        let facts = engine_facts(&host);
        assert!(facts.readable && facts.cdi_enabled && !facts.default_runtime_is_vendor);
        assert!(
            facts
                .cdi_devices
                .contains(&format!("nvidia.com/gpu={UUID}"))
        );
        assert!(!facts.cdi_devices.contains("nvidia.com/gpu=GPU-late"));
    }

    #[test]
    fn containerd_v2_without_enable_cdi_does_not_resolve_cdi() {
        let spec = fixture();
        let (_root, host) = host(&[
            (CONTAINERD_CONFIG, "version = 2\n"),
            ("etc/cdi/nvidia.yaml", &spec),
        ]);
        let facts = engine_facts(&host);
        assert!(facts.readable);
        assert!(!facts.cdi_enabled);
        assert!(facts.cdi_devices.is_empty());
    }

    #[test]
    fn containerd_v3_resolves_cdi_by_default_and_can_turn_it_off() {
        let (_root, on) = host(&[(CONTAINERD_CONFIG, "version = 3\n")]);
        let config = read_config(&on).unwrap();
        assert!(config.cdi_enabled);
        assert_eq!(config.cdi_spec_dirs, ["/etc/cdi", "/var/run/cdi"]);
        assert_eq!(config.default_runtime, "runc");
        let (_root, off) = host(&[(
            CONTAINERD_CONFIG,
            "version = 3\n[plugins.'io.containerd.cri.v1.runtime']\nenable_cdi = false\n",
        )]);
        assert!(!read_config(&off).unwrap().cdi_enabled);
    }

    #[test]
    fn nvidia_default_runtime_from_a_drop_in() {
        // What `nvidia-ctk runtime configure --config-source=... --drop-in` writes.
        let (_root, host) = host(&[
            (
                CONTAINERD_CONFIG,
                "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\n",
            ),
            (
                "etc/containerd/conf.d/99-nvidia.toml",
                r#"version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "nvidia"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"#,
            ),
            ("etc/containerd/conf.d/README", "not a drop-in"),
        ]);
        let config = read_config(&host).unwrap();
        assert_eq!(config.default_runtime, "nvidia");
        assert!(config.default_runtime_is_vendor);
        assert!(
            config.cdi_enabled,
            "the main file's setting survives the merge"
        );
        assert!(engine_facts(&host).default_runtime_is_vendor);
    }

    #[test]
    fn a_runtime_named_otherwise_is_nvidias_by_its_binary() {
        let (_root, host) = host(&[(
            CONTAINERD_CONFIG,
            r#"version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "gpu"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpu.options]
  BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime.cdi"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  BinaryName = "/usr/bin/runc"
"#,
        )]);
        assert!(read_config(&host).unwrap().default_runtime_is_vendor);
    }

    #[test]
    fn crio_resolves_cdi_and_drop_ins_override_in_name_order() {
        let spec = fixture();
        let (_root, host) = host(&[
            (
                CRIO_CONFIG,
                "[crio.runtime]\ndefault_runtime = \"crun\"\ncdi_spec_dirs = [\"/var/run/cdi\"]\n",
            ),
            (
                "etc/crio/crio.conf.d/10-nvidia.conf",
                "[crio.runtime]\ndefault_runtime = \"nvidia\"\n[crio.runtime.runtimes.nvidia]\nruntime_path = \"/usr/bin/nvidia-container-runtime\"\n",
            ),
            (
                "etc/crio/crio.conf.d/20-back.conf",
                "[crio.runtime]\ndefault_runtime = \"crun\"\n",
            ),
            ("var/run/cdi/nvidia.yaml", &spec),
        ]);
        let config = read_config(&host).unwrap();
        assert_eq!(config.engine, Engine::CriO);
        assert_eq!(config.default_runtime, "crun");
        assert!(!config.default_runtime_is_vendor);
        let facts = engine_facts(&host);
        assert!(facts.cdi_enabled);
        assert!(
            facts
                .cdi_devices
                .contains(&format!("nvidia.com/gpu={UUID}"))
        );
    }

    #[test]
    fn unreadable_or_absent_configuration_is_not_readable() {
        let (_root, empty) = host(&[]);
        assert_eq!(read_config(&empty), Err(EngineError::NotFound));
        assert_eq!(engine_facts(&empty), EngineFacts::default());
        let (_root, broken) = host(&[(CONTAINERD_CONFIG, "version = [")]);
        let err = read_config(&broken).unwrap_err().to_string();
        assert!(err.starts_with("/etc/containerd/config.toml: "), "{err}");
        assert!(!engine_facts(&broken).readable);
        let (_root, missing_import) = host(&[(
            CONTAINERD_CONFIG,
            "imports = [\"/etc/containerd/extra.toml\"]\n",
        )]);
        assert!(matches!(
            read_config(&missing_import),
            Err(EngineError::Unreadable { .. })
        ));
        let (_root, both) = host(&[(CONTAINERD_CONFIG, ""), (CRIO_CONFIG, "")]);
        assert_eq!(read_config(&both), Err(EngineError::Ambiguous));
        let (_root, crio_runs) = host(&[
            (CONTAINERD_CONFIG, ""),
            (CRIO_CONFIG, ""),
            (CRIO_SOCKET, ""),
        ]);
        assert_eq!(read_config(&crio_runs).unwrap().engine, Engine::CriO);
    }

    const CDI_ON: &str = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\ncdi_spec_dirs = [\"/etc/cdi\"]\n";

    fn live(root: &tempfile::TempDir) -> LiveEngine {
        LiveEngine::new(Arc::new(FsHost::new(root.path())), DEFAULT_CONTAINERD_DIR)
    }

    #[test]
    fn a_cdi_spec_generated_after_start_is_seen_by_the_next_answer() {
        let (root, _) = host(&[(CONTAINERD_CONFIG, CDI_ON)]);
        let engine = live(&root);
        let before = engine.current();
        assert!(before.readable && before.cdi_enabled);
        assert!(before.cdi_devices.is_empty());
        // The toolkit comes up second and writes the vendor spec.
        std::fs::create_dir_all(root.path().join("etc/cdi")).unwrap();
        std::fs::write(root.path().join("etc/cdi/nvidia.yaml"), fixture()).unwrap();
        let after = engine.current();
        assert!(
            after
                .cdi_devices
                .contains(&format!("nvidia.com/gpu={UUID}")),
            "{after:?}"
        );
        // Removed again: gone from the next answer too.
        std::fs::remove_file(root.path().join("etc/cdi/nvidia.yaml")).unwrap();
        assert!(engine.current().cdi_devices.is_empty());
    }

    #[test]
    fn a_spec_rewritten_in_place_and_a_drop_in_added_are_read_again() {
        let (root, _) = host(&[
            (
                CONTAINERD_CONFIG,
                "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n[plugins.\"io.containerd.grpc.v1.cri\"]\nenable_cdi = true\n",
            ),
            (
                "etc/cdi/nvidia.json",
                r#"{"kind":"nvidia.com/gpu","devices":[{"name":"GPU-old"}]}"#,
            ),
            ("etc/containerd/conf.d/.keep", ""),
        ]);
        let engine = live(&root);
        assert!(
            engine
                .current()
                .cdi_devices
                .contains("nvidia.com/gpu=GPU-old")
        );
        assert!(!engine.current().default_runtime_is_vendor);
        std::fs::write(
            root.path().join("etc/cdi/nvidia.json"),
            r#"{"kind":"nvidia.com/gpu","devices":[{"name":"GPU-new-one"}]}"#,
        )
        .unwrap();
        let facts = engine.current();
        assert!(facts.cdi_devices.contains("nvidia.com/gpu=GPU-new-one"));
        assert!(!facts.cdi_devices.contains("nvidia.com/gpu=GPU-old"));
        std::fs::write(
            root.path().join("etc/containerd/conf.d/99-nvidia.toml"),
            "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"nvidia\"\n",
        )
        .unwrap();
        assert!(engine.current().default_runtime_is_vendor);
    }

    #[test]
    fn an_engine_configured_after_start_is_read_when_it_appears() {
        let (root, _) = host(&[]);
        let engine = live(&root);
        assert!(!engine.current().readable);
        std::fs::create_dir_all(root.path().join("etc/containerd")).unwrap();
        std::fs::write(root.path().join(CONTAINERD_CONFIG), CDI_ON).unwrap();
        let facts = engine.current();
        assert!(facts.readable && facts.cdi_enabled);
    }

    #[test]
    fn nothing_changed_nothing_is_read_again() {
        let (root, _) = host(&[
            (CONTAINERD_CONFIG, CDI_ON),
            ("etc/cdi/nvidia.yaml", &fixture()),
        ]);
        let engine = live(&root);
        let first = engine.current();
        let watched = engine.watched();
        assert!(watched.iter().any(|p| p == "etc/cdi"), "{watched:?}");
        assert!(
            watched.iter().any(|p| p == "etc/cdi/nvidia.yaml"),
            "{watched:?}"
        );
        assert!(
            watched.iter().any(|p| p == CONTAINERD_CONFIG),
            "{watched:?}"
        );
        // The same read answers again: not a copy made by reading the files once more.
        assert!(Arc::ptr_eq(&first, &engine.current()));
    }
}
