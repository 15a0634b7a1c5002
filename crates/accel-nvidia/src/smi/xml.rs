//! The `nvidia-smi -q -x` reader: the XML report to a [`Report`] of [`Gpu`]s.
//!
//! The XML changes between driver branches (DTD v8 to v13), SKUs and operating systems: tags are
//! renamed, added and dropped, values carry units and a dozen spellings of "no value". This reader
//! keys on the presence of elements, never on the DTD version, never validates, and reads what it
//! does not recognise as absent. It returns every `<gpu>` in document order (which is not index
//! order) and never merges two of them, even when masked captures repeat a UUID. It must not run
//! nvidia-smi or decide what the facts mean for scheduling.

use accel_core::BusId;
use accel_core::inventory::{Ecc, MigDevice, MigMode, NvLink, RemappedRows};
use roxmltree::{Document, Node, ParsingOptions};
use serde::Serialize;

use super::value::{flag, float, mebibytes, present, whole_u32};

/// The argv of the full query this module reads.
pub const QUERY_ARGV: &[&str] = &["nvidia-smi", "-q", "-x"];

/// The root element of every nvidia-smi XML report.
const ROOT: &str = "nvidia_smi_log";

/// Bounds the memory a hostile or corrupt input can make the parser take; the largest real
/// report in the corpus (one Blackwell GPU) has about 3,000 nodes, an 8-GPU board a few tens of
/// thousands.
const NODES_LIMIT: u32 = 2_000_000;

/// Why a text is not an nvidia-smi XML report at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum XmlError {
    /// The text is not well-formed XML.
    #[error("nvidia-smi -q -x output is not XML: {0}")]
    NotXml(String),
    /// Well-formed XML, but not an nvidia-smi report.
    #[error("nvidia-smi -q -x output has root element <{0}>, expected <nvidia_smi_log>")]
    WrongRoot(String),
}

/// The whole report. Report-level fields absent from trimmed documents stay `None`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub driver_version: Option<String>,
    /// The CUDA driver version (`12.2`); `None` before v10 and when the driver says `Not Found`.
    pub cuda_version: Option<String>,
    /// What the report says it holds; can disagree with `gpus.len()` in trimmed captures.
    pub attached_gpus: Option<u32>,
    /// Every `<gpu>`, in document order.
    pub gpus: Vec<Gpu>,
}

/// One `<gpu>` element.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Gpu {
    /// From `<pci><pci_bus_id>`, else from `<gpu id="…">`.
    pub bus_id: Option<BusId>,
    pub uuid: Option<String>,
    pub product_name: Option<String>,
    pub product_brand: Option<String>,
    pub product_architecture: Option<String>,
    /// The `/dev/nvidiaN` minor; not the nvidia-smi index (the K80 capture runs 1,2,3,0).
    pub minor_number: Option<u32>,
    pub serial: Option<String>,
    pub vbios_version: Option<String>,
    pub board_part_number: Option<String>,
    pub persistence_mode: Option<bool>,
    /// Windows driver model (`WDDM`, `TCC`, `MCDM`); `None` on Linux (`N/A`).
    pub driver_model: Option<String>,
    pub gsp_firmware_version: Option<String>,
    pub memory: FbMemory,
    /// `None` when the report has neither `<ecc_mode>` nor `<ecc_errors>`.
    pub ecc: Option<Ecc>,
    /// `None` before v11 and where the GPU has no row remapper (`N/A`).
    pub remapped_rows: Option<RemappedRows>,
    pub mig_mode: Option<MigMode>,
    /// MIG instances; UUIDs and profile names are not in the XML (they come from `-L`).
    pub mig_devices: Vec<MigDevice>,
    /// NVLinks: always empty from this reader, since `-q -x` does not list links (none of the
    /// captured reports, v9 to v13, has them); kept so the shape matches the inventory's.
    pub nvlinks: Vec<NvLink>,
    pub processes: Vec<Process>,
    pub usage: Usage,
}

