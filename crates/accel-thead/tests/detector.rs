//! The detector over the recorded T-Head hosts (`testdata/hosts/thead-*`): sixteen whole
//! cards, a mixed node with two cards in MIG mode, a driver that is not loaded, another
//! vendor's host, and copies of the 16-PPU host with one source hanging, missing or lacking a
//! card's UUID (which shifts every later ordinal, and the minor proof catches it).

use std::path::Path;
use std::time::Duration;

use accel_backend::Deadlines;
use accel_core::inventory::{DetectError, Grantable, MigMode};
use accel_host::{FsHost, RecordedCommands};
use accel_testkit::failing_tool::{ToolFailure, copy_with_failing_tool, fail_commands};
use accel_thead::detector::{self, DetectOptions, Note};
use accel_thead::devnode;

fn detect_in(dir: &Path, options: DetectOptions) -> accel_core::Detection {
    let files = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(dir).unwrap();
    detector::detect(&files, &commands, options)
}

fn detect(name: &str) -> accel_core::ManufacturerInventory {
    detect_in(
        &accel_testkit::recorded_host(name),
        DetectOptions::default(),
    )
    .unwrap()
}

#[test]
fn sixteen_whole_cards_by_tool_index_with_their_minors() {
    let section = detect("thead-16x-zw810e");
    assert_eq!(section.accelerators.len(), 16);
    let a = &section.accelerators[0];
    assert_eq!(
        a.uuid.as_deref(),
        Some("GPU-019e2226-4211-0208-0000-000000ab261d")
    );
    assert_eq!(a.bus_id.unwrap().sysfs(), "0000:a8:00.0");
    assert_eq!((a.minor_number, a.numa_node), (Some(1), Some(4)));
    let last = &section.accelerators[15];
    assert_eq!((last.index, last.minor_number), (15, Some(16)));
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.grantable == Grantable::Whole && a.mig_mode == Some(MigMode::Disabled))
    );
    assert_eq!(section.management_version.as_deref(), Some("1.17"));
    assert!(section.notes.is_empty(), "{:?}", section.notes);
    // Every fact came from the table itself (two-digit indexes too), not a fallback.
    let dir = accel_testkit::recorded_host("thead-16x-zw810e");
    let text = std::fs::read_to_string(dir.join("commands/table/stdout")).unwrap();
    let table = accel_thead::smi::parse_table(&text).unwrap();
    let indexes: Vec<Option<u32>> = table.cards.iter().map(|c| c.index).collect();
    assert_eq!(indexes, (0..16).map(Some).collect::<Vec<_>>());
    assert!(
        table
            .cards
            .iter()
            .all(|c| c.name.as_deref() == Some("PPU-ZW810E"))
    );
}

/// A profile as offered: name, id, placements `(start, size)`, memory.
type Offered<'a> = (&'a str, u32, Vec<(u32, u32)>, Option<u64>);

#[test]
fn a_mixed_node_serves_mig_cards_as_partitions_only() {
    let section = detect("thead-16x-zw810e-mig2");
    let modes: Vec<Grantable> = section.accelerators.iter().map(|a| a.grantable).collect();
    assert_eq!(modes.iter().filter(|g| **g == Grantable::Whole).count(), 14);
    assert_eq!(modes[14], Grantable::PartitionsOnly);
    assert_eq!(modes[15], Grantable::PartitionsOnly);
    let last = &section.accelerators[15];
    assert_eq!(last.mig_mode, Some(MigMode::Enabled));
    // Its profiles come from `ppu-smi mig -lgip`/`-lgipp`, published with the dot; the
    // graphics variant is no resource-name segment and is left out.
    for card in [&section.accelerators[14], last] {
        let offered: Vec<Offered<'_>> = card
            .partition_profiles
            .iter()
            .map(|p| {
                (
                    p.name.as_str(),
                    p.id,
                    p.placements.iter().map(|x| (x.start, x.size)).collect(),
                    p.memory_mib,
                )
            })
            .collect();
        assert_eq!(
            offered,
            [
                ("8g.96gb", 3, vec![(0, 8)], Some(98_304)),
                ("4g.48gb", 5, vec![(0, 4), (4, 4)], Some(49_152)),
            ]
        );
    }
    assert!(
        section.accelerators[..14]
            .iter()
            .all(|a| a.partition_profiles.is_empty())
    );
    // No instance is made yet (the replay's state is empty).
    assert!(last.mig_devices.is_empty());
    // A pending switch changes nothing before a restart.
    assert_eq!(section.accelerators[13].grantable, Grantable::Whole);
    let pending = Note::PendingMode {
        ordinal: 13,
        current: Some(MigMode::Disabled),
        pending: MigMode::Enabled,
    };
    assert!(
        section.notes.contains(&pending.to_string()),
        "{:?}",
        section.notes
    );
}

