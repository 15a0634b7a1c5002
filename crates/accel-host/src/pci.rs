//! The PCI scan: the functions under `sys/bus/pci/devices` whose class marks an accelerator, a
//! network card or a co-processor (seed 000: classes `02`, `03`, `0b`, `12`, overridable through
//! `GPUSTACK_PCI_CLASS_PREFIXES`), with the facts sysfs gives about each.
//!
//! Entries there are symlinks into `sys/devices/…`; reading through them is left to the [`Host`].
//! A function whose files cannot be read is skipped with a note, never a panic and never a made-up
//! value. This module reads sysfs; which vendor's readers to run is the caller's business.

use std::collections::BTreeSet;
use std::fmt;

use accel_core::{BusId, Manufacturer};

use crate::host::{Host, HostError};

/// Where the kernel lists every PCI function (relative to the host root).
pub const PCI_DEVICES_DIR: &str = "sys/bus/pci/devices";

/// The setting that overrides [`PciClassPrefixes::default`].
pub const PCI_CLASS_PREFIXES_ENV: &str = "GPUSTACK_PCI_CLASS_PREFIXES";

/// The class prefixes scanned by default (seed 000, the NFD `deviceClassWhitelist`): network
/// controllers, display controllers, processors, processing accelerators.
pub const DEFAULT_PCI_CLASS_PREFIXES: [&str; 4] = ["02", "03", "0b", "12"];

/// A PCI scan that could not be done, or a setting that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PciError {
    /// `GPUSTACK_PCI_CLASS_PREFIXES` holds something that is not a list of hex prefixes.
    #[error(
        "{PCI_CLASS_PREFIXES_ENV}: bad class prefix {item:?} in {value:?} \
         (expected comma-separated hex prefixes of at most 6 digits, such as 02,03,0b,12)"
    )]
    BadClassPrefix { value: String, item: String },
    /// The PCI device list exists but could not be read.
    #[error("pci scan: {0}")]
    Host(#[from] HostError),
}

/// The PCI class prefixes (hex, lower-case, at most 6 digits) that select functions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciClassPrefixes(Vec<String>);

impl Default for PciClassPrefixes {
    fn default() -> Self {
        PciClassPrefixes(
            DEFAULT_PCI_CLASS_PREFIXES
                .iter()
                .map(|p| p.to_string())
                .collect(),
        )
    }
}

impl PciClassPrefixes {
    /// Reads the value of `GPUSTACK_PCI_CLASS_PREFIXES`: comma-separated hex prefixes, each
    /// optionally `0x`-led (`02,03,0x0b,12`). A blank value is no setting: the default.
    pub fn from_env_value(value: &str) -> Result<Self, PciError> {
        if value.trim().is_empty() {
            return Ok(Self::default());
        }
        let mut prefixes = Vec::new();
        for item in value.split(',') {
            let trimmed = item.trim();
            let digits = trimmed
                .strip_prefix("0x")
                .or_else(|| trimmed.strip_prefix("0X"))
                .unwrap_or(trimmed);
            if digits.is_empty()
                || digits.len() > 6
                || !digits.chars().all(|c| c.is_ascii_hexdigit())
            {
                return Err(PciError::BadClassPrefix {
                    value: value.to_string(),
                    item: item.to_string(),
                });
            }
            let digits = digits.to_ascii_lowercase();
            if !prefixes.contains(&digits) {
                prefixes.push(digits);
            }
        }
        Ok(PciClassPrefixes(prefixes))
    }

    /// The prefixes, lower-case hex without `0x`.
    pub fn prefixes(&self) -> &[String] {
        &self.0
    }

    /// Whether a 24-bit class code (`0x030200`) starts with one of the prefixes.
    pub fn matches(&self, class: u32) -> bool {
        let text = format!("{class:06x}");
        self.0.iter().any(|p| text.starts_with(p.as_str()))
    }
}

/// One PCI function as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciFunction {
    pub bus_id: BusId,
    /// `vendor` (`0x10de`).
    pub vendor_id: u16,
    /// `device` (`0x2330`).
    pub device_id: u16,
    /// `class`, the 24-bit class code (`0x030200`: 3D controller).
    pub class: u32,
    /// `numa_node`; `None` when absent, unreadable or `-1` (no affinity).
    pub numa_node: Option<u32>,
    /// The bound driver (the `driver` link's last part: `nvidia`, `vfio-pci`); `None` when
    /// no driver is bound.
    pub driver: Option<String>,
    /// The manufacturer the vendor id belongs to, when it is one we know.
    pub manufacturer: Option<Manufacturer>,
}

