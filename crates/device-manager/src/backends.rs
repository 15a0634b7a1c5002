//! The registry of manufacturer backends this build carries (accel-backend's seam): one row per
//! manufacturer that has one. A new manufacturer is a crate implementing the traits it has and
//! one line here; `serve --manufacturer <name>` selects its row, `detect` runs every row.

use accel_backend::Backend;
use accel_core::Manufacturer;

/// Every backend of this build, in the manufacturers table's order.
pub fn all() -> Vec<Backend> {
    vec![
        accel_nvidia::backend::backend(),
        accel_amd::backend::backend(),
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
/// it: one line per manufacturer, beside its backend row.
pub fn preflight(
    manufacturer: Manufacturer,
) -> Option<std::sync::Arc<dyn accel_backend::preflight::Preflight>> {
    match manufacturer {
        Manufacturer::Nvidia => Some(accel_nvidia::backend::preflight()),
        _ => None,
    }
}

/// The manufacturer's kernel-log fault knowledge (accel-backend's `FaultClassifier`): NVIDIA's
/// XIDs under the `GPUSTACK_NVIDIA_XID_APPLICATION`/`GPUSTACK_NVIDIA_XID_HARDWARE` classes, AMD's amdgpu faults; `None` for a
/// manufacturer whose faults this build does not read (its health then rests on detection).
pub fn fault_classifier(
    manufacturer: Manufacturer,
    xid_classes: &accel_nvidia::xid::XidClasses,
) -> Option<std::sync::Arc<dyn accel_backend::health::FaultClassifier>> {
    match manufacturer {
        Manufacturer::Nvidia => Some(std::sync::Arc::new(xid_classes.clone())),
        Manufacturer::Amd => Some(std::sync::Arc::new(accel_amd::kmsg::AmdFaults)),
        _ => None,
    }
}

/// Every fault classifier of this build (reading a fault record that any of them wrote).
pub fn fault_classifiers(
    xid_classes: &accel_nvidia::xid::XidClasses,
) -> Vec<std::sync::Arc<dyn accel_backend::health::FaultClassifier>> {
    detectable()
        .into_iter()
        .filter_map(|m| fault_classifier(m, xid_classes))
        .collect()
}

/// Why the admin socket's `reset` refuses the manufacturer's accelerators, or `None` when this
/// build resets them (NVIDIA, through `nvidia-smi --gpu-reset`).
pub fn reset_refusal(manufacturer: Manufacturer) -> Option<String> {
    match manufacturer {
        Manufacturer::Nvidia => None,
        Manufacturer::Amd => Some(
            "AMD accelerators are not reset by the device manager: amdgpu recovers a GPU of an \
             XGMI hive by resetting every GPU in the hive, so the grants on the others could not \
             be checked from the names given; drain the node and reset with amd-smi by hand, or \
             reboot (a new boot clears the recorded faults)"
                .to_string(),
        ),
        other => Some(format!("{other} accelerators are not reset by this build")),
    }
}
