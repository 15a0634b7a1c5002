use super::*;

#[test]
fn cleaning_drops_escapes_nuls_and_carriage_returns() {
    assert_eq!(
        clean("\u{1b}[37mhygon module is loaded\u{1b}[0m\r\n"),
        "hygon module is loaded\n"
    );
    assert_eq!(clean("a\0\0b"), "ab");
    assert_eq!(
        clean("\u{1b}]0;title\u{7}x\u{1b}]8;;\u{1b}\\y\u{1b}(Bz"),
        "xyBz"
    );
    assert_eq!(clean("cut \u{1b}[1;3"), "cut ");
    // An OSC ends at BEL or at `ESC \`, not at a backslash inside it.
    assert_eq!(clean("\u{1b}]0;C:\\dir\u{7}x"), "x");
    assert!(matches!(clean("plain"), Cow::Borrowed("plain")));
}

#[test]
fn placeholders_and_redactions_are_absent() {
    for raw in [
        "",
        "  ",
        "N/A",
        "n/a",
        "NA",
        "-",
        "--",
        "[N/A]",
        "Not Supported",
        "[Not Supported]",
        "xxx",
        "xxxxx",
        "xxxxx MiB",
        " XXXX ",
    ] {
        assert_eq!(present(raw), None, "{raw:?}");
    }
    for raw in ["0", "OK", "Ascend xxx", "16x(16x)", "x", "Normal"] {
        assert_eq!(present(raw), Some(raw), "{raw:?}");
    }
    assert_eq!(present("  310P3 "), Some("310P3"));
}

#[test]
fn figures_carry_their_unit() {
    assert_eq!(figure("81559 MiB"), Some((81559.0, "MiB")));
    assert_eq!(figure("45C"), Some((45.0, "C")));
    assert_eq!(figure("12 %"), Some((12.0, "%")));
    assert_eq!(figure("-5 C"), Some((-5.0, "C")));
    assert_eq!(figure("42"), Some((42.0, "")));
    // A second dot ends the number: a figure closed by a full stop keeps its number.
    assert_eq!(figure("45.5."), Some((45.5, ".")));
    for raw in [
        "N/A",
        "MiB",
        "12 34",
        "-",
        "+",
        ".",
        "1.2.3",
        "xxxxx MiB",
        "1e999",
    ] {
        assert_eq!(figure(raw), None, "{raw:?}");
    }
    assert_eq!(celsius("45 C"), Some(45.0));
    assert_eq!(celsius("30.0c"), Some(30.0));
    assert_eq!(celsius("45 W"), None);
    assert_eq!(watts("300 W"), Some(300.0));
    assert_eq!(watts("118.0W"), Some(118.0));
    assert_eq!(watts("NA"), None);
    assert_eq!(percent("12 %"), Some(12.0));
    assert_eq!(percent("0%"), Some(0.0));
    assert_eq!(percent("12 MHz"), None);
    assert_eq!(whole("7"), Some(7));
    assert_eq!(whole("7.5"), None);
    assert_eq!(whole("-1"), None);
}

#[test]
fn memory_converts_to_mebibytes() {
    use MemoryUnit::*;
    assert_eq!(mebibytes("81559 MiB", Bytes), Some(81559));
    assert_eq!(mebibytes("32 GB", MiB), Some(32 * 1024));
    assert_eq!(mebibytes("1.5 GiB", MiB), Some(1536));
    assert_eq!(mebibytes("2048 KiB", MiB), Some(2));
    assert_eq!(mebibytes("1048576 B", MiB), Some(1));
    assert_eq!(mebibytes("65536", MiB), Some(65536));
    assert_eq!(mebibytes("64", GiB), Some(65536));
    assert_eq!(mebibytes("-1 MiB", MiB), None);
    assert_eq!(mebibytes("12 MHz", MiB), None);
    assert_eq!(mebibytes("xxxxx MiB", MiB), None);
}

