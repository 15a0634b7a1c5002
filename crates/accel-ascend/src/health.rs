//! `npu-smi info -t health` (spec/ascend.md addendum A5) and what its state means for one chip,
//! pure: the text in, the reading and its verdict out. It runs nothing; the detector asks the
//! tool ([`crate::npusmi::health_argv`]) and joins the verdict in, doctor words the same readings.
//!
//! **The format.** `key : value` lines, labels padded (a TAB and 30 columns in real captures):
//! `Health Status` (V1, HAZARDS 17) or `Health` (the 950's manual, after an `NPU ID` line),
//! `Error Code` (every code on one line, ` %04X` each, or `NA`) and `Error Information` (`NA`, or
//! the first text on the label's line and every further text after an empty line under a blank
//! label, `\t<30 blanks> : <text>`, HAZARDS 18). Labels are looked up without case or padding;
//! a blank-label line continues the field above it, so every code and every text is kept. A
//! label this reader does not know is skipped, and so are lines without a colon (the tool's
//! `Invalid card id.` for a device it lost, HAZARDS 23); output with no health label at all is
//! not this query's answer ([`HealthError`]).
//!
//! **The verdict** (spec §7 names ECC as the only signal; where it is silent this is our rule):
//! `OK` is in service; `Warning` (a minor alarm) only warns — a note, the chip stays in
//! service; `Alarm` (major) and `Critical` take the chip out of service, the reason naming the
//! state, every code and text and what to do. `UNKNOWN` (the device absent or not started),
//! `NA` (an MCU inside a vNPU container), a word this build does not know or no health line are
//! no reading: the chip's health is unknown, never "healthy", and the daemon keeps its last
//! reading.
//!
//! **Recovery.** The state is the driver's own, printed afresh on every pass: a reading that
//! clears (OK or Warning) brings the chip back, a restarted daemon reads the same state again,
//! and an alarm that only a reset clears stands until the chip is reset or the node rebooted.
//! Nothing is kept in `faults.json` (that record is for kernel-log lines, gone once read).

use std::fmt;

use accel_backend::text;

/// The health states `npu-smi` prints (the most severe alarm wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum HealthState {
    /// `OK`.
    Ok,
    /// `Warning`: a minor alarm.
    Warning,
    /// `Alarm`: a major alarm.
    Alarm,
    /// `Critical`.
    Critical,
    /// `UNKNOWN`: the device is absent or not started.
    Unknown,
}

impl HealthState {
    /// The word as `npu-smi` prints it.
    pub fn word(self) -> &'static str {
        match self {
            HealthState::Ok => "OK",
            HealthState::Warning => "Warning",
            HealthState::Alarm => "Alarm",
            HealthState::Critical => "Critical",
            HealthState::Unknown => "UNKNOWN",
        }
    }

    fn from_word(word: &str) -> Option<HealthState> {
        [
            HealthState::Ok,
            HealthState::Warning,
            HealthState::Alarm,
            HealthState::Critical,
            HealthState::Unknown,
        ]
        .into_iter()
        .find(|s| s.word().eq_ignore_ascii_case(word))
    }
}

/// What `npu-smi info -t health` printed for one chip, every field as printed.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChipHealth {
    /// `NPU ID` (the 950 prints it; V1's chip-level answer does not).
    pub npu: Option<u32>,
    /// The state; `None` when the health line is `NA` or a word this build does not know.
    pub state: Option<HealthState>,
    /// The health line's value as printed (`None` when there was none).
    pub word: Option<String>,
    /// Every error code, as printed (`A4025021`); empty for `NA`.
    pub codes: Vec<String>,
    /// Every error text, the continuation lines included, in printed order; empty for `NA`.
    pub texts: Vec<String>,
}

/// Why `npu-smi info -t health`'s output gave no reading: text without a health line at all
/// (quoted: its first line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("npu-smi info -t health: no health line in its output (it begins {first_line:?})")]
pub struct HealthError {
    pub first_line: String,
}

/// The field a line belongs to (a blank label continues the one above).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Field {
    Health,
    Codes,
    Texts,
    Other,
}

