//! DRM sysfs as AMD reads it: [`accel_host::drm`]'s reader, for the cards bound to [`DRIVER`]
//! (`DRIVER=amdgpu` only: an old card on `radeon` has vendor 1002 too and no ROCm).

pub use accel_host::drm::*;

/// AMD's kernel driver.
pub const DRIVER: &str = "amdgpu";

/// The cards AMD serves: those bound to [`DRIVER`].
pub trait Amdgpu {
    /// Bound to amdgpu.
    fn is_amdgpu(&self) -> bool;
}

impl Amdgpu for DrmCard {
    fn is_amdgpu(&self) -> bool {
        self.is_bound_to(DRIVER)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_amdgpu_cards_are_amds() {
        let card = |driver: &str| DrmCard {
            driver: Some(driver.into()),
            ..DrmCard::default()
        };
        assert!(card("amdgpu").is_amdgpu());
        assert!(!card("radeon").is_amdgpu());
        assert!(!DrmCard::default().is_amdgpu());
    }
}
