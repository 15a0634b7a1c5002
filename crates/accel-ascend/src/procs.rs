//! The process section `npu-smi info` may print under its chip table (HAZARDS.md item 9): a box
//! of its own, `NPU  Chip | Process id | Process name | Process memory(MB)`, one row a process,
//! each NPU's rows closed by a `+===+` rule, or one `No running processes found in NPU <n>` row
//! for an NPU without any; some releases print no section at all. Read by its header through
//! `accel_backend::text::box_table`. It comes in the output the sampler already reads, so it
//! costs no call of its own.
//!
//! Not read here: the chip table above (`npusmi.rs`), and what a row means for a sample
//! (`usage.rs` counts them per chip).

use accel_backend::text::{self, MemoryUnit, Record};

/// The labels of the process section's header.
const HEADER: &[&str] = &["Process id", "Process name"];

/// One process as a row of the section prints it; `None` where the row has no such column or a
/// placeholder (`xxx`, a redaction, included).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InfoProcess {
    /// The NPU ID, as the chip table above prints it (`NPU`).
    pub npu: Option<u32>,
    /// The chip index in the NPU (`Chip`).
    pub chip: Option<u32>,
    pub pid: Option<u32>,
    pub name: Option<String>,
    /// `Process memory(MB)` (npu-smi's MB are MiB, as in the chip table).
    pub memory_used_mib: Option<u64>,
}

/// Reads the process section of `npu-smi info`: its rows, none where every NPU says `No running
/// processes found`; `None` when the output has no such section.
pub fn parse_processes(text: &str) -> Option<Vec<InfoProcess>> {
    let table = text::box_table(&text::clean(text), HEADER)?;
    Some(
        table
            .records
            .iter()
            .filter(|r| !says_none(r))
            .map(process_of)
            .collect(),
    )
}

/// `No running processes found in NPU 0`: an idle NPU's one row.
fn says_none(record: &Record) -> bool {
    record.fields.first().is_some_and(|(_, value)| {
        let value = value.to_ascii_lowercase();
        value.starts_with("no ") && value.contains("process")
    })
}

fn process_of(record: &Record) -> InfoProcess {
    let number = |label| record.number(label);
    InfoProcess {
        npu: number("NPU"),
        chip: number("Chip"),
        pid: number("Process id"),
        name: record.get("Process name").map(str::to_string),
        memory_used_mib: record
            .get("Process memory(MB)")
            .and_then(|m| text::mebibytes(m, MemoryUnit::MiB)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_none_and_other_tables_are_no_section() {
        let text = "\
+----------------------+---------------+----------------------------------------------------+
| NPU     Chip         | Process id    | Process name             | Process memory(MB)      |
+======================+===============+====================================================+
| 0       1            | N/A           | xxx                      | NA                      |
+======================+===============+====================================================+
";
        let rows = parse_processes(text).unwrap();
        assert_eq!(
            rows,
            [InfoProcess {
                npu: Some(0),
                chip: Some(1),
                ..InfoProcess::default()
            }]
        );
        assert_eq!(parse_processes(""), None);
        assert_eq!(
            parse_processes("| NPU   Name   | Health |\n| Chip  | Bus-Id |\n"),
            None
        );
    }
}
