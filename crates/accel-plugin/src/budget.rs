//! A sliced grant's budget: the container's `.sliced.*` requests folded into units per
//! accelerator and a cores percentage, through the one units function the webhook uses
//! ([`accel_core::units::fold`]). Manufacturer-neutral: it reads resource names, never a vendor.

use crate::pods::Container;

/// Folds a container's sliced requests into units per accelerator and a cores percentage, the
/// seed's defaults applied for Pods that skipped the webhook: the percentage wins over MiB,
/// cores default to 100, and no budget at all means the whole accelerator.
pub fn slice_budget(
    container: Option<&Container>,
    resource: &str,
    vram_mib: Option<u64>,
) -> Result<(u64, u32), accel_core::units::UnitsError> {
    use accel_core::units::{MemoryBudget, UNITS_PER_ACCELERATOR, fold};
    let get = |suffix: &str| container.and_then(|c| c.count(&format!("{resource}.{suffix}")));
    let cores = slice_cores(container, resource);
    let units = if let Some(p) = get("memory-percentage") {
        fold(MemoryBudget::Percentage(p), vram_mib)?
    } else if let Some(m) = get("memory-mib") {
        // Seed 000: a MiB budget is "floored and capped at the accelerator VRAM" (the webhook
        // refuses one over it; a Pod that skipped the webhook gets the whole VRAM).
        let capped = vram_mib.map_or(m, |vram| m.min(vram));
        fold(MemoryBudget::Mib(capped), vram_mib)?
    } else if let Some(u) = get("units") {
        u.min(UNITS_PER_ACCELERATOR)
    } else {
        UNITS_PER_ACCELERATOR
    };
    Ok((units, cores))
}

/// A container's sliced cores percentage: the one it asks, capped at 100, else 100 (the
/// seed's default). It does not depend on the accelerator, as the units do.
pub fn slice_cores(container: Option<&Container>, resource: &str) -> u32 {
    container
        .and_then(|c| c.count(&format!("{resource}.cores-percentage")))
        .map_or(100, |c| c.min(100) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_default_like_the_seed() {
        let mut c = Container::default();
        assert_eq!(
            slice_budget(Some(&c), "nvidia.com/gpu.sliced", Some(80_000)),
            Ok((1_600_000, 100))
        );
        c.limits
            .insert("nvidia.com/gpu.sliced.memory-mib".into(), "20000".into());
        assert_eq!(
            slice_budget(Some(&c), "nvidia.com/gpu.sliced", Some(80_000)),
            Ok((400_000, 100))
        );
        c.limits.insert(
            "nvidia.com/gpu.sliced.memory-percentage".into(),
            "50".into(),
        );
        c.limits
            .insert("nvidia.com/gpu.sliced.cores-percentage".into(), "20".into());
        assert_eq!(
            slice_budget(Some(&c), "nvidia.com/gpu.sliced", Some(80_000)),
            Ok((800_000, 20))
        );
    }

    #[test]
    fn slice_budgets_fold_through_the_one_units_function() {
        use accel_core::units::{UNITS_PER_ACCELERATOR, UnitsError};
        let budget = |key: &str, value: &str, vram: Option<u64>| {
            let c = Container {
                name: "main".into(),
                limits: [(format!("nvidia.com/gpu.sliced.{key}"), value.to_string())].into(),
                env: Default::default(),
            };
            slice_budget(Some(&c), "nvidia.com/gpu.sliced", vram).map(|(units, _)| units)
        };
        assert_eq!(budget("memory-percentage", "25", None), Ok(400_000));
        assert_eq!(
            budget("memory-percentage", "101", Some(10)),
            Err(UnitsError::Percentage(101))
        );
        // 20,000 MiB of an 81,559 MiB H100: floor(20000 × 1.6M / 81559) = 392,354.
        assert_eq!(budget("memory-mib", "20000", Some(81_559)), Ok(392_354));
        // Over the VRAM (a Pod that skipped the webhook): capped at the whole accelerator.
        assert_eq!(
            budget("memory-mib", "999999", Some(81_559)),
            Ok(UNITS_PER_ACCELERATOR)
        );
        assert_eq!(
            budget("memory-mib", "1", None),
            Err(UnitsError::VramUnknown)
        );
        assert_eq!(budget("memory-mib", "0", Some(10)), Err(UnitsError::Empty));
    }
}
