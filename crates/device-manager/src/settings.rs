//! The binary's one settings value: every `GPUSTACK_*` variable the described system defines and
//! this binary reads (`../shared/spec/partitions-preflight-settings.md` §3), read once at start
//! from the environment, validated (a bad value is one line naming the variable), and handed to
//! every subcommand. Flags stay with their subcommands; what the settings decide (the
//! manufacturers table, the key grammar, the state directories) is read here and nowhere else.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use accel_backend::health::FaultClassifier;
use accel_backend::respond::InjectionStrategy;
use accel_core::Manufacturer;
use accel_core::labels::GroupNaming;
use accel_core::manufacturer::{ManufacturerTable, TableError};
use accel_core::resources::KeyGrammar;
use accel_plugin::settings::{Settings as PluginSettings, SettingsError as PluginSettingsError};

/// `GPUSTACK_DATA_DIR`: the data root; the operator's host trees live under `<it>/operator/`.
pub const DATA_DIR_ENV: &str = "GPUSTACK_DATA_DIR";
/// The data root when `GPUSTACK_DATA_DIR` is unset.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/gpustack";
/// `GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY`: a VRAM suffix on the group id.
pub const GROUP_ID_WITH_MEMORY_ENV: &str = "GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY";
/// `GPUSTACK_CONTAINERD_CONFIG_DIR`: where `auto` reads containerd's `config.toml`.
pub const CONTAINERD_CONFIG_DIR_ENV: &str = "GPUSTACK_CONTAINERD_CONFIG_DIR";
/// containerd's configuration directory when `GPUSTACK_CONTAINERD_CONFIG_DIR` is unset.
pub const DEFAULT_CONTAINERD_CONFIG_DIR: &str = "/etc/containerd";

/// A setting with a value it cannot take; every message starts with the variable's name.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Manufacturers(#[from] TableError),
    #[error(transparent)]
    Plugin(#[from] PluginSettingsError),
    /// A fault classifier's setting (`GPUSTACK_NVIDIA_XID_APPLICATION`, …): its own line.
    #[error("{0}")]
    Faults(String),
    #[error("{name}={value:?}: expected true or false")]
    NotABool { name: &'static str, value: String },
    #[error("{name}={value:?}: expected an absolute path")]
    NotAnAbsolutePath { name: &'static str, value: String },
    /// A tools search path with an entry that is not an absolute host directory.
    #[error("{name}={value:?}: {source} (expected host directories separated by ':')")]
    NotASearchPath {
        name: String,
        value: String,
        #[source]
        source: accel_host::commands::NotAHostDir,
    },
}

/// Every setting the binary reads, parsed once.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The manufacturers table with the `GPUSTACK_<MANUFACTURER>_*` overrides applied.
    pub manufacturers: ManufacturerTable,
    /// The device plugin's switches (identification, the slice gate, release of finished Pods).
    pub plugin: PluginSettings,
    /// `GPUSTACK_<MANUFACTURER>_DEVICE_INJECTION_STRATEGY` of every manufacturer whose backend
    /// reads it (its default when unset); absent for the others, where it has no effect.
    pub injection: BTreeMap<Manufacturer, InjectionStrategy>,
    /// The values of the settings the backends' fault classifiers read
    /// (`GPUSTACK_NVIDIA_XID_APPLICATION`, …), validated: [`Settings::fault_classifier`] builds
    /// from them.
    pub fault_vars: BTreeMap<String, String>,
    /// `GPUSTACK_DATA_DIR`.
    pub data_dir: PathBuf,
    /// `GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY`.
    pub group_id_with_memory: bool,
    /// `GPUSTACK_CONTAINERD_CONFIG_DIR` (a host path, read under the host root).
    pub containerd_config_dir: PathBuf,
    /// `GPUSTACK_<MANUFACTURER>_TOOLS_PATH` of every manufacturer where it is set: the host
    /// directories its tools are looked for in, replacing its row's default search path.
    pub tools_path: BTreeMap<Manufacturer, Vec<String>>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            manufacturers: ManufacturerTable::default(),
            plugin: PluginSettings::default(),
            injection: default_injection(),
            fault_vars: BTreeMap::new(),
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            group_id_with_memory: false,
            containerd_config_dir: PathBuf::from(DEFAULT_CONTAINERD_CONFIG_DIR),
            tools_path: BTreeMap::new(),
        }
    }
}

