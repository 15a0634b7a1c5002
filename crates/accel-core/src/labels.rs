//! The accelerator feature labels a node's NodeFeature carries (seed 000, "Detection and the
//! accelerator feature labels"), and the naming rules behind them: the model key
//! `${manufacturer}-${id}`, label-value sanitising and the memory size at its largest binary unit.
//!
//! Pure: it reads an [`Inventory`] and returns a sorted map. Keys for undetected facts are
//! omitted, never filled with a placeholder.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::inventory::{Accelerator, Inventory, ManufacturerInventory};
use crate::manufacturer::Manufacturer;

/// The label prefix (`${prefix}` in the seed's table).
pub const PREFIX: &str = "feature.gpustack.ai/";
/// The namespace of every per-manufacturer and per-model label.
pub const ACCELERATABLE_PREFIX: &str = "acceleratable.feature.gpustack.ai/";
/// The node-level marker the NFD rule sets to `false` and the device manager to `true`.
pub const ACCELERATABLE: &str = "feature.gpustack.ai/acceleratable";
/// Kubernetes' limit on a label name part and on a label value.
pub const NAME_MAX: usize = 63;

/// The longest suffix a model key carries (`.product`); the key is cut so that every
/// `${aKey}.${suffix}` fits [`NAME_MAX`].
const LONGEST_SUFFIX: usize = ".product".len();

/// The model id of a product name, as the described system's `NormalizeName` forms it:
/// lower-cased, spaces to dashes, only `[a-z0-9-_.]` kept, a run of separators (`-`, `_`, `.`)
/// kept as its first one, and the manufacturer's own prefix dropped wherever the name starts
/// with it — followed by a separator or not ("NVIDIA H100 80GB HBM3" → `h100-80gb-hbm3`, Ascend's
/// A3 chip `Ascend910` → `910`) — then a suffix its group ids leave out
/// ([`Manufacturer::product_suffixes`]: Hygon's `K100_AI` → `k100`).
pub fn model_id(manufacturer: Manufacturer, product: &str) -> String {
    let lowered: String = product
        .trim()
        .to_lowercase()
        .chars()
        .map(|c| if c.is_whitespace() { '-' } else { c })
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'))
        .collect();
    let mut id = collapse_separators(&lowered);
    // `NormalizeName` empties its buffer each time it equals the prefix, so a prefix printed
    // twice (`Ascend Ascend910`) goes twice; a separator after it is never kept.
    while let Some(rest) = manufacturer.product_prefixes().iter().find_map(|prefix| {
        id.strip_prefix(prefix.replace(' ', "-").as_str())
            .map(|rest| rest.trim_start_matches(['-', '_', '.']))
    }) {
        if rest.len() == id.len() {
            break;
        }
        id = rest.to_string();
    }
    for suffix in manufacturer.product_suffixes() {
        if let Some(rest) = id.strip_suffix(suffix).filter(|r| !r.is_empty()) {
            id = rest.to_string();
            break;
        }
    }
    trim_to_alphanumeric(&id).to_string()
}

/// The accelerated device key `${manufacturer}-${id}`, cut deterministically (a prefix plus a
/// short hash of the whole key) when a label name built from it would pass 63 characters.
pub fn model_key(manufacturer: Manufacturer, product: &str) -> String {
    let id = model_id(manufacturer, product);
    let key = if id.is_empty() {
        manufacturer.name().to_string()
    } else {
        format!("{}-{id}", manufacturer.name())
    };
    let budget = NAME_MAX - LONGEST_SUFFIX;
    if key.len() <= budget {
        return key;
    }
    let digest = Sha256::digest(key.as_bytes());
    let tag: String = digest.iter().take(4).map(|b| format!("{b:02x}")).collect();
    let keep = budget - tag.len() - 1;
    let head = trim_to_alphanumeric(&key[..keep]);
    format!("{head}-{tag}")
}

/// How group ids (the accelerated device keys) are formed on this deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupNaming {
    /// `GPUSTACK_DEVICES_GROUP_ID_WITH_MEMORY`: a `-<GiB>g` VRAM suffix on the key
    /// (16368 MiB → `-16g`), the name part's budget shrinking by 7 to make room for it.
    pub with_memory: bool,
}