#[test]
fn used_total_pairs_in_every_spelling() {
    assert_eq!(pair("1024MiB / 32768MiB"), Some(("1024MiB", "32768MiB")));
    assert_eq!(pair("N/A / N/A"), Some(("N/A", "N/A")));
    assert_eq!(pair("0    / 0"), Some(("0", "0")));
    assert_eq!(pair("826/65536 MiB"), Some(("826", "65536 MiB")));
    assert_eq!(pair("0 MiB/ 23308 MiB"), Some(("0 MiB", "23308 MiB")));
    assert_eq!(pair("66641MiB(81920MiB)"), Some(("66641MiB", "81920MiB")));
    assert_eq!(pair("16x(16x)"), Some(("16x", "16x")));
    for raw in ["", "N/A", "4302", "(x)", "a/b/c"] {
        assert_eq!(pair(raw), None, "{raw:?}");
    }
    use MemoryUnit::MiB;
    assert_eq!(
        memory_pair("1024MiB / 32768MiB", MiB),
        (Some(1024), Some(32768))
    );
    assert_eq!(memory_pair("0/65536 MB", MiB), (Some(0), Some(65536)));
    assert_eq!(memory_pair("826/65536 MiB", MiB), (Some(826), Some(65536)));
    assert_eq!(memory_pair("4302 / 65536", MiB), (Some(4302), Some(65536)));
    assert_eq!(
        memory_pair("1 / 2", MemoryUnit::GiB),
        (Some(1024), Some(2048))
    );
    assert_eq!(memory_pair("0 MiB/ xxxxx MiB", MiB), (Some(0), None));
    assert_eq!(memory_pair("2MiB(49152MiB)", MiB), (Some(2), Some(49152)));
    assert_eq!(memory_pair("N/A / N/A", MiB), (None, None));
    assert_eq!(memory_pair("116MiB", MiB), (None, None));
}

#[test]
fn hex_and_unique_ids() {
    assert_eq!(hex("0x1d94"), Some(0x1d94));
    assert_eq!(hex("1D94"), Some(0x1d94));
    assert_eq!(hex("0X1d94"), Some(0x1d94));
    // More than 16 digits is no 64-bit figure, even when leading zeros keep its value small.
    for raw in [
        "",
        "0x",
        "N/A",
        "0x1g",
        "12345678901234567",
        "0x00000000000000001d94",
        "-1",
        "+1",
    ] {
        assert_eq!(hex(raw), None, "{raw:?}");
    }
    assert_eq!(unique_id("7137d9b2a08a4841"), Some(0x7137_d9b2_a08a_4841));
    assert_eq!(unique_id("0x2150e7d042a1124"), Some(0x0215_0e7d_042a_1124));
    for raw in [
        "0",
        "0x0000000000000000",
        "ffffffffffffffff",
        "0xFFFFFFFF",
        "N/A",
    ] {
        assert_eq!(unique_id(raw), None, "{raw:?}");
    }
    assert_eq!(unique_id("0x7fffffff"), Some(0x7fff_ffff));
}

#[test]
fn versions_are_dotted_figures() {
    for (raw, version) in [
        ("6.3.8", "6.3.8"),
        ("23.0.rc3", "23.0.rc3"),
        ("24.1.RC2", "24.1.RC2"),
        ("25.7.rc1.6", "25.7.rc1.6"),
        ("21.0.4.B030", "21.0.4.B030"),
        ("3.3.5-server", "3.3.5-server"),
        ("2.1.0-ra1f23041713", "2.1.0-ra1f23041713"),
        ("v5.10.10", "5.10.10"),
        (" 10.2 ", "10.2"),
    ] {
        assert_eq!(dotted_version(raw), Some(version), "{raw:?}");
    }
    for raw in [
        "",
        "N/A",
        "1",
        "6.",
        ".6",
        "1.x",
        "6.8.0-",
        "Linux version 6.8.0-48-generic (buildd@lcy02) #48",
        "v",
        "a.1",
    ] {
        assert_eq!(dotted_version(raw), None, "{raw:?}");
    }
    let banner = "|  IX-ML: 4.1.0       Driver Version: 4.1.0       CUDA Version: N/A   |";
    assert_eq!(version_after(banner, "Driver Version"), Some("4.1.0"));
    assert_eq!(version_after(banner, "ix-ml"), Some("4.1.0"));
    assert_eq!(version_after(banner, "CUDA Version"), None);
    assert_eq!(
        version_after(
            "    mthreads-gmi:2.3.2           Driver Version:3.3.5-server",
            "Driver Version"
        ),
        Some("3.3.5-server")
    );
    assert_eq!(
        version_after("| CNMON v5.10.10            Driver v5.10.10 |", "Driver"),
        Some("5.10.10")
    );
    assert_eq!(version_after("no version here", "Driver"), None);
    assert_eq!(version_after("Driver", ""), None);
}