impl Settings {
    /// Reads the settings from variables (the process environment, or a map in tests); an
    /// absent variable keeps its default.
    pub fn from_vars(vars: &BTreeMap<String, String>) -> Result<Settings, SettingsError> {
        let path = |name: &'static str, default: &str| match vars.get(name).map(|v| v.trim()) {
            None | Some("") => Ok(PathBuf::from(default)),
            Some(v) if Path::new(v).is_absolute() => Ok(PathBuf::from(v)),
            Some(v) => Err(SettingsError::NotAnAbsolutePath {
                name,
                value: v.to_string(),
            }),
        };
        let group_id_with_memory = match vars.get(GROUP_ID_WITH_MEMORY_ENV) {
            None => false,
            Some(v) => match v.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" | "on" => true,
                "false" | "0" | "no" | "off" | "" => false,
                _ => {
                    return Err(SettingsError::NotABool {
                        name: GROUP_ID_WITH_MEMORY_ENV,
                        value: v.clone(),
                    });
                }
            },
        };
        let mut injection = default_injection();
        for (manufacturer, strategy) in &mut injection {
            let name = injection_env(*manufacturer);
            if let Some(value) = vars.get(&name) {
                *strategy = accel_plugin::settings::parse_strategy(&name, value)?;
            }
        }
        let mut tools_path = BTreeMap::new();
        for backend in crate::backends::all() {
            let name = tools_path_env(backend.manufacturer);
            let Some(value) = vars.get(&name).filter(|v| !v.trim().is_empty()) else {
                continue;
            };
            let search = accel_host::commands::parse_search_path(value).map_err(|source| {
                SettingsError::NotASearchPath {
                    name: name.clone(),
                    value: value.clone(),
                    source,
                }
            })?;
            tools_path.insert(backend.manufacturer, search);
        }
        let fault_vars: BTreeMap<String, String> = crate::backends::fault_settings()
            .into_iter()
            .filter_map(|name| Some((name.to_string(), vars.get(name)?.clone())))
            .collect();
        // Every classifier is built once here, so a bad value is refused at start.
        crate::backends::fault_classifiers(&fault_vars).map_err(SettingsError::Faults)?;
        Ok(Settings {
            manufacturers: ManufacturerTable::from_vars(vars)?,
            plugin: PluginSettings::from_vars(vars)?,
            injection,
            fault_vars,
            data_dir: path(DATA_DIR_ENV, DEFAULT_DATA_DIR)?,
            group_id_with_memory,
            containerd_config_dir: path(CONTAINERD_CONFIG_DIR_ENV, DEFAULT_CONTAINERD_CONFIG_DIR)?,
            tools_path,
        })
    }

    /// Where each backend's tools are looked for on a host: its row's places, with the search
    /// path `GPUSTACK_<MANUFACTURER>_TOOLS_PATH` gives where it is set.
    pub fn tool_places(&self) -> Vec<accel_host::ToolPlaces> {
        crate::backends::all()
            .iter()
            .map(|b| {
                let places = b.tools.places();
                match self.tools_path.get(&b.manufacturer) {
                    Some(search) => places.searching(search.clone()),
                    None => places,
                }
            })
            .collect()
    }

    /// The injection strategy configured for `manufacturer`; `None` where its backend offers
    /// no choice.
    pub fn injection(&self, manufacturer: Manufacturer) -> Option<InjectionStrategy> {
        self.injection.get(&manufacturer).copied()
    }

    /// The manufacturer's kernel-log fault classifier under these settings; `None` where this
    /// build reads none of its faults.
    pub fn fault_classifier(&self, manufacturer: Manufacturer) -> Option<Arc<dyn FaultClassifier>> {
        // The values were validated when the settings were read.
        crate::backends::fault_classifier(manufacturer, &self.fault_vars)
            .ok()
            .flatten()
    }

    /// The settings of this process's environment (variables that are not UTF-8 are skipped:
    /// none of ours can be one).
    pub fn from_env() -> Result<Settings, SettingsError> {
        Settings::from_vars(
            &std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
                .collect(),
        )
    }

    /// The resource-key grammar of the manufacturers table in force: what the plugins register,
    /// the capacity the node publishes, and what the webhooks check all come from it.
    pub fn grammar(&self) -> KeyGrammar {
        KeyGrammar::from_table(&self.manufacturers).with_group_naming(GroupNaming {
            with_memory: self.group_id_with_memory,
        })
    }

    /// `<GPUSTACK_DATA_DIR>/operator`: the operator's host trees (`device-manager`, `lib`, …).
    pub fn operator_dir(&self) -> PathBuf {
        self.data_dir.join("operator")
    }

    /// The node daemon's state directory unless `--data-dir` names one.
    pub fn daemon_dir(&self) -> PathBuf {
        self.operator_dir().join("device-manager")
    }

    /// The host directory the preload libraries are staged in unless `--library-dir` names one.
    pub fn library_dir(&self) -> PathBuf {
        self.operator_dir().join("lib")
    }
}