/// The group id of an accelerator: [`model_key`], with the VRAM suffix when `naming` asks for
/// one and the VRAM is known. The suffix is the VRAM in GiB rounded to the nearest whole one
/// (the described system's example: 16368 MiB → `-16g`).
pub fn group_key(
    manufacturer: Manufacturer,
    product: &str,
    memory_mib: Option<u64>,
    naming: GroupNaming,
) -> String {
    let Some(mib) = memory_mib.filter(|_| naming.with_memory) else {
        return model_key(manufacturer, product);
    };
    let suffix = format!("-{}g", (mib + 512) / 1024);
    let key = model_key(manufacturer, product);
    let budget = NAME_MAX - LONGEST_SUFFIX - 7;
    let head = if key.len() <= budget {
        key.as_str()
    } else {
        trim_to_alphanumeric(&key[..budget])
    };
    format!("{head}{suffix}")
}

/// A Kubernetes label value: spaces to dashes, only `[A-Za-z0-9-_.]` kept, at most 63
/// characters, starting and ending with an alphanumeric ("Tesla T4" → `Tesla-T4`).
pub fn label_value(text: &str) -> String {
    let kept: String = text
        .trim()
        .chars()
        .map(|c| if c.is_whitespace() { '-' } else { c })
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .collect();
    let collapsed = collapse_dashes(&kept);
    let cut: String = collapsed.chars().take(NAME_MAX).collect();
    trim_to_alphanumeric(&cut).to_string()
}

/// A VRAM size at its largest binary unit, rounded to the nearest whole one
/// (15360 MiB → `15Gi`, 97887 MiB → `96Gi`, 512 MiB → `512Mi`).
pub fn memory_quantity(mib: u64) -> String {
    const UNITS: [&str; 3] = ["Mi", "Gi", "Ti"];
    let mut unit = 0;
    let mut scale: u64 = 1;
    while unit + 1 < UNITS.len() && mib >= scale * 1024 {
        scale *= 1024;
        unit += 1;
    }
    let rounded = (mib + scale / 2) / scale;
    format!("{rounded}{}", UNITS[unit])
}

/// A run of separators (`-`, `_`, `.`) kept as its first one (`NormalizeName`'s rule:
/// `a_-b` → `a_b`).
fn collapse_separators(text: &str) -> String {
    let separator = |c: char| matches!(c, '-' | '_' | '.');
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if separator(c) && out.ends_with(separator) {
            continue;
        }
        out.push(c);
    }
    out
}

fn collapse_dashes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c == '-' && out.ends_with('-') {
            continue;
        }
        out.push(c);
    }
    out
}

fn trim_to_alphanumeric(text: &str) -> &str {
    text.trim_matches(|c: char| !c.is_ascii_alphanumeric())
}

/// The label map for a node's inventory.
pub fn labels(inventory: &Inventory) -> BTreeMap<String, String> {
    labels_with(inventory, GroupNaming::default())
}

/// [`labels`] with the deployment's group naming.
pub fn labels_with(inventory: &Inventory, naming: GroupNaming) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for section in &inventory.manufacturers {
        manufacturer_labels(section, naming, &mut out);
    }
    out
}