/// `<fb_memory_usage>` in MiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FbMemory {
    pub total_mib: Option<u64>,
    pub reserved_mib: Option<u64>,
    pub used_mib: Option<u64>,
    pub free_mib: Option<u64>,
}

/// One `<process_info>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Process {
    pub pid: Option<u32>,
    /// `C`, `G`, `C+G`, `M`, `M+C` as the driver prints it.
    pub kind: Option<String>,
    /// The command (a full path on Windows; empty names are `None`).
    pub name: Option<String>,
    pub used_memory_mib: Option<u64>,
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
}

impl Process {
    /// A compute process: its type contains `C` (`C`, `C+G`, `M+C` for MPS clients). A desktop
    /// compositor or WSL's Xwayland is a graphics process and no workload (seed 002, "Live
    /// samples").
    pub fn is_compute(&self) -> bool {
        self.kind.as_deref().is_some_and(is_compute_type)
    }
}

/// Whether a process type as nvidia-smi prints it counts as a compute process.
pub fn is_compute_type(kind: &str) -> bool {
    kind.contains('C')
}

/// What changes from second to second: a sample, never part of the inventory hash.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub utilization_gpu_percent: Option<f64>,
    pub utilization_memory_percent: Option<f64>,
    pub temperature_c: Option<f64>,
    /// `power_draw`, else `average_power_draw`, else `instant_power_draw` (v12+ split).
    pub power_draw_w: Option<f64>,
    /// `power_limit` (to v12), else `current_power_limit`, else `enforced_power_limit`.
    pub power_limit_w: Option<f64>,
    pub clock_sm_mhz: Option<u32>,
    pub clock_mem_mhz: Option<u32>,
    /// Performance state (`P0` … `P12`).
    pub pstate: Option<String>,
}

impl Gpu {
    /// How many compute processes run on the GPU (see [`Process::is_compute`]).
    pub fn compute_process_count(&self) -> usize {
        self.processes.iter().filter(|p| p.is_compute()).count()
    }
}

/// Reads a `nvidia-smi -q -x` report. Bytes that are not UTF-8 are replaced, not refused (a
/// Windows process name can carry them); a leading byte-order mark and blank lines are skipped.
pub fn parse(input: &[u8]) -> Result<Report, XmlError> {
    let text = String::from_utf8_lossy(input);
    let text = text.trim_start_matches('\u{feff}').trim();
    let options = ParsingOptions {
        allow_dtd: true,
        nodes_limit: NODES_LIMIT,
    };
    let document =
        Document::parse_with_options(text, options).map_err(|e| XmlError::NotXml(e.to_string()))?;
    let root = document.root_element();
    if root.tag_name().name() != ROOT {
        return Err(XmlError::WrongRoot(root.tag_name().name().to_string()));
    }
    Ok(Report {
        driver_version: child_text(root, "driver_version"),
        cuda_version: child_text(root, "cuda_version"),
        attached_gpus: child(root, "attached_gpus").and_then(|n| whole_u32(raw(n))),
        gpus: children(root, "gpu").map(read_gpu).collect(),
    })
}