/// What a scan found, and what it skipped and why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PciScan {
    /// The matching functions, in bus order.
    pub functions: Vec<PciFunction>,
    /// One line per function skipped or fact left out (`0000:18:00.0: class: …`).
    pub notes: Vec<String>,
}

fn parse_hex(text: &str) -> Option<u32> {
    let text = text.trim();
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    u32::from_str_radix(digits, 16).ok()
}

/// Reads one attribute as hex; `Err` carries the note.
fn read_hex(host: &dyn Host, function: &str, attribute: &str) -> Result<u32, String> {
    let path = format!("{PCI_DEVICES_DIR}/{function}/{attribute}");
    let text = host
        .read_to_string(&path)
        .map_err(|e| format!("{function}: {attribute}: {e}"))?;
    parse_hex(&text).ok_or_else(|| format!("{function}: {attribute}: not hex: {:?}", text.trim()))
}

fn read_id(host: &dyn Host, function: &str, attribute: &str) -> Result<u16, String> {
    let value = read_hex(host, function, attribute)?;
    u16::try_from(value).map_err(|_| format!("{function}: {attribute}: {value:#x} is not 16-bit"))
}

fn read_numa_node(host: &dyn Host, function: &str, notes: &mut Vec<String>) -> Option<u32> {
    let path = format!("{PCI_DEVICES_DIR}/{function}/numa_node");
    match host.read_to_string(&path) {
        Ok(text) => match text.trim().parse::<i64>() {
            // -1: the platform gives no NUMA affinity.
            Ok(node) if node < 0 => None,
            Ok(node) => u32::try_from(node).ok(),
            Err(_) => {
                notes.push(format!(
                    "{function}: numa_node: not a number: {:?}",
                    text.trim()
                ));
                None
            }
        },
        Err(e) if e.is_not_found() => None,
        Err(e) => {
            notes.push(format!("{function}: numa_node: {e}"));
            None
        }
    }
}

fn read_driver(host: &dyn Host, function: &str, notes: &mut Vec<String>) -> Option<String> {
    let path = format!("{PCI_DEVICES_DIR}/{function}/driver");
    match host.read_link(&path) {
        Ok(target) => target
            .file_name()
            .map(|name| name.to_string_lossy().into_owned()),
        Err(e) if e.is_not_found() => None,
        Err(e) => {
            notes.push(format!("{function}: driver: {e}"));
            None
        }
    }
}

/// Reads one function; `Ok(None)` when its class does not match, `Err` carries the note.
fn read_function(
    host: &dyn Host,
    function: &str,
    prefixes: &PciClassPrefixes,
    notes: &mut Vec<String>,
) -> Result<Option<PciFunction>, String> {
    let bus_id: BusId = function
        .parse()
        .map_err(|e| format!("{function}: not a PCI address: {e}"))?;
    let class = read_hex(host, function, "class")?;
    if !prefixes.matches(class) {
        return Ok(None);
    }
    let vendor_id = read_id(host, function, "vendor")?;
    let device_id = read_id(host, function, "device")?;
    Ok(Some(PciFunction {
        bus_id,
        vendor_id,
        device_id,
        class,
        numa_node: read_numa_node(host, function, notes),
        driver: read_driver(host, function, notes),
        manufacturer: Manufacturer::from_pci_vendor(vendor_id),
    }))
}

/// Scans `sys/bus/pci/devices` for the functions whose class matches `prefixes`.
///
/// A host without PCI devices listed (no sysfs, a WSL guest) gives an empty scan; only a list
/// that exists but cannot be read is an error.
pub fn scan_pci(host: &dyn Host, prefixes: &PciClassPrefixes) -> Result<PciScan, PciError> {
    let names = match host.list(PCI_DEVICES_DIR) {
        Ok(names) => names,
        Err(e) if e.is_not_found() => return Ok(PciScan::default()),
        Err(e) => return Err(e.into()),
    };
    let mut scan = PciScan::default();
    for name in names {
        match read_function(host, &name, prefixes, &mut scan.notes) {
            Ok(Some(function)) => scan.functions.push(function),
            Ok(None) => {}
            Err(note) => {
                tracing::debug!("pci scan skipped {note}");
                scan.notes.push(note);
            }
        }
    }
    scan.functions.sort_by_key(|f| f.bus_id);
    Ok(scan)
}

/// What identifies the PCI device set: each matching function's address, vendor and class.
/// A different fingerprint means a card came, went or was swapped, and the inventory is redone.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct PciSetFingerprint(BTreeSet<(BusId, u16, u32)>);

