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
