//! The ledger's arithmetic: how much of an accelerator a grant takes, in units, shares and
//! slots, and the constants those counts come from.
//!
//! This module owns the per-accelerator constants of DESIGN.md ("Resource keys and units") and
//! the memory-budget folding the ledger charges. The webhook's `.units` folding (issue 3) computes
//! the same numbers; at merge the two must become one function. It must not read the machine.

use crate::manufacturer::Manufacturer;

/// One accelerator is worth this many units (DESIGN.md): a memory percentage p is p × 16,000.
pub const UNITS_PER_ACCELERATOR: u64 = 1_600_000;

/// Units per memory percentage point (`UNITS_PER_ACCELERATOR / 100`).
pub const UNITS_PER_PERCENT: u64 = UNITS_PER_ACCELERATOR / 100;

/// Ownership shares per accelerator for the shared family.
pub const SHARES_PER_ACCELERATOR: u32 = 10;

/// What one share charges against the accelerator's units, so `remaining` stays meaningful for
/// every family.
pub const UNITS_PER_SHARE: u64 = UNITS_PER_ACCELERATOR / SHARES_PER_ACCELERATOR as u64;

/// Logical slices an NVIDIA accelerator hosts at most (`logicalSliced.count`).
pub const NVIDIA_SLICES_PER_ACCELERATOR: u32 = 128;

/// Logical slices a Hygon accelerator hosts at most (seed 000: "4 on Hygon").
pub const HYGON_SLICES_PER_ACCELERATOR: u32 = 4;

/// Tokens the visibility pool advertises per accelerator (`SlicedResourceMaxSize`).
pub const VISIBILITY_TOKENS_PER_ACCELERATOR: u32 = 512;

/// A memory budget the ledger cannot charge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitsError {
    /// A memory percentage outside 1–100.
    #[error("memory percentage {0} is outside 1-100")]
    Percentage(u64),
    /// A MiB budget of zero.
    #[error("a memory budget of 0 MiB grants nothing")]
    ZeroMib,
    /// A MiB budget on an accelerator whose VRAM the driver did not report.
    #[error("a MiB budget needs the accelerator's VRAM, which the driver did not report")]
    UnknownVram,
}

/// The logical slice count of a manufacturer's accelerator, where it is known. Iluvatar reuses
/// NVIDIA's HAMi-core build, so it hosts as many slices as NVIDIA.
pub fn slices_per_accelerator(manufacturer: Manufacturer) -> Option<u32> {
    match manufacturer {
        Manufacturer::Nvidia | Manufacturer::Iluvatar => Some(NVIDIA_SLICES_PER_ACCELERATOR),
        Manufacturer::Hygon => Some(HYGON_SLICES_PER_ACCELERATOR),
        _ => None,
    }
}

/// Units of a memory percentage: p × 16,000.
pub fn units_for_percentage(percentage: u64) -> Result<u64, UnitsError> {
    if !(1..=100).contains(&percentage) {
        return Err(UnitsError::Percentage(percentage));
    }
    Ok(percentage * UNITS_PER_PERCENT)
}

/// Units of a MiB budget on an accelerator of `vram_mib`: floor(m × 1,600,000 / VRAM), the budget
/// capped at the VRAM first (seed 000: "floored and capped at the accelerator VRAM").
pub fn units_for_mib(mib: u64, vram_mib: Option<u64>) -> Result<u64, UnitsError> {
    if mib == 0 {
        return Err(UnitsError::ZeroMib);
    }
    let vram = match vram_mib {
        Some(v) if v > 0 => v,
        _ => return Err(UnitsError::UnknownVram),
    };
    let capped = u128::from(mib.min(vram));
    let units = capped * u128::from(UNITS_PER_ACCELERATOR) / u128::from(vram);
    // capped ≤ vram, so units ≤ UNITS_PER_ACCELERATOR and fits.
    Ok(u64::try_from(units).unwrap_or(UNITS_PER_ACCELERATOR))
}

/// The VRAM in MiB that `units` stand for on an accelerator of `vram_mib`, floored: what the
/// preload library is told the slice may use (`CUDA_DEVICE_MEMORY_LIMIT_<i>`).
pub fn mib_for_units(units: u64, vram_mib: u64) -> u64 {
    let mib = u128::from(units.min(UNITS_PER_ACCELERATOR)) * u128::from(vram_mib)
        / u128::from(UNITS_PER_ACCELERATOR);
    u64::try_from(mib).unwrap_or(vram_mib)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentage_folds_to_sixteen_thousand_per_point() {
        assert_eq!(units_for_percentage(25), Ok(400_000));
        assert_eq!(units_for_percentage(100), Ok(UNITS_PER_ACCELERATOR));
        assert_eq!(units_for_percentage(0), Err(UnitsError::Percentage(0)));
        assert_eq!(units_for_percentage(101), Err(UnitsError::Percentage(101)));
    }

    #[test]
    fn mib_floors_and_caps_at_vram() {
        // 20,000 MiB of an 81,559 MiB H100: floor(20000 × 1.6M / 81559) = 392,354.
        assert_eq!(units_for_mib(20_000, Some(81_559)), Ok(392_354));
        assert_eq!(
            units_for_mib(999_999, Some(81_559)),
            Ok(UNITS_PER_ACCELERATOR)
        );
        assert_eq!(units_for_mib(1, None), Err(UnitsError::UnknownVram));
        assert_eq!(units_for_mib(0, Some(10)), Err(UnitsError::ZeroMib));
    }

    #[test]
    fn units_back_to_mib_is_floored() {
        assert_eq!(mib_for_units(400_000, 81_559), 20_389);
        assert_eq!(mib_for_units(UNITS_PER_ACCELERATOR, 81_559), 81_559);
    }

    #[test]
    fn slice_counts_per_manufacturer() {
        assert_eq!(slices_per_accelerator(Manufacturer::Nvidia), Some(128));
        assert_eq!(slices_per_accelerator(Manufacturer::Hygon), Some(4));
        assert_eq!(slices_per_accelerator(Manufacturer::Amd), None);
    }
}