#[test]
fn a_driver_that_is_not_loaded_lists_nothing_and_says_why() {
    let section = detect("thead-driver-not-loaded");
    assert!(section.accelerators.is_empty());
    let note = Note::UnlistedFunctions {
        count: 2,
        why: "ppu-smi: the alixpu driver is not loaded (init HGML error: driver is not loaded)"
            .into(),
    };
    assert_eq!(section.notes, [note.to_string()]);
}

#[test]
fn another_vendors_host_is_not_a_ppu_host() {
    for name in ["amd-8x-mi300x", "hgx-h100-8gpu", "no-driver"] {
        let section = detect(name);
        assert!(section.accelerators.is_empty(), "{name}");
        assert!(section.notes.is_empty(), "{name}: {:?}", section.notes);
    }
}

fn copy_of(name: &str) -> tempfile::TempDir {
    accel_testkit::copy_recorded(name)
}

#[test]
fn a_mig_card_without_placements_offers_nothing_and_says_so() {
    let dir = copy_of("thead-16x-zw810e-mig2");
    std::fs::write(
        dir.path().join("commands/mig-lgipp/stdout"),
        "PPU 15 profile ID 3 placements: {0}:8\n",
    )
    .unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert!(section.accelerators[14].partition_profiles.is_empty());
    let names: Vec<&str> = section.accelerators[15]
        .partition_profiles
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["8g.96gb"]);
    let uuid = section.accelerators[14].uuid.clone().unwrap();
    for want in [
        format!(
            "accelerator 14 ({uuid}): MIG profile 8g.96gb (id 3) has no legal placement in ppu-smi mig -lgipp, left out"
        ),
        Note::NoProfiles {
            ordinal: 14,
            uuid: uuid.clone(),
        }
        .to_string(),
        format!(
            "accelerator 15 ({}): MIG profile 4g.48gb (id 5) has no legal placement in ppu-smi mig -lgipp, left out",
            section.accelerators[15].uuid.as_deref().unwrap()
        ),
    ] {
        assert!(section.notes.contains(&want), "{want}\n{:?}", section.notes);
    }
}

#[test]
fn a_profile_listed_twice_with_differing_figures_is_withheld() {
    let dir = copy_of("thead-16x-zw810e-mig2");
    let path = dir.path().join("commands/mig-lgip/stdout");
    let text = std::fs::read_to_string(&path).unwrap();
    // PPU 15 lists its 4g48gb a second time under another id.
    let doubled = text.replace(
        "| 15   MIG 4g48gb+gfx         6",
        "| 15   MIG 4g48gb             6",
    );
    assert_ne!(doubled, text);
    std::fs::write(&path, doubled).unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    let names: Vec<&str> = section.accelerators[15]
        .partition_profiles
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["8g.96gb"]);
    // PPU 14 lists it once, PPU 15 no longer offers it: the group disagrees, so neither does.
    let names: Vec<&str> = section.accelerators[14]
        .partition_profiles
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(names, ["8g.96gb"]);
    for note in [
        Note::DuplicateProfile {
            ordinal: 15,
            name: "4g.48gb".into(),
        },
        Note::GroupDisagrees {
            product: "PPU-ZW810E".into(),
            name: "4g.48gb".into(),
        },
    ] {
        assert!(
            section.notes.contains(&note.to_string()),
            "{note}: {:?}",
            section.notes
        );
    }
}

