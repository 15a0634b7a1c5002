//! DRM sysfs (`/sys/class/drm/card<N>/device/…`): the cards a kernel driver has bound, with
//! their PCI address, VRAM, unique id, NUMA node, and the two device nodes a container needs.
//! The attribute files are those of AMD's `amdgpu` driver, which Hygon's fork (`hycu`, `hydcu`)
//! keeps; a caller names its driver ([`DrmCard::is_bound_to`], [`read_bound_cards`]), since the
//! vendor id alone is not enough (an old card on `radeon` has vendor 1002 too and no ROCm).
//!
//! The card and render minors are read separately, from the PCI device's own `drm/` listing
//! (`card<N>`, `renderD<M>`: the listing `/sys/module/<driver>/drivers/pci:<driver>/<bdf>/drm`
//! shows, [`bound_drm_dir`]): they are unrelated numbers (a host's index 0 can be
//! card1/renderD128 and index 1 card0/renderD129), so neither is ever computed from the other.

use std::collections::BTreeMap;

use accel_core::busid::BusId;

use crate::Host;
use crate::sysfs::{attribute as clean, hex as hex_u64, unique_id};

/// Where the kernel lists DRM devices.
pub const CLASS_DIR: &str = "/sys/class/drm";

/// `KEY=VALUE` lines of a `uevent` file (NUL padding and blank lines skipped).
pub fn parse_uevent(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim_matches(|c: char| c == '\0' || c.is_whitespace());
            let (k, v) = line.split_once('=')?;
            (!k.is_empty()).then(|| (k.to_string(), v.to_string()))
        })
        .collect()
}

/// One DRM card as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DrmCard {
    /// `N` of `card<N>`: the primary node's minor.
    pub card: u32,
    /// `M` of the `renderD<M>` the PCI device lists, when it lists one.
    pub render: Option<u32>,
    pub driver: Option<String>,
    pub bus_id: Option<BusId>,
    pub vendor_id: Option<u16>,
    pub device_id: Option<u16>,
    pub class: Option<u32>,
    pub vram_bytes: Option<u64>,
    pub unique_id: Option<u64>,
    pub product_name: Option<String>,
    pub serial_number: Option<String>,
    pub vbios_version: Option<String>,
    /// `numa_node`; `-1` (no affinity) is `None`.
    pub numa_node: Option<u32>,
    /// `current_compute_partition` (`SPX`, `DPX`, `CPX` …) on boards that partition.
    pub compute_partition: Option<String>,
    /// `current_memory_partition` (`NPS1`, `NPS4` …).
    pub memory_partition: Option<String>,
}

impl DrmCard {
    /// Bound to the kernel driver `driver` (`amdgpu`, `hycu`): its uevent's `DRIVER`.
    pub fn is_bound_to(&self, driver: &str) -> bool {
        self.driver.as_deref() == Some(driver)
    }
}

fn read_clean(host: &dyn Host, path: &str) -> Option<String> {
    host.read(path)
        .ok()
        .and_then(|b| clean(&String::from_utf8_lossy(&b)))
}

/// The minors a PCI device's `drm/` listing names: `(card, render)`.
pub fn minors(entries: &[String]) -> (Option<u32>, Option<u32>) {
    let mut card = None;
    let mut render = None;
    for entry in entries {
        if let Some(n) = entry.strip_prefix("renderD").and_then(|n| n.parse().ok()) {
            render = render.or(Some(n));
        } else if let Some(n) = entry.strip_prefix("card").and_then(|n| n.parse().ok()) {
            card = card.or(Some(n));
        }
    }
    (card, render)
}

