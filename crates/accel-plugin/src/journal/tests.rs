use super::*;
use accel_core::ledger::Family;
use proptest::prelude::*;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

fn grant(index: u32) -> Grant {
    Grant {
        family: Family::Exclusive,
        resource: "nvidia.com/gpu".into(),
        device_ids: vec![format!("GPU-{index}")],
        accelerators: vec![index],
        units: 1_600_000,
        cores_percentage: None,
        partition: None,
        finished: false,
    }
}

fn grant_entry(n: u32) -> Entry {
    Entry::Grant {
        key: GrantKey::new(format!("pod-{n}"), "main"),
        grant: grant(n % 8),
    }
}

fn line(entry: &Entry) -> String {
    let mut line = serde_json::to_string(entry).unwrap();
    line.push('\n');
    line
}

/// Waits (bounded) for `ticket`, from a test without a runtime of its own.
fn wait(ticket: Ticket) -> Result<(), NotDurable> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), ticket.durable())
            .await
            .expect("the ticket resolved within 30 s")
    })
}

/// Whether `ticket` resolves within `within` (it must not while its syncs are held).
fn resolves_within(ticket: Ticket, within: Duration) -> bool {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async { tokio::time::timeout(within, ticket.durable()).await.is_ok() })
}

#[test]
fn appends_are_written_at_once_and_durable_when_the_syncer_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(dir.path()).unwrap();
    for n in 0..50 {
        j.append(&grant_entry(n)).unwrap();
    }
    // Written before append returned: another reader sees every line at once.
    let bytes = std::fs::read(j.path()).unwrap();
    let (written, _) = written_part(&bytes);
    assert_eq!(written.split(|b| *b == b'\n').count() - 1, 50);
    // The ticket taken now resolves once the syncer has made all fifty durable.
    wait(j.ticket()).unwrap();
    assert_eq!(
        j.durability(),
        Durability {
            appended: 50,
            synced: 50
        }
    );
    // A compaction's snapshot is written synced: nothing is left for the thread.
    let (grants, _) = replay_bytes(&bytes).unwrap();
    j.append(&Entry::Release {
        key: GrantKey::new("pod-0", "main"),
    })
    .unwrap();
    j.compact(&grants).unwrap();
    assert_eq!(j.durability().synced, 51);
    assert!(j.ticket().is_durable());
}

#[test]
fn the_file_is_preallocated_and_an_append_changes_neither_its_length_nor_its_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(dir.path()).unwrap();
    let path = j.path().to_path_buf();
    let before = std::fs::metadata(&path).unwrap();
    assert!(before.len() >= PREALLOCATE, "{} bytes", before.len());
    assert_eq!(before.len(), j.capacity());
    // Zeros throughout, written (not a sparse hole: its blocks are allocated).
    assert!(std::fs::read(&path).unwrap().iter().all(|b| *b == 0));
    assert!(
        std::os::unix::fs::MetadataExt::blocks(&before) * 512 >= PREALLOCATE,
        "the zeros are written, not a hole"
    );
    for n in 0..20 {
        j.append(&grant_entry(n)).unwrap();
    }
    wait(j.ticket()).unwrap();
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!(after.len(), before.len(), "appends write in place");
    assert_eq!(
        std::os::unix::fs::MetadataExt::blocks(&after),
        std::os::unix::fs::MetadataExt::blocks(&before)
    );
    let bytes = std::fs::read(&path).unwrap();
    let (written, junk) = written_part(&bytes);
    assert!(!junk);
    let expected: String = (0..20).map(|n| line(&grant_entry(n))).collect();
    assert_eq!(written, expected.as_bytes());
    assert!(bytes[written.len()..].iter().all(|b| *b == 0));
}

#[test]
fn a_ticket_waits_for_its_sync_and_concurrent_appends_share_one() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(dir.path()).unwrap();
    let faults = j.faults();
    let syncs_before = faults.syncs();
    faults.hold();
    j.append(&grant_entry(0)).unwrap();
    let first = j.ticket();
    assert!(!first.is_durable());
    assert!(
        !resolves_within(j.ticket(), Duration::from_millis(50)),
        "not durable while its sync is held"
    );
    // More appends while the first sync waits: one more sync covers all of them.
    for n in 1..20 {
        j.append(&grant_entry(n)).unwrap();
    }
    let last = j.ticket();
    faults.release();
    wait(first).unwrap();
    wait(last).unwrap();
    assert_eq!(j.durability().synced, 20);
    let syncs = faults.syncs() - syncs_before;
    assert!(
        (1..=3).contains(&syncs),
        "20 appends made durable by {syncs} syncs"
    );
}