/// Spec §1.2 step 12: the cards of one group (name and memory) must agree on a profile; one
/// listed with other figures on one card is offered by none of them (as Hygon's §6.1).
#[test]
fn a_profile_the_cards_of_a_group_disagree_on_is_withheld_from_all_of_them() {
    let dir = copy_of("thead-16x-zw810e-mig2");
    let path = dir.path().join("commands/mig-lgipp/stdout");
    let text = std::fs::read_to_string(&path).unwrap();
    // PPU 14 offers 4g48gb at one placement only; PPU 15 at two.
    let one_place = text.replace(
        "PPU 14 profile ID 5 placements: {0,4}:4",
        "PPU 14 profile ID 5 placements: {0}:4",
    );
    assert_ne!(one_place, text);
    std::fs::write(&path, one_place).unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(
        section.accelerators[14].product,
        section.accelerators[15].product
    );
    for card in [14, 15] {
        let names: Vec<&str> = section.accelerators[card]
            .partition_profiles
            .iter()
            .map(|p| p.name.as_str())
            .collect();
        assert_eq!(names, ["8g.96gb"], "PPU {card}");
    }
    let note = Note::GroupDisagrees {
        product: "PPU-ZW810E".into(),
        name: "4g.48gb".into(),
    };
    assert_eq!(
        note.to_string(),
        "the PPU-ZW810E PPUs do not agree on MIG profile 4g.48gb, so no card of them offers it"
    );
    assert!(
        section.notes.contains(&note.to_string()),
        "{:?}",
        section.notes
    );
}

#[test]
fn no_mig_listing_is_asked_of_a_node_with_no_card_in_mig_mode() {
    // The whole-card host records no `ppu-smi mig` answer: a call would be a failed replay
    // and a note.
    let section = detect("thead-16x-zw810e");
    assert!(
        section.notes.iter().all(|n| !n.contains("mig")),
        "{:?}",
        section.notes
    );
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.partition_profiles.is_empty())
    );
}

#[test]
fn a_hanging_table_is_an_unmeasured_pass() {
    let dir = copy_of("thead-16x-zw810e");
    std::fs::write(dir.path().join("commands/table/delay-ms"), "5000\n").unwrap();
    let options = DetectOptions {
        deadlines: Deadlines {
            per_query: Duration::from_millis(200),
            snapshot: Duration::from_millis(400),
        },
        ..DetectOptions::default()
    };
    let err = detect_in(dir.path(), options).unwrap_err();
    let DetectError::NotMeasured { reason, .. } = err else {
        panic!("{err:?}");
    };
    assert!(reason.starts_with("ppu-smi: no answer within"), "{reason}");
}

#[test]
fn without_the_query_no_card_has_a_minor_and_each_says_so() {
    let dir = copy_of("thead-16x-zw810e");
    std::fs::remove_dir_all(dir.path().join("commands/query")).unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(section.accelerators.len(), 16);
    assert!(
        section
            .accelerators
            .iter()
            .all(|a| a.minor_number.is_none())
    );
    let first = Note::NoMinor {
        ordinal: 0,
        uuid: "GPU-019e2226-4211-0208-0000-000000ab261d".into(),
    };
    assert!(
        section.notes.contains(&first.to_string()),
        "{:?}",
        section.notes
    );
    // The responder's proof then refuses the card by name.
    let host = FsHost::new(dir.path().join("root"));
    let a = &section.accelerators[0];
    assert_eq!(
        devnode::prove_card(&host, a.uuid.as_deref().unwrap(), a.index, a.minor_number)
            .unwrap_err()
            .to_string(),
        "card GPU-019e2226-4211-0208-0000-000000ab261d: no recorded minor number to prove its device node addresses it: fail closed"
    );
}

