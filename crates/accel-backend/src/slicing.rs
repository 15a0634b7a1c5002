//! Logical slicing's library: where a manufacturer's preload library for a runtime generation
//! lies on the host, and the gate DESIGN.md sets ("Slicing needs its library"): slices are
//! offered only when the library for the node's runtime major is staged (seed 000, "One driver
//! stack per node": one runtime per node, so one library serves every slice).

use std::path::Path;

use accel_core::ManufacturerInventory;

/// The runtime major a library that does not depend on it reports: the major the detection
/// names (`6.2.1` → 6), else 0 — slices are offered either way (AMD's `libvrocm.so`, T-Head's
/// HGGC shims).
pub fn major_or_zero(section: &ManufacturerInventory) -> u32 {
    section
        .runtime_version
        .as_deref()
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.trim().parse::<u32>().ok())
        .unwrap_or(0)
}

/// One manufacturer's preload-library layout.
pub trait SlicingLibrary: Send + Sync {
    /// The runtime the libraries are built per, for messages (`CUDA`).
    fn runtime(&self) -> &'static str;
    /// The node's runtime major from its detection (NVIDIA: the CUDA driver version's major).
    fn runtime_major(&self, section: &ManufacturerInventory) -> Option<u32>;
    /// The host path of the library for a runtime major under the library directory.
    fn library_path(&self, library_dir: &Path, major: u32) -> String;
    /// Whether slices need a preload library staged on the host; `false` (Hygon: the host's own
    /// user space reads a per-container file) offers slices wherever the runtime major is known,
    /// with no library looked for.
    fn needs_library(&self) -> bool {
        true
    }
    /// Whether slices need the node's runtime major; `false` (MetaX: a slice is a driver
    /// object, advertised unconditionally) offers them on every node without a library.
    fn needs_runtime(&self) -> bool {
        true
    }
    /// [`SlicingLibrary::library_path`] for a node's detection, where the build depends on
    /// more than the runtime major (Ascend: one vcann-rt per family and CANN major).
    fn library_path_for(
        &self,
        library_dir: &Path,
        major: u32,
        section: &ManufacturerInventory,
    ) -> String {
        let _ = section;
        self.library_path(library_dir, major)
    }
}

/// Whether slices are offered on this node, and why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SliceOffer {
    pub runtime_major: Option<u32>,
    /// The library looked for, when the runtime major is known.
    pub library: Option<String>,
    pub offered: bool,
}

/// The gate: the library for the node's runtime major exists (`exists` reads the host under its
/// root).
pub fn offer(
    library: &dyn SlicingLibrary,
    section: &ManufacturerInventory,
    library_dir: &Path,
    exists: impl Fn(&str) -> bool,
) -> SliceOffer {
    let runtime_major = library.runtime_major(section);
    if !library.needs_library() {
        return SliceOffer {
            runtime_major,
            library: None,
            offered: runtime_major.is_some() || !library.needs_runtime(),
        };
    }
    let path = runtime_major.map(|major| library.library_path_for(library_dir, major, section));
    let offered = path.as_deref().is_some_and(exists);
    SliceOffer {
        runtime_major,
        library: path,
        offered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_core::Manufacturer;

    struct Ledger(bool);

    impl SlicingLibrary for Ledger {
        fn runtime(&self) -> &'static str {
            "X"
        }
        fn runtime_major(&self, _section: &ManufacturerInventory) -> Option<u32> {
            Some(1)
        }
        fn library_path(&self, library_dir: &Path, major: u32) -> String {
            library_dir
                .join(format!("x-{major}/lib.so"))
                .display()
                .to_string()
        }
        fn needs_library(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn a_library_free_backend_is_offered_without_looking_for_a_file() {
        let section = ManufacturerInventory::empty(Manufacturer::Hygon);
        let dir = Path::new("/lib");
        let free = offer(&Ledger(false), &section, dir, |_| false);
        assert_eq!(
            free,
            SliceOffer {
                runtime_major: Some(1),
                library: None,
                offered: true
            }
        );
        let needs = offer(&Ledger(true), &section, dir, |_| false);
        assert!(!needs.offered);
        assert_eq!(needs.library.as_deref(), Some("/lib/x-1/lib.so"));
    }

    /// A slice that is a driver object (MetaX) needs no runtime version either.
    struct DriverObject(bool);

    impl SlicingLibrary for DriverObject {
        fn runtime(&self) -> &'static str {
            "X"
        }
        fn runtime_major(&self, _section: &ManufacturerInventory) -> Option<u32> {
            None
        }
        fn library_path(&self, _library_dir: &Path, _major: u32) -> String {
            String::new()
        }
        fn needs_library(&self) -> bool {
            false
        }
        fn needs_runtime(&self) -> bool {
            self.0
        }
    }

    #[test]
    fn a_driver_object_slice_is_offered_without_a_runtime_version() {
        let section = ManufacturerInventory::empty(Manufacturer::Metax);
        let dir = Path::new("/lib");
        assert!(offer(&DriverObject(false), &section, dir, |_| false).offered);
        assert!(!offer(&DriverObject(true), &section, dir, |_| false).offered);
    }
}

#[cfg(test)]
mod major_tests {
    use super::*;
    use accel_core::Manufacturer;

    #[test]
    fn the_major_is_the_first_number_or_zero() {
        let mut section = ManufacturerInventory::empty(Manufacturer::Amd);
        assert_eq!(major_or_zero(&section), 0);
        for (version, major) in [("6.2.1", 6), ("1.7", 1), ("N/A", 0), ("", 0), ("12", 12)] {
            section.runtime_version = Some(version.into());
            assert_eq!(major_or_zero(&section), major, "{version}");
        }
    }
}
