//! The registry of manufacturer backends this build carries (accel-backend's seam): one row per
//! manufacturer that has one. A new manufacturer is a crate providing its `Backend` and one
//! line in [`all`]; nothing else in the binary names a vendor crate or a manufacturer
//! (`tests/one_row.rs` scans the sources for it). `serve --manufacturer <name>` selects a row,
//! `detect` and `record` run every row, `doctor` picks one by what the host shows.

use std::collections::BTreeMap;
use std::sync::Arc;

use accel_backend::Backend;
use accel_backend::health::FaultClassifier;
use accel_core::Manufacturer;

/// Every backend of this build, in the manufacturers table's order.
pub fn all() -> Vec<Backend> {
    vec![
        accel_nvidia::backend::backend(),
        accel_amd::backend::backend(),
        accel_ascend::backend::backend(),
        accel_cambricon::backend::backend(),
        accel_hygon::backend::backend(),
        accel_iluvatar::backend::backend(),
        accel_metax::backend::backend(),
        accel_mthreads::backend::backend(),
        accel_thead::backend::backend(),
    ]
}

/// The manufacturers this build can detect.
pub fn detectable() -> Vec<Manufacturer> {
    all().iter().map(|b| b.manufacturer).collect()
}

/// The backend of one manufacturer, or a one-line refusal naming what this build detects.
pub fn backend(manufacturer: Manufacturer) -> anyhow::Result<Backend> {
    all()
        .into_iter()
        .find(|b| b.manufacturer == manufacturer)
        .ok_or_else(|| {
            let names: Vec<&str> = detectable().into_iter().map(Manufacturer::name).collect();
            anyhow::anyhow!(
                "manufacturer {manufacturer}: no detector yet (this build detects {})",
                names.join(", ")
            )
        })
}

/// The manufacturer's preflight knowledge (`device-manager preflight`), where this build has
/// it.
pub fn preflight(
    manufacturer: Manufacturer,
) -> Option<Arc<dyn accel_backend::preflight::Preflight>> {
    all()
        .into_iter()
        .find(|b| b.manufacturer == manufacturer)
        .and_then(|b| b.preflight)
}

/// Every setting a backend's fault classifier reads (`GPUSTACK_NVIDIA_XID_APPLICATION`, …).
pub fn fault_settings() -> Vec<&'static str> {
    all()
        .iter()
        .filter_map(|b| b.faults)
        .flat_map(|f| f.settings.iter().copied())
        .collect()
}

/// The manufacturer's kernel-log fault classifier under `vars` (the fault settings' values);
/// `Ok(None)` for a manufacturer whose faults this build does not read (its health then rests
/// on detection); `Err` is the bad setting's one line.
pub fn fault_classifier(
    manufacturer: Manufacturer,
    vars: &BTreeMap<String, String>,
) -> Result<Option<Arc<dyn FaultClassifier>>, String> {
    match all()
        .into_iter()
        .find(|b| b.manufacturer == manufacturer)
        .and_then(|b| b.faults)
    {
        Some(knowledge) => knowledge.classifier(vars).map(Some),
        None => Ok(None),
    }
}

/// Every fault classifier of this build under `vars`, in registry order (reading a fault
/// record that any of them wrote, `xids` over saved log text).
pub fn fault_classifiers(
    vars: &BTreeMap<String, String>,
) -> Result<Vec<Arc<dyn FaultClassifier>>, String> {
    all()
        .iter()
        .filter_map(|b| b.faults)
        .map(|f| f.classifier(vars))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program a backend runs (its record plan names them all) is one its row says where
    /// to find on a host, and the row names no program it never runs: on a live node a tool
    /// left out would be looked for in the image, where no vendor tool is.
    #[test]
    fn every_tool_a_backend_runs_is_found_through_its_row() {
        for backend in all() {
            let mut runs = backend.record.programs();
            runs.sort_unstable();
            let mut named: Vec<&str> = backend.tools.programs.to_vec();
            named.sort_unstable();
            assert_eq!(runs, named, "{}", backend.manufacturer);
            let places = backend.tools.places();
            assert_eq!(
                &places.search[..accel_host::HOST_SEARCH_PATH.len()],
                accel_host::HOST_SEARCH_PATH,
                "{}: the host's own search path comes first",
                backend.manufacturer
            );
            for dir in backend
                .tools
                .install_dirs
                .iter()
                .chain(backend.tools.library_dirs)
            {
                assert!(
                    dir.starts_with('/') && !dir.ends_with('/'),
                    "{}: {dir:?} is one absolute host directory",
                    backend.manufacturer
                );
            }
        }
    }
}
