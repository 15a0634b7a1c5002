//! mx-smi's `Process:` table (singular, HAZARDS.md item 5), printed under the GPU table of the
//! default output: `GPU  PID  Process Name  GPU Memory`, with the memory column's unit on a
//! second header line (`Usage(MiB)`). Which process holds memory on which GPU, read by its
//! header through `accel_backend::text::process_rows`. It comes in the output the sampler already
//! reads, so it costs no call of its own. The one capture that prints it says `no process
//! found`; a process row is read by the same labels.
//!
//! Not read here: the GPU table above (`mxsmi.rs`), and what a row means for a sample
//! (`usage.rs` counts them per GPU).

use accel_backend::text::{self, MemoryUnit, Record};

/// The labels of the process table's first header line (never its title, `Process:`).
const HEADER: &[&str] = &["GPU", "PID", "Process Name"];

/// One process as a row of the table prints it; `None` where the row has no such column or a
/// placeholder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MxSmiProcess {
    /// The GPU's ordinal, as the GPU table above numbers it (`GPU`).
    pub gpu: Option<u32>,
    pub pid: Option<u32>,
    pub name: Option<String>,
    /// `GPU Memory Usage(MiB)`.
    pub memory_used_mib: Option<u64>,
}

/// Reads the `Process:` table of mx-smi's default output: its rows, none for `no process
/// found`; `None` when the output has no process table (a capture cut before it).
pub fn parse_processes(text: &str) -> Option<Vec<MxSmiProcess>> {
    let rows = text::process_rows(text, HEADER)?;
    Some(rows.iter().map(process_of).collect())
}

fn process_of(record: &Record) -> MxSmiProcess {
    let number = |label| record.number(label);
    MxSmiProcess {
        gpu: number("GPU"),
        pid: number("PID"),
        name: record.get("Process Name").map(str::to_string),
        // The unit is the header's (`Usage(MiB)`); a figure printed with its own is read in it.
        memory_used_mib: record
            .get("GPU Memory")
            .and_then(|m| text::mebibytes(m, MemoryUnit::MiB)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The captured title and header (`paddlenlp__8x-mxc550-mx-smi2.1.6-…`), with rows written
    /// in its columns: no capture shows a busy GPU.
    const BUSY: &str = "\
+---------------------------------------------------------------------------------+
| Process:                                                                        |
|  GPU                    PID         Process Name                 GPU Memory     |
|                                                                  Usage(MiB)     |
|=================================================================================|
|  0                      52011       python3 -m vllm              1536           |
|  0                      52012       python3                      N/A            |
|  7                      N/A         ray::worker                  512            |
+---------------------------------------------------------------------------------+
";

    #[test]
    fn rows_are_read_by_their_labels_one_line_each_and_placeholders_are_none() {
        let rows = parse_processes(BUSY).unwrap();
        assert_eq!(
            rows.len(),
            3,
            "neither the title nor the unit line is a row"
        );
        assert_eq!(
            rows[0],
            MxSmiProcess {
                gpu: Some(0),
                pid: Some(52011),
                name: Some("python3 -m vllm".into()),
                memory_used_mib: Some(1536),
            }
        );
        assert_eq!((rows[1].gpu, rows[1].memory_used_mib), (Some(0), None));
        assert_eq!((rows[2].gpu, rows[2].pid), (Some(7), None));
    }

    #[test]
    fn no_table_is_none_and_an_idle_one_is_no_rows() {
        assert_eq!(parse_processes(""), None);
        assert_eq!(
            parse_processes("| GPU   NAME   | Bus-id  | GPU-Util |\n"),
            None
        );
        let idle: String = BUSY
            .lines()
            .take(5)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            + "|  no process found                                                               |\n"
            + "+---------------------------------------------------------------------------------+\n";
        assert_eq!(parse_processes(&idle), Some(Vec::new()));
    }
}
