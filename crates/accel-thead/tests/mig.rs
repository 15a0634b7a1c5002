//! `ppu-smi mig` behind the partition seam, against a small stateful driver that answers in the
//! forms of T-Head's PPU-SMI manual (§2.1.1, §2.2, §10): profiles and placements, a create with
//! its default compute instance, the `-L` MIG children and the `MIG devices:` table joined by
//! device number, the process table, and destroys.

use std::sync::Mutex;
use std::time::Duration;

use accel_backend::partition::RecordLayout;
use accel_backend::partition::{PartitionErrorKind, PartitionGpu, Partitioner};
use accel_host::{CommandError, CommandOutput, Commands};
use accel_thead::mig::{
    MARKER_PREFIX, PpuSmi, PpuSmiPartitioner, published_profile, vendor_profile,
};

const CARD: &str = "GPU-019ea108-c120-040c-0000-0000c0267f1e";

const LGIP: &str = "\
+---------------------------------------------------------------------------------+
| GPU instance profiles:                                                          |
| PPU  Name                 Profile  Instances   Memory  P2P  CU      DEC   ENC   |
|                             ID     Free/Total   GiB         CpyEng  JPEG  OFA   |
+=================================================================================+
| 1    MIG 8g96gb              3        1/1      96.00   No   64      4     4     |
|                                                             2       4     0     |
+---------------------------------------------------------------------------------+
| 1    MIG 4g48gb              2        2/2      48.00   No   32      2     2     |
|                                                             2       2     0     |
+---------------------------------------------------------------------------------+
| 1    MIG 1g12gb+me           7        1/1      12.00   No   8       0     0     |
|                                                             2       0     0     |
+---------------------------------------------------------------------------------+
";

const LGIPP: &str = "\
PPU 1 profile ID 3 placements: {0}:8
PPU 1 profile ID 2 placements: {0,4}:4
PPU 1 profile ID 7 placements: {0,1,2,3,4,5,6,7}:1
";