fn read_gpu(gpu: Node) -> Gpu {
    let pci_bus_id = path(gpu, &["pci", "pci_bus_id"]).and_then(|n| present(raw(n)));
    let bus_id = pci_bus_id
        .and_then(|s| s.parse::<BusId>().ok())
        .or_else(|| gpu.attribute("id").and_then(|s| s.trim().parse().ok()));
    Gpu {
        bus_id,
        uuid: child_text(gpu, "uuid"),
        product_name: child_text(gpu, "product_name"),
        product_brand: child_text(gpu, "product_brand"),
        product_architecture: child_text(gpu, "product_architecture"),
        minor_number: child(gpu, "minor_number").and_then(|n| whole_u32(raw(n))),
        serial: child_text(gpu, "serial"),
        vbios_version: child_text(gpu, "vbios_version"),
        board_part_number: child_text(gpu, "board_part_number"),
        persistence_mode: child(gpu, "persistence_mode").and_then(|n| flag(raw(n))),
        driver_model: path_text(gpu, &["driver_model", "current_dm"]),
        gsp_firmware_version: child_text(gpu, "gsp_firmware_version"),
        memory: read_fb_memory(child(gpu, "fb_memory_usage")),
        ecc: read_ecc(gpu),
        remapped_rows: child(gpu, "remapped_rows").and_then(read_remapped_rows),
        mig_mode: path(gpu, &["mig_mode", "current_mig"]).and_then(|n| mig_mode(raw(n))),
        mig_devices: child(gpu, "mig_devices")
            .map(|list| {
                children(list, "mig_device")
                    .filter_map(read_mig_device)
                    .collect()
            })
            .unwrap_or_default(),
        // `-q -x` carries no per-link NVLink state in any report we have seen (that is
        // `nvidia-smi nvlink -s`); the list stays empty rather than guessing at a layout.
        nvlinks: Vec::new(),
        processes: child(gpu, "processes")
            .map(|list| children(list, "process_info").map(read_process).collect())
            .unwrap_or_default(),
        usage: read_usage(gpu),
    }
}

fn mig_mode(raw: &str) -> Option<MigMode> {
    match present(raw)?.to_ascii_lowercase().as_str() {
        "enabled" => Some(MigMode::Enabled),
        "disabled" => Some(MigMode::Disabled),
        _ => None,
    }
}

fn read_fb_memory(node: Option<Node>) -> FbMemory {
    let Some(node) = node else {
        return FbMemory::default();
    };
    let mib = |tag| child(node, tag).and_then(|n| mebibytes(raw(n)));
    FbMemory {
        total_mib: mib("total"),
        reserved_mib: mib("reserved"),
        used_mib: mib("used"),
        free_mib: mib("free"),
    }
}

/// ECC mode and counters. Two layouts of `<ecc_errors>` exist: v9–v11 nest
/// `<volatile><single_bit>…<total>` / `<double_bit>…<total>`; later reports list
/// `sram_correctable`, `sram_uncorrectable` (split into `_parity` and `_secded` from v12.x),
/// `dram_correctable`, `dram_uncorrectable`, whose sums are the totals.
fn read_ecc(gpu: Node) -> Option<Ecc> {
    let mode = child(gpu, "ecc_mode");
    let errors = child(gpu, "ecc_errors");
    if mode.is_none() && errors.is_none() {
        return None;
    }
    let (volatile_corrected, volatile_uncorrected) = errors
        .and_then(|e| child(e, "volatile"))
        .map(ecc_counts)
        .unwrap_or_default();
    let (aggregate_corrected, aggregate_uncorrected) = errors
        .and_then(|e| child(e, "aggregate"))
        .map(ecc_counts)
        .unwrap_or_default();
    Some(Ecc {
        enabled: mode
            .and_then(|m| child(m, "current_ecc"))
            .and_then(|n| flag(raw(n))),
        pending_enabled: mode
            .and_then(|m| child(m, "pending_ecc"))
            .and_then(|n| flag(raw(n))),
        volatile_corrected,
        volatile_uncorrected,
        aggregate_corrected,
        aggregate_uncorrected,
        corrected_is_fault: false,
    })
}

/// (corrected, uncorrected) totals of one `<volatile>` or `<aggregate>` block.
fn ecc_counts(block: Node) -> (Option<u64>, Option<u64>) {
    let nested = |tag| path(block, &[tag, "total"]).and_then(|n| super::value::whole(raw(n)));
    if child(block, "single_bit").is_some() || child(block, "double_bit").is_some() {
        return (nested("single_bit"), nested("double_bit"));
    }
    let sum = |tags: &[&str]| {
        let counts: Vec<u64> = tags
            .iter()
            .filter_map(|tag| child(block, tag))
            .filter_map(|n| super::value::whole(raw(n)))
            .collect();
        (!counts.is_empty()).then(|| counts.iter().fold(0u64, |a, b| a.saturating_add(*b)))
    };
    (
        sum(&["sram_correctable", "dram_correctable"]),
        sum(&[
            "sram_uncorrectable",
            "sram_uncorrectable_parity",
            "sram_uncorrectable_secded",
            "dram_uncorrectable",
        ]),
    )
}