impl fmt::Display for PciSetFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (bus_id, vendor, class) in &self.0 {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{}/{vendor:04x}/{class:06x}", bus_id.sysfs())?;
        }
        Ok(())
    }
}

/// The fingerprint of a set of functions (their order does not matter).
pub fn pci_set_fingerprint(functions: &[PciFunction]) -> PciSetFingerprint {
    PciSetFingerprint(
        functions
            .iter()
            .map(|f| (f.bus_id, f.vendor_id, f.class))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::path::Path;

    use super::*;
    use crate::host::FsHost;

    /// Lays out a function as the kernel does: the real folder under `sys/devices/pci…`, a link
    /// to it from `sys/bus/pci/devices`, and a `driver` link into `sys/bus/pci/drivers`.
    fn function(root: &Path, address: &str, files: &[(&str, &str)], driver: Option<&str>) {
        let real = root.join("sys/devices/pci0000:00").join(address);
        std::fs::create_dir_all(&real).unwrap();
        for (name, text) in files {
            std::fs::write(real.join(name), text).unwrap();
        }
        if let Some(driver) = driver {
            let driver_dir = root.join("sys/bus/pci/drivers").join(driver);
            std::fs::create_dir_all(&driver_dir).unwrap();
            symlink(
                format!("../../../bus/pci/drivers/{driver}"),
                real.join("driver"),
            )
            .unwrap();
        }
        let devices = root.join(PCI_DEVICES_DIR);
        std::fs::create_dir_all(&devices).unwrap();
        symlink(
            format!("../../../devices/pci0000:00/{address}"),
            devices.join(address),
        )
        .unwrap();
    }

    fn gpu(root: &Path, address: &str, numa: &str, driver: Option<&str>) {
        function(
            root,
            address,
            &[
                ("vendor", "0x10de\n"),
                ("device", "0x2330\n"),
                ("class", "0x030200\n"),
                ("numa_node", numa),
            ],
            driver,
        );
    }

    fn sample_host() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        gpu(root, "0000:9a:00.0", "1\n", Some("nvidia"));
        gpu(root, "0000:18:00.0", "0\n", Some("nvidia"));
        gpu(root, "0000:3b:00.0", "-1\n", None);
        // An AMD GPU passed through to a VM.
        function(
            root,
            "0000:c1:00.0",
            &[
                ("vendor", "0x1002\n"),
                ("device", "0x74a1\n"),
                ("class", "0x038000\n"),
            ],
            Some("vfio-pci"),
        );
        // A network card from a vendor we do not map.
        function(
            root,
            "0000:01:00.0",
            &[
                ("vendor", "0x15b3\n"),
                ("device", "0x101b\n"),
                ("class", "0x020700\n"),
            ],
            Some("mlx5_core"),
        );
        // A host bridge: class 06 is not scanned.
        function(
            root,
            "0000:00:00.0",
            &[
                ("vendor", "0x8086\n"),
                ("device", "0x09a2\n"),
                ("class", "0x060000\n"),
            ],
            None,
        );
        // A function whose class file is garbage.
        function(
            root,
            "0000:5e:00.0",
            &[
                ("vendor", "0x10de\n"),
                ("device", "0x2330\n"),
                ("class", "three-d\n"),
            ],
            None,
        );
        dir
    }

    #[test]
    fn scans_matching_functions_in_bus_order_through_symlinks() {
        let dir = sample_host();
        let scan = scan_pci(&FsHost::new(dir.path()), &PciClassPrefixes::default()).unwrap();
        let addresses: Vec<String> = scan.functions.iter().map(|f| f.bus_id.sysfs()).collect();
        assert_eq!(
            addresses,
            [
                "0000:01:00.0",
                "0000:18:00.0",
                "0000:3b:00.0",
                "0000:9a:00.0",
                "0000:c1:00.0"
            ]
        );
        let first_gpu = &scan.functions[1];
        assert_eq!(
            *first_gpu,
            PciFunction {
                bus_id: "0000:18:00.0".parse().unwrap(),
                vendor_id: 0x10de,
                device_id: 0x2330,
                class: 0x030200,
                numa_node: Some(0),
                driver: Some("nvidia".into()),
                manufacturer: Some(Manufacturer::Nvidia),
            }
        );
        let unbound = &scan.functions[2];
        assert_eq!(unbound.numa_node, None, "-1 means no NUMA affinity");
        assert_eq!(unbound.driver, None, "no driver link: no driver");
        assert_eq!(scan.functions[3].numa_node, Some(1));
        let amd = &scan.functions[4];
        assert_eq!(amd.driver.as_deref(), Some("vfio-pci"));
        assert_eq!(amd.manufacturer, Some(Manufacturer::Amd));
        assert_eq!(amd.numa_node, None, "no numa_node file: unknown");
        assert_eq!(scan.functions[0].manufacturer, None);
        assert_eq!(scan.notes.len(), 1, "{:?}", scan.notes);
        assert!(
            scan.notes[0].starts_with("0000:5e:00.0: class: not hex"),
            "{:?}",
            scan.notes
        );
    }

    #[test]
    fn class_prefixes_select_what_is_scanned() {
        let dir = sample_host();
        let host = FsHost::new(dir.path());
        let display_only = PciClassPrefixes::from_env_value("0302").unwrap();
        let scan = scan_pci(&host, &display_only).unwrap();
        assert_eq!(scan.functions.len(), 3);
        assert!(scan.functions.iter().all(|f| f.class == 0x030200));
        let bridges = PciClassPrefixes::from_env_value(" 06 ,0x12").unwrap();
        let scan = scan_pci(&host, &bridges).unwrap();
        assert_eq!(scan.functions.len(), 1);
        assert_eq!(scan.functions[0].vendor_id, 0x8086);
    }

    #[test]
    fn parses_the_class_prefix_setting() {
        assert_eq!(
            PciClassPrefixes::from_env_value("02,03,0B,12").unwrap(),
            PciClassPrefixes::default()
        );
        assert_eq!(
            PciClassPrefixes::from_env_value("  ").unwrap(),
            PciClassPrefixes::default()
        );
        assert_eq!(
            PciClassPrefixes::from_env_value("0x03,03")
                .unwrap()
                .prefixes(),
            ["03"]
        );
        for bad in ["03,,12", "0x", "zz", "0300000", "03;12"] {
            let message = PciClassPrefixes::from_env_value(bad)
                .unwrap_err()
                .to_string();
            assert!(
                message.starts_with("GPUSTACK_PCI_CLASS_PREFIXES: bad class prefix"),
                "{bad}: {message}"
            );
        }
        let default = PciClassPrefixes::default();
        assert!(default.matches(0x030200));
        assert!(default.matches(0x120000));
        assert!(default.matches(0x0b4000));
        assert!(!default.matches(0x060400));
        assert!(!default.matches(0x010802), "NVMe is storage");
    }

    #[test]
    fn a_host_without_pci_devices_scans_empty() {
        let dir = tempfile::tempdir().unwrap();
        let scan = scan_pci(&FsHost::new(dir.path()), &PciClassPrefixes::default()).unwrap();
        assert_eq!(scan, PciScan::default());
    }

    #[test]
    fn an_unreadable_device_list_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys/bus/pci")).unwrap();
        std::fs::write(dir.path().join(PCI_DEVICES_DIR), "not a folder").unwrap();
        let err = scan_pci(&FsHost::new(dir.path()), &PciClassPrefixes::default()).unwrap_err();
        assert!(err.to_string().starts_with("pci scan: "), "{err}");
    }

    #[test]
    fn the_fingerprint_changes_with_the_device_set_only() {
        let dir = sample_host();
        let host = FsHost::new(dir.path());
        let prefixes = PciClassPrefixes::default();
        let before = scan_pci(&host, &prefixes).unwrap().functions;
        let mut shuffled = before.clone();
        shuffled.reverse();
        // A driver change (bind to vfio-pci) is not a change of the device set.
        shuffled[0].driver = Some("vfio-pci".into());
        assert_eq!(pci_set_fingerprint(&before), pci_set_fingerprint(&shuffled));

        gpu(dir.path(), "0000:bc:00.0", "1\n", Some("nvidia"));
        let after = scan_pci(&host, &prefixes).unwrap().functions;
        assert_ne!(pci_set_fingerprint(&before), pci_set_fingerprint(&after));

        let mut swapped = before.clone();
        swapped[1].class = 0x030000;
        assert_ne!(pci_set_fingerprint(&before), pci_set_fingerprint(&swapped));
        assert_eq!(
            pci_set_fingerprint(&before[..2]).to_string(),
            "0000:01:00.0/15b3/020700,0000:18:00.0/10de/030200"
        );
    }

    proptest::proptest! {
        #[test]
        fn class_text_and_prefix_settings_never_panic(text in ".{0,24}") {
            let _ = parse_hex(&text);
            if let Ok(prefixes) = PciClassPrefixes::from_env_value(&text) {
                proptest::prop_assert!(!prefixes.prefixes().is_empty());
                let _ = prefixes.matches(0x030200);
            }
        }
    }
}
