//! `npu-smi info -t topo`: the NPU-to-NPU connection matrix (HAZARDS item 13), read by header
//! through `accel_backend::text::column_table`. The header row has no label cell above the row
//! names (`NPU0  NPU1 … CPU Affinity`), each row starts with its NPU (`NPU0  X  HCCS …`), the
//! diagonal is `X`, and a `Legend:` block follows a blank line. The words are npu-smi's own
//! (`HCCS`, `SYS`, `PHB`, `PIX`, `PXB`) and are kept as printed.
//!
//! Which number `NPU<n>` is — the `npu-smi info` table's NPU id or a logic id — no capture
//! tells: on the one captured host (8× 910B1, one chip per NPU) the two coincide. The detector
//! therefore applies the matrix only to NPUs of one chip, by NPU id. Pure; never runs npu-smi.

use std::collections::BTreeMap;

use accel_backend::text;

/// `npu-smi info -t topo`: the whole node's matrix (no `-i`).
pub const TOPO_ARGV: &[&str] = &["npu-smi", "info", "-t", "topo"];

/// Why a text is not the topology matrix at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopoError {
    /// No header row of `NPU<n>` columns (an error or usage text instead).
    #[error("npu-smi info -t topo: no NPU matrix in its output: first line {0:?}")]
    NoMatrix(String),
}

/// The matrix: for each row's NPU, the connection to every other NPU column, as printed
/// (the diagonal and blank cells left out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NpuTopology {
    pub links: BTreeMap<u32, BTreeMap<u32, String>>,
}

/// The `n` of an `NPU<n>` cell.
fn npu_number(cell: &str) -> Option<u32> {
    cell.trim().strip_prefix("NPU")?.parse().ok()
}

/// Reads `npu-smi info -t topo`. `Err` when no line starts with an `NPU<n>` column header.
pub fn parse_topo(output: &str) -> Result<NpuTopology, TopoError> {
    let cleaned = text::clean(output);
    let no_matrix = || {
        let first = cleaned.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        TopoError::NoMatrix(first.trim().to_string())
    };
    // The header is the first line whose first cell is an NPU column; a row's first cell is
    // one too, but rows come after it.
    let first_column = cleaned
        .lines()
        .filter_map(|l| text::split_blanks(l.trim()).first().copied())
        .find(|cell| npu_number(cell).is_some())
        .ok_or_else(no_matrix)?;
    let table = text::column_table(&cleaned, &[first_column]).ok_or_else(no_matrix)?;
    let mut topology = NpuTopology::default();
    for row in &table.rows {
        let Some(from) = row.name.as_deref().and_then(npu_number) else {
            continue;
        };
        let peers: BTreeMap<u32, String> = row
            .fields
            .iter()
            .filter_map(|(label, word)| {
                let to = npu_number(label)?;
                let word = word.trim();
                (to != from && !word.is_empty() && word != "X").then(|| (to, word.to_string()))
            })
            .collect();
        topology.links.insert(from, peers);
    }
    if topology.links.is_empty() {
        return Err(no_matrix());
    }
    Ok(topology)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_or_usage_text_is_no_matrix() {
        let usage = "Error parameter of -t\nUsage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n";
        assert_eq!(
            parse_topo(usage),
            Err(TopoError::NoMatrix("Error parameter of -t".into()))
        );
        assert_eq!(parse_topo(""), Err(TopoError::NoMatrix(String::new())));
        // A header alone, no row under it.
        assert!(parse_topo("       NPU0       NPU1       CPU Affinity\n").is_err());
    }

    #[test]
    fn a_row_keeps_each_word_as_printed_without_the_diagonal() {
        let text = "\u{1b}[4m       NPU0   NPU1   NPU2   CPU Affinity\u{1b}[0m\n\
                    NPU0   X      HCCS   SYS    0-23\n\
                    NPU1   HCCS   X      PIX    24-47\n\
                    NPU2   SYS    PIX    X      24-47\n\
                    \n\
                    Legend:\n  X    = Self\n";
        let topology = parse_topo(text).unwrap();
        assert_eq!(
            topology.links[&0],
            BTreeMap::from([(1, "HCCS".into()), (2, "SYS".into())])
        );
        assert_eq!(
            topology.links[&2],
            BTreeMap::from([(0, "SYS".into()), (1, "PIX".into())])
        );
        assert_eq!(topology.links.len(), 3);
    }
}