/// Drops card 3's UUID from `-L` and `-q`.
fn without_uuid_of_card_3(dir: &Path) {
    let uuid = "GPU-019e2226-8261-0222-0000-0000a0490d60";
    for file in ["commands/list/stdout", "commands/query/stdout"] {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace(uuid, "N/A")).unwrap();
    }
}

#[test]
fn a_card_without_uuid_is_skipped_and_the_shifted_ordinals_fail_their_proof() {
    let dir = copy_of("thead-16x-zw810e");
    without_uuid_of_card_3(dir.path());
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(section.accelerators.len(), 15);
    let skipped = Note::NoUuid {
        tool_index: 3,
        bus: "0000:aa:00.0".into(),
    };
    assert!(
        section.notes.contains(&skipped.to_string()),
        "{:?}",
        section.notes
    );
    let host = FsHost::new(dir.path().join("root"));
    let proof = |i: usize| {
        let a = &section.accelerators[i];
        devnode::prove_card(&host, a.uuid.as_deref().unwrap(), a.index, a.minor_number)
    };
    // Ordinals 0–2 are unchanged; ordinal 3 is the tool's card 4 (minor 5), whose node
    // /dev/alixpu_ppu3 carries the skipped card's minor 4.
    assert_eq!(proof(2).unwrap(), "/dev/alixpu_ppu2");
    assert_eq!(
        proof(3).unwrap_err().to_string(),
        "card GPU-019e2226-84b1-061e-0000-000020cc396a: device node \"/dev/alixpu_ppu3\" carries minor 4, want 5: fail closed"
    );
}

#[test]
fn without_the_list_the_query_names_the_cards() {
    let dir = copy_of("thead-16x-zw810e");
    std::fs::remove_dir_all(dir.path().join("commands/list")).unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    assert_eq!(section.accelerators.len(), 16);
    assert_eq!(
        section.accelerators[1].uuid.as_deref(),
        Some("GPU-019e2226-84c1-0200-0000-0000c020e701")
    );
    assert!(
        section.notes.iter().any(|n| n.starts_with("ppu-smi -L: ")),
        "{:?}",
        section.notes
    );
}

#[test]
fn an_uncorrected_ecc_error_makes_the_card_unhealthy() {
    let dir = copy_of("thead-16x-zw810e");
    let path = dir.path().join("commands/table/stdout");
    let text = std::fs::read_to_string(&path).unwrap();
    // Card 0's `Volatile Uncorr. ECC` cell.
    let first = "| 00000000:A8:00.0     |                    0 |";
    assert!(text.contains(first));
    let text = text.replacen(first, "| 00000000:A8:00.0     |                    2 |", 1);
    std::fs::write(&path, text).unwrap();
    let section = detect_in(dir.path(), DetectOptions::default()).unwrap();
    let a = &section.accelerators[0];
    assert!(!a.healthy);
    assert_eq!(a.health_reasons, ["2 uncorrectable volatile ECC errors"]);
    assert!(section.accelerators[1].healthy);
}

#[test]
fn the_sampler_reads_the_table_named_by_the_lists_uuids() {
    use accel_backend::usage::UsageSampler;
    let dir = accel_testkit::recorded_host("thead-16x-zw810e");
    let commands = RecordedCommands::load(&dir).unwrap();
    let sample = accel_thead::usage::PpuSmiSampler
        .sample(&commands, Duration::from_secs(5))
        .unwrap();
    assert_eq!(sample.accelerators.len(), 16);
    let a = &sample.accelerators[0];
    assert_eq!(a.uuid, "GPU-019e2226-4211-0208-0000-000000ab261d");
    assert_eq!(
        (a.memory_used_mib, a.memory_total_mib),
        (Some(91_349), Some(98_304))
    );
    assert_eq!(
        (a.temperature_c, a.power_draw_w, a.power_limit_w),
        (Some(34.0), Some(93.0), Some(400.0))
    );
    assert_eq!(a.utilization_percent, Some(0.0));
    let gone = copy_of("thead-16x-zw810e");
    std::fs::remove_dir_all(gone.path().join("commands/table")).unwrap();
    let err = accel_thead::usage::PpuSmiSampler
        .sample(
            &RecordedCommands::load(gone.path()).unwrap(),
            Duration::from_secs(5),
        )
        .unwrap_err();
    assert!(
        matches!(err, accel_backend::usage::SampleError::NoTool(_)),
        "{err}"
    );
}