#[test]
fn a_failed_sync_fails_every_ticket_past_it_until_a_compaction_rewrites_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(dir.path()).unwrap();
    j.append(&grant_entry(0)).unwrap();
    wait(j.ticket()).unwrap();
    j.faults().fail_next(1);
    j.append(&grant_entry(1)).unwrap();
    let failed = wait(j.ticket()).unwrap_err();
    assert!(failed.0.contains("injected fdatasync failure"), "{failed}");
    // The next sync works, but what the failed one held may be lost: still not durable.
    j.append(&grant_entry(2)).unwrap();
    assert!(wait(j.ticket()).is_err(), "sticky until rewritten");
    assert_eq!(j.durability().synced, 1);
    // What the ledger holds, rewritten atomically: durable, and so is everything after.
    let grants: BTreeMap<GrantKey, Grant> = (0..3)
        .map(|n| (GrantKey::new(format!("pod-{n}"), "main"), grant(n)))
        .collect();
    j.compact(&grants).unwrap();
    wait(j.ticket()).unwrap();
    j.append(&grant_entry(3)).unwrap();
    wait(j.ticket()).unwrap();
    drop(j);
    let (_, replay) = Journal::open(dir.path()).unwrap();
    assert_eq!(replay.grants.len(), 4);
}

#[test]
fn dropping_the_journal_waits_for_its_last_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(dir.path()).unwrap();
    j.append(&Entry::Finish {
        pod_uid: "a".into(),
    })
    .unwrap();
    let ticket = j.ticket();
    drop(j);
    assert!(
        ticket.is_durable(),
        "the queued sync ran before the drop returned"
    );
}

#[test]
fn entries_survive_reopen_and_the_file_is_private() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, replay) = Journal::open(dir.path()).unwrap();
    assert!(replay.grants.is_empty());
    let a = GrantKey::new("a", "main");
    let b = GrantKey::new("b", "main");
    j.append(&Entry::Grant {
        key: a.clone(),
        grant: grant(0),
    })
    .unwrap();
    j.append(&Entry::Grant {
        key: b.clone(),
        grant: grant(1),
    })
    .unwrap();
    j.append(&Entry::Release { key: b }).unwrap();
    j.append(&Entry::Finish {
        pod_uid: "a".into(),
    })
    .unwrap();
    drop(j);
    let (_, replay) = Journal::open(dir.path()).unwrap();
    let mut expected = grant(0);
    expected.finished = true;
    assert_eq!(replay.grants, BTreeMap::from([(a, expected)]));
    assert!(!replay.torn_tail);
    let mode = std::fs::metadata(dir.path().join(FILE_NAME))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[test]
fn a_journal_written_before_the_preallocation_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..3).map(|n| line(&grant_entry(n))).collect();
    std::fs::write(dir.path().join(FILE_NAME), text).unwrap();
    let (j, replay) = Journal::open(dir.path()).unwrap();
    assert_eq!(replay.grants.len(), 3);
    assert!(!replay.torn_tail);
    // Compacted into the preallocated form.
    assert!(j.capacity() >= PREALLOCATE);
}

#[test]
fn the_file_grows_ahead_of_the_entries_and_an_entry_without_room_grows_it_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(dir.path()).unwrap();
    let first = j.capacity();
    let size = line(&grant_entry(0)).len() as u64;
    // Fill until less than GROW_BELOW is left, syncing as Allocate does.
    let mut n = 0;
    while first - n as u64 * size >= GROW_BELOW {
        j.append(&grant_entry(n)).unwrap();
        n += 1;
    }
    wait(j.ticket()).unwrap();
    // Idle now: the syncer grows it, synced, without another append.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while j.capacity() == first {
        assert!(
            std::time::Instant::now() < deadline,
            "the syncer grew nothing"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(j.capacity(), first + PREALLOCATE);
    // With the syncer held, appends run past the room on their own.
    j.faults().hold();
    let held_at = j.capacity();
    while (n as u64) * size <= held_at {
        j.append(&grant_entry(n)).unwrap();
        n += 1;
    }
    assert!(j.capacity() > held_at, "the append grew the file itself");
    j.faults().release();
    wait(j.ticket()).unwrap();
    drop(j);
    let (_, replay) = Journal::open(dir.path()).unwrap();
    assert_eq!(replay.grants.len(), n as usize);
    assert!(!replay.torn_tail);
}

