//! NVIDIA's vendor CDI specifications on the node (DESIGN.md, "CDI"): which `nvidia.com/gpu`
//! device names the specs in `/etc/cdi` and `/var/run/cdi` (or the engine's own spec dirs) carry.
//! JSON and YAML alike, read through [`Host`] and never written. Our own `gpustack-*` specs are
//! not vendor specs and are skipped. Used by `doctor` and by the responder's `auto` strategy.

use std::collections::BTreeSet;

use accel_host::Host;

/// Where CDI specs are read from by default, in order (DESIGN.md, "CDI").
pub const CDI_DIRS: [&str; 2] = ["etc/cdi", "var/run/cdi"];
/// The CDI kind of NVIDIA's GPU devices.
pub const CDI_KIND: &str = "nvidia.com/gpu";

/// The device names of one CDI spec.
#[derive(Debug, serde::Deserialize)]
struct CdiSpec {
    kind: Option<String>,
    #[serde(default)]
    devices: Vec<CdiDevice>,
}

#[derive(Debug, serde::Deserialize)]
struct CdiDevice {
    name: Option<serde_yaml::Value>,
}

/// What the vendor specs under some directories name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VendorSpecs {
    /// The specs of kind `nvidia.com/gpu` read, as host paths (`/etc/cdi/nvidia.yaml`).
    pub specs: Vec<String>,
    /// Their device names (`0`, `GPU-…`, `all`), without the kind.
    pub names: BTreeSet<String>,
    /// Spec files that could not be read or parsed, as host paths.
    pub unreadable: Vec<String>,
}

impl VendorSpecs {
    /// The fully qualified CDI names (`nvidia.com/gpu=GPU-…`).
    pub fn qualified(&self) -> BTreeSet<String> {
        self.names
            .iter()
            .map(|n| format!("{CDI_KIND}={n}"))
            .collect()
    }
}

/// Every NVIDIA vendor spec's device names under `dirs` (host paths; a missing directory is
/// simply empty).
pub fn vendor_specs<S: AsRef<str>>(host: &dyn Host, dirs: &[S]) -> VendorSpecs {
    let mut found = VendorSpecs::default();
    for dir in dirs {
        let dir = dir.as_ref().trim_start_matches('/').trim_end_matches('/');
        let Ok(files) = host.list(dir) else { continue };
        for file in files {
            let yaml = file.ends_with(".yaml") || file.ends_with(".yml");
            if !(yaml || file.ends_with(".json")) || file.starts_with("gpustack-") {
                continue;
            }
            let path = format!("{dir}/{file}");
            let Ok(bytes) = host.read(&path) else {
                found.unreadable.push(format!("/{path}"));
                continue;
            };
            // YAML is a superset of JSON: one reader for both.
            match serde_yaml::from_slice::<CdiSpec>(&bytes) {
                Ok(spec) if spec.kind.as_deref() == Some(CDI_KIND) => {
                    found.specs.push(format!("/{path}"));
                    for device in spec.devices {
                        match device.name {
                            Some(serde_yaml::Value::String(s)) => {
                                found.names.insert(s);
                            }
                            Some(serde_yaml::Value::Number(n)) => {
                                found.names.insert(n.to_string());
                            }
                            _ => {}
                        }
                    }
                }
                Ok(_) => {}
                Err(_) => found.unreadable.push(format!("/{path}")),
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_host::FsHost;

    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../shared/fixtures/nvidia/cdi/salilkadam-infrastructure__nvidia-575.64.03.yaml"
    );

    #[test]
    fn reads_the_generated_yaml_and_json_and_skips_our_own() {
        let yaml = std::fs::read(FIXTURE).expect("the CDI fixture is missing (../shared)");
        let root = tempfile::tempdir().unwrap();
        let etc = root.path().join("etc/cdi");
        let run = root.path().join("var/run/cdi");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::create_dir_all(&run).unwrap();
        std::fs::write(etc.join("nvidia.yaml"), yaml).unwrap();
        std::fs::write(
            run.join("extra.json"),
            r#"{"cdiVersion":"0.6.0","kind":"nvidia.com/gpu","devices":[{"name":"GPU-json"}]}"#,
        )
        .unwrap();
        std::fs::write(
            run.join("gpustack-mig.json"),
            r#"{"kind":"nvidia.com/gpu","devices":[{"name":"GPU-ours"}]}"#,
        )
        .unwrap();
        std::fs::write(
            run.join("other.json"),
            r#"{"kind":"vendor.com/x","devices":[{"name":"a"}]}"#,
        )
        .unwrap();
        std::fs::write(run.join("broken.yaml"), ": : [").unwrap();
        let host = FsHost::new(root.path());
        let found = vendor_specs(&host, &CDI_DIRS);
        assert_eq!(
            found.specs,
            ["/etc/cdi/nvidia.yaml", "/var/run/cdi/extra.json"]
        );
        assert_eq!(found.unreadable, ["/var/run/cdi/broken.yaml"]);
        assert!(
            found
                .names
                .contains("GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e")
        );
        assert!(found.names.contains("0") && found.names.contains("all"));
        assert!(found.names.contains("GPU-json"));
        assert!(!found.names.contains("GPU-ours"));
        assert!(
            found
                .qualified()
                .contains("nvidia.com/gpu=GPU-520e01f2-cf30-6396-abef-e8e9a5233b0e")
        );
        // A directory named with a leading slash is the same directory; a missing one is empty.
        assert_eq!(
            vendor_specs(&host, &["/etc/cdi/", "/nowhere"]).specs.len(),
            1
        );
    }
}
