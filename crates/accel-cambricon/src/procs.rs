//! cnmon's `Processes:` table, printed under the card table of the default output (`Card  MI
//! PID  Command Line  MLU Memory Usage`; the instance column is `VF` on 4.x and on some 5.10.10
//! builds, HAZARDS.md item 3): which process holds memory on which card, read by its header
//! through `accel_backend::text::process_rows`. It comes in the output the sampler already reads,
//! so it costs no call of its own. Every capture prints `No running processes found`; a process
//! row is read by the same labels.
//!
//! Not read here: the card table above (`cnmon.rs`), and what a row means for a sample
//! (`usage.rs` counts them per card).

use accel_backend::text::{self, MemoryUnit, Record};

/// The labels of the process table's header line (never its title, `Processes:`).
const HEADER: &[&str] = &["Card", "PID", "Command Line"];

/// One process as a row of the table prints it; `None` where the row has no such column or a
/// placeholder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CnmonProcess {
    /// The card's ordinal, as the card table above numbers it (`Card`).
    pub card: Option<u32>,
    /// `MI` (an MLU instance) or `VF`; `/` on a whole card, which is `None`.
    pub instance: Option<u32>,
    pub pid: Option<u32>,
    pub command: Option<String>,
    /// `MLU Memory Usage`.
    pub memory_used_mib: Option<u64>,
}

/// Reads the `Processes:` table of cnmon's default output: its rows, none for `No running
/// processes found`; `None` when the output has no process table (a capture cut before it).
pub fn parse_processes(text: &str) -> Option<Vec<CnmonProcess>> {
    let rows = text::process_rows(text, HEADER)?;
    Some(rows.iter().map(process_of).collect())
}

fn process_of(record: &Record) -> CnmonProcess {
    let number = |label| record.number(label);
    CnmonProcess {
        card: number("Card"),
        instance: number("MI").or_else(|| number("VF")),
        pid: number("PID"),
        command: record.get("Command Line").map(str::to_string),
        memory_used_mib: record
            .get("MLU Memory Usage")
            .and_then(|m| text::mebibytes(m, MemoryUnit::MiB)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The captured 5.x title and header (`paddlenlp__8x-mluxxx-…-v5.10.31-…`), with rows
    /// written in its columns: no capture shows a busy card.
    const BUSY: &str = "\
+------------------------------------------------------------------------------+
| Processes:                                                                   |
|  Card  MI  PID     Command Line                             MLU Memory Usage |
|==============================================================================|
|  0     /   31337   python3 train.py --mlu                           1024 MiB |
|  0     1   31338   python3                                               N/A |
|  5     /   N/A     vllm                                                  512 |
+------------------------------------------------------------------------------+
";

    #[test]
    fn rows_are_read_by_their_labels_and_placeholders_are_none() {
        let rows = parse_processes(BUSY).unwrap();
        assert_eq!(rows.len(), 3, "the title line is no row");
        assert_eq!(
            rows[0],
            CnmonProcess {
                card: Some(0),
                instance: None,
                pid: Some(31337),
                command: Some("python3 train.py --mlu".into()),
                memory_used_mib: Some(1024),
            }
        );
        assert_eq!((rows[1].instance, rows[1].memory_used_mib), (Some(1), None));
        assert_eq!((rows[2].card, rows[2].pid), (Some(5), None));
        assert_eq!(rows[2].memory_used_mib, Some(512), "a bare figure is MiB");
        let v4 = BUSY.replace("Card  MI  PID ", "Card  VF  PID ");
        assert_eq!(parse_processes(&v4).unwrap()[1].instance, Some(1), "4.x");
    }

    #[test]
    fn no_table_is_none_and_an_idle_one_is_no_rows() {
        assert_eq!(parse_processes(""), None);
        assert_eq!(parse_processes("| Card  VF  Name  Firmware |\n"), None);
        let idle: String = BUSY
            .lines()
            .take(4)
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            + "|  No running processes found                                                  |\n"
            + "+------------------------------------------------------------------------------+\n";
        assert_eq!(parse_processes(&idle), Some(Vec::new()));
    }
}
