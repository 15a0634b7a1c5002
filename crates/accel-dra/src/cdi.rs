//! One CDI spec file per prepared claim: what the container is given for a claim, written for the
//! container runtime to inject, and removed at unprepare. The spec is built from the backend's
//! manufacturer-neutral [`Injection`], the same answer the device plugin turns into Allocate's
//! `ContainerAllocateResponse`, so a claim injects exactly what a device-plugin grant would.
//!
//! This module owns the spec's shape, its file name and the claim's CDI device id; it decides
//! nothing about which accelerators a claim holds and never reads the machine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use accel_backend::respond::Injection;
use accel_core::manufacturer::Manufacturer;
use serde::Serialize;

/// The CDI spec version written. 0.6.0 is the lowest that carries every field used here
/// (`deviceNodes[].hostPath` came in 0.5.0, device `annotations` in 0.6.0); runtimes refuse a
/// spec whose version is newer than the CDI library they were built with, so the lowest
/// sufficient version loads on the most containerd and CRI-O releases.
pub const CDI_VERSION: &str = "0.6.0";

/// The domain our CDI kinds live under: `gpustack.ai/<manufacturer>`.
pub const CDI_DOMAIN: &str = "gpustack.ai";

/// The transient CDI spec directory every CDI-enabled runtime reads by default; specs of
/// prepared claims do not outlive a reboot, and neither do the claims' preparations.
pub const DEFAULT_CDI_DIR: &str = "/var/run/cdi";

/// The file name prefix of our specs; `accel_nvidia::cdi` skips files named so when it reads
/// the vendor's own specs.
pub const SPEC_FILE_PREFIX: &str = "gpustack-";

/// A container runtime reads the spec (it may run as another user than the daemon).
const SPEC_FILE_MODE: u32 = 0o644;

/// The annotation prefix whose values are CDI device names (`cdi.k8s.io/<key>`): a responder
/// that names vendor CDI devices in an annotation (NVIDIA's `cdi-annotations` strategy) has them
/// returned as the claim's CDI ids instead, since a DRA claim carries no annotations.
const CDI_ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

/// Why a claim's spec could not be written or removed.
#[derive(Debug, thiserror::Error)]
pub enum CdiError {
    /// The claim uid cannot name a CDI device or a file: it must be one path component of
    /// alphanumerics with `-`, `_` or `.` between (a Kubernetes UID always is).
    #[error(
        "claim uid {uid:?} is not a CDI device name (alphanumerics with '-', '_', '.' between, one path component)"
    )]
    ClaimUid { uid: String },
    /// The spec could not be serialized.
    #[error("cannot serialize the CDI spec of claim {uid}")]
    Serialize {
        uid: String,
        #[source]
        source: serde_json::Error,
    },
    /// The CDI directory did not exist and could not be made.
    #[error("cannot create the CDI directory {path}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The spec could not be written into the CDI directory.
    #[error("cannot write the CDI spec of claim {uid}")]
    Write {
        uid: String,
        #[source]
        source: accel_host::atomic::AtomicWriteError,
    },
    /// The spec could not be removed from the CDI directory.
    #[error("cannot remove the CDI spec {path}")]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Writes and removes one manufacturer's per-claim specs in one CDI directory.
#[derive(Debug, Clone)]
pub struct CdiSpecs {
    dir: PathBuf,
    manufacturer: Manufacturer,
}

/// A CDI spec as the runtime reads it (only the fields written here).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Spec<'a> {
    cdi_version: &'static str,
    kind: String,
    devices: Vec<SpecDevice<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SpecDevice<'a> {
    name: &'a str,
    /// Annotations the device plugin would have set on the container: a claim cannot set them,
    /// so they are kept here, on the record, for whoever reads the spec.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<&'a str, &'a str>,
    container_edits: ContainerEdits<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ContainerEdits<'a> {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    env: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    device_nodes: Vec<DeviceNode<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    mounts: Vec<SpecMount<'a>>,
}