/// Deadlines short enough that a hanging tool costs the test a fraction of a second.
fn short() -> DetectOptions {
    DetectOptions {
        deadlines: Deadlines {
            per_query: Duration::from_millis(300),
            snapshot: Duration::from_millis(600),
        },
        ..DetectOptions::default()
    }
}

/// What the reason says of each failure (its `RunFailure` or parse error, naming the argv).
fn says(failure: ToolFailure) -> &'static str {
    match failure {
        ToolFailure::Missing => "ppu-smi is not installed",
        ToolFailure::Hangs => "ppu-smi: no answer within",
        ToolFailure::ExitsNonZero => "ppu-smi: exited with status 1: Error: failed",
        ToolFailure::Unreadable => "ppu-smi: not its output",
    }
}

/// Issue 42 item 3: the UUID comes only from `ppu-smi`, so on a host whose alixpu driver is
/// there a tool that is missing, hangs, exits non-zero or prints what cannot be read is a pass
/// not measured — never zero PPUs, never PPUs without an identity.
#[test]
fn a_failing_ppu_smi_is_a_pass_not_measured_whichever_way_it_fails() {
    for failure in ToolFailure::ALL {
        let dir = copy_with_failing_tool("thead-16x-zw810e", "ppu-smi", failure);
        let detection = detect_in(dir.path(), short());
        let Err(DetectError::NotMeasured { reason, .. }) = detection else {
            panic!("{failure}: {detection:?}");
        };
        assert!(reason.starts_with(says(failure)), "{failure}: {reason}");
        assert!(!reason.contains('\n'), "{failure}: one line: {reason}");
    }
}

/// The table enumerates, `-L` (else `-q`) names: with both identity queries failing, the
/// cards the table lists have no UUID, and the pass is not measured rather than every card
/// skipped.
#[test]
fn failing_identity_queries_are_a_pass_not_measured_not_cards_skipped() {
    for failure in ToolFailure::ALL {
        let dir = copy_of("thead-16x-zw810e");
        fail_commands(dir.path(), "ppu-smi", failure, |argv| {
            matches!(argv.get(1).map(String::as_str), Some("-L" | "-q"))
        });
        let detection = detect_in(dir.path(), short());
        let Err(DetectError::NotMeasured { reason, .. }) = detection else {
            panic!("{failure}: {detection:?}");
        };
        assert!(reason.starts_with("ppu-smi -L: "), "{failure}: {reason}");
        assert!(!reason.contains('\n'), "{failure}: one line: {reason}");
    }
}

/// A table listing fewer cards than the kernel's `/dev/alixpu_ppu<N>` nodes cannot be read as
/// the host's PPUs.
#[test]
fn a_table_of_fewer_cards_than_the_kernel_shows_is_a_pass_not_measured() {
    let dir = copy_of("thead-16x-zw810e");
    std::fs::remove_file(dir.path().join("root/dev/alixpu_ppu15")).unwrap();
    std::fs::remove_file(dir.path().join("root/dev/alixpu_ppu14")).unwrap();
    assert_eq!(
        detect_in(dir.path(), DetectOptions::default())
            .unwrap()
            .accelerators
            .len(),
        16,
        "more cards than nodes is the node proof's business, not a failed pass"
    );
    let dir = copy_of("thead-16x-zw810e");
    let path = dir.path().join("commands/table/stdout");
    let text = std::fs::read_to_string(&path).unwrap();
    // The banner and the header, down to its `+===` rule: a well-formed table of no card.
    let end = text.find("+===").unwrap();
    let end = end + text[end..].find('\n').unwrap() + 1;
    let kept = &text[..end];
    std::fs::write(&path, kept).unwrap();
    let detection = detect_in(dir.path(), DetectOptions::default());
    let Err(DetectError::NotMeasured { reason, .. }) = detection else {
        panic!("{detection:?}");
    };
    assert!(
        reason.starts_with(
            "ppu-smi: lists 0 card(s), but the kernel shows 16 /dev/alixpu_ppu<N> node(s)"
        ),
        "{reason}"
    );
}

