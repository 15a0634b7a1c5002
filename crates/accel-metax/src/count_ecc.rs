//! `mx-smi --count-ecc`, MetaX's ECC error counts: after the log banner, one block per GPU — a
//! `GPU#<n>  <model>  <bus id>` header, then sections (`ECC Errors`, `Retired Pages`) of
//! `label : value` items. The one capture (mx-smi 2.2.9 on a C500,
//! `testdata/captures/metax/mx-smi/`) prints `SRAM Correctable` under `ECC Errors` and
//! `Double Bit ECC` under `Retired Pages`.
//!
//! **Read by label, never by position.** An item is known by its section and its words: under
//! `ECC Errors`, the memory (`SRAM`, `DRAM`) and the kind (`Correctable`, `Uncorrectable`);
//! under `Retired Pages`, `Single Bit` or `Double Bit`. Case, indentation (blanks or tabs) and
//! the padding before the colon do not matter; an item this module does not know, or a value
//! that is no whole number (`N/A`), is `None`. MXSML's `mxSmlGetTotalEccErrors` counts
//! `sramCE`, `sramUE`, `dramCE`, `dramUE` and `retiredPage`; the capture prints two of them, so
//! the others' spellings here (`DRAM Uncorrectable`, …) follow the printed ones' pattern and
//! are UNMEASURED: an output that spells them otherwise leaves them `None`, never 0.
//!
//! A text with no GPU block is not this output ([`CountEccError`]); a blank one is an empty
//! list.

use accel_backend::text;
use accel_core::busid::BusId;

/// The ECC counts of every GPU.
pub const COUNT_ECC_ARGV: &[&str] = &["mx-smi", "--count-ecc"];

/// Why a text is not `mx-smi --count-ecc`'s output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CountEccError {
    /// Something was printed, but no `GPU#<n>` block.
    #[error("mx-smi --count-ecc: no GPU block in the output (first line: {first_line:?})")]
    NoGpuBlock { first_line: String },
}

/// One GPU's block, each count as printed (`None`: not printed, or no whole number).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EccCounts {
    /// The tool's ordinal (`GPU#1`).
    pub gpu: Option<u32>,
    pub bus_id: Option<BusId>,
    pub sram_correctable: Option<u64>,
    pub sram_uncorrectable: Option<u64>,
    pub dram_correctable: Option<u64>,
    /// The count spec/metax.md §6 reads (MXSML's `DramUE`): above 0, the GPU is unhealthy.
    pub dram_uncorrectable: Option<u64>,
    /// `Retired Pages` / `Single Bit ECC`.
    pub retired_single_bit: Option<u64>,
    /// `Retired Pages` / `Double Bit ECC`.
    pub retired_double_bit: Option<u64>,
}

/// The sections items are read under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Errors,
    Retired,
    Other,
}

fn section(heading: &str) -> Section {
    let lower = heading.to_ascii_lowercase();
    if lower.contains("ecc error") {
        Section::Errors
    } else if lower.contains("retired") {
        Section::Retired
    } else {
        Section::Other
    }
}

/// The ordinal and bus id of a `GPU#<n> <model> <bus id>` header line.
fn header(line: &str) -> Option<(Option<u32>, Option<BusId>)> {
    let rest = line.strip_prefix("GPU#")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let gpu = digits.parse().ok();
    let bus_id = rest
        .split_whitespace()
        .find_map(|word| (word.contains(':') && word.contains('.')).then(|| word.parse().ok())?);
    (gpu.is_some() || bus_id.is_some()).then_some((gpu, bus_id))
}

/// Stores one item's value in the field its section and words name.
fn store(counts: &mut EccCounts, section: Section, label: &str, value: Option<u64>) {
    let lower = label.to_ascii_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    let has = |w: &str| words.contains(&w);
    let field = match section {
        Section::Errors => {
            let uncorrectable = has("uncorrectable");
            let correctable = has("correctable");
            match (has("sram"), has("dram"), uncorrectable, correctable) {
                (true, false, true, _) => Some(&mut counts.sram_uncorrectable),
                (true, false, false, true) => Some(&mut counts.sram_correctable),
                (false, true, true, _) => Some(&mut counts.dram_uncorrectable),
                (false, true, false, true) => Some(&mut counts.dram_correctable),
                _ => None,
            }
        }
        Section::Retired if has("bit") && has("single") => Some(&mut counts.retired_single_bit),
        Section::Retired if has("bit") && has("double") => Some(&mut counts.retired_double_bit),
        _ => None,
    };
    if let Some(field) = field {
        *field = value;
    }
}