impl ContainerEdits<'_> {
    fn is_empty(&self) -> bool {
        self.env.is_empty() && self.device_nodes.is_empty() && self.mounts.is_empty()
    }
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct DeviceNode<'a> {
    path: &'a str,
    host_path: &'a str,
    permissions: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SpecMount<'a> {
    host_path: &'a str,
    container_path: &'a str,
    options: [&'static str; 3],
}

/// Whether `name` is a CDI device name that is also one path component: it begins and ends with
/// an ASCII alphanumeric and has only alphanumerics, `-`, `_` and `.` between (CDI spec,
/// "CDI Devices"; so never `.`, `..` or anything with a `/`).
fn is_device_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl CdiSpecs {
    /// The specs of `manufacturer` in `dir` (usually [`DEFAULT_CDI_DIR`] under the host root).
    pub fn new(dir: impl Into<PathBuf>, manufacturer: Manufacturer) -> CdiSpecs {
        CdiSpecs {
            dir: dir.into(),
            manufacturer,
        }
    }

    /// The CDI kind of this manufacturer's devices: `gpustack.ai/<manufacturer>`.
    pub fn kind(&self) -> String {
        format!("{CDI_DOMAIN}/{}", self.manufacturer.name())
    }

    /// The fully qualified CDI device id of a claim: `gpustack.ai/<manufacturer>=<claim uid>`.
    pub fn device_id(&self, claim_uid: &str) -> Result<String, CdiError> {
        checked(claim_uid)?;
        Ok(format!("{}={claim_uid}", self.kind()))
    }

    /// The claim's spec file: `<dir>/gpustack-<manufacturer>-<claim uid>.json`.
    pub fn spec_path(&self, claim_uid: &str) -> Result<PathBuf, CdiError> {
        checked(claim_uid)?;
        Ok(self.dir.join(format!(
            "{SPEC_FILE_PREFIX}{}-{claim_uid}.json",
            self.manufacturer.name()
        )))
    }

    /// Writes (or replaces, atomically) the claim's spec: one device named by the claim uid
    /// carrying the injection's environment, device nodes and mounts. Returns the CDI device ids
    /// the kubelet hands the runtime: the claim's own, then the vendor CDI devices the injection
    /// names (its typed CDI names and the values of `cdi.k8s.io/` annotations). An injection
    /// with no edits of its own gets no spec (CDI refuses a device without edits, and one bad
    /// device makes the runtime refuse the whole file): its vendor ids alone are returned.
    pub fn write(&self, claim_uid: &str, injection: &Injection) -> Result<Vec<String>, CdiError> {
        let path = self.spec_path(claim_uid)?;
        let (vendor_ids, annotations) = split_annotations(injection);
        let edits = container_edits(injection);
        let mut ids = Vec::new();
        if edits.is_empty() {
            self.remove(claim_uid)?;
        } else {
            self.write_spec(claim_uid, &path, annotations, edits)?;
            ids.push(self.device_id(claim_uid)?);
        }
        for id in injection.cdi_devices.iter().cloned().chain(vendor_ids) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        Ok(ids)
    }

    fn write_spec(
        &self,
        claim_uid: &str,
        path: &Path,
        annotations: BTreeMap<&str, &str>,
        container_edits: ContainerEdits<'_>,
    ) -> Result<(), CdiError> {
        let spec = Spec {
            cdi_version: CDI_VERSION,
            kind: self.kind(),
            devices: vec![SpecDevice {
                name: claim_uid,
                annotations,
                container_edits,
            }],
        };
        std::fs::create_dir_all(&self.dir).map_err(|source| CdiError::CreateDir {
            path: self.dir.clone(),
            source,
        })?;
        let bytes = serde_json::to_vec_pretty(&spec).map_err(|source| CdiError::Serialize {
            uid: claim_uid.to_string(),
            source,
        })?;
        accel_host::atomic::write_atomic_mode(path, &bytes, SPEC_FILE_MODE).map_err(|source| {
            CdiError::Write {
                uid: claim_uid.to_string(),
                source,
            }
        })
    }

    /// The claim uids this manufacturer's specs in the directory are named for (a directory
    /// not made yet holds none); for the sweep of specs whose claims are gone.
    pub fn claim_uids(&self) -> std::io::Result<Vec<String>> {
        let prefix = format!("{SPEC_FILE_PREFIX}{}-", self.manufacturer.name());
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut uids = Vec::new();
        for entry in entries {
            let name = entry?.file_name();
            let uid = name
                .to_str()
                .and_then(|n| n.strip_prefix(&prefix))
                .and_then(|n| n.strip_suffix(".json"))
                .filter(|uid| is_device_name(uid));
            if let Some(uid) = uid {
                uids.push(uid.to_string());
            }
        }
        uids.sort();
        Ok(uids)
    }

    /// Removes the claim's spec; a spec already gone is not an error (unprepare is retried).
    pub fn remove(&self, claim_uid: &str) -> Result<(), CdiError> {
        let path = self.spec_path(claim_uid)?;
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(CdiError::Remove { path, source }),
        }
    }
}