#[test]
fn torn_writes_are_dropped_and_corruption_kept_aside() {
    let good = line(&grant_entry(0));
    let zeros = vec![0u8; 4096];
    // A last line without its newline, at the end of an old file or before the zeros.
    let (grants, torn) = replay_bytes(format!("{good}{{\"op\":\"gra").as_bytes()).unwrap();
    assert!(torn);
    assert_eq!(grants.len(), 1);
    let mut padded = format!("{good}{{\"op\":\"gra").into_bytes();
    padded.extend(&zeros);
    let (grants, torn) = replay_bytes(&padded).unwrap();
    assert!(torn);
    assert_eq!(grants.len(), 1);
    // A whole entry without its newline was never synced either: dropped, not read.
    let unsynced = line(&grant_entry(1));
    let mut padded = format!("{good}{}", unsynced.trim_end()).into_bytes();
    padded.extend(&zeros);
    let (grants, torn) = replay_bytes(&padded).unwrap();
    assert!(torn);
    assert_eq!(grants.len(), 1);
    // A sector written out of order: bytes past a hole of zeros are dropped too.
    let mut holed = good.clone().into_bytes();
    holed.extend(&zeros[..512]);
    holed.extend(b"\"units\":1}}\n");
    holed.extend(&zeros);
    let (grants, torn) = replay_bytes(&holed).unwrap();
    assert!(torn);
    assert_eq!(grants.len(), 1);
    // Clean: all zeros after the entries.
    let mut clean = good.clone().into_bytes();
    clean.extend(&zeros);
    assert_eq!(replay_bytes(&clean).unwrap(), (grants.clone(), false));
    // A bad line before the last is corruption.
    assert_eq!(
        replay_bytes(format!("garbage\n{good}").as_bytes()).unwrap_err(),
        "line 1: expected value at line 1 column 1"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(FILE_NAME), "garbage\n").unwrap();
    let (_, replay) = Journal::open(dir.path()).unwrap();
    let (aside, reason) = replay.corrupt.unwrap();
    assert!(aside.to_string_lossy().contains(".corrupt-"));
    assert_eq!(std::fs::read_to_string(aside).unwrap(), "garbage\n");
    assert!(reason.starts_with("line 1"));
    assert!(replay.grants.is_empty());
}

#[test]
fn a_torn_file_on_disk_is_replayed_to_its_synced_entries_and_rewritten_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (mut j, _) = Journal::open(dir.path()).unwrap();
    for n in 0..5 {
        j.append(&grant_entry(n)).unwrap();
    }
    wait(j.ticket()).unwrap();
    let path = j.path().to_path_buf();
    drop(j);
    // A crash in the middle of the sixth entry's write: half of it reached the disk.
    let sixth = line(&grant_entry(5));
    let end: usize = (0..5).map(|n| line(&grant_entry(n)).len()).sum();
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.write_all_at(&sixth.as_bytes()[..sixth.len() / 2], end as u64)
        .unwrap();
    drop(file);
    let (j, replay) = Journal::open(dir.path()).unwrap();
    assert!(replay.torn_tail);
    assert_eq!(replay.grants.len(), 5);
    // The compaction left nothing of the torn entry behind.
    let bytes = std::fs::read(j.path()).unwrap();
    let (written, junk) = written_part(&bytes);
    assert!(!junk);
    assert_eq!(written.split(|b| *b == b'\n').count() - 1, 5);
}

fn entries() -> impl Strategy<Value = Vec<Entry>> {
    let entry = prop_oneof![
        (0u32..6, 0u32..8).prop_map(|(pod, gpu)| Entry::Grant {
            key: GrantKey::new(format!("pod-{pod}"), "main"),
            grant: grant(gpu),
        }),
        (0u32..6).prop_map(|pod| Entry::Release {
            key: GrantKey::new(format!("pod-{pod}"), "main"),
        }),
        (0u32..6).prop_map(|pod| Entry::Finish {
            pod_uid: format!("pod-{pod}"),
        }),
    ];
    proptest::collection::vec(entry, 1..40)
}

fn apply(entries: &[Entry]) -> BTreeMap<GrantKey, Grant> {
    let text: String = entries.iter().map(line).collect();
    replay_bytes(text.as_bytes()).unwrap().0
}

proptest! {
    /// A crash image of a preallocated journal: the first `synced` entries are on disk (they
    /// were answered), and of the bytes written after them any 512-byte sector may or may not
    /// have reached the disk (zeros where it did not). Replay never calls it corrupt, never
    /// loses a synced entry, and never reads anything but a prefix of what was written.
    #[test]
    fn a_crash_image_replays_to_a_prefix_that_keeps_every_synced_entry(
        entries in entries(),
        synced_share in 0.0f64..=1.0,
        sectors in proptest::collection::vec(any::<bool>(), 64),
    ) {
        let synced = ((entries.len() as f64) * synced_share) as usize;
        let lines: Vec<String> = entries.iter().map(line).collect();
        let durable_end: usize = lines[..synced].iter().map(String::len).sum();
        let written: Vec<u8> = lines.concat().into_bytes();
        let mut image = vec![0u8; written.len() + 4096];
        image[..durable_end].copy_from_slice(&written[..durable_end]);
        // Sector by sector past the durable end: written or not.
        for (s, reached) in sectors.iter().enumerate() {
            let from = (s * 512).max(durable_end);
            let to = ((s + 1) * 512).min(written.len());
            if *reached && from < to {
                image[from..to].copy_from_slice(&written[from..to]);
            }
        }
        let (grants, _) = replay_bytes(&image).expect("a crash image is never corrupt");
        let prefixes: Vec<BTreeMap<GrantKey, Grant>> =
            (synced..=entries.len()).map(|k| apply(&entries[..k])).collect();
        prop_assert!(
            prefixes.contains(&grants),
            "replayed {grants:?}, not the state after any prefix of {synced}..={} entries",
            entries.len()
        );
    }
}