fn manufacturer_labels(
    section: &ManufacturerInventory,
    naming: GroupNaming,
    out: &mut BTreeMap<String, String>,
) {
    let grantable: Vec<&Accelerator> = section
        .accelerators
        .iter()
        .filter(|a| a.can_be_granted())
        .collect();
    if grantable.is_empty() {
        return;
    }
    let m = section.name;
    out.insert(ACCELERATABLE.to_string(), "true".to_string());
    out.insert(format!("{ACCELERATABLE_PREFIX}{m}"), "true".to_string());
    if let Some(version) = section.driver_version.as_deref().map(label_value) {
        out.insert(format!("{ACCELERATABLE_PREFIX}{m}.driver-version"), version);
    }
    if let Some(version) = section.runtime_version.as_deref().map(label_value) {
        out.insert(
            format!("{ACCELERATABLE_PREFIX}{m}.runtime-version"),
            version,
        );
    }
    let mut models: BTreeMap<String, Vec<&Accelerator>> = BTreeMap::new();
    for accelerator in grantable {
        let Some(product) = accelerator.product.as_deref() else {
            continue;
        };
        models
            .entry(group_key(m, product, accelerator.memory_mib, naming))
            .or_default()
            .push(accelerator);
    }
    for (key, members) in models {
        let first = members[0];
        let base = format!("{ACCELERATABLE_PREFIX}{key}");
        out.insert(base.clone(), "true".to_string());
        if let Some(product) = first.product.as_deref().map(label_value) {
            out.insert(format!("{base}.product"), product);
        }
        // Every member of a model has the same VRAM on a real node; the smallest is the one a
        // budget can rely on if a reading differs.
        if let Some(mib) = members.iter().filter_map(|a| a.memory_mib).min() {
            out.insert(format!("{base}.memory"), memory_quantity(mib));
        }
        if let Some(cores) = first.cores {
            out.insert(format!("{base}.cores"), cores.to_string());
        }
        out.insert(format!("{base}.count"), members.len().to_string());
        if let Some(family) = first.architecture.as_deref().map(label_value) {
            out.insert(format!("{base}.family"), family);
        }
        if let Some(cc) = first.compute_capability.as_deref().map(label_value) {
            out.insert(format!("{base}.comcap"), cc);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_ids_carry_the_vram_when_asked() {
        let n = Manufacturer::Nvidia;
        let with = GroupNaming { with_memory: true };
        assert_eq!(
            group_key(n, "Tesla T4", Some(16_368), with),
            "nvidia-tesla-t4-16g"
        );
        assert_eq!(
            group_key(n, "NVIDIA H100 80GB HBM3", Some(81_559), with),
            "nvidia-h100-80gb-hbm3-80g"
        );
        assert_eq!(
            group_key(n, "Tesla T4", Some(16_368), GroupNaming::default()),
            "nvidia-tesla-t4"
        );
        assert_eq!(group_key(n, "Tesla T4", None, with), "nvidia-tesla-t4");
        let long = "NVIDIA Some Extraordinarily Long Product Name That Goes On And On Forever";
        let key = group_key(n, long, Some(40_960), with);
        assert!(key.ends_with("-40g"), "{key}");
        assert!(key.len() + ".product".len() <= NAME_MAX, "{key}");
    }
    use crate::inventory::{MigMode, Source};

    #[test]
    fn model_keys_follow_the_naming_rules() {
        let n = Manufacturer::Nvidia;
        assert_eq!(
            model_key(n, "NVIDIA H100 80GB HBM3"),
            "nvidia-h100-80gb-hbm3"
        );
        assert_eq!(model_key(n, "Tesla T4"), "nvidia-tesla-t4");
        let h = Manufacturer::Hygon;
        assert_eq!(model_key(h, "K100_AI"), "hygon-k100");
        assert_eq!(model_key(h, "BW150"), "hygon-bw150");
        assert_eq!(model_key(h, "_AI"), "hygon-ai");
        assert_eq!(model_key(n, "Foo_AI"), "nvidia-foo_ai");
        assert_eq!(
            model_key(n, "NVIDIA A100-SXM4-40GB"),
            "nvidia-a100-sxm4-40gb"
        );
        assert_eq!(
            model_key(n, "NVIDIA GeForce RTX 4080 SUPER"),
            "nvidia-geforce-rtx-4080-super"
        );
        assert_eq!(model_key(n, "NVIDIA  (R) weird/GPU™"), "nvidia-r-weirdgpu");
    }

    /// spec/ascend.md §1.6: `NormalizeName` drops the maker's prefix wherever the name starts
    /// with it, separator or not, so every generation's chip name gives the spec's group id.
    #[test]
    fn ascend_group_ids_drop_the_prefix_of_every_generation() {
        let a = Manufacturer::Ascend;
        for (chip, key) in [
            ("910B2", "ascend-910b2"),
            ("910B4", "ascend-910b4"),
            ("310P3", "ascend-310p3"),
            ("910A", "ascend-910a"),
            // A3 (910_93) prints its chip as `Ascend910`, the 950 generation as `Ascend950PR`.
            ("Ascend910", "ascend-910"),
            ("Ascend950PR", "ascend-950pr"),
            ("Ascend 910A", "ascend-910a"),
            ("Ascend-910B2", "ascend-910b2"),
            ("AscendAscend910", "ascend-910"),
            // `_` is kept, as `NormalizeName` keeps it (spec §1.6's [UNSURE]).
            ("910_9391", "ascend-910_9391"),
            ("Ascend", "ascend"),
        ] {
            assert_eq!(model_key(a, chip), key, "{chip}");
        }
    }

    #[test]
    fn a_run_of_separators_keeps_its_first() {
        let n = Manufacturer::Nvidia;
        assert_eq!(model_key(n, "A_-B"), "nvidia-a_b");
        assert_eq!(model_key(n, "A.-_B"), "nvidia-a.b");
        assert_eq!(model_key(n, "A - B"), "nvidia-a-b");
        assert_eq!(model_key(n, "NVIDIA-_H100"), "nvidia-h100");
    }

    #[test]
    fn long_keys_are_cut_deterministically() {
        let n = Manufacturer::Nvidia;
        let long = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition With A Very Long Name";
        let key = model_key(n, long);
        assert!(key.len() + ".product".len() <= NAME_MAX, "{key}");
        assert_eq!(key, model_key(n, long));
        assert_ne!(key, model_key(n, &format!("{long} 2")));
        assert!(key.starts_with("nvidia-rtx-pro-6000-blackwell"));
        assert!(
            key.chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric())
        );
    }

    #[test]
    fn values_and_memory() {
        assert_eq!(label_value("Tesla T4"), "Tesla-T4");
        assert_eq!(
            label_value("NVIDIA H100 80GB HBM3"),
            "NVIDIA-H100-80GB-HBM3"
        );
        assert_eq!(label_value(" (x) "), "x");
        assert_eq!(label_value(&"a".repeat(80)).len(), 63);
        assert_eq!(memory_quantity(15360), "15Gi");
        assert_eq!(memory_quantity(97887), "96Gi");
        assert_eq!(memory_quantity(81559), "80Gi");
        assert_eq!(memory_quantity(512), "512Mi");
        assert_eq!(memory_quantity(2 * 1024 * 1024), "2Ti");
    }

    #[test]
    fn tebi_is_the_largest_memory_unit() {
        // No Pi: a petabyte-sized value is still counted in Ti, never past the unit list.
        assert_eq!(memory_quantity(1024 * 1024 * 1024), "1024Ti");
        assert_eq!(memory_quantity(5 * 1024 * 1024 * 1024), "5120Ti");
    }

    fn gpu(index: u32, product: &str, memory: u64) -> Accelerator {
        let mut a = Accelerator::new(index, Source::Driver);
        a.product = Some(product.to_string());
        a.memory_mib = Some(memory);
        a.architecture = Some("Hopper".into());
        a.compute_capability = Some("9.0".into());
        a
    }

    #[test]
    fn count_only_grantable_and_omit_undetected() {
        let mut section = ManufacturerInventory::empty(Manufacturer::Nvidia);
        section.driver_version = Some("590.48.01".into());
        let mut mig = gpu(1, "NVIDIA H100 80GB HBM3", 81559);
        mig.mig_mode = Some(MigMode::Enabled);
        mig.classify_grantable();
        let mut passed = gpu(2, "NVIDIA H100 80GB HBM3", 81559);
        passed.source = Source::Passthrough;
        passed.classify_grantable();
        section.accelerators = vec![gpu(0, "NVIDIA H100 80GB HBM3", 81559), mig, passed];
        let map = labels(&Inventory {
            manufacturers: vec![section],
        });
        let k = "acceleratable.feature.gpustack.ai/nvidia-h100-80gb-hbm3";
        assert_eq!(map[ACCELERATABLE], "true");
        assert_eq!(map["acceleratable.feature.gpustack.ai/nvidia"], "true");
        assert_eq!(
            map["acceleratable.feature.gpustack.ai/nvidia.driver-version"],
            "590.48.01"
        );
        assert!(!map.contains_key("acceleratable.feature.gpustack.ai/nvidia.runtime-version"));
        assert_eq!(map[&format!("{k}.count")], "2");
        assert_eq!(map[&format!("{k}.memory")], "80Gi");
        assert_eq!(map[&format!("{k}.product")], "NVIDIA-H100-80GB-HBM3");
        assert_eq!(map[&format!("{k}.family")], "Hopper");
        assert_eq!(map[&format!("{k}.comcap")], "9.0");
        assert!(!map.contains_key(&format!("{k}.cores")));
    }

    #[test]
    fn nothing_grantable_means_no_labels() {
        let mut section = ManufacturerInventory::empty(Manufacturer::Nvidia);
        let mut passed = gpu(0, "NVIDIA H100 80GB HBM3", 81559);
        passed.source = Source::Passthrough;
        passed.classify_grantable();
        section.accelerators = vec![passed];
        assert!(
            labels(&Inventory {
                manufacturers: vec![section]
            })
            .is_empty()
        );
    }
}
