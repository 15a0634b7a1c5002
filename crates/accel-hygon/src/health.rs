//! `hy-smi --healthcheck` (spec/hygon.md addendum H5) and what it means for one DCU, pure: the
//! text in, one reading per card out, each joined to its DCU by bus id. It runs nothing; the
//! detector asks the tool ([`crate::hysmi::HEALTHCHECK`]) and joins the verdict in, doctor words
//! the same readings.
//!
//! **The format.** One line per card, `HCU[<n>]          : Bus Id : <BDF>         : <Status>`
//! (Hygon's own code reads it with `HCU\[(\d+)\]\s*:\s*Bus Id\s*:\s*(\S+)\s*:\s*(\w+)`; the one
//! example is a source comment, no capture on hardware). Read tolerantly: any word before the
//! `[<n>]` (older banners say `DCU`), `Bus Id` without case, the address in any form accel-core
//! parses (it holds colons itself, so the line is not split on them), the status as the words
//! after it. Lines that are not such a line are skipped; output holding none is not this
//! query's answer ([`HealthcheckError`]), and empty output is no card.
//!
//! **The verdict** (spec §7 names only UMC ECC; where it is silent this is our rule): `Healthy`
//! is in service; any other status takes the DCU out of service, as Hygon's own exporter and
//! device plugin count only `Healthy` as healthy (`hcu_health_status`: "1=Healthy, 0=otherwise").
//! Only `Healthy` is known; the reason quotes whatever word the tool printed. A DCU the output
//! does not name, or a query that fails, has no reading: its health check is unknown (never
//! "healthy"), and the daemon keeps the last reading.
//!
//! **Recovery.** The check is the tool's reading of the card now, printed afresh every pass: a
//! reading that clears (`Healthy`) brings the DCU back, and a restarted daemon reads it again.
//! Nothing is kept in `faults.json` (that record is for kernel-log lines).

use accel_core::busid::BusId;

/// One card's line.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthcheckLine {
    /// The tool's card number (`HCU[<n>]`).
    pub card: Option<u32>,
    /// The card's PCI address; `None` when it does not parse.
    pub bus: Option<BusId>,
    /// The status as printed (`Healthy`).
    pub status: String,
}

impl HealthcheckLine {
    /// Whether the tool states the card healthy (`Healthy`, any case).
    pub fn healthy(&self) -> bool {
        self.status.eq_ignore_ascii_case("healthy")
    }

    /// The health reason when the tool states anything but `Healthy`; `None` when healthy.
    pub fn fault(&self, bus: BusId) -> Option<String> {
        (!self.healthy()).then(|| {
            format!(
                "hy-smi --healthcheck reports \"{}\" for DCU {}: drain the node and check the card with `hy-smi --healthcheck` and `hy-smi --showrasinfo`; it returns to service once hy-smi reports it Healthy",
                self.status,
                bus.sysfs()
            )
        })
    }
}

/// Why `hy-smi --healthcheck`'s output gave no reading: text holding no card line (quoted: its
/// first line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hy-smi --healthcheck: no card line in its output (it begins {first_line:?})")]
pub struct HealthcheckError {
    pub first_line: String,
}

/// One `<word>[<n>] : Bus Id : <BDF> : <Status>` line, or `None`.
fn line_of(line: &str) -> Option<HealthcheckLine> {
    let (head, rest) = line.split_once(']')?;
    let (_, number) = head.rsplit_once('[')?;
    let card = number.trim().parse::<u32>().ok();
    let at = rest.to_ascii_lowercase().find("bus id")?;
    let after = rest.get(at + "bus id".len()..)?;
    let after = after.trim_start().strip_prefix(':')?.trim_start();
    let (token, rest) = after.split_once(char::is_whitespace).unwrap_or((after, ""));
    // A line printed without blanks (`…:0000:8a:00.0:Warning`) ends the address at its last
    // colon.
    let (bus, status) = match token.parse::<BusId>() {
        Ok(bus) => (Some(bus), rest.to_string()),
        Err(_) => match token.rsplit_once(':') {
            Some((address, tail)) if address.parse::<BusId>().is_ok() => {
                (address.parse::<BusId>().ok(), format!("{tail} {rest}"))
            }
            _ => (None, rest.to_string()),
        },
    };
    let status = status.trim().trim_start_matches(':').trim();
    if status.is_empty() {
        return None;
    }
    Some(HealthcheckLine {
        card,
        bus,
        status: status.to_string(),
    })
}

/// Reads `hy-smi --healthcheck` (the module's doc says how).
pub fn parse_healthcheck(output: &str) -> Result<Vec<HealthcheckLine>, HealthcheckError> {
    let cleaned = accel_backend::text::clean(output);
    let lines: Vec<HealthcheckLine> = cleaned.lines().filter_map(line_of).collect();
    let first_line = cleaned.lines().map(str::trim).find(|l| !l.is_empty());
    match first_line {
        Some(first) if lines.is_empty() => Err(HealthcheckError {
            first_line: first.chars().take(120).collect(),
        }),
        _ => Ok(lines),
    }
}

/// The line naming the DCU at `bus` (function 0 of its board).
pub fn line_for(lines: &[HealthcheckLine], bus: BusId) -> Option<&HealthcheckLine> {
    lines.iter().find(|l| {
        l.bus
            .is_some_and(|b| BusId { function: 0, ..b } == BusId { function: 0, ..bus })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = "HCU[0]          : Bus Id : 0000:09:00.0         : Healthy\n";

    #[test]
    fn the_source_comments_line_reads_by_its_words() {
        let lines = parse_healthcheck(LINE).unwrap();
        assert_eq!(
            lines,
            [HealthcheckLine {
                card: Some(0),
                bus: Some("0000:09:00.0".parse().unwrap()),
                status: "Healthy".into(),
            }]
        );
        assert!(lines[0].healthy());
        let bus: BusId = "0000:09:00.0".parse().unwrap();
        assert_eq!(lines[0].fault(bus), None);
        assert_eq!(line_for(&lines, bus), Some(&lines[0]));
    }

    /// Any other status takes the card out, quoted as printed; other banners and spacing read
    /// alike; a line without a status is no line.
    #[test]
    fn any_status_but_healthy_is_a_fault_quoted_as_printed() {
        let lines = parse_healthcheck(
            "============ HCU Health Check ============\nDCU[3]:Bus Id:0000:8a:00.0:Warning\nHCU[4] : Bus Id : 0000:8d:00.0 :\n",
        )
        .unwrap();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].card, Some(3));
        let bus: BusId = "0000:8a:00.0".parse().unwrap();
        assert_eq!(
            lines[0].fault(bus).as_deref(),
            Some(
                "hy-smi --healthcheck reports \"Warning\" for DCU 0000:8a:00.0: drain the node and check the card with `hy-smi --healthcheck` and `hy-smi --showrasinfo`; it returns to service once hy-smi reports it Healthy"
            )
        );
    }

    #[test]
    fn text_without_a_card_line_is_no_reading_and_nothing_is_no_card() {
        let e = parse_healthcheck("hy-smi: unrecognized arguments: --healthcheck\n").unwrap_err();
        assert_eq!(
            e.to_string(),
            "hy-smi --healthcheck: no card line in its output (it begins \"hy-smi: unrecognized arguments: --healthcheck\")"
        );
        assert_eq!(parse_healthcheck(""), Ok(Vec::new()));
    }
}