/// One GPU instance: id, profile id, profile name, start, size, its compute instance, busy.
type Made = (u32, u32, &'static str, u32, u32, Option<u32>, bool);

#[derive(Default)]
struct Driver {
    instances: Mutex<Vec<Made>>,
    /// Leave the created instance out of the MIG devices table.
    unpaired: bool,
    seen: Mutex<Vec<String>>,
}

fn out(status: i32, text: &str) -> Result<CommandOutput, CommandError> {
    Ok(CommandOutput {
        status: Some(status),
        stdout: text.as_bytes().to_vec(),
        stderr: Vec::new(),
    })
}

impl Driver {
    fn table(&self) -> String {
        let instances = self.instances.lock().unwrap();
        let mut t = String::from(
            "+-----------------------------------------------------------------------------+
| MIG devices:                                                                |
+------------------+---------------------+----------+-------------------------+
| PPU  GI  CI  MIG |        Memory-Usage |      Vol |         Shared          |
|      ID  ID  DEV |                     |  CU  Unc | CpyEng ENC DEC OFA JPEG |
|                  |                     |      ECC |                         |
+==================+=====================+==========+=========================+
",
        );
        for (n, (gi, .., ci, _)) in instances.iter().enumerate() {
            if self.unpaired {
                continue;
            }
            // Device numbers run against GI order, so only the join by number pairs them.
            let dev = instances.len() - 1 - n;
            if let Some(ci) = ci {
                t.push_str(&format!(
                    "|  1   {gi}   {ci}    {dev}  |     6MiB / 49152MiB |  32    0 |   2     0   0   0   0   |\n+------------------+---------------------+----------+-------------------------+\n"
                ));
            }
        }
        t.push_str("\n| Processes:                                              |\n| PPU    GI   CI   PID      Type  Process name   PPU Memory |\n|        ID   ID                                  Usage      |\n+==========================================================+\n");
        for (gi, .., ci, busy) in instances.iter() {
            if *busy {
                t.push_str(&format!(
                    "| 1      {gi}    {}    4242     C     python3     48MiB |\n",
                    ci.unwrap_or(0)
                ));
            }
        }
        t.push_str("+----------------------------------------------------------+\n");
        t
    }

    fn list(&self) -> String {
        let instances = self.instances.lock().unwrap();
        let mut l = format!("PPU 0: PPU (UUID: GPU-other)\nPPU 1: PPU (UUID: {CARD})\n");
        for (n, (gi, ..)) in instances.iter().enumerate() {
            let dev = instances.len() - 1 - n;
            l.push_str(&format!(
                "    MIG g1.c0.i0, Device {dev} (UUID: MIG-79c62632-04cc-574b-af7b-cb2e30712{gi:04})\n"
            ));
        }
        l
    }
}

impl Commands for Driver {
    fn run(&self, argv: &[&str], _deadline: Duration) -> Result<CommandOutput, CommandError> {
        self.seen.lock().unwrap().push(argv.join(" "));
        let mut inst = self.instances.lock().unwrap();
        match argv {
            ["ppu-smi"] => {
                drop(inst);
                out(0, &self.table())
            }
            ["ppu-smi", "-L"] => {
                drop(inst);
                out(0, &self.list())
            }
            ["ppu-smi", "mig", "-i", CARD, rest @ ..] => match rest {
                ["-lgip"] => out(0, LGIP),
                ["-lgipp"] => out(0, LGIPP),
                ["-lgi"] if inst.is_empty() => out(6, "No GPU instances found: Not Found\n"),
                ["-lgi"] => {
                    let mut t = String::from(
                        "| GPU instances:  |\n| PPU  Name  Profile  Instance  Placement |\n|  ID  ID  Start:Size |\n+=====+\n",
                    );
                    for (gi, id, name, start, size, ..) in inst.iter() {
                        t.push_str(&format!(
                            "| 1    MIG {name}   {id}   {gi}   {start}:{size}  |\n+---+\n"
                        ));
                    }
                    out(0, &t)
                }
                ["-lci"] => {
                    let mut t = String::from(
                        "| Compute instances: |\n| PPU  GPU  Name  Profile  Instance  Placement |\n|  Instance  ID  ID  Start:Size |\n|  ID |\n+=====+\n",
                    );
                    for (gi, _, name, .., ci, _) in inst.iter() {
                        if let Some(ci) = ci {
                            t.push_str(&format!(
                                "| 1   {gi}   MIG 32u.{name}   6   {ci}   0:32  |\n+---+\n"
                            ));
                        }
                    }
                    out(0, &t)
                }
                ["-cgi", spec, "-C"] => {
                    let (id, start) = spec.split_once(':').unwrap();
                    let (id, start): (u32, u32) = (id.parse().unwrap(), start.parse().unwrap());
                    let (name, size) = match id {
                        3 => ("8g96gb", 8),
                        2 => ("4g48gb", 4),
                        _ => return out(2, "Invalid profile\n"),
                    };
                    if inst.iter().any(|i| start < i.3 + i.4 && i.3 < start + size) {
                        return out(
                            255,
                            "Unable to create GPU instance on PPU 1 using profile 2: Insufficient Resources\n",
                        );
                    }
                    let gi = (0..).find(|g| inst.iter().all(|i| i.0 != *g)).unwrap();
                    inst.push((gi, id, name, start, size, Some(0), false));
                    out(
                        0,
                        &format!(
                            "Successfully created GPU instance ID {gi} on PPU 1 using profile MIG {name} (Profile ID {id})\nSuccessfully created compute instance ID 0 on PPU 1 GPU instance ID {gi} using profile MIG 32u.{name} (Profile ID 6)\n"
                        ),
                    )
                }
                ["-gi", gi, "-ci", _, "-dci"] => {
                    let gi: u32 = gi.parse().unwrap();
                    match inst.iter_mut().find(|i| i.0 == gi) {
                        Some(i) if i.6 => out(
                            255,
                            &format!(
                                "Unable to destroy compute instance ID 0 from PPU 1 GPU instance {gi}: In use by another client\n"
                            ),
                        ),
                        Some(i) => {
                            i.5 = None;
                            out(
                                0,
                                &format!(
                                    "Successfully destroyed compute instance ID 0 from PPU 1 GPU instance {gi}\n"
                                ),
                            )
                        }
                        None => out(6, "Not Found\n"),
                    }
                }
                ["-gi", gi, "-dgi"] => {
                    let gi: u32 = gi.parse().unwrap();
                    match inst.iter().position(|i| i.0 == gi) {
                        Some(at) if inst[at].5.is_some() => out(
                            255,
                            &format!(
                                "GPU instance {gi} is in use, please destory related compute instances then try again\n"
                            ),
                        ),
                        Some(at) => {
                            inst.remove(at);
                            out(
                                0,
                                &format!(
                                    "Successfully destroyed GPU instance ID {gi} from PPU 1\n"
                                ),
                            )
                        }
                        None => out(6, "Not Found\n"),
                    }
                }
                _ => out(2, "bad arguments\n"),
            },
            _ => Err(CommandError::NotInstalled {
                program: argv.join(" "),
            }),
        }
    }

    fn is_installed(&self, _program: &str) -> bool {
        true
    }
}

fn card() -> PartitionGpu {
    // The inventory's ordinal (0) is not ppu-smi's index (1): the card is named by UUID.
    PartitionGpu {
        index: 0,
        uuid: Some(CARD.into()),
    }
}

#[test]
fn profiles_are_published_with_the_dot_t_head_leaves_out() {
    assert_eq!(published_profile("4g48gb"), "4g.48gb");
    assert_eq!(published_profile("8G96GB"), "8g.96gb");
    assert_eq!(published_profile("1g.12gb"), "1g.12gb");
    assert_eq!(published_profile("g1.c1.i1"), "g1.c1.i1");
    assert_eq!(published_profile("1g12gb+me"), "1g12gb+me");
}

#[test]
fn records_are_t_heads_per_card_markers_in_the_vendor_spelling() {
    for published in ["4g.48gb", "1g.12gb", "8g.96gb"] {
        assert_eq!(published_profile(&vendor_profile(published)), published);
    }
    assert_eq!(vendor_profile("4g.48gb"), "4g48gb");
    assert_eq!(vendor_profile("g1.c1.i1"), "g1.c1.i1");
    let layout = accel_backend::mig_cli::partitioner::MigTool::record_layout(&PpuSmi::default());
    let RecordLayout::PodMarker(spelling) = layout else {
        panic!("T-Head keeps the described system's marker, got {layout:?}");
    };
    assert_eq!(spelling.prefix, MARKER_PREFIX);
    assert_eq!(MARKER_PREFIX, "thead-mig-");
    assert_eq!((spelling.vendor)("2g.24gb"), "2g24gb");
    assert_eq!((spelling.published)("2g24gb"), "2g.24gb");
    let cli = PpuSmiPartitioner::default();
    assert!(matches!(
        accel_backend::partition::Partitioner::record_layout(&cli),
        RecordLayout::PodMarker(_)
    ));
}

#[test]
fn geometry_reads_the_uuid_named_card_and_leaves_out_plus_variants() {
    let driver = Driver::default();
    let geometry = PpuSmiPartitioner::default()
        .geometry(&driver, &card())
        .unwrap();
    let names: Vec<(&str, u32, u32, &[u32])> = geometry
        .profiles
        .iter()
        .map(|p| (p.name.as_str(), p.id, p.size, p.starts.as_slice()))
        .collect();
    assert_eq!(
        names,
        [("8g.96gb", 3, 8, &[0][..]), ("4g.48gb", 2, 4, &[0, 4][..])]
    );
    assert_eq!(geometry.profiles[1].memory_mib, Some(49152));
    assert!(driver.seen.lock().unwrap().iter().all(|c| c.contains(CARD)));
}

#[test]
fn a_create_pairs_its_mig_uuid_by_device_number_and_a_destroy_takes_ci_then_gi() {
    let driver = Driver::default();
    let p = PpuSmiPartitioner::default();
    let first = p.create(&driver, &card(), 2, 0).unwrap();
    let second = p.create(&driver, &card(), 2, 4).unwrap();
    assert_eq!((first.gpu_instance, first.start, first.size), (0, 0, 4));
    assert_eq!(first.profile, "4g.48gb");
    assert_eq!(first.compute_instances, [0]);
    assert_eq!(
        first.uuid.as_deref(),
        Some("MIG-79c62632-04cc-574b-af7b-cb2e307120000")
    );
    assert_eq!(
        second.uuid.as_deref(),
        Some("MIG-79c62632-04cc-574b-af7b-cb2e307120001")
    );
    let full = p.create(&driver, &card(), 2, 0).unwrap_err();
    assert_eq!(full.kind, PartitionErrorKind::NoRoom);
    assert!(
        full.to_string()
            .contains(&format!("ppu-smi mig -i {CARD} -cgi 2:0 -C"))
    );

    driver.instances.lock().unwrap()[1].6 = true;
    assert_eq!(p.busy(&driver, &card()).unwrap(), [1]);
    let in_use = p.destroy(&driver, &card(), 1, Some(0)).unwrap_err();
    assert_eq!(in_use.kind, PartitionErrorKind::InUse);
    driver.instances.lock().unwrap()[1].6 = false;
    p.destroy(&driver, &card(), 1, Some(0)).unwrap();
    p.destroy(&driver, &card(), 1, Some(0)).unwrap();
    let left: Vec<u32> = p
        .instances(&driver, &card())
        .unwrap()
        .iter()
        .map(|i| i.gpu_instance)
        .collect();
    assert_eq!(left, [0]);
    // A GI destroyed with its CI still under it is refused by the driver, and said so.
    let refused = p.destroy(&driver, &card(), 0, None).unwrap_err();
    assert!(refused.to_string().contains("is in use, please destory"));
}

#[test]
fn an_instance_whose_uuid_cannot_be_paired_is_undone() {
    let driver = Driver {
        unpaired: true,
        ..Driver::default()
    };
    let e = PpuSmiPartitioner::default()
        .create(&driver, &card(), 3, 0)
        .unwrap_err();
    assert_eq!(e.kind, PartitionErrorKind::Unreadable);
    assert!(e.to_string().contains("cannot be paired"), "{e}");
    assert!(e.to_string().contains("it made was destroyed"), "{e}");
    assert!(driver.instances.lock().unwrap().is_empty());
}

#[test]
fn a_compute_process_outside_any_instance_is_unreadable() {
    let driver = Driver::default();
    driver
        .instances
        .lock()
        .unwrap()
        .push((0, 2, "4g48gb", 0, 4, Some(0), true));
    let p = PpuSmiPartitioner::default();
    assert_eq!(p.busy(&driver, &card()).unwrap(), [0]);
    let other = PartitionGpu {
        index: 0,
        uuid: Some("GPU-missing".into()),
    };
    let e = p.busy(&driver, &other).unwrap_err();
    assert!(e.to_string().contains("does not list this card"), "{e}");
}