fn checked(claim_uid: &str) -> Result<(), CdiError> {
    if is_device_name(claim_uid) {
        Ok(())
    } else {
        Err(CdiError::ClaimUid {
            uid: claim_uid.to_string(),
        })
    }
}

/// The injection's `cdi.k8s.io/` annotations as CDI ids (comma-separated values), and the rest
/// as the device's annotations.
fn split_annotations(injection: &Injection) -> (Vec<String>, BTreeMap<&str, &str>) {
    let mut ids = Vec::new();
    let mut rest = BTreeMap::new();
    for (key, value) in &injection.annotations {
        if key.starts_with(CDI_ANNOTATION_PREFIX) {
            ids.extend(
                value
                    .split(',')
                    .map(str::trim)
                    .filter(|id| !id.is_empty())
                    .map(str::to_string),
            );
        } else {
            rest.insert(key.as_str(), value.as_str());
        }
    }
    (ids, rest)
}

/// The injection as CDI container edits. Mounts are recursive private bind mounts, read-only or
/// read-write as the injection says: what the CRI runtime makes of the device plugin's mounts.
fn container_edits(injection: &Injection) -> ContainerEdits<'_> {
    ContainerEdits {
        env: injection
            .envs
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect(),
        device_nodes: injection
            .devices
            .iter()
            .map(|d| DeviceNode {
                path: &d.container_path,
                host_path: &d.host_path,
                permissions: &d.permissions,
            })
            .collect(),
        mounts: injection
            .mounts
            .iter()
            .map(|m| SpecMount {
                host_path: &m.host_path,
                container_path: &m.container_path,
                options: [if m.read_only { "ro" } else { "rw" }, "rbind", "rprivate"],
            })
            .collect(),
    }
}