/// Reads one `card<N>` under `class_dir`.
pub fn read_card(host: &dyn Host, class_dir: &str, card: u32) -> DrmCard {
    let device = format!("{class_dir}/card{card}/device");
    let uevent = host
        .read(&format!("{device}/uevent"))
        .map(|b| parse_uevent(&String::from_utf8_lossy(&b)))
        .unwrap_or_default();
    let (vendor_id, device_id) = match uevent.get("PCI_ID").and_then(|v| v.split_once(':')) {
        Some((v, d)) => (
            hex_u64(v).and_then(|v| u16::try_from(v).ok()),
            hex_u64(d).and_then(|d| u16::try_from(d).ok()),
        ),
        None => (None, None),
    };
    let vendor_id = vendor_id.or_else(|| {
        read_clean(host, &format!("{device}/vendor"))
            .and_then(|v| hex_u64(&v))
            .and_then(|v| u16::try_from(v).ok())
    });
    let device_id = device_id.or_else(|| {
        read_clean(host, &format!("{device}/device"))
            .and_then(|v| hex_u64(&v))
            .and_then(|v| u16::try_from(v).ok())
    });
    let class = uevent
        .get("PCI_CLASS")
        .and_then(|c| hex_u64(c))
        .or_else(|| read_clean(host, &format!("{device}/class")).and_then(|c| hex_u64(&c)))
        .and_then(|c| u32::try_from(c).ok());
    let (_, render) = host
        .list(&format!("{device}/drm"))
        .map(|entries| minors(&entries))
        .unwrap_or((None, None));
    DrmCard {
        card,
        render,
        driver: uevent.get("DRIVER").and_then(|d| clean(d)),
        bus_id: uevent
            .get("PCI_SLOT_NAME")
            .and_then(|s| s.trim().parse().ok()),
        vendor_id,
        device_id,
        class,
        vram_bytes: read_clean(host, &format!("{device}/mem_info_vram_total"))
            .and_then(|v| v.parse().ok()),
        unique_id: read_clean(host, &format!("{device}/unique_id")).and_then(|u| unique_id(&u)),
        product_name: read_clean(host, &format!("{device}/product_name")),
        serial_number: read_clean(host, &format!("{device}/serial_number")),
        vbios_version: read_clean(host, &format!("{device}/vbios_version")),
        numa_node: read_clean(host, &format!("{device}/numa_node"))
            .and_then(|n| n.parse::<i64>().ok())
            .and_then(|n| u32::try_from(n).ok()),
        compute_partition: read_clean(host, &format!("{device}/current_compute_partition")),
        memory_partition: read_clean(host, &format!("{device}/current_memory_partition")),
    }
}

/// Every `card<N>` under `class_dir` (connectors such as `card0-DP-1` skipped), by card number.
/// A missing directory is no card.
pub fn read_cards(host: &dyn Host, class_dir: &str) -> Vec<DrmCard> {
    let Ok(entries) = host.list(class_dir) else {
        return Vec::new();
    };
    let mut numbers: Vec<u32> = entries
        .iter()
        .filter_map(|e| e.strip_prefix("card").and_then(|n| n.parse().ok()))
        .collect();
    numbers.sort_unstable();
    numbers
        .into_iter()
        .map(|n| read_card(host, class_dir, n))
        .collect()
}

/// The cards under `class_dir` bound to `driver`, by card number.
pub fn read_bound_cards(host: &dyn Host, class_dir: &str, driver: &str) -> Vec<DrmCard> {
    let mut cards = read_cards(host, class_dir);
    cards.retain(|c| c.is_bound_to(driver));
    cards
}

/// The `drm/` listing of the PCI device `bdf` under the driver `driver`'s module:
/// `/sys/module/<driver>/drivers/pci:<driver>/<bdf>/drm`.
pub fn bound_drm_dir(driver: &str, bdf: &str) -> String {
    format!("/sys/module/{driver}/drivers/pci:{driver}/{bdf}/drm")
}

/// The minors the PCI device `bdf` lists under `driver`'s module ([`bound_drm_dir`]), `(card,
/// render)`; `None` when the listing cannot be read (not bound to that driver).
pub fn read_bound_minors(
    host: &dyn Host,
    driver: &str,
    bdf: &str,
) -> Option<(Option<u32>, Option<u32>)> {
    host.list(&bound_drm_dir(driver, bdf))
        .ok()
        .map(|entries| minors(&entries))
}

/// The `drm/` listing of the PCI device `bdf` under a module whose PCI driver is named apart
/// from it (MetaX: module `metax`, driver `pci:METAX` or `pci:metax`):
/// `/sys/module/<module>/drivers/pci:<pci_driver>/<bdf>/drm`.
pub fn module_drm_dir(module: &str, pci_driver: &str, bdf: &str) -> String {
    format!("/sys/module/{module}/drivers/pci:{pci_driver}/{bdf}/drm")
}

/// The minors `bdf` lists under the first of `pci_drivers` whose [`module_drm_dir`] can be
/// read, `(card, render)`; `None` when none can (not bound to that module).
pub fn read_module_minors(
    host: &dyn Host,
    module: &str,
    pci_drivers: &[&str],
    bdf: &str,
) -> Option<(Option<u32>, Option<u32>)> {
    pci_drivers.iter().find_map(|driver| {
        host.list(&module_drm_dir(module, driver, bdf))
            .ok()
            .map(|entries| minors(&entries))
    })
}