#[test]
fn blanks_split_on_runs_of_two() {
    assert_eq!(
        split_blanks("  Fan  Temp  Perf   Pwr:Usage/Cap "),
        ["Fan", "Temp", "Perf", "Pwr:Usage/Cap"]
    );
    assert_eq!(split_blanks("Chip Name"), ["Chip Name"]);
    assert_eq!(split_blanks("a\tb"), ["a", "b"]);
    assert!(split_blanks("   ").is_empty());
    assert_eq!(
        labels("NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)"),
        ["NPU Util(%)", "Memory-Usage(MB)", "HBM-Usage(MB)"]
    );
    assert_eq!(
        values("83.4        35                0    / 0   "),
        ["83.4", "35", "0 / 0"]
    );
    assert_eq!(
        values("0     /   MLU370-X4    v1.1.6"),
        ["0", "/", "MLU370-X4", "v1.1.6"]
    );
    assert_eq!(values("0 MiB/   23308 MiB"), ["0 MiB/ 23308 MiB"]);
}

const BOX: &str = "\
log line before the table
+------------------------------------------------------+
| tool 1.0          Driver Version: 1.2.3              |
+-------------------+-------------------+--------------+
| ID   Name         | Bus-Id            | Temp  Util   |
| Fan  Memory-Usage |                   | Power        |
+===================+===================+==============+
| 0    Card A       | 0000:01:00.0      | 45C   3 %    |
| 0%   1 / 2 GiB    |                   | N/A          |
+-------------------+-------------------+--------------+
...
+-------------------+-------------------+--------------+
| 1    Card B       | 0000:02:00.0      | 46C   4 %    |
| 1%   0    / 2 GiB |                   | 30 W         |
+===================+===================+==============+
+------------------------------------------------------+
| ID   Process      | PID               | Memory       |
+======================================================+
| No running processes found                           |
+------------------------------------------------------+
";

#[test]
fn a_box_table_is_read_by_its_header() {
    let table = box_table(BOX, &["Bus-Id", "Name"]).unwrap();
    assert_eq!(
        table.header,
        vec![
            vec!["ID", "Name", "Bus-Id", "Temp", "Util"],
            vec!["Fan", "Memory-Usage", "Power"],
        ]
    );
    assert!(table.has_label("memory-usage"));
    assert!(!table.has_label("PID"));
    assert_eq!(table.records.len(), 2, "{table:#?}");
    let a = &table.records[0];
    assert_eq!(a.lines, 2);
    assert_eq!(a.get("ID"), Some("0"));
    assert_eq!(a.get("name"), Some("Card A"));
    assert_eq!(a.get("Bus-Id"), Some("0000:01:00.0"));
    assert_eq!(a.get("Temp").and_then(celsius), Some(45.0));
    assert_eq!(a.get("Util").and_then(percent), Some(3.0));
    assert_eq!(a.raw("Power"), Some("N/A"));
    assert_eq!(a.get("Power"), None);
    assert_eq!(a.get("Memory-Usage"), Some("1 / 2 GiB"));
    assert_eq!(a.get("PID"), None, "the process table is another table");
    let b = &table.records[1];
    assert_eq!(
        b.get("Memory-Usage")
            .map(|m| memory_pair(m, MemoryUnit::MiB)),
        Some((Some(0), Some(2048)))
    );
    assert_eq!(b.get("Power").and_then(watts), Some(30.0));
    // The anchor picks the table: the process table is found by its own words.
    let procs = box_table(BOX, &["Process", "PID"]).unwrap();
    assert_eq!(procs.records.len(), 1);
    assert_eq!(
        procs.records[0].get("ID"),
        Some("No running processes found")
    );
    assert_eq!(box_table(BOX, &["Nothing"]), None);
    assert_eq!(box_table(BOX, &[]), None);
    // An empty anchor word is in no header.
    assert_eq!(box_table(BOX, &["Bus-Id", ""]), None);
    assert_eq!(column_table("DCU  Temp\n0    30.0c\n", &["DCU", ""]), None);
    assert_eq!(csv_table("index, uuid\n0, a\n", &["uuid", ""]), None);
}