/// Whether `path` is one of our spec files (for a sweep of specs whose claims are gone).
pub fn is_spec_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(SPEC_FILE_PREFIX) && n.ends_with(".json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_specs_named_are_this_manufacturers_claims() {
        let temp = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(temp.path().join("cdi"), Manufacturer::Nvidia);
        assert!(specs.claim_uids().unwrap().is_empty(), "no directory yet");
        specs.write("claim-b", &injection()).unwrap();
        specs.write("claim-a", &injection()).unwrap();
        CdiSpecs::new(temp.path().join("cdi"), Manufacturer::Amd)
            .write("claim-c", &injection())
            .unwrap();
        std::fs::write(temp.path().join("cdi/nvidia.json"), "{}").unwrap();
        std::fs::write(temp.path().join("cdi/gpustack-nvidia-.json"), "{}").unwrap();
        assert_eq!(specs.claim_uids().unwrap(), ["claim-a", "claim-b"]);
    }
    use accel_backend::respond::{DeviceNode as Node, Mount};
    use serde_json::{Value, json};

    const UID: &str = "6f1c2a9e-1b7d-4f0e-9a53-2d7c0b4e8f11";

    fn injection() -> Injection {
        Injection {
            envs: BTreeMap::from([
                (
                    "NVIDIA_VISIBLE_DEVICES".to_string(),
                    "GPU-a,GPU-b".to_string(),
                ),
                ("CUDA_DEVICE_MEMORY_LIMIT".to_string(), "40960m".to_string()),
            ]),
            mounts: vec![
                Mount {
                    container_path: "/etc/ld.so.preload".into(),
                    host_path: "/var/lib/gpustack/preload/ld.so.preload".into(),
                    read_only: true,
                },
                Mount {
                    container_path: "/tmp/vgpu".into(),
                    host_path: "/var/lib/gpustack/pods/p/c-main".into(),
                    read_only: false,
                },
            ],
            devices: vec![Node {
                container_path: "/dev/davinci0".into(),
                host_path: "/dev/davinci3".into(),
                permissions: "rw".into(),
            }],
            annotations: BTreeMap::new(),
            cdi_devices: Vec::new(),
        }
    }

    fn written(specs: &CdiSpecs) -> Value {
        let text = std::fs::read_to_string(specs.spec_path(UID).unwrap()).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn the_spec_carries_the_injection_field_by_field() {
        let dir = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(dir.path(), Manufacturer::Ascend);
        let ids = specs.write(UID, &injection()).unwrap();
        assert_eq!(ids, [format!("gpustack.ai/ascend={UID}")]);
        let path = dir.path().join(format!("gpustack-ascend-{UID}.json"));
        assert_eq!(specs.spec_path(UID).unwrap(), path);
        let spec = written(&specs);
        assert_eq!(spec["cdiVersion"], "0.6.0");
        assert_eq!(spec["kind"], "gpustack.ai/ascend");
        let devices = spec["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0]["name"], UID);
        assert!(devices[0].get("annotations").is_none());
        let edits = &devices[0]["containerEdits"];
        assert_eq!(
            edits["env"],
            json!([
                "CUDA_DEVICE_MEMORY_LIMIT=40960m",
                "NVIDIA_VISIBLE_DEVICES=GPU-a,GPU-b"
            ])
        );
        assert_eq!(
            edits["deviceNodes"],
            json!([{"path": "/dev/davinci0", "hostPath": "/dev/davinci3", "permissions": "rw"}])
        );
        assert_eq!(
            edits["mounts"],
            json!([
                {
                    "hostPath": "/var/lib/gpustack/preload/ld.so.preload",
                    "containerPath": "/etc/ld.so.preload",
                    "options": ["ro", "rbind", "rprivate"]
                },
                {
                    "hostPath": "/var/lib/gpustack/pods/p/c-main",
                    "containerPath": "/tmp/vgpu",
                    "options": ["rw", "rbind", "rprivate"]
                }
            ])
        );
        let object = spec.as_object().unwrap();
        assert_eq!(object.len(), 3, "only cdiVersion, kind and devices: {spec}");
    }

    #[test]
    fn the_spec_is_readable_by_the_runtime_and_leaves_no_temporary_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(dir.path(), Manufacturer::Nvidia);
        specs.write(UID, &injection()).unwrap();
        let path = specs.spec_path(UID).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [path.file_name().unwrap()]);
        assert!(is_spec_file(&path));
    }

    #[test]
    fn empty_edits_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(dir.path(), Manufacturer::Iluvatar);
        let only_env = Injection {
            envs: BTreeMap::from([("IX_VISIBLE_DEVICES".to_string(), "0".to_string())]),
            ..Injection::default()
        };
        specs.write(UID, &only_env).unwrap();
        let edits = written(&specs)["devices"][0]["containerEdits"].clone();
        assert_eq!(edits, json!({"env": ["IX_VISIBLE_DEVICES=0"]}));
    }

    fn annotated() -> Injection {
        Injection {
            annotations: BTreeMap::from([
                (
                    "cdi.k8s.io/gpustack-nvidia".to_string(),
                    "nvidia.com/gpu=GPU-a,nvidia.com/gpu=GPU-b".to_string(),
                ),
                (
                    "device.gpustack.ai/cambricon-smlu-simulated".to_string(),
                    "card=0000:3b:00.0".to_string(),
                ),
            ]),
            cdi_devices: vec!["nvidia.com/gpu=GPU-a".to_string()],
            ..Injection::default()
        }
    }

    #[test]
    fn vendor_cdi_names_become_ids_and_other_annotations_stay_on_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(dir.path(), Manufacturer::Nvidia);
        let ids = specs
            .write(
                UID,
                &Injection {
                    annotations: annotated().annotations,
                    ..injection()
                },
            )
            .unwrap();
        assert_eq!(
            ids,
            [
                format!("gpustack.ai/nvidia={UID}"),
                "nvidia.com/gpu=GPU-a".to_string(),
                "nvidia.com/gpu=GPU-b".to_string(),
            ]
        );
        assert_eq!(
            written(&specs)["devices"][0]["annotations"],
            json!({"device.gpustack.ai/cambricon-smlu-simulated": "card=0000:3b:00.0"})
        );
    }

    #[test]
    fn an_injection_without_edits_gets_no_spec_only_its_vendor_ids() {
        let dir = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(dir.path(), Manufacturer::Nvidia);
        specs.write(UID, &injection()).unwrap();
        let ids = specs.write(UID, &annotated()).unwrap();
        assert_eq!(ids, ["nvidia.com/gpu=GPU-a", "nvidia.com/gpu=GPU-b"]);
        assert!(
            !specs.spec_path(UID).unwrap().exists(),
            "the earlier spec is gone"
        );
        assert!(specs.write(UID, &Injection::default()).unwrap().is_empty());
    }

    #[test]
    fn writing_again_replaces_the_spec_and_a_missing_directory_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(dir.path().join("var/run/cdi"), Manufacturer::Amd);
        specs.write(UID, &injection()).unwrap();
        let second = Injection {
            envs: BTreeMap::from([("HIP_VISIBLE_DEVICES".to_string(), "1".to_string())]),
            ..Injection::default()
        };
        specs.write(UID, &second).unwrap();
        assert_eq!(
            written(&specs)["devices"][0]["containerEdits"],
            json!({"env": ["HIP_VISIBLE_DEVICES=1"]})
        );
    }

    #[test]
    fn remove_deletes_the_spec_and_a_missing_one_is_no_error() {
        let dir = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(dir.path(), Manufacturer::Hygon);
        specs.write(UID, &injection()).unwrap();
        let other = "0a0b0c0d-0000-4000-8000-000000000001";
        specs.write(other, &injection()).unwrap();
        specs.remove(UID).unwrap();
        assert!(!specs.spec_path(UID).unwrap().exists());
        assert!(
            specs.spec_path(other).unwrap().exists(),
            "another claim's spec stays"
        );
        specs.remove(UID).unwrap();
    }

    /// An injection read back from a written spec: what the runtime will apply.
    fn read_back(spec: &Value) -> Injection {
        let edits = &spec["devices"][0]["containerEdits"];
        let list = |key: &str| edits[key].as_array().cloned().unwrap_or_default();
        let text = |v: &Value, key: &str| v[key].as_str().unwrap().to_string();
        Injection {
            envs: list("env")
                .iter()
                .map(|e| {
                    let (name, value) = e.as_str().unwrap().split_once('=').unwrap();
                    (name.to_string(), value.to_string())
                })
                .collect(),
            devices: list("deviceNodes")
                .iter()
                .map(|d| Node {
                    container_path: text(d, "path"),
                    host_path: text(d, "hostPath"),
                    permissions: text(d, "permissions"),
                })
                .collect(),
            mounts: list("mounts")
                .iter()
                .map(|m| Mount {
                    container_path: text(m, "containerPath"),
                    host_path: text(m, "hostPath"),
                    read_only: m["options"][0] == "ro",
                })
                .collect(),
            ..Injection::default()
        }
    }

    fn any_injection() -> impl proptest::strategy::Strategy<Value = Injection> {
        use proptest::prelude::*;
        let path = "/[a-z0-9/._-]{1,20}";
        let env = proptest::collection::btree_map("[A-Z_][A-Z0-9_]{0,12}", "\\PC{0,16}", 0..4);
        let node = (path, path, "rw|rwm|r").prop_map(|(c, h, p)| Node {
            container_path: c,
            host_path: h,
            permissions: p,
        });
        let mount = (path, path, any::<bool>()).prop_map(|(c, h, ro)| Mount {
            container_path: c,
            host_path: h,
            read_only: ro,
        });
        (
            env,
            proptest::collection::vec(node, 0..3),
            proptest::collection::vec(mount, 0..3),
        )
            .prop_map(|(envs, devices, mounts)| Injection {
                envs,
                devices,
                mounts,
                ..Injection::default()
            })
    }

    proptest::proptest! {
        /// The spec carries every environment variable, device node and mount of any injection,
        /// in order, and nothing else: the container gets what Allocate would have given it.
        #[test]
        fn the_spec_carries_exactly_the_injection(injection in any_injection()) {
            let dir = tempfile::tempdir().unwrap();
            let specs = CdiSpecs::new(dir.path(), Manufacturer::Thead);
            let ids = specs.write(UID, &injection).unwrap();
            if injection == Injection::default() {
                proptest::prop_assert!(ids.is_empty());
                proptest::prop_assert!(!specs.spec_path(UID).unwrap().exists());
            } else {
                proptest::prop_assert_eq!(ids, [format!("gpustack.ai/thead={UID}")]);
                proptest::prop_assert_eq!(read_back(&written(&specs)), injection);
            }
        }
    }

    proptest::proptest! {
        /// Whatever uid the kubelet sends, a spec path is a file directly in the CDI directory,
        /// and the device id names exactly that uid.
        #[test]
        fn no_claim_uid_escapes_the_cdi_directory(uid in "\\PC{0,40}|[a-z0-9./_-]{0,12}") {
            let specs = CdiSpecs::new("/var/run/cdi", Manufacturer::Metax);
            if let Ok(path) = specs.spec_path(&uid) {
                proptest::prop_assert_eq!(path.parent(), Some(Path::new("/var/run/cdi")));
                proptest::prop_assert!(!uid.contains('/') && uid != "." && uid != "..");
                proptest::prop_assert_eq!(
                    specs.device_id(&uid).unwrap(),
                    format!("gpustack.ai/metax={uid}")
                );
            } else {
                proptest::prop_assert!(specs.device_id(&uid).is_err());
            }
        }
    }

    #[test]
    fn a_claim_uid_that_is_not_one_component_or_device_name_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let specs = CdiSpecs::new(dir.path().join("cdi"), Manufacturer::Nvidia);
        for uid in [
            "../escape",
            "a/b",
            "..",
            ".",
            "",
            "-lead",
            "trail-",
            "x y",
            "uid/",
        ] {
            assert!(
                matches!(
                    specs.write(uid, &injection()),
                    Err(CdiError::ClaimUid { .. })
                ),
                "{uid:?} accepted by write"
            );
            assert!(
                matches!(specs.remove(uid), Err(CdiError::ClaimUid { .. })),
                "{uid:?} accepted by remove"
            );
        }
        assert!(!dir.path().join("escape").exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(specs.device_id("a.b_c-9").is_ok());
    }
}