/// A label without case, padding or inner runs of blanks.
fn field_of(label: &str) -> Field {
    let words: Vec<String> = label
        .split_whitespace()
        .map(str::to_ascii_lowercase)
        .collect();
    match words.join(" ").as_str() {
        "health" | "health status" => Field::Health,
        "error code" | "error codes" => Field::Codes,
        "error information" | "error info" => Field::Texts,
        _ => Field::Other,
    }
}

/// Reads `npu-smi info -t health …` (the module's doc says how).
pub fn parse_health(output: &str) -> Result<ChipHealth, HealthError> {
    let cleaned = text::clean(output);
    let mut health = ChipHealth::default();
    let mut seen_health = false;
    let mut field = Field::Other;
    for line in cleaned.lines() {
        let Some((label, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let label = label.trim();
        if label.eq_ignore_ascii_case("npu id") {
            health.npu = text::whole(value).and_then(|n| u32::try_from(n).ok());
            field = Field::Other;
            continue;
        }
        if !label.is_empty() {
            field = field_of(label);
        }
        let Some(value) = text::present(value) else {
            if field == Field::Health && !label.is_empty() {
                seen_health = true;
            }
            continue;
        };
        match field {
            Field::Health if !label.is_empty() => {
                seen_health = true;
                health.state = HealthState::from_word(value);
                health.word = Some(value.to_string());
            }
            Field::Codes => health
                .codes
                .extend(value.split_whitespace().map(str::to_string)),
            Field::Texts => health.texts.push(value.to_string()),
            Field::Health | Field::Other => {}
        }
    }
    if !seen_health {
        return Err(HealthError {
            first_line: cleaned
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .chars()
                .take(120)
                .collect(),
        });
    }
    Ok(health)
}

/// What a reading means for the chip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `OK`.
    InService,
    /// `Warning`: a note; the chip stays in service.
    Warns,
    /// `Alarm` or `Critical`: out of service.
    OutOfService,
    /// No state to judge by (`UNKNOWN`, `NA`, a word not known): the last reading stands.
    Unknown,
}

impl ChipHealth {
    /// The verdict of this reading (the module's doc says why).
    pub fn verdict(&self) -> Verdict {
        match self.state {
            Some(HealthState::Ok) => Verdict::InService,
            Some(HealthState::Warning) => Verdict::Warns,
            Some(HealthState::Alarm | HealthState::Critical) => Verdict::OutOfService,
            Some(HealthState::Unknown) | None => Verdict::Unknown,
        }
    }

    /// The codes and texts in one clause: `error codes A B C: text; text` (`no error code` when
    /// none is printed).
    pub fn detail(&self) -> String {
        let codes = match self.codes.len() {
            0 => "no error code".to_string(),
            1 => format!("error code {}", self.codes[0]),
            _ => format!("error codes {}", self.codes.join(" ")),
        };
        if self.texts.is_empty() {
            codes
        } else {
            format!("{codes}: {}", self.texts.join("; "))
        }
    }

    /// The state as printed (`NA` when the line printed a placeholder).
    pub fn printed(&self) -> &str {
        self.word.as_deref().unwrap_or("NA")
    }
}

/// Which chip a reading is about, as `npu-smi` addresses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChipName {
    pub npu: u32,
    pub chip: u32,
}

impl fmt::Display for ChipName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NPU {} chip {}", self.npu, self.chip)
    }
}

