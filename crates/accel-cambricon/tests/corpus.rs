//! The captured Cambricon corpus: every file in `../shared/fixtures/cambricon/` read by the
//! parser it is for, with what it must yield. The folder missing fails; a file on disk without
//! an expectation here fails; an expectation without its file fails.

use std::path::PathBuf;

use accel_cambricon::cnmon::{self, CnmonTable};

fn fixtures() -> PathBuf {
    accel_testkit::shared_fixtures("cambricon")
}

fn table(name: &str) -> CnmonTable {
    let path = fixtures().join("cnmon").join(name);
    let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
    cnmon::parse_table(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

type Expectation = fn(&CnmonTable);

const V5_1X: &str = "llamafactory-6429__1x-mlu370-x4-cnmon-v5.10.10.txt";
const V4_3X: &str = "paddledocs__3x-mlu370-x4-cnmon-v4.20.11-inited-vmemory.txt";
const V5_8X_REDACTED: &str = "paddlenlp__8x-mluxxx-redacted-cnmon-v5.10.31-mode-full.txt";

fn expectations() -> Vec<(&'static str, Expectation)> {
    vec![
        (V5_1X, |t| {
            assert_eq!(t.cnmon_version.as_deref(), Some("5.10.10"));
            assert_eq!(t.driver_version.as_deref(), Some("5.10.10"));
            assert_eq!(t.cards.len(), 1, "the process table is not read");
            let c = &t.cards[0];
            assert_eq!(c.card, Some(0));
            assert_eq!(c.name.as_deref(), Some("MLU370-X4"));
            assert_eq!(c.firmware.as_deref(), Some("v1.1.6"));
            assert_eq!(c.bus_id.map(|b| b.sysfs()).as_deref(), Some("0000:34:00.0"));
            assert_eq!(
                (c.memory_used_mib, c.memory_total_mib),
                (Some(0), Some(23308))
            );
            assert_eq!(c.mode, None, "5.10.10 prints SR-IOV there, not Mode");
            // Item 2: Ecc-Error N/A on this board, kept as printed and no count.
            assert_eq!(
                (c.ecc_error.as_deref(), c.ecc_errors()),
                (Some("N/A"), None)
            );
        }),
        (V4_3X, |t| {
            // HAZARDS.md item 1: the old header, a per-card Driver column, no Bus-Id.
            assert_eq!(t.cnmon_version.as_deref(), Some("4.20.11"));
            assert_eq!(t.driver_version.as_deref(), Some("4.20.11"));
            assert_eq!(t.cards.len(), 3);
            for (i, c) in t.cards.iter().enumerate() {
                assert_eq!(c.card, Some(i as u32));
                assert_eq!(c.bus_id, None);
                assert_eq!(c.driver_version.as_deref(), Some("4.20.11"));
                // Item 4 and 6: a blank after the slash; the total is not a round number.
                assert_eq!(c.memory_total_mib, Some(23308), "not the vMemory total");
                assert_eq!(c.ecc_error.as_deref(), Some("N/A"), "item 2");
            }
        }),
        (V5_8X_REDACTED, |t| {
            assert_eq!(t.driver_version.as_deref(), Some("5.10.31"));
            assert_eq!(t.cards.len(), 8);
            // HAZARDS.md item 5: redactions are unknown, never a value.
            for c in &t.cards {
                assert_eq!(c.name, None);
                assert_eq!(c.memory_total_mib, None);
                assert_eq!(c.memory_used_mib, Some(0));
                assert_eq!(c.mode.as_deref(), Some("FULL"));
                // Item 2: Ecc-Error `0` on this board, a count.
                assert_eq!(c.ecc_errors(), Some(0));
            }
            assert_eq!(
                t.cards[7].bus_id.map(|b| b.sysfs()).as_deref(),
                Some("0000:d3:00.0"),
                "upper-case hex (item 4)"
            );
        }),
    ]
}

#[test]
fn every_capture_is_read_as_expected() {
    let expectations = expectations();
    accel_testkit::assert_folder_covered(
        &fixtures().join("cnmon"),
        expectations.iter().map(|(n, _)| n),
    );
    accel_testkit::assert_same_files(
        "cambricon",
        accel_testkit::file_names(&fixtures()),
        ["HAZARDS.md", "SOURCES.md", "cnmon"],
    );
    for (name, check) in expectations {
        check(&table(name));
    }
}

/// A record is a card when it names its card number, its model or its bus id: 4.x prints no
/// bus id, so a card whose number is a placeholder is kept by its name alone.
#[test]
fn a_card_without_its_number_is_kept_by_its_name() {
    let path = fixtures().join("cnmon").join(V4_3X);
    let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
    let masked = text.replace("| 1     /   MLU370-X4", "| -     /   MLU370-X4");
    assert_ne!(masked, text);
    let t = cnmon::parse_table(&masked).unwrap();
    let cards: Vec<_> = t
        .cards
        .iter()
        .map(|c| (c.card, c.name.as_deref()))
        .collect();
    assert_eq!(
        cards,
        [
            (Some(0), Some("MLU370-X4")),
            (None, Some("MLU370-X4")),
            (Some(2), Some("MLU370-X4"))
        ]
    );
}

#[test]
fn other_text_is_not_a_card_table() {
    let e = cnmon::parse_table("cnmon: command not found\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "cnmon: no card table in the output (first line: \"cnmon: command not found\")"
    );
}

/// Issue 44 item 8: the `Processes:` table under the card table, read in every capture (each
/// prints one, idle: `Some([])`, never `None`, which means no table was printed), with the
/// instance column `VF` (4.x) or `MI` (5.x) of HAZARDS.md item 3.
#[test]
fn every_process_table_is_read_as_expected() {
    use accel_cambricon::procs;
    let expected = [(V5_1X, "MI"), (V4_3X, "VF"), (V5_8X_REDACTED, "MI")];
    accel_testkit::assert_folder_covered(
        &fixtures().join("cnmon"),
        expected.iter().map(|(n, _)| n),
    );
    for (name, instance) in expected {
        let path = fixtures().join("cnmon").join(name);
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        assert!(
            text.contains(&format!("Card  {instance}  PID")),
            "{name}: the {instance} layout"
        );
        assert_eq!(procs::parse_processes(&text), Some(Vec::new()), "{name}");
    }
}