/// Reads `mx-smi --count-ecc`: the GPU blocks in printed order.
pub fn parse_count_ecc(text: &str) -> Result<Vec<EccCounts>, CountEccError> {
    let cleaned = text::clean(text);
    let mut blocks: Vec<EccCounts> = Vec::new();
    let mut current = Section::Other;
    for line in cleaned.lines().map(str::trim) {
        if let Some((gpu, bus_id)) = header(line) {
            blocks.push(EccCounts {
                gpu,
                bus_id,
                ..EccCounts::default()
            });
            current = Section::Other;
            continue;
        }
        let Some(block) = blocks.last_mut() else {
            continue;
        };
        match line.split_once(':') {
            Some((label, value)) => store(block, current, label.trim(), text::whole(value)),
            None if !line.is_empty() => current = section(line),
            None => {}
        }
    }
    if blocks.is_empty() && !cleaned.trim().is_empty() {
        return Err(CountEccError::NoGpuBlock {
            first_line: cleaned
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .chars()
                .take(80)
                .collect(),
        });
    }
    Ok(blocks)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURE: &str = include_str!(
        "../../../testdata/captures/metax/mx-smi/kcover__8x-c500-mx-smi2.2.9-count-ecc-excerpt.txt"
    );

    #[test]
    fn the_capture_prints_sram_correctable_and_retired_double_bit_pages() {
        let blocks = parse_count_ecc(CAPTURE).unwrap();
        assert_eq!(
            blocks,
            [EccCounts {
                gpu: Some(0),
                bus_id: Some("0000:08:00.0".parse().unwrap()),
                sram_correctable: Some(0),
                retired_double_bit: Some(0),
                ..EccCounts::default()
            }]
        );
    }

    /// The shape of BaizeAI/kcover's test literal (a third block indented with tabs, retired
    /// pages above 0), with the MXSML counters the capture does not print spelled after the
    /// printed ones; a value that is no whole number is none, an unknown item is ignored.
    #[test]
    fn items_are_read_by_section_and_words_whatever_the_indentation() {
        let text = "Attached GPUs : 3\n\
GPU#0  MXC500  0000:08:00.0\n    ECC Errors\n        SRAM Correctable   : 0\n\
        SRAM Uncorrectable : 1\n        DRAM Correctable : 3\n        DRAM Uncorrectable : 2\n\
    Retired Pages\n        Single Bit ECC : 5\n        Double Bit ECC : 4\n\n\
GPU#1  MXC500  0000:09:00.0\n\tECC Errors\n\t\tdram uncorrectable\t: N/A\n\t\tHBM Parity : 9\n\
\tRetired Pages\n\t\tDouble Bit ECC : 1\nEnd of Log\n";
        let blocks = parse_count_ecc(text).unwrap();
        assert_eq!(blocks.len(), 2);
        assert_eq!(
            blocks[0],
            EccCounts {
                gpu: Some(0),
                bus_id: Some("0000:08:00.0".parse().unwrap()),
                sram_correctable: Some(0),
                sram_uncorrectable: Some(1),
                dram_correctable: Some(3),
                dram_uncorrectable: Some(2),
                retired_single_bit: Some(5),
                retired_double_bit: Some(4),
            }
        );
        assert_eq!(blocks[1].gpu, Some(1));
        assert_eq!(blocks[1].dram_uncorrectable, None);
        assert_eq!(blocks[1].retired_double_bit, Some(1));
    }

    /// A `Double Bit ECC` item outside `Retired Pages`, or a counter before any GPU block, is
    /// not read as one.
    #[test]
    fn an_item_counts_only_in_its_section_and_block() {
        let text = "DRAM Uncorrectable : 7\nGPU#0  MXC500  0000:08:00.0\n    Double Bit ECC : 3\n    ECC Errors\n        Double Bit ECC : 3\n";
        let blocks = parse_count_ecc(text).unwrap();
        assert_eq!(
            blocks,
            [EccCounts {
                gpu: Some(0),
                bus_id: Some("0000:08:00.0".parse().unwrap()),
                ..EccCounts::default()
            }]
        );
    }

    #[test]
    fn a_text_without_a_gpu_block_is_not_this_output_and_blank_is_empty() {
        assert_eq!(parse_count_ecc("  \n"), Ok(Vec::new()));
        assert_eq!(
            parse_count_ecc("Usage: mx-smi [OPTIONS]\nunrecognized option '--count-ecc'\n"),
            Err(CountEccError::NoGpuBlock {
                first_line: "Usage: mx-smi [OPTIONS]".into()
            })
        );
    }
}