fn read_remapped_rows(node: Node) -> Option<RemappedRows> {
    // `<remapped_rows>N/A</remapped_rows>`: the GPU has no row remapper.
    if !node.children().any(|c| c.is_element()) {
        return None;
    }
    let rows = RemappedRows {
        correctable: child(node, "remapped_row_corr").and_then(|n| super::value::whole(raw(n))),
        uncorrectable: child(node, "remapped_row_unc").and_then(|n| super::value::whole(raw(n))),
        pending: child(node, "remapped_row_pending").and_then(|n| flag(raw(n))),
        failure: child(node, "remapped_row_failure").and_then(|n| flag(raw(n))),
    };
    Some(rows)
}

/// A `<mig_device>` without a readable `<index>` is left out: the index is its identity.
fn read_mig_device(node: Node) -> Option<MigDevice> {
    let number = |tag| child(node, tag).and_then(|n| whole_u32(raw(n)));
    Some(MigDevice {
        index: number("index")?,
        gpu_instance_id: number("gpu_instance_id"),
        compute_instance_id: number("compute_instance_id"),
        uuid: None,
        profile: None,
        memory_mib: path(node, &["fb_memory_usage", "total"]).and_then(|n| mebibytes(raw(n))),
        multiprocessors: path(
            node,
            &["device_attributes", "shared", "multiprocessor_count"],
        )
        .and_then(|n| whole_u32(raw(n))),
    })
}

fn read_process(node: Node) -> Process {
    Process {
        pid: child(node, "pid").and_then(|n| whole_u32(raw(n))),
        kind: child_text(node, "type"),
        name: child_text(node, "process_name"),
        used_memory_mib: child(node, "used_memory").and_then(|n| mebibytes(raw(n))),
        gpu_instance_id: child(node, "gpu_instance_id").and_then(|n| whole_u32(raw(n))),
        compute_instance_id: child(node, "compute_instance_id").and_then(|n| whole_u32(raw(n))),
    }
}

fn read_usage(gpu: Node) -> Usage {
    // `power_readings` up to v12; `gpu_power_readings` from v12 on (module and memory
    // readings are other rails and are not the GPU's draw).
    let power_blocks: Vec<Node> = ["power_readings", "gpu_power_readings"]
        .iter()
        .filter_map(|tag| child(gpu, tag))
        .collect();
    let power = |tags: &[&str]| {
        power_blocks.iter().find_map(|block| {
            tags.iter()
                .find_map(|tag| child(*block, tag).and_then(|n| float(raw(n))))
        })
    };
    Usage {
        utilization_gpu_percent: path(gpu, &["utilization", "gpu_util"])
            .and_then(|n| float(raw(n))),
        utilization_memory_percent: path(gpu, &["utilization", "memory_util"])
            .and_then(|n| float(raw(n))),
        temperature_c: path(gpu, &["temperature", "gpu_temp"]).and_then(|n| float(raw(n))),
        power_draw_w: power(&["power_draw", "average_power_draw", "instant_power_draw"]),
        power_limit_w: power(&["power_limit", "current_power_limit", "enforced_power_limit"]),
        clock_sm_mhz: path(gpu, &["clocks", "sm_clock"]).and_then(|n| whole_u32(raw(n))),
        clock_mem_mhz: path(gpu, &["clocks", "mem_clock"]).and_then(|n| whole_u32(raw(n))),
        pstate: child_text(gpu, "performance_state"),
    }
}

/// The first child element with this tag.
fn child<'a, 'i>(node: Node<'a, 'i>, tag: &str) -> Option<Node<'a, 'i>> {
    node.children()
        .find(|c| c.is_element() && c.tag_name().name() == tag)
}