/// The recorded host whose PPU 3 reads 2 in `Volatile Uncorr. ECC` (issue 43).
const SICK_HOST: &str = "thead-16x-zw810e-ppu3-ecc-uncorrected";

/// Issue 43: on the recorded sick host, ordinal 3 is out of service by its uncorrected volatile
/// ECC count (spec §7), the other fifteen are in.
#[test]
fn the_sick_host_takes_ppu_3_out_and_no_other() {
    let section = detect(SICK_HOST);
    let sick: Vec<(u32, Option<&str>, Vec<String>)> = section
        .accelerators
        .iter()
        .filter(|a| !a.healthy)
        .map(|a| (a.index, a.uuid.as_deref(), a.health_reasons.clone()))
        .collect();
    assert_eq!(
        sick,
        [(
            3,
            Some("GPU-019e2226-8261-0222-0000-0000a0490d60"),
            vec!["2 uncorrectable volatile ECC errors".to_string()]
        )]
    );
    assert_eq!(section.accelerators.len(), 16);
}

/// A count that clears (`0`, after a reset) brings the card back; a cell that does not read
/// (`N/A`) is no reading — never "healthy": the daemon keeps the last one, so the card stays
/// out until the table says otherwise.
#[test]
fn an_unreadable_ecc_cell_keeps_the_last_reading_and_a_cleared_one_brings_the_card_back() {
    let sick = detect(SICK_HOST);
    let dir = copy_of(SICK_HOST);
    let path = dir.path().join("commands/table/stdout");
    let text = std::fs::read_to_string(&path).unwrap();
    let cell = "| 00000000:AA:00.0     |                    2 |";
    assert!(text.contains(cell));
    let with = |value: &str| {
        std::fs::write(
            &path,
            text.replace(cell, &format!("| 00000000:AA:00.0     | {value:>20} |")),
        )
        .unwrap();
        detect_in(dir.path(), DetectOptions::default()).unwrap()
    };
    let cleared = with("0");
    assert!(cleared.accelerators.iter().all(|a| a.healthy));

    let unread = with("N/A");
    assert_eq!(unread.accelerators[3].ecc, None);
    let mut now = accel_core::Inventory {
        manufacturers: vec![unread],
    };
    now.keep_known(&accel_core::Inventory {
        manufacturers: vec![sick],
    });
    let mut card = now.manufacturers[0].accelerators[3].clone();
    accel_core::health::assess(&mut card, &[]);
    assert_eq!(card.health_reasons, ["2 uncorrectable volatile ECC errors"]);
}

/// Issue 43 item 5: doctor says which health sources it read on the node, a row each.
#[test]
fn doctor_names_each_health_source_and_the_card_it_takes_out() {
    let dir = accel_testkit::recorded_host(SICK_HOST);
    let host = FsHost::new(dir.join("root"));
    let commands = RecordedCommands::load(&dir).unwrap();
    let checks = accel_thead::doctor::run(
        &host,
        &commands,
        Deadlines::default(),
        "/var/lib/gpustack/operator/lib",
        "x86_64",
    );
    let row = |name: &str| {
        checks
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no {name} row: {checks:?}"))
    };
    let ecc = row("health-ecc");
    assert_eq!(ecc.status, accel_backend::doctor::Status::Warn);
    assert_eq!(
        ecc.reason,
        "ppu-smi's Volatile Uncorr. ECC read for 16 of 16 PPU(s); out of service: accelerator 3 (GPU-019e2226-8261-0222-0000-0000a0490d60) 2 uncorrected"
    );
    let log = row("health-kernel-log");
    assert_eq!(log.status, accel_backend::doctor::Status::Ok);
    assert!(log.reason.starts_with("not watched: "), "{}", log.reason);
}