#[test]
fn the_header_is_every_line_of_its_run_whichever_the_anchor_is_on() {
    let by_first = box_table(BOX, &["Bus-Id", "Name"]).unwrap();
    let by_second = box_table(BOX, &["Fan", "Memory-Usage"]).unwrap();
    assert_eq!(by_second, by_first);
}

#[test]
fn a_second_rule_under_the_header_is_no_end_of_the_table() {
    let doubled = BOX.replacen(
        "+===================+===================+==============+\n",
        "+===================+===================+==============+\n+-------------------+-------------------+--------------+\n",
        1,
    );
    assert_ne!(doubled, BOX);
    let table = box_table(&doubled, &["Bus-Id", "Name"]).unwrap();
    let ids: Vec<_> = table.records.iter().map(|r| r.get("ID")).collect();
    assert_eq!(ids, [Some("0"), Some("1")]);
}

/// A line indented past the header's margin has left its first cells out and pairs from the
/// right, though its header line prints those cells blank; the margin is the header's own
/// indent, so a whole table indented (here by 4) reads the same.
#[test]
fn a_line_indented_past_the_margin_pairs_from_the_right() {
    let text = "\
    +-----------+---------+---------------------------------+
    | ID  Name  | Bus-Id  | Util                            |
    |           |         | ECC Mode                        |
    +===========+=========+=================================+
    | 0   S4000 | 0f:00.0 | 0%                              |
                          | On-die, EDC                     |
    +-----------+---------+---------------------------------+
";
    let table = box_table(text, &["ID", "Bus-Id"]).unwrap();
    assert_eq!(table.records.len(), 1, "{table:#?}");
    let r = &table.records[0];
    assert_eq!(
        (r.get("Name"), r.get("Util"), r.get("ECC Mode")),
        (Some("S4000"), Some("0%"), Some("On-die, EDC"))
    );
}

#[test]
fn a_missing_or_renamed_column_is_none_not_a_shifted_value() {
    let renamed = BOX.replace("Temp  Util", "Tmp   Util");
    let table = box_table(&renamed, &["Bus-Id"]).unwrap();
    assert_eq!(table.records[0].get("Temp"), None);
    assert_eq!(table.records[0].get("Tmp"), Some("45C"));
    assert_eq!(table.records[0].get("Util"), Some("3 %"));
}