/// `GPUSTACK_<MANUFACTURER>_DEVICE_INJECTION_STRATEGY`.
pub fn injection_env(manufacturer: Manufacturer) -> String {
    format!(
        "GPUSTACK_{}_DEVICE_INJECTION_STRATEGY",
        manufacturer.name().to_ascii_uppercase()
    )
}

/// `GPUSTACK_<MANUFACTURER>_TOOLS_PATH`: the host directories, `PATH`-style, the
/// manufacturer's tools are looked for in (replacing the host's search path and its row's
/// install directories).
pub fn tools_path_env(manufacturer: Manufacturer) -> String {
    format!(
        "GPUSTACK_{}_TOOLS_PATH",
        manufacturer.name().to_ascii_uppercase()
    )
}

/// Each backend's default strategy, for the manufacturers that read the setting.
fn default_injection() -> BTreeMap<Manufacturer, InjectionStrategy> {
    crate::backends::all()
        .into_iter()
        .filter_map(|b| Some((b.manufacturer, b.injection?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use accel_core::Manufacturer;
    use accel_core::resources::AcceleratorKey;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The worker's webhooks answer with the grammar [`Settings::grammar`] builds (`worker`
    /// hands it to `accel_webhook::router`): a renamed resource is checked under its new name,
    /// and the old name is no longer a key of this system.
    #[test]
    fn the_webhooks_check_a_renamed_resource_under_its_new_name() {
        use accel_webhook::StaticPool;
        use accel_webhook::review::answer;
        let settings = Settings::from_vars(&vars(&[(
            "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME",
            "example.com/gpu",
        )]))
        .unwrap();
        let grammar = settings.grammar();
        let pools = StaticPool(Default::default());
        let review = |key: &str| {
            serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"}, "operation": "CREATE",
                "namespace": "team-a", "object": {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
                "spec": {"containers": [{"name": "main", "image": "busybox",
                    "resources": {"limits": {key: "2", format!("{}.memory-percentage", key): "50"}}}]}}}})
            .to_string()
        };
        let renamed = answer(
            review("example.com/gpu.sliced").as_bytes(),
            accel_core::admission::Phase::Validate,
            &pools,
            &grammar,
        )
        .unwrap();
        assert_eq!(
            renamed.body["response"]["allowed"], false,
            "{:?}",
            renamed.body
        );
        assert_eq!(
            renamed.body["response"]["status"]["message"],
            "spec.containers[0].resources.limits[example.com/gpu.sliced]: Invalid value: \"2\": a logical slice request is always a single accelerator; multi-accelerator logical slicing is not supported yet"
        );
        let old = answer(
            review("nvidia.com/gpu.sliced").as_bytes(),
            accel_core::admission::Phase::Validate,
            &pools,
            &grammar,
        )
        .unwrap();
        assert_eq!(old.body["response"]["allowed"], true, "{:?}", old.body);
        // And with the defaults, the same request under nvidia.com is refused.
        let default = answer(
            review("nvidia.com/gpu.sliced").as_bytes(),
            accel_core::admission::Phase::Validate,
            &pools,
            &Settings::default().grammar(),
        )
        .unwrap();
        assert_eq!(default.body["response"]["allowed"], false);
    }

    #[test]
    fn defaults_keep_todays_paths() {
        let s = Settings::from_vars(&BTreeMap::new()).unwrap();
        assert_eq!(s, Settings::default());
        assert_eq!(
            s.daemon_dir(),
            Path::new("/var/lib/gpustack/operator/device-manager")
        );
        assert_eq!(
            s.library_dir().display().to_string(),
            accel_nvidia::responder::HOST_LIBRARY_DIR
        );
        assert_eq!(s.containerd_config_dir, Path::new("/etc/containerd"));
        assert!(!s.group_id_with_memory);
    }

    #[test]
    fn the_data_root_moves_every_tree() {
        let s = Settings::from_vars(&vars(&[
            (DATA_DIR_ENV, "/data/gpustack"),
            (CONTAINERD_CONFIG_DIR_ENV, "/etc/k3s/containerd"),
            (GROUP_ID_WITH_MEMORY_ENV, "true"),
        ]))
        .unwrap();
        assert_eq!(
            s.daemon_dir(),
            Path::new("/data/gpustack/operator/device-manager")
        );
        assert_eq!(s.library_dir(), Path::new("/data/gpustack/operator/lib"));
        assert_eq!(s.containerd_config_dir, Path::new("/etc/k3s/containerd"));
        assert!(s.group_id_with_memory);
        // The one grammar every publisher reads carries the group naming.
        assert!(s.grammar().group_naming().with_memory);
        assert!(!Settings::default().grammar().group_naming().with_memory);
    }

    #[test]
    fn the_resource_name_setting_renames_every_key() {
        let s = Settings::from_vars(&vars(&[(
            "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME",
            "example.com/gpu",
        )]))
        .unwrap();
        let grammar = s.grammar();
        assert_eq!(
            grammar.accelerator_key(Manufacturer::Nvidia, AcceleratorKey::Shared),
            "example.com/gpu.shared"
        );
        assert_eq!(grammar.parse("nvidia.com/gpu"), None);
    }

    #[test]
    fn each_bad_value_is_one_line_naming_its_variable() {
        for (name, value) in [
            ("GPUSTACK_NVIDIA_PCI_VENDOR_ID", "xyz"),
            ("GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME", "gpu"),
            ("GPUSTACK_DEVICE_PLUGIN_SLICED_ALLOCATE_GATE", "maybe"),
            ("GPUSTACK_NVIDIA_XID_APPLICATION", "x"),
            (DATA_DIR_ENV, "relative/dir"),
            (CONTAINERD_CONFIG_DIR_ENV, "etc"),
            (GROUP_ID_WITH_MEMORY_ENV, "sometimes"),
        ] {
            let text = Settings::from_vars(&vars(&[(name, value)]))
                .unwrap_err()
                .to_string();
            assert!(text.contains(name), "{name}: {text}");
            assert!(!text.contains('\n'), "{text}");
        }
    }

    #[test]
    fn the_injection_strategy_is_read_for_the_manufacturers_whose_backend_reads_it() {
        // No effect on AMD (its responder hands /dev itself): not even its value is read.
        let amd = injection_env(Manufacturer::Amd);
        let s = Settings::from_vars(&vars(&[
            ("GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY", "auto"),
            (&amd, "anything"),
        ]))
        .unwrap();
        assert_eq!(
            s.injection(Manufacturer::Nvidia),
            Some(InjectionStrategy::Auto)
        );
        assert_eq!(s.injection(Manufacturer::Amd), None);
        assert_eq!(
            Settings::default().injection(Manufacturer::Nvidia),
            Some(InjectionStrategy::Envvar)
        );
        let bad = Settings::from_vars(&vars(&[(
            "GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY",
            "cdi",
        )]))
        .unwrap_err()
        .to_string();
        assert!(
            bad.starts_with("GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY=\"cdi\""),
            "{bad}"
        );
    }

    #[test]
    fn fault_settings_reach_the_classifier_their_backend_builds() {
        let s = Settings::from_vars(&vars(&[("GPUSTACK_NVIDIA_XID_APPLICATION", "79")])).unwrap();
        let nvidia = s.fault_classifier(Manufacturer::Nvidia).unwrap();
        assert_eq!(
            nvidia.class_of("Xid79", Some(79)),
            Some(accel_backend::health::FaultClass::Application)
        );
        let default = Settings::default()
            .fault_classifier(Manufacturer::Nvidia)
            .unwrap();
        assert_eq!(
            default.class_of("Xid79", Some(79)),
            Some(accel_backend::health::FaultClass::Hardware)
        );
        assert!(s.fault_classifier(Manufacturer::Amd).is_some());
        assert!(s.fault_classifier(Manufacturer::Hygon).is_none());
    }
}
