//! The `nvidia-smi topo -m` reader: each GPU's connection to every other GPU and NIC, and its
//! CPU and NUMA affinity.
//!
//! The matrix is tab-separated, with ANSI underline escapes around the header in recent drivers,
//! padded ` X ` on the diagonal, NIC rows shorter than GPU rows, an optional `GPU NUMA ID` column
//! preceded by an empty cell, and a legend after a blank line. Windows drivers answer with an
//! error instead. It must not run nvidia-smi.

use std::collections::BTreeMap;

use serde::Serialize;

use super::value::present;

/// The argv of the topology query this module reads.
pub const TOPO_ARGV: &[&str] = &["nvidia-smi", "topo", "-m"];

/// Why a text is not a topology matrix at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopoError {
    /// No header row naming GPU columns (Windows' `ERROR: Option -m is missing its value`).
    #[error("nvidia-smi topo -m output has no matrix: first line {0:?}")]
    NoMatrix(String),
}

/// The matrix's GPU rows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Topology {
    pub gpus: Vec<TopoGpu>,
}

/// One `GPUn` row.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopoGpu {
    /// The `n` of `GPUn`, nvidia-smi's index.
    pub index: u32,
    /// Connection to each GPU column by its index, the diagonal included (`X`, `NV18`, `SYS`,
    /// `PIX`, `PXB`, `PHB`, `NODE`).
    pub peers: BTreeMap<u32, String>,
    /// Connection to each NIC column by its name (`NIC0`).
    pub nics: BTreeMap<String, String>,
    /// CPU list as printed (`0-55,112-167`).
    pub cpu_affinity: Option<String>,
    /// NUMA node list as printed (`0`, `0-1`).
    pub numa_affinity: Option<String>,
    pub gpu_numa_id: Option<u32>,
}

impl TopoGpu {
    /// The NUMA node when the affinity names exactly one.
    pub fn numa_node(&self) -> Option<u32> {
        self.numa_affinity.as_deref()?.parse().ok()
    }
}

/// Removes ANSI escape sequences (`ESC [ … letter`) from the text.
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, then one final byte in '@'..='~'.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// Reads `nvidia-smi topo -m`.
pub fn parse(text: &str) -> Result<Topology, TopoError> {
    let clean = strip_ansi(text);
    let mut lines = clean.lines();
    let header = lines.by_ref().find(|l| is_header(l)).ok_or_else(|| {
        let first = clean.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        TopoError::NoMatrix(first.trim().chars().take(120).collect())
    })?;
    let columns: Vec<&str> = header
        .split('\t')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    // Device columns come first, then the affinity columns.
    let devices: Vec<&str> = columns
        .iter()
        .copied()
        .take_while(|c| is_device(c))
        .collect();
    let has_cpu = columns.contains(&"CPU Affinity");
    let has_numa = columns.contains(&"NUMA Affinity");
    let has_gpu_numa = columns.contains(&"GPU NUMA ID");

    let mut topology = Topology::default();
    for line in lines {
        if line.trim().is_empty() {
            // The legend follows the first blank line.
            break;
        }
        let mut cells = line.split('\t').map(str::trim);
        let Some(label) = cells.next() else { continue };
        let Some(index) = label
            .strip_prefix("GPU")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            // NIC rows and anything else.
            continue;
        };
        let cells: Vec<&str> = cells.collect();
        let mut gpu = TopoGpu {
            index,
            ..TopoGpu::default()
        };
        for (column, cell) in devices.iter().zip(&cells) {
            let Some(link) = present(cell) else { continue };
            if let Some(peer) = column.strip_prefix("GPU").and_then(|n| n.parse().ok()) {
                gpu.peers.insert(peer, link.to_string());
            } else {
                gpu.nics.insert((*column).to_string(), link.to_string());
            }
        }
        let mut rest = cells.iter().skip(devices.len());
        if has_cpu {
            gpu.cpu_affinity = rest.next().and_then(|c| present(c)).map(str::to_string);
        }
        if has_numa {
            gpu.numa_affinity = rest.next().and_then(|c| present(c)).map(str::to_string);
        }
        if has_gpu_numa {
            // nvidia-smi prints an empty cell before this column: take the last cell.
            gpu.gpu_numa_id = rest
                .next_back()
                .and_then(|c| present(c))
                .and_then(|c| c.parse().ok());
        }
        topology.gpus.push(gpu);
    }
    Ok(topology)
}

fn is_header(line: &str) -> bool {
    line.starts_with('\t')
        && line
            .split('\t')
            .map(str::trim)
            .find(|c| !c.is_empty())
            .is_some_and(is_device)
}

/// A device column: `GPU0`, `NIC1`, `mlx5_0` style names are all devices until the affinity
/// columns begin.
fn is_device(column: &str) -> bool {
    !column.is_empty()
        && !column.contains(' ')
        && column
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const EIGHT: &str = "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n\
GPU0\t X \tNV18\tPHB\t0-55,112-167\t0\t\tN/A\n\
GPU1\tNV18\t X \tSYS\t56-111\t1\t\t3\n\
NIC0\tPHB\tSYS\t X\n\n\
Legend:\n\n  X    = Self\n";

    #[test]
    fn gpu_rows_nics_and_affinity() {
        let topo = parse(EIGHT).unwrap();
        assert_eq!(topo.gpus.len(), 2);
        let g0 = &topo.gpus[0];
        assert_eq!(g0.peers.get(&0).map(String::as_str), Some("X"));
        assert_eq!(g0.peers.get(&1).map(String::as_str), Some("NV18"));
        assert_eq!(g0.nics.get("NIC0").map(String::as_str), Some("PHB"));
        assert_eq!(g0.cpu_affinity.as_deref(), Some("0-55,112-167"));
        assert_eq!(g0.numa_node(), Some(0));
        assert_eq!(g0.gpu_numa_id, None);
        assert_eq!(topo.gpus[1].gpu_numa_id, Some(3));
    }

    #[test]
    fn ansi_escapes_are_stripped() {
        let text = "\t\u{1b}[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\u{1b}[0m\nGPU0\t X \t0-19\t0\t\tN/A\n";
        let topo = parse(text).unwrap();
        assert_eq!(topo.gpus[0].cpu_affinity.as_deref(), Some("0-19"));
        assert_eq!(strip_ansi("a\u{1b}[4mb\u{1b}[0mc\u{1b}"), "abc");
    }

    #[test]
    fn empty_affinity_cells_are_absent() {
        let text = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\nGPU0\t X \t\t\t\tN/A\n";
        let gpu = &parse(text).unwrap().gpus[0];
        assert_eq!(
            (gpu.cpu_affinity.as_deref(), gpu.numa_affinity.as_deref()),
            (None, None)
        );
    }

    #[test]
    fn windows_error_is_no_matrix() {
        let err =
            parse("ERROR: Option -m is missing its value. Please run 'nvidia-smi -h' for help.\n")
                .unwrap_err();
        assert!(err.to_string().contains("Option -m"));
        assert!(parse("").is_err());
    }
}