#[test]
fn lines_leaving_their_first_cells_out_pair_from_the_right() {
    let text = "\
---------------------------
ID   Name  |PCIe      |%GPU  Mem
     Type  |Width     |Temp  MPC
                      |      ECC Mode
+-------------------------+
0    S4000 |0f:00.0   |0%    2MiB(49152MiB)
     Phys  |16x(16x)  |38C   YES
                      |      On-die, EDC
+-------------------------+
";
    let table = box_table(text, &["ID", "PCIe"]).unwrap();
    assert_eq!(table.records.len(), 1);
    let r = &table.records[0];
    assert_eq!(r.lines, 3);
    assert_eq!(r.get("ECC Mode"), Some("On-die, EDC"));
    assert_eq!(r.get("Mem"), Some("2MiB(49152MiB)"));
    assert_eq!(r.get("Width"), Some("16x(16x)"));
    // A trimmed capture: a header no rule closes, one line per record.
    let trimmed =
        "ID   Name  |PCIe      |%GPU  Mem\n0    S30   |02:00.0   |0%    509MiB(4096MiB)\n";
    let table = box_table(trimmed, &["ID", "PCIe"]).unwrap();
    assert_eq!(table.records.len(), 1);
    assert_eq!(table.records[0].get("Name"), Some("S30"));
    // A blank line after the last row closes no header: the row is still a record.
    let table = box_table(&format!("{trimmed}\n"), &["ID", "PCIe"]).unwrap();
    assert_eq!(table.header.len(), 1);
    assert_eq!(table.records.len(), 1);
}

#[test]
fn a_column_table_pairs_values_with_labels() {
    let text = "\
============ System Management Interface ============
=====================================================
DCU  Temp   AvgPwr  Fan   Perf  PwrCap  VRAM%  DCU%
0    30.0c  38.0W   0.0%  auto  280.0W    0%   0%
1    29.0c  N/A
=====================================================
";
    let table = column_table(text, &["DCU", "Temp"]).unwrap();
    assert_eq!(table.labels.len(), 8);
    assert_eq!(table.rows.len(), 2);
    assert_eq!(table.rows[0].get("Temp").and_then(celsius), Some(30.0));
    assert_eq!(table.rows[0].get("PwrCap").and_then(watts), Some(280.0));
    assert_eq!(table.rows[1].get("AvgPwr"), None);
    assert_eq!(table.rows[1].get("Perf"), None);
    assert_eq!(
        (&table.rows[0].name, &table.rows[1].name),
        (&None, &None),
        "a row no longer than the header has no name"
    );
    let matrix = "      A     B     Affinity\nA     X     L1    0-3\nB     L1    X     4-7\n\nLegend: X self\n";
    let table = column_table(matrix, &["Affinity"]).unwrap();
    assert_eq!(table.rows.len(), 2);
    assert_eq!(table.rows[1].name.as_deref(), Some("B"));
    assert_eq!(table.rows[1].get("A"), Some("L1"));
    assert_eq!(table.rows[1].get("Affinity"), Some("4-7"));
    assert_eq!(column_table(matrix, &["Nope"]), None);
}

proptest::proptest! {
    #[test]
    fn never_panics_on_arbitrary_text(text in "\\PC{0,400}") {
        exercise(&text);
    }

    #[test]
    fn never_panics_on_table_shaped_text(text in "[-+=| a-zA-Z0-9/().%:\n\u{1b}\\[\0x]{0,400}") {
        exercise(&text);
    }

    #[test]
    fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..400)) {
        exercise(&String::from_utf8_lossy(&bytes));
    }
}

/// Every public reader of this module on `text`, and on each of its lines.
fn exercise(text: &str) {
    let _ = clean(text);
    for anchor in [&["ID"][..], &["Name", "Bus-Id"], &["a"], &["x"], &["|"]] {
        if let Some(table) = box_table(text, anchor) {
            for record in &table.records {
                let _ = record.get("Name");
            }
        }
        let _ = column_table(text, anchor);
    }
    let _ = version_after(text, "Version");
    for line in text.lines().chain(std::iter::once(text)) {
        let _ = (
            present(line),
            figure(line),
            celsius(line),
            watts(line),
            percent(line),
        );
        let _ = (whole(line), mebibytes(line, MemoryUnit::MiB), pair(line));
        let _ = (
            memory_pair(line, MemoryUnit::GiB),
            hex(line),
            unique_id(line),
        );
        let _ = (dotted_version(line), split_blanks(line), is_redacted(line));
    }
}