/// The health reason of a chip out of service: the state, every code and text, what to do.
pub fn reason(who: ChipName, health: &ChipHealth) -> String {
    format!(
        "npu-smi reports Health {} for {who} ({}): drain the node, look the error codes up in Huawei's fault reference and reset the chip (`npu-smi set -t reset`) or reboot; it returns to service once npu-smi reports it OK or Warning",
        health.printed(),
        health.detail()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALARM: &str = "\tHealth Status                  : Alarm
\tError Code                     : A4025021 8C03A000 8C084E00
\tError Information              : ascend_monitor adda heart beat lost error

\t                               : node type=process-manager, sensor type=General Software, event state=The process start failed or exit abnormally

\t                               : node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.
";

    /// HAZARDS 18: every code and every text, the blank-label lines after empty lines too.
    #[test]
    fn an_alarm_keeps_every_code_and_every_text() {
        let h = parse_health(ALARM).unwrap();
        assert_eq!(h.state, Some(HealthState::Alarm));
        assert_eq!(h.codes, ["A4025021", "8C03A000", "8C084E00"]);
        assert_eq!(
            h.texts,
            [
                "ascend_monitor adda heart beat lost error",
                "node type=process-manager, sensor type=General Software, event state=The process start failed or exit abnormally",
                "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.",
            ]
        );
        assert_eq!(h.verdict(), Verdict::OutOfService);
        assert_eq!(
            reason(ChipName { npu: 0, chip: 0 }, &h),
            "npu-smi reports Health Alarm for NPU 0 chip 0 (error codes A4025021 8C03A000 8C084E00: \
             ascend_monitor adda heart beat lost error; node type=process-manager, sensor type=General \
             Software, event state=The process start failed or exit abnormally; node type=adda, sensor \
             type=Heartbeat Sensor, event state=Heartbeat Lost.): drain the node, look the error codes \
             up in Huawei's fault reference and reset the chip (`npu-smi set -t reset`) or reboot; it \
             returns to service once npu-smi reports it OK or Warning"
        );
    }

    /// HAZARDS 17: `Health Status` (V1) and `Health` after `NPU ID` (the 950), any padding.
    #[test]
    fn both_labels_and_any_padding_read_alike() {
        let v1 = parse_health(
            "\tHealth Status                  : OK\n\tError Code                     : NA\n\tError Information              : NA\n",
        )
        .unwrap();
        assert_eq!(v1.state, Some(HealthState::Ok));
        assert!(v1.codes.is_empty() && v1.texts.is_empty());
        assert_eq!(v1.npu, None);
        let v2 = parse_health(
            "        NPU ID                         : 0\n        Health                         : OK\n        Error Code                     : NA\n        Error Information              : NA\n",
        )
        .unwrap();
        assert_eq!(v2.npu, Some(0));
        assert_eq!(v2.state, Some(HealthState::Ok));
        assert_eq!(
            parse_health("Health : critical\nError Code : 80E18000\n")
                .unwrap()
                .verdict(),
            Verdict::OutOfService
        );
    }

    #[test]
    fn each_state_has_its_verdict() {
        let verdict =
            |word: &str| parse_health(&format!("Health Status : {word}\n")).map(|h| h.verdict());
        assert_eq!(verdict("OK"), Ok(Verdict::InService));
        assert_eq!(verdict("Warning"), Ok(Verdict::Warns));
        assert_eq!(verdict("Alarm"), Ok(Verdict::OutOfService));
        assert_eq!(verdict("Critical"), Ok(Verdict::OutOfService));
        assert_eq!(verdict("UNKNOWN"), Ok(Verdict::Unknown));
        assert_eq!(verdict("NA"), Ok(Verdict::Unknown));
        assert_eq!(verdict("Degraded"), Ok(Verdict::Unknown));
    }

    /// A failed lookup is a text like any other; its colon stays in the value.
    #[test]
    fn a_text_holding_a_colon_is_kept_whole() {
        let h = parse_health(
            "Health Status : Warning\nError Code : 8C03A000\nError Information : Failed to get error information for error code : 0x8C03A000\n",
        )
        .unwrap();
        assert_eq!(
            h.texts,
            ["Failed to get error information for error code : 0x8C03A000"]
        );
        assert_eq!(
            h.detail(),
            "error code 8C03A000: Failed to get error information for error code : 0x8C03A000"
        );
    }

    /// HAZARDS 23: a lost device answers an invalid id, not a health line.
    #[test]
    fn text_without_a_health_line_is_no_reading() {
        let e = parse_health("Invalid card id.\nError parameter of -i\nUsage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n")
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "npu-smi info -t health: no health line in its output (it begins \"Invalid card id.\")"
        );
        assert!(parse_health("").is_err());
    }
}