/// The character devices an `ls -l` listing shows (`crw-rw---- 1 root render 226, 128 … renderD128`):
/// `(name, major, minor)`. Other lines are skipped.
pub fn listed_char_devices(text: &str) -> Vec<(String, u32, u32)> {
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            if !line.starts_with('c') {
                return None;
            }
            let comma = line.find(", ")?;
            let major = line[..comma].rsplit(' ').next()?.parse().ok()?;
            let mut rest = line[comma + 2..].split_whitespace();
            let minor = rest.next()?.parse().ok()?;
            let name = rest.last()?.rsplit('/').next()?.to_string();
            Some((name, major, minor))
        })
        .collect()
}

/// The render nodes of compute partitions in a sysfs listing: `(partition, render minor)` for
/// every `/sys/devices/platform/<driver>_xcp.<p>/drm/renderD<m>` path (`amdgpu_xcp.3`).
pub fn partition_render_nodes(listing: &str, driver: &str) -> Vec<(u32, u32)> {
    let prefix = format!("/sys/devices/platform/{driver}_xcp.");
    let mut out: Vec<(u32, u32)> = listing
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix(prefix.as_str())?;
            let (p, rest) = rest.split_once('/')?;
            let rest = rest.strip_prefix("drm/renderD")?;
            let minor = rest.split('/').next()?.parse().ok()?;
            Some((p.parse().ok()?, minor))
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn card_and_render_minors_are_read_apart() {
        let entries = vec!["renderD129".to_string(), "card0".to_string()];
        assert_eq!(minors(&entries), (Some(0), Some(129)));
        assert_eq!(minors(&["card3".to_string()]), (Some(3), None));
        assert_eq!(minors(&[]), (None, None));
    }

    fn card_tree(root: &std::path::Path, card: u32, driver: &str, bdf: &str) {
        let device = root.join(format!("sys/class/drm/card{card}/device"));
        std::fs::create_dir_all(device.join("drm")).unwrap();
        std::fs::create_dir_all(device.join(format!("drm/renderD{}", 128 + card))).unwrap();
        std::fs::write(
            device.join("uevent"),
            format!("DRIVER={driver}\nPCI_ID=1D94:6210\nPCI_SLOT_NAME={bdf}\n"),
        )
        .unwrap();
        let bound = root.join(format!(
            "sys/module/{driver}/drivers/pci:{driver}/{bdf}/drm/card{card}"
        ));
        std::fs::create_dir_all(bound).unwrap();
    }

    #[test]
    fn cards_are_kept_by_the_driver_the_caller_names() {
        let tmp = tempfile::tempdir().unwrap();
        card_tree(tmp.path(), 0, "hycu", "0000:11:00.0");
        card_tree(tmp.path(), 1, "amdgpu", "0000:22:00.0");
        let host = crate::FsHost::new(tmp.path());
        let all = read_cards(&host, CLASS_DIR);
        assert_eq!(all.len(), 2);
        assert!(all[0].is_bound_to("hycu") && !all[0].is_bound_to("amdgpu"));
        let hygon = read_bound_cards(&host, CLASS_DIR, "hycu");
        assert_eq!(hygon.len(), 1);
        assert_eq!(hygon[0].card, 0);
        assert_eq!(hygon[0].render, Some(128));
        assert_eq!(hygon[0].vendor_id, Some(0x1d94));
        let amd = read_bound_cards(&host, CLASS_DIR, "amdgpu");
        assert_eq!(amd.iter().map(|c| c.card).collect::<Vec<_>>(), vec![1]);
        assert!(read_bound_cards(&host, CLASS_DIR, "hydcu").is_empty());
        assert_eq!(
            bound_drm_dir("hycu", "0000:11:00.0"),
            "/sys/module/hycu/drivers/pci:hycu/0000:11:00.0/drm"
        );
        assert_eq!(
            read_bound_minors(&host, "hycu", "0000:11:00.0"),
            Some((Some(0), None))
        );
        assert_eq!(read_bound_minors(&host, "hydcu", "0000:11:00.0"), None);
    }

    #[test]
    fn partition_render_nodes_follow_the_driver_name() {
        let listing = "/sys/devices/platform/amdgpu_xcp.3/drm/renderD131\n\
                       /sys/devices/platform/hycu_xcp.1/drm/renderD129/dev\n\
                       /sys/devices/platform/amdgpu_xcp.1/drm/renderD129\n";
        assert_eq!(
            partition_render_nodes(listing, "amdgpu"),
            vec![(1, 129), (3, 131)]
        );
        assert_eq!(partition_render_nodes(listing, "hycu"), vec![(1, 129)]);
        assert!(partition_render_nodes(listing, "hydcu").is_empty());
    }

    #[test]
    fn uevent_lines_are_keys_and_values() {
        let u = parse_uevent("DRIVER=amdgpu\nPCI_ID=1002:744C\n\0\0\0");
        assert_eq!(u["DRIVER"], "amdgpu");
        assert_eq!(u.len(), 2);
    }
}
