//! ixsmi's `Processes:` table, printed under the GPU table of the default output like
//! nvidia-smi's (`GPU  PID  Process name  Usage(MiB)`, `GPU Memory` on the title line above):
//! which process holds memory on which GPU, read by its header through
//! `accel_backend::text::process_rows`. It comes in the output the sampler already reads, so it
//! costs no call of its own. Every capture prints `No running processes found`; a process row is
//! read by the same labels.
//!
//! Not read here: the GPU table above (`ixsmi.rs`), and what a row means for a sample
//! (`usage.rs` counts them per GPU).

use accel_backend::text::{self, MemoryUnit, Record};

/// The labels of the process table's header line (never its title, `Processes:`).
const HEADER: &[&str] = &["GPU", "PID", "Process name"];

/// One process as a row of the table prints it; `None` where the row has no such column or a
/// placeholder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IxsmiProcess {
    /// The GPU's index, as the GPU table above numbers it (`GPU`).
    pub gpu: Option<u32>,
    pub pid: Option<u32>,
    pub name: Option<String>,
    /// `GPU Memory Usage(MiB)`.
    pub memory_used_mib: Option<u64>,
}

/// Reads the `Processes:` table of ixsmi's default output: its rows, none for `No running
/// processes found`; `None` when the output has no process table (a capture cut before it).
pub fn parse_processes(text: &str) -> Option<Vec<IxsmiProcess>> {
    let rows = text::process_rows(text, HEADER)?;
    Some(rows.iter().map(process_of).collect())
}

fn process_of(record: &Record) -> IxsmiProcess {
    let number = |label| record.number(label);
    IxsmiProcess {
        gpu: number("GPU"),
        pid: number("PID"),
        name: record.get("Process name").map(str::to_string),
        memory_used_mib: record
            .get("Usage(MiB)")
            .and_then(|m| text::mebibytes(m, MemoryUnit::MiB)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The captured header and title (`paddlenlp__16x-bi-v150-…`), with rows written in its
    /// columns: no capture shows a busy GPU.
    const BUSY: &str = "\
+-----------------------------------------------------------------------------+
| Processes:                                                       GPU Memory |
|  GPU        PID      Process name                                Usage(MiB) |
|=============================================================================|
|  0          4021     python3 -m vllm.entrypoints                      1024MiB |
|  0          4022     python3                                            N/A  |
|  3          N/A      ray::worker                                         512 |
+-----------------------------------------------------------------------------+
";

    #[test]
    fn rows_are_read_by_their_labels_and_placeholders_are_none() {
        let rows = parse_processes(BUSY).unwrap();
        assert_eq!(rows.len(), 3, "the title line is no row");
        assert_eq!(
            rows[0],
            IxsmiProcess {
                gpu: Some(0),
                pid: Some(4021),
                name: Some("python3 -m vllm.entrypoints".into()),
                memory_used_mib: Some(1024),
            }
        );
        assert_eq!((rows[1].gpu, rows[1].memory_used_mib), (Some(0), None));
        assert_eq!((rows[2].gpu, rows[2].pid), (Some(3), None));
        assert_eq!(rows[2].memory_used_mib, Some(512), "a bare figure is MiB");
    }

    #[test]
    fn no_table_is_none_and_an_idle_one_is_no_rows() {
        assert_eq!(parse_processes(""), None);
        assert_eq!(parse_processes("| GPU  Name | Bus-Id |\n"), None);
        let idle: String = BUSY
            .lines()
            .take(4)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            + "|  No running processes found                                                 |\n"
            + "+-----------------------------------------------------------------------------+\n";
        assert_eq!(parse_processes(&idle), Some(Vec::new()));
    }
}