/// Every child element with this tag, in document order.
fn children<'a, 'i: 'a>(
    node: Node<'a, 'i>,
    tag: &'a str,
) -> impl Iterator<Item = Node<'a, 'i>> + 'a {
    node.children()
        .filter(move |c| c.is_element() && c.tag_name().name() == tag)
}

/// The element at a path of child tags.
fn path<'a, 'i>(node: Node<'a, 'i>, tags: &[&str]) -> Option<Node<'a, 'i>> {
    tags.iter().try_fold(node, |n, tag| child(n, tag))
}

/// An element's own text (empty when it has none).
fn raw<'a>(node: Node<'a, '_>) -> &'a str {
    node.text().unwrap_or("")
}

fn child_text(node: Node, tag: &str) -> Option<String> {
    child(node, tag)
        .and_then(|n| present(raw(n)))
        .map(str::to_string)
}

fn path_text(node: Node, tags: &[&str]) -> Option<String> {
    path(node, tags)
        .and_then(|n| present(raw(n)))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(xml: &str) -> Gpu {
        let report = parse(xml.as_bytes()).unwrap();
        assert_eq!(report.gpus.len(), 1);
        report.gpus.into_iter().next().unwrap()
    }

    fn wrap(gpu_body: &str) -> String {
        format!(
            "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<gpu id=\"00000000:18:00.0\">{gpu_body}</gpu>\n</nvidia_smi_log>\n"
        )
    }

    #[test]
    fn prolog_variants_and_no_doctype() {
        for prolog in [
            "<?xml version=\"1.0\" ?>",
            "<?xml version=\"1.0\"?>",
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>",
            "\u{feff}<?xml version=\"1.0\"?>",
            "",
        ] {
            for doctype in [
                "<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v13.dtd\">",
                "<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v8.dtd\">",
                "",
            ] {
                let xml = format!(
                    "{prolog}\n{doctype}\n<nvidia_smi_log><driver_version>535.54.03</driver_version></nvidia_smi_log>\n"
                );
                let report = parse(xml.as_bytes()).unwrap();
                assert_eq!(report.driver_version.as_deref(), Some("535.54.03"), "{xml}");
            }
        }
    }

    #[test]
    fn not_xml_and_wrong_root_are_one_line_errors() {
        let err = parse(b"Failed to initialize NVML: Driver/library version mismatch").unwrap_err();
        assert!(matches!(err, XmlError::NotXml(_)));
        assert!(!err.to_string().contains('\n'));
        let err = parse(b"<html><body/></html>").unwrap_err();
        assert_eq!(err, XmlError::WrongRoot("html".into()));
        assert!(parse(b"").is_err());
    }

    #[test]
    fn missing_value_spellings_are_absent() {
        let xml = "<?xml version=\"1.0\" ?><nvidia_smi_log><cuda_version>Not Found</cuda_version>\
            <gpu id=\"00000000:01:00.0\"><serial>N/A</serial><display_mode>Requested functionality has been deprecated</display_mode>\
            <utilization><gpu_util>N/A %</gpu_util></utilization>\
            <clocks><sm_clock>Requested functionality has been deprecated</sm_clock></clocks></gpu></nvidia_smi_log>";
        let report = parse(xml.as_bytes()).unwrap();
        assert_eq!(report.cuda_version, None);
        let gpu = &report.gpus[0];
        assert_eq!(gpu.serial, None);
        assert_eq!(gpu.usage.utilization_gpu_percent, None);
        assert_eq!(gpu.usage.clock_sm_mhz, None);
    }

    #[test]
    fn padded_values_and_empty_multiline_lists() {
        let gpu = one(&wrap(
            "<fb_memory_usage><total> 24576 MiB </total></fb_memory_usage>\
             <utilization><gpu_util> 40 % </gpu_util></utilization>\
             <temperature><gpu_temp>-7 C</gpu_temp></temperature>\
             <mig_devices>\n\t\tNone\n\t</mig_devices><processes>\n</processes>",
        ));
        assert_eq!(gpu.memory.total_mib, Some(24576));
        assert_eq!(gpu.usage.utilization_gpu_percent, Some(40.0));
        assert_eq!(gpu.usage.temperature_c, Some(-7.0));
        assert!(gpu.mig_devices.is_empty());
        assert!(gpu.processes.is_empty());
    }

    #[test]
    fn power_readings_renamed_in_v12() {
        let old = one(&wrap(
            "<power_readings><power_draw>66.92 W</power_draw><power_limit>400.00 W</power_limit></power_readings>",
        ));
        assert_eq!(old.usage.power_draw_w, Some(66.92));
        assert_eq!(old.usage.power_limit_w, Some(400.0));
        let new = one(&wrap(
            "<gpu_power_readings><average_power_draw>N/A</average_power_draw>\
             <instant_power_draw>9.23 W</instant_power_draw><current_power_limit>175.00 W</current_power_limit></gpu_power_readings>\
             <module_power_readings><average_power_draw>500 W</average_power_draw></module_power_readings>",
        ));
        assert_eq!(new.usage.power_draw_w, Some(9.23));
        assert_eq!(new.usage.power_limit_w, Some(175.0));
    }

    #[test]
    fn ecc_both_layouts() {
        let nested = one(&wrap(
            "<ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Disabled</pending_ecc></ecc_mode>\
             <ecc_errors><volatile><single_bit><device_memory>3</device_memory><total>3</total></single_bit>\
             <double_bit><total>1</total></double_bit></volatile>\
             <aggregate><single_bit><total>N/A</total></single_bit><double_bit><total>0</total></double_bit></aggregate></ecc_errors>",
        ));
        let ecc = nested.ecc.unwrap();
        assert_eq!(ecc.enabled, Some(true));
        assert_eq!(ecc.pending_enabled, Some(false));
        assert_eq!(ecc.volatile_corrected, Some(3));
        assert_eq!(ecc.volatile_uncorrected, Some(1));
        assert_eq!(ecc.aggregate_corrected, None);
        assert_eq!(ecc.aggregate_uncorrected, Some(0));

        let flat = one(&wrap(
            "<ecc_mode><current_ecc>Enabled</current_ecc></ecc_mode>\
             <ecc_errors><volatile><sram_correctable>2</sram_correctable><sram_uncorrectable_parity>1</sram_uncorrectable_parity>\
             <sram_uncorrectable_secded>4</sram_uncorrectable_secded><dram_correctable>5</dram_correctable>\
             <dram_uncorrectable>N/A</dram_uncorrectable></volatile>\
             <aggregate><sram_correctable>N/A</sram_correctable><dram_uncorrectable>N/A</dram_uncorrectable></aggregate></ecc_errors>",
        ));
        let ecc = flat.ecc.unwrap();
        assert_eq!(ecc.volatile_corrected, Some(7));
        assert_eq!(ecc.volatile_uncorrected, Some(5));
        assert_eq!(ecc.aggregate_corrected, None);
        assert_eq!(ecc.aggregate_uncorrected, None);
        assert_eq!(one(&wrap("")).ecc, None);
    }

    #[test]
    fn remapped_rows_na_and_present() {
        assert_eq!(
            one(&wrap("<remapped_rows>N/A</remapped_rows>")).remapped_rows,
            None
        );
        let rows = one(&wrap(
            "<remapped_rows><remapped_row_corr>2</remapped_row_corr><remapped_row_unc>1</remapped_row_unc>\
             <remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure>\
             <row_remapper_histogram></row_remapper_histogram></remapped_rows>",
        ))
        .remapped_rows
        .unwrap();
        assert_eq!(rows.correctable, Some(2));
        assert_eq!(rows.uncorrectable, Some(1));
        assert_eq!(rows.pending, Some(true));
        assert_eq!(rows.failure, Some(false));
    }

    #[test]
    fn bus_id_spellings_and_fallback_to_attribute() {
        let gpu = one(
            "<nvidia_smi_log><gpu id=\"0000:3b:00.0\"><pci><pci_bus_id>N/A</pci_bus_id></pci></gpu></nvidia_smi_log>",
        );
        assert_eq!(gpu.bus_id.unwrap().to_string(), "00000000:3B:00.0");
        let gpu = one(
            "<nvidia_smi_log><gpu id=\"junk\"><pci><pci_bus_id>0000F8D6:00:00.0</pci_bus_id></pci></gpu></nvidia_smi_log>",
        );
        assert_eq!(gpu.bus_id.unwrap().domain, 0xF8D6);
        let gpu = one("<nvidia_smi_log><gpu/></nvidia_smi_log>");
        assert_eq!(gpu.bus_id, None);
    }

    #[test]
    fn windows_driver_model_and_processes() {
        let gpu = one(&wrap(
            "<driver_model><current_dm>WDDM</current_dm></driver_model><minor_number>N/A</minor_number>\
             <processes><process_info><pid>10380</pid><type>C+G</type>\
             <process_name>C:\\Windows\\explorer.exe</process_name><used_memory>N/A</used_memory></process_info>\
             <process_info><pid>2320</pid><type>C+G</type><process_name></process_name><used_memory>N/A</used_memory></process_info>\
             <process_info><pid>7</pid><type>G</type><process_name>Xwayland</process_name><used_memory>4 MiB</used_memory></process_info>\
             <process_info><pid>8</pid><type>M+C</type><process_name>mps</process_name><used_memory>4 MiB</used_memory></process_info></processes>",
        ));
        assert_eq!(gpu.driver_model.as_deref(), Some("WDDM"));
        assert_eq!(gpu.minor_number, None);
        assert_eq!(
            gpu.processes[0].name.as_deref(),
            Some("C:\\Windows\\explorer.exe")
        );
        assert_eq!(gpu.processes[1].name, None);
        assert_eq!(gpu.processes[1].used_memory_mib, None);
        assert_eq!(gpu.compute_process_count(), 3);
    }

    #[test]
    fn mig_devices_and_mode() {
        let gpu = one(&wrap(
            "<mig_mode><current_mig>Enabled</current_mig><pending_mig>Enabled</pending_mig></mig_mode>\
             <mig_devices><mig_device><index>1</index><gpu_instance_id>2</gpu_instance_id>\
             <compute_instance_id>0</compute_instance_id><device_attributes><shared>\
             <multiprocessor_count>42</multiprocessor_count></shared></device_attributes>\
             <fb_memory_usage><total>19968 MiB</total></fb_memory_usage></mig_device></mig_devices>",
        ));
        assert_eq!(gpu.mig_mode, Some(MigMode::Enabled));
        assert_eq!(
            gpu.mig_devices,
            vec![MigDevice {
                index: 1,
                gpu_instance_id: Some(2),
                compute_instance_id: Some(0),
                uuid: None,
                profile: None,
                memory_mib: Some(19968),
                multiprocessors: Some(42),
            }]
        );
        assert_eq!(
            one(&wrap("<mig_mode><current_mig>N/A</current_mig></mig_mode>")).mig_mode,
            None
        );
    }

    #[test]
    fn repeated_uuids_are_not_merged() {
        let xml = "<nvidia_smi_log><gpu id=\"00000000:01:00.0\"><uuid>GPU-0</uuid></gpu>\
                   <gpu id=\"00000000:02:00.0\"><uuid>GPU-0</uuid></gpu></nvidia_smi_log>";
        let report = parse(xml.as_bytes()).unwrap();
        assert_eq!(report.gpus.len(), 2);
    }

    #[test]
    fn non_utf8_bytes_are_replaced() {
        let mut xml = b"<nvidia_smi_log><gpu><processes><process_info><process_name>a".to_vec();
        xml.push(0xff);
        xml.extend_from_slice(b"</process_name></process_info></processes></gpu></nvidia_smi_log>");
        let report = parse(&xml).unwrap();
        assert_eq!(
            report.gpus[0].processes[0].name.as_deref(),
            Some("a\u{fffd}")
        );
    }
}