#[test]
fn a_csv_query_is_read_by_its_header_without_the_units() {
    let text = "index, uuid, name, pci.bus_id, memory.total [MiB]\n\
                0, GPU-a1, Iluvatar BI-V150, 00000000:13:00.0, 32768 MiB\n\
                1, GPU-b2, A, B, 00000000:16:00.0, [N/A]\n\n\
                trailing, text\n";
    let t = csv_table(text, &["uuid", "pci.bus_id"]).unwrap();
    assert_eq!(
        t.labels,
        ["index", "uuid", "name", "pci.bus_id", "memory.total"]
    );
    assert_eq!(t.rows.len(), 2, "a blank line ends the rows");
    let r = &t.rows[0];
    assert_eq!(r.get("UUID"), Some("GPU-a1"));
    assert_eq!(r.get("memory.total"), Some("32768 MiB"));
    // A row with a surplus field cannot be paired: nothing of it is read, never a shifted value.
    assert!(t.rows[1].fields.is_empty());
    assert!(csv_table(text, &["compute_cap"]).is_none());
    assert!(csv_table("", &["uuid"]).is_none());
    // Only a bracket that ends the label is its unit.
    let t = csv_table("index, note [a] b\n0, x\n", &["index"]).unwrap();
    assert_eq!(t.labels, ["index", "note [a] b"]);
    // The header is the line whose fields are the anchor, not a line mentioning its words.
    let t = csv_table(
        "Warning: uuid may read N/A\nindex, uuid\n0, GPU-1\n",
        &["uuid"],
    )
    .unwrap();
    assert_eq!(t.labels, ["index", "uuid"]);
    assert_eq!(t.rows[0].get("uuid"), Some("GPU-1"));
    // A short row leaves its last labels out.
    let t = csv_table("index, uuid\n3\n", &["index"]).unwrap();
    assert_eq!(
        (t.rows[0].get("index"), t.rows[0].get("uuid")),
        (Some("3"), None)
    );
}

#[test]
fn a_process_table_is_read_from_its_label_line_under_a_title_and_over_a_unit_line() {
    let text = "\
+---------------------------------------------------+
| Process:                                          |
|  GPU     PID        Process Name      GPU Memory  |
|                                       Usage(MiB)  |
|===================================================|
|  0       1234       python3           512         |
|  3       99         vllm              N/A         |
+---------------------------------------------------+
";
    let rows = process_rows(text, &["GPU", "PID", "Process Name"]).unwrap();
    let read: Vec<(Option<&str>, Option<&str>, Option<&str>)> = rows
        .iter()
        .map(|r| (r.get("GPU"), r.get("PID"), r.get("Process Name")))
        .collect();
    assert_eq!(
        read,
        [
            (Some("0"), Some("1234"), Some("python3")),
            (Some("3"), Some("99"), Some("vllm"))
        ]
    );
    let idle = "\
| GPU  PID  Process name  Usage(MiB) |
|====================================|
|  No running processes found        |
+------------------------------------+
";
    assert_eq!(
        process_rows(idle, &["GPU", "PID", "Process name"]).unwrap(),
        []
    );
    assert_eq!(process_rows("| GPU | Name |\n", &["GPU", "PID"]), None);
    // A capture cut after the label line has no table: the blank line is no `===` rule.
    let cut = "| GPU  PID  Process name  Usage(MiB) |\n\n";
    assert_eq!(process_rows(cut, &["GPU", "PID", "Process name"]), None);
    // Only the idle line is dropped: a row whose first value merely holds the word
    // (a table that leads with the process name) is a process.
    let named_first = "\
| Process name  PID   GPU |
|=========================|
| process_pool  4242  0   |
+-------------------------+
";
    let rows = process_rows(named_first, &["Process name", "PID"]).unwrap();
    let read: Vec<_> = rows
        .iter()
        .map(|r| (r.get("Process name"), r.get("PID")))
        .collect();
    assert_eq!(read, [(Some("process_pool"), Some("4242"))]);
}
