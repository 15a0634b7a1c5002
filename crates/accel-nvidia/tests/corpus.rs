//! The captured corpus: every file in `../shared/fixtures/nvidia/{smi-xml,smi-csv,list,topo,mig}`
//! is read by its reader and checked against the facts written below by reading the files. A
//! folder that is missing, or a file with no expectation here, fails the test: a new capture must
//! be looked at before it counts as read.

use std::fs;
use std::path::PathBuf;

use accel_core::inventory::MigMode;
use accel_nvidia::smi::{csv, list, mig, topo, value, xml};

fn fixtures(folder: &str) -> PathBuf {
    accel_testkit::shared_fixture_folder("nvidia", folder)
}

/// Every file name in a fixture folder, sorted.
fn files(folder: &str) -> Vec<String> {
    accel_testkit::file_names(&fixtures(folder))
        .into_iter()
        .collect()
}

fn read(folder: &str, name: &str) -> Vec<u8> {
    fs::read(fixtures(folder).join(name)).unwrap()
}

/// Fails when the folder and the table of expectations disagree on which files exist.
fn assert_same_files(folder: &str, expected: impl IntoIterator<Item = &'static str>) {
    accel_testkit::assert_folder_covered(&fixtures(folder), expected);
}

struct XmlFile {
    name: &'static str,
    driver: Option<&'static str>,
    cuda: Option<&'static str>,
    gpus: &'static [XmlGpu],
}

struct XmlGpu {
    uuid: &'static str,
    product: &'static str,
    bus: &'static str,
    memory_mib: Option<u64>,
    mig: Option<MigMode>,
    /// Processes whose type contains C.
    compute: usize,
}

/// In document order, which is not index order (the K80 file's minors run 1,2,3,0) and where
/// masked captures repeat UUIDs.
const XML: &[XmlFile] = &[
    XmlFile {
        name: "netdata__a100-sxm4-40gb-mig-510.47.03-v11.xml",
        driver: Some("510.47.03"),
        cuda: Some("11.6"),
        gpus: &[XmlGpu {
            uuid: "GPU-27b94a00-ed54-5c24-b1fd-1054085de32a",
            product: "NVIDIA A100-SXM4-40GB",
            bus: "00000000:00:04.0",
            memory_mib: Some(40960),
            mig: Some(MigMode::Enabled),
            compute: 0,
        }],
    },
    XmlFile {
        name: "netdata__rtx-3060-laptop-515.65.01-v11.xml",
        driver: Some("515.65.01"),
        cuda: Some("11.7"),
        gpus: &[XmlGpu {
            uuid: "GPU-473d8d0f-d462-185c-6b36-6fc23e23e571",
            product: "NVIDIA GeForce RTX 3060 Laptop GPU",
            bus: "00000000:01:00.0",
            memory_mib: Some(6144),
            mig: None,
            compute: 0,
        }],
    },
    XmlFile {
        name: "netdata__tesla-p100-pcie-16gb-510.47.03-v11.xml",
        driver: Some("510.47.03"),
        cuda: Some("11.6"),
        gpus: &[XmlGpu {
            uuid: "GPU-d3da8716-eaab-75db-efc1-60e88e1cd55e",
            product: "Tesla P100-PCIE-16GB",
            bus: "00000000:00:04.0",
            memory_mib: Some(16384),
            mig: None,
            compute: 0,
        }],
    },
    XmlFile {
        name: "pai__2x-gtx-1070-384.66-v9.xml",
        driver: Some("384.66"),
        cuda: None,
        gpus: &[
            XmlGpu {
                uuid: "GPU-e511a7b2-f9d5-ba47-9b98-853732ca6c1b",
                product: "GeForce GTX 1070",
                bus: "00000000:01:00.0",
                memory_mib: Some(8112),
                mig: None,
                compute: 1,
            },
            XmlGpu {
                uuid: "GPU-28daffaf-8abe-aaf8-c298-4bd13aecb5e6",
                product: "GeForce GTX 1070",
                bus: "00000000:03:00.0",
                memory_mib: Some(8114),
                mig: None,
                compute: 1,
            },
        ],
    },
    XmlFile {
        name: "pai__2x-rtx-2080-ti-410.73-v10.xml",
        driver: Some("410.73"),
        cuda: Some("10.0"),
        gpus: &[
            XmlGpu {
                uuid: "GPU-57567e11-0be2-381b-5132-2ad95c262e58",
                product: "GeForce RTX 2080 Ti",
                bus: "00000000:02:00.0",
                memory_mib: Some(10989),
                mig: None,
                compute: 0,
            },
            XmlGpu {
                uuid: "GPU-ef1d0068-5bfd-f1e4-7e79-ff35d71d44b8",
                product: "GeForce RTX 2080 Ti",
                bus: "00000000:03:00.0",
                memory_mib: Some(10989),
                mig: None,
                compute: 0,
            },
        ],
    },
    XmlFile {
        name: "pai__4x-tesla-k80-430.26-v10.xml",
        driver: Some("430.26"),
        cuda: None,
        gpus: &[
            XmlGpu {
                uuid: "GPU-c3b26f7a-8dcb-619c-fa1b-8029265a4db0",
                product: "Tesla K80",
                bus: "00001580:00:00.0",
                memory_mib: Some(11441),
                mig: None,
                compute: 1,
            },
            XmlGpu {
                uuid: "GPU-b01b80eb-0f18-1df0-cf88-0725bd90f1e1",
                product: "Tesla K80",
                bus: "00002DF7:00:00.0",
                memory_mib: Some(11441),
                mig: None,
                compute: 1,
            },
            XmlGpu {
                uuid: "GPU-30bc2701-3bc2-5f35-0ebd-9867a077e138",
                product: "Tesla K80",
                bus: "00004968:00:00.0",
                memory_mib: Some(11441),
                mig: None,
                compute: 0,
            },
            XmlGpu {
                uuid: "GPU-3341aba2-f01d-2c1f-7dd4-e389779faec2",
                product: "Tesla K80",
                bus: "0000F8D6:00:00.0",
                memory_mib: Some(11441),
                mig: None,
                compute: 0,
            },
        ],
    },
    XmlFile {
        name: "pai__gt-730-384.111-v9.xml",
        driver: Some("384.111"),
        cuda: None,
        gpus: &[XmlGpu {
            uuid: "GPU-09cb2925-9d01-5ca4-810b-6cdebe86b71a",
            product: "GeForce GT 730",
            bus: "00000000:01:00.0",
            memory_mib: None,
            mig: None,
            compute: 0,
        }],
    },
    XmlFile {
        name: "telegraf__dual-rtx-2070-590.44.01-v13.xml",
        driver: Some("590.44.01"),
        cuda: Some("13.1"),
        gpus: &[
            XmlGpu {
                uuid: "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                product: "NVIDIA GeForce RTX 2070",
                bus: "00000000:01:00.0",
                memory_mib: Some(8192),
                mig: None,
                compute: 0,
            },
            XmlGpu {
                uuid: "GPU-12345678-aaaa-bbbb-cccc-0123456789cd",
                product: "NVIDIA GeForce RTX 2070",
                bus: "00000000:02:00.0",
                memory_mib: Some(8192),
                mig: None,
                compute: 0,
            },
        ],
    },
    XmlFile {
        name: "telegraf__dual-rtx-a5000-590.44.01-v13.xml",
        driver: Some("590.44.01"),
        cuda: Some("13.1"),
        gpus: &[
            XmlGpu {
                uuid: "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
                product: "NVIDIA RTX A5000",
                bus: "00000000:81:00.0",
                memory_mib: Some(24564),
                mig: None,
                compute: 1,
            },
            XmlGpu {
                uuid: "GPU-12345678-aaaa-bbbb-cccc-0123456789cd",
                product: "NVIDIA RTX A5000",
                bus: "00000000:C1:00.0",
                memory_mib: Some(24564),
                mig: None,
                compute: 1,
            },
        ],
    },
    XmlFile {
        name: "telegraf__gt-1030-470.74-v11.xml",
        driver: Some("470.74"),
        cuda: Some("11.4"),
        gpus: &[XmlGpu {
            uuid: "GPU-857c6374-f681-cf3a-f99f-9063a87b8ac0",
            product: "NVIDIA GeForce GT 1030",
            bus: "00000000:2D:00.0",
            memory_mib: Some(1998),
            mig: None,
            compute: 0,
        }],
    },
    XmlFile {
        name: "telegraf__gtx-1070-ti-v10-excerpt.xml",
        driver: None,
        cuda: None,
        gpus: &[XmlGpu {
            uuid: "GPU-f9ba66fc-a7f5-94c5-da19-019ef2f9c665",
            product: "GeForce GTX 1070 Ti",
            bus: "00000000:01:00.0",
            memory_mib: Some(4096),
            mig: None,
            compute: 0,
        }],
    },
    XmlFile {
        name: "telegraf__quadro-p2000-525.125.06-v12.xml",
        driver: Some("525.125.06"),
        cuda: Some("12.0"),
        gpus: &[XmlGpu {
            uuid: "GPU-396caaed-39ca-3199-2e68-717cdb786ec6",
            product: "Quadro P2000",
            bus: "00000000:17:00.0",
            memory_mib: Some(5120),
            mig: None,
            compute: 0,
        }],
    },
    XmlFile {
        name: "telegraf__quadro-p400-418.43-nodoctype.xml",
        driver: Some("418.43"),
        cuda: Some("10.1"),
        gpus: &[XmlGpu {
            uuid: "GPU-8f750be4-dfbc-23b9-b33f-da729a536494",
            product: "Quadro P400",
            bus: "00000000:43:00.0",
            memory_mib: Some(1998),
            mig: None,
            compute: 0,
        }],
    },
    XmlFile {
        name: "telegraf__rtx-3060-570.124.04-v12.xml",
        driver: Some("570.124.04"),
        cuda: Some("12.8"),
        gpus: &[XmlGpu {
            uuid: "GPU-d6889ff6-2523-9142-ca3c-1ca3f396a625",
            product: "NVIDIA GeForce RTX 3060",
            bus: "00000000:2D:00.0",
            memory_mib: Some(12288),
            mig: None,
            compute: 0,
        }],
    },
    XmlFile {
        name: "telegraf__rtx-3080-536.40-win-v12.xml",
        driver: Some("536.40"),
        cuda: Some("12.2"),
        gpus: &[XmlGpu {
            uuid: "GPU-19d6d965-2acc-f646-00f8-4c76979aabb4",
            product: "NVIDIA GeForce RTX 3080",
            bus: "00000000:04:00.0",
            memory_mib: Some(10240),
            mig: None,
            compute: 0,
        }],
    },
    XmlFile {
        name: "telegraf__rtx-3090-525.147.05-v12.xml",
        driver: Some("525.147.05"),
        cuda: Some("12.0"),
        gpus: &[XmlGpu {
            uuid: "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
            product: "NVIDIA GeForce RTX 3090",
            bus: "00000000:00:10.0",
            memory_mib: Some(24576),
            mig: None,
            compute: 0,
        }],
    },
    XmlFile {
        name: "telegraf__rtx-3090-590.44.01-v13.xml",
        driver: Some("590.44.01"),
        cuda: Some("13.1"),
        gpus: &[XmlGpu {
            uuid: "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
            product: "NVIDIA GeForce RTX 3090",
            bus: "00000000:09:00.0",
            memory_mib: Some(24576),
            mig: None,
            compute: 0,
        }],
    },
    XmlFile {
        name: "telegraf__rtx-4000-sff-ada-595.84-v13.xml",
        driver: Some("595.84"),
        cuda: Some("13.2"),
        gpus: &[XmlGpu {
            uuid: "GPU-37037c3f-65c8-ec4d-24a9-420204ad8026",
            product: "NVIDIA RTX 4000 SFF Ada Generation",
            bus: "00000000:06:00.0",
            memory_mib: Some(20475),
            mig: None,
            compute: 2,
        }],
    },
    XmlFile {
        name: "telegraf__rtx-pro-6000-blackwell-maxq-590.44.01-v13.xml",
        driver: Some("590.44.01"),
        cuda: Some("13.1"),
        gpus: &[XmlGpu {
            uuid: "GPU-12345678-aaaa-bbbb-cccc-0123456789ab",
            product: "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
            bus: "00000000:61:00.0",
            memory_mib: Some(97887),
            mig: None,
            compute: 1,
        }],
    },
    XmlFile {
        name: "telegraf__tesla-t4-512.78-win.xml",
        driver: Some("512.78"),
        cuda: Some("11.6"),
        gpus: &[XmlGpu {
            uuid: "GPU-f6e826dc-c9d7-ac58-6d5d-9048c9e1c124",
            product: "Tesla T4",
            bus: "00000000:01:00.0",
            memory_mib: Some(15360),
            mig: None,
            compute: 15,
        }],
    },
    XmlFile {
        name: "telegraf__tesla-t4-515.105.01-v11.xml",
        driver: Some("515.105.01"),
        cuda: Some("11.7"),
        gpus: &[XmlGpu {
            uuid: "GPU-d37e67a5-91dd-3774-a5cb-99096249601a",
            product: "Tesla T4",
            bus: "00000000:00:1E.0",
            memory_mib: Some(15360),
            mig: None,
            compute: 1,
        }],
    },
];

#[test]
fn smi_xml_every_file() {
    assert_same_files("smi-xml", XML.iter().map(|f| f.name));
    for file in XML {
        let report = xml::parse(&read("smi-xml", file.name))
            .unwrap_or_else(|e| panic!("{}: {e}", file.name));
        assert_eq!(
            report.driver_version.as_deref(),
            file.driver,
            "{}",
            file.name
        );
        assert_eq!(report.cuda_version.as_deref(), file.cuda, "{}", file.name);
        assert_eq!(report.gpus.len(), file.gpus.len(), "{}", file.name);
        for (gpu, want) in report.gpus.iter().zip(file.gpus) {
            let at = format!("{} {}", file.name, want.uuid);
            assert_eq!(gpu.uuid.as_deref(), Some(want.uuid), "{at}");
            assert_eq!(gpu.product_name.as_deref(), Some(want.product), "{at}");
            assert_eq!(
                gpu.bus_id.map(|b| b.to_string()).as_deref(),
                Some(want.bus),
                "{at}"
            );
            assert_eq!(gpu.memory.total_mib, want.memory_mib, "{at}");
            assert_eq!(gpu.mig_mode, want.mig, "{at}");
            assert_eq!(gpu.compute_process_count(), want.compute, "{at}");
        }
        insta::with_settings!({ snapshot_suffix => file.name, prepend_module_to_snapshot => false }, {
            insta::assert_yaml_snapshot!("smi_xml", report);
        });
    }
}

#[test]
fn smi_xml_specific_facts() {
    let parse = |name: &str| xml::parse(&read("smi-xml", name)).unwrap();

    // MIG: two instances of 42 SMs and 19968 MiB, no UUIDs or profiles in the XML.
    let a100 = parse("netdata__a100-sxm4-40gb-mig-510.47.03-v11.xml");
    let gpu = &a100.gpus[0];
    assert_eq!(gpu.mig_devices.len(), 2);
    assert!(
        gpu.mig_devices.iter().all(|d| d.memory_mib == Some(19968)
            && d.multiprocessors == Some(42)
            && d.uuid.is_none())
    );
    assert_eq!(gpu.mig_devices[1].gpu_instance_id, Some(2));
    assert_eq!(gpu.memory.reserved_mib, Some(605));
    assert_eq!(gpu.gsp_firmware_version.as_deref(), Some("510.47.03"));
    assert_eq!(gpu.product_architecture.as_deref(), Some("Ampere"));
    let ecc = gpu.ecc.as_ref().unwrap();
    assert_eq!(ecc.enabled, Some(true));
    assert_eq!(
        ecc.volatile_uncorrected, None,
        "all N/A in the volatile block"
    );
    assert_eq!(ecc.aggregate_uncorrected, Some(0));
    assert_eq!(gpu.usage.power_draw_w, Some(66.92));
    assert_eq!(gpu.usage.clock_sm_mhz, Some(1410));

    // K80 in a Hyper-V guest: minors 1,2,3,0 in document order, 32-bit domains.
    let k80 = parse("pai__4x-tesla-k80-430.26-v10.xml");
    let minors: Vec<_> = k80.gpus.iter().map(|g| g.minor_number).collect();
    assert_eq!(minors, [Some(1), Some(2), Some(3), Some(0)]);
    assert_eq!(k80.attached_gpus, Some(4));
    assert_eq!(k80.gpus[3].bus_id.unwrap().domain, 0xF8D6);
    assert_eq!(
        k80.gpus[0].ecc.as_ref().unwrap().volatile_corrected,
        Some(0)
    );

    // Windows: WDDM, no minor, no persistence; C+G processes with empty names count.
    let t4 = parse("telegraf__tesla-t4-512.78-win.xml");
    let gpu = &t4.gpus[0];
    assert_eq!(gpu.driver_model.as_deref(), Some("WDDM"));
    assert_eq!(gpu.minor_number, None);
    assert_eq!(gpu.persistence_mode, None);
    assert!(
        gpu.processes
            .iter()
            .any(|p| p.name.as_deref() == Some("C:\\Windows\\explorer.exe"))
    );

    // v13: instant power when average is N/A, current_power_limit, remapped rows present.
    let a5000 = parse("telegraf__dual-rtx-a5000-590.44.01-v13.xml");
    let gpu = &a5000.gpus[0];
    assert_eq!(gpu.usage.power_draw_w, Some(6.41));
    assert_eq!(gpu.usage.power_limit_w, Some(230.0));
    let rows = gpu.remapped_rows.as_ref().unwrap();
    assert_eq!(
        (
            rows.correctable,
            rows.uncorrectable,
            rows.pending,
            rows.failure
        ),
        (Some(0), Some(0), Some(false), Some(false))
    );
    let rtx2070 = parse("telegraf__dual-rtx-2070-590.44.01-v13.xml");
    assert_eq!(rtx2070.gpus[0].usage.power_draw_w, Some(9.23));

    // Trimmed documents: no driver version, attached_gpus disagreeing with the GPUs present.
    assert_eq!(
        parse("telegraf__gtx-1070-ti-v10-excerpt.xml").attached_gpus,
        None
    );
    let gtx1070 = parse("pai__2x-gtx-1070-384.66-v9.xml");
    assert_eq!((gtx1070.attached_gpus, gtx1070.gpus.len()), (Some(6), 2));
}

struct ListFile {
    name: &'static str,
    gpus: &'static [ListGpu],
}

struct ListGpu {
    index: u32,
    product: &'static str,
    uuid: &'static str,
    /// The MIG children's profiles in order, comma-separated.
    mig_profiles: &'static str,
}

const LIST: &[ListFile] = &[
    ListFile {
        name: "exporter-testdata__8x-h100-mig-list.txt",
        gpus: &[
            ListGpu {
                index: 0,
                product: "NVIDIA H100 80GB HBM3",
                uuid: "GPU-63d1e50a-b952-d15c-0740-12bc14859142",
                mig_profiles: "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb",
            },
            ListGpu {
                index: 1,
                product: "NVIDIA H100 80GB HBM3",
                uuid: "GPU-7e7d2a20-56b8-3220-e75c-1f3185864bda",
                mig_profiles: "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb",
            },
            ListGpu {
                index: 2,
                product: "NVIDIA H100 80GB HBM3",
                uuid: "GPU-20e54ffb-782f-47b6-2d6f-2641b20a4ec1",
                mig_profiles: "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb",
            },
            ListGpu {
                index: 3,
                product: "NVIDIA H100 80GB HBM3",
                uuid: "GPU-8e70d727-bd2d-0723-0bf5-015d93cb90e6",
                mig_profiles: "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb",
            },
            ListGpu {
                index: 4,
                product: "NVIDIA H100 80GB HBM3",
                uuid: "GPU-3d761336-f338-7808-b8d6-dc4c2d11537f",
                mig_profiles: "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb",
            },
            ListGpu {
                index: 5,
                product: "NVIDIA H100 80GB HBM3",
                uuid: "GPU-7d6267d7-7109-1970-9adf-852cdf00b314",
                mig_profiles: "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb",
            },
            ListGpu {
                index: 6,
                product: "NVIDIA H100 80GB HBM3",
                uuid: "GPU-f10582d0-a657-b746-3bed-366c6a014f07",
                mig_profiles: "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb",
            },
            ListGpu {
                index: 7,
                product: "NVIDIA H100 80GB HBM3",
                uuid: "GPU-882ebfab-da98-c41e-357c-47272c0d560d",
                mig_profiles: "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb",
            },
        ],
    },
    ListFile {
        name: "h100-80gb-hbm3-590.48.01-linux.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA H100 80GB HBM3",
            uuid: "GPU-00000000-0000-0000-0000-000000000000",
            mig_profiles: "",
        }],
    },
    ListFile {
        name: "h100-mig-590.48.01-linux.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA H100 80GB HBM3",
            uuid: "GPU-00000000-0000-0000-0000-000000000000",
            mig_profiles: "3g.40gb,2g.20gb,1g.10gb,1g.10gb",
        }],
    },
    ListFile {
        name: "h200-590.48.01-linux.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA H200",
            uuid: "GPU-00000000-0000-0000-0000-000000000000",
            mig_profiles: "",
        }],
    },
    ListFile {
        name: "h200-mig-590.48.01-linux.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA H200",
            uuid: "GPU-00000000-0000-0000-0000-000000000000",
            mig_profiles: "1c.3g.71gb,2c.3g.71gb,2g.35gb,1g.18gb,1g.18gb",
        }],
    },
    ListFile {
        name: "l40s-595.80-linux.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA L40S",
            uuid: "GPU-00000000-0000-0000-0000-000000000000",
            mig_profiles: "",
        }],
    },
    ListFile {
        name: "rtx2080super-591.86-windows.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA GeForce RTX 2080 SUPER",
            uuid: "GPU-00000000-0000-0000-0000-000000000000",
            mig_profiles: "",
        }],
    },
    ListFile {
        name: "rtx2080super-595.71.05-linux.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA GeForce RTX 2080 SUPER",
            uuid: "GPU-00000000-0000-0000-0000-000000000000",
            mig_profiles: "",
        }],
    },
    ListFile {
        name: "rtx2080super-610.57.04-linux.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA GeForce RTX 2080 SUPER",
            uuid: "GPU-00000000-0000-0000-0000-000000000000",
            mig_profiles: "",
        }],
    },
    ListFile {
        name: "rtx2080super-610.62-windows.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA GeForce RTX 2080 SUPER",
            uuid: "GPU-00000000-0000-0000-0000-000000000000",
            mig_profiles: "",
        }],
    },
    ListFile {
        name: "rtx4080super-595.71.05-linux.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA GeForce RTX 4080 SUPER",
            uuid: "GPU-00000000-0000-0000-0000-000000000000",
            mig_profiles: "",
        }],
    },
];

/// The `-L` captures that sit in the mig folder.
const MIG_LIST: &[ListFile] = &[
    ListFile {
        name: "a100-40gb-r450-L-old-mig-uuid-7x1g__nvidia-cloud-native-docs.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "A100-SXM4-40GB",
            uuid: "GPU-4200ccc0-2667-d4cb-9137-f932c716232a",
            mig_profiles: "1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb",
        }],
    },
    ListFile {
        name: "a100-40gb-r450-L-old-mig-uuid-mixed__nvidia-cloud-native-docs.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "A100-SXM4-40GB",
            uuid: "GPU-4200ccc0-2667-d4cb-9137-f932c716232a",
            mig_profiles: "3g.20gb,2g.10gb,1g.5gb",
        }],
    },
    ListFile {
        name: "a100-40gb-r470-L-8gpu-mixed__nvidia-mig-user-guide.txt",
        gpus: &[
            ListGpu {
                index: 0,
                product: "A100-SXM4-40GB",
                uuid: "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77",
                mig_profiles: "1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb,1g.5gb",
            },
            ListGpu {
                index: 1,
                product: "A100-SXM4-40GB",
                uuid: "GPU-0aa11ebd-627f-af3f-1a0d-4e1fd92fd7b0",
                mig_profiles: "2g.10gb,2g.10gb,2g.10gb",
            },
            ListGpu {
                index: 2,
                product: "A100-SXM4-40GB",
                uuid: "GPU-08279800-1cbe-a71d-f3e6-8f67e15ae54a",
                mig_profiles: "3g.20gb,3g.20gb",
            },
            ListGpu {
                index: 3,
                product: "A100-SXM4-40GB",
                uuid: "GPU-71086aca-c858-d1e0-aae1-275bed1008b9",
                mig_profiles: "7g.40gb",
            },
            ListGpu {
                index: 4,
                product: "A100-SXM4-40GB",
                uuid: "GPU-74fa9fb7-ccf6-8234-e597-7af8ace9a8f5",
                mig_profiles: "1c.3g.20gb,1c.3g.20gb,1c.3g.20gb,1c.3g.20gb,1c.3g.20gb,1c.3g.20gb",
            },
            ListGpu {
                index: 5,
                product: "A100-SXM4-40GB",
                uuid: "GPU-3301e6dd-d38f-0eb5-4665-6c9659f320ff",
                mig_profiles: "4g.20gb",
            },
            ListGpu {
                index: 6,
                product: "A100-SXM4-40GB",
                uuid: "GPU-bb40ed7d-cbbb-d92c-50ac-24803cda52c5",
                mig_profiles: "1c.7g.40gb,2c.7g.40gb,3c.7g.40gb",
            },
            ListGpu {
                index: 7,
                product: "A100-SXM4-40GB",
                uuid: "GPU-95fac899-e21a-0e44-b0fc-e4e3bf106feb",
                mig_profiles: "4g.20gb,2g.10gb",
            },
        ],
    },
    ListFile {
        name: "gh200-480gb-550.54.15-L-mig__kf-cuanschutz-gh-logs.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA GH200 480GB",
            uuid: "GPU-42cb9eed-bcd8-7856-e232-d14e35c16632",
            mig_profiles: "1g.24gb,1g.24gb,1g.24gb,1g.12gb",
        }],
    },
    ListFile {
        name: "h100-80gb-hbm3-L-7x1g.10gb-crlf__nvidia-cloud-native-docs.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA H100 80GB HBM3",
            uuid: "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4",
            mig_profiles: "1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb,1g.10gb",
        }],
    },
    ListFile {
        name: "h100-80gb-hbm3-L-mixed-crlf__nvidia-cloud-native-docs.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA H100 80GB HBM3",
            uuid: "GPU-b4895dbf-9350-2524-a89b-98161ddd9fe4",
            mig_profiles: "3g.40gb,2g.20gb,1g.10gb,1g.10gb",
        }],
    },
    ListFile {
        name: "h100-80gb-hbm3-r570-L-mig-1c.3g__nvidia-mig-user-guide.txt",
        gpus: &[ListGpu {
            index: 0,
            product: "NVIDIA H100 80GB HBM3",
            uuid: "GPU-c08d91cb-e324-655c-71ba-7570956445bc",
            mig_profiles: "1c.3g.40gb,1c.3g.40gb,1c.3g.40gb,1g.10gb,1g.10gb",
        }],
    },
    ListFile {
        name: "rtx-pro-6000-blackwell-server-610.43.02-L-8gpu-32mig__kubesimplify-blog.txt",
        gpus: &[
            ListGpu {
                index: 0,
                product: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                uuid: "GPU-8b89b58e-b427-108d-ac50-06138d78fe78",
                mig_profiles: "1g.24gb,1g.24gb,1g.24gb,1g.24gb",
            },
            ListGpu {
                index: 1,
                product: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                uuid: "GPU-03a041b7-8abf-360a-d1a2-dfd70188cd5f",
                mig_profiles: "1g.24gb,1g.24gb,1g.24gb,1g.24gb",
            },
            ListGpu {
                index: 2,
                product: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                uuid: "GPU-ba09367f-dd50-32ca-e988-7ff66bece885",
                mig_profiles: "1g.24gb,1g.24gb,1g.24gb,1g.24gb",
            },
            ListGpu {
                index: 3,
                product: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                uuid: "GPU-30512c46-708b-f374-5698-ee24be6cd626",
                mig_profiles: "1g.24gb,1g.24gb,1g.24gb,1g.24gb",
            },
            ListGpu {
                index: 4,
                product: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                uuid: "GPU-4c395b7a-a7e6-d90f-1ced-d96e8dd68288",
                mig_profiles: "1g.24gb,1g.24gb,1g.24gb,1g.24gb",
            },
            ListGpu {
                index: 5,
                product: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                uuid: "GPU-04dc48d7-7048-aef5-ad36-f5db716e7668",
                mig_profiles: "1g.24gb,1g.24gb,1g.24gb,1g.24gb",
            },
            ListGpu {
                index: 6,
                product: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                uuid: "GPU-f4f5db98-143f-0a8d-47ce-956fab39a736",
                mig_profiles: "1g.24gb,1g.24gb,1g.24gb,1g.24gb",
            },
            ListGpu {
                index: 7,
                product: "NVIDIA RTX PRO 6000 Blackwell Server Edition",
                uuid: "GPU-f4c61521-240a-da09-2787-e576034e197e",
                mig_profiles: "1g.24gb,1g.24gb,1g.24gb,1g.24gb",
            },
        ],
    },
];

fn check_list(folder: &str, file: &ListFile) {
    let text = String::from_utf8(read(folder, file.name)).unwrap();
    let gpus = list::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", file.name));
    assert_eq!(gpus.len(), file.gpus.len(), "{}", file.name);
    for (gpu, want) in gpus.iter().zip(file.gpus) {
        let at = format!("{} GPU {}", file.name, want.index);
        assert_eq!(gpu.index, want.index, "{at}");
        assert_eq!(gpu.product, want.product, "{at}");
        assert_eq!(gpu.uuid.as_deref(), Some(want.uuid), "{at}");
        let profiles: Vec<&str> = gpu.mig_devices.iter().map(|m| m.profile.as_str()).collect();
        assert_eq!(profiles.join(","), want.mig_profiles, "{at}");
        for (i, mig) in gpu.mig_devices.iter().enumerate() {
            assert_eq!(
                mig.device_index as usize, i,
                "{at}: MIG devices restart at 0 per GPU"
            );
            assert!(
                mig.uuid.as_deref().is_some_and(|u| u.starts_with("MIG-")),
                "{at}"
            );
        }
    }
    insta::with_settings!({ snapshot_suffix => file.name, prepend_module_to_snapshot => false }, {
        insta::assert_yaml_snapshot!("list", gpus);
    });
}

#[test]
fn list_every_file() {
    assert_same_files("list", LIST.iter().map(|f| f.name));
    for file in LIST {
        check_list("list", file);
    }
    let mig_folder: Vec<String> = files("mig");
    for file in MIG_LIST {
        assert!(
            mig_folder.iter().any(|n| n == file.name),
            "{} is gone",
            file.name
        );
        check_list("mig", file);
    }
}

#[test]
fn list_r450_uuid_names_its_instances() {
    let text = String::from_utf8(read(
        "mig",
        "a100-40gb-r450-L-old-mig-uuid-mixed__nvidia-cloud-native-docs.txt",
    ))
    .unwrap();
    let gpus = list::parse(&text).unwrap();
    let ids: Vec<_> = gpus[0]
        .mig_devices
        .iter()
        .map(|m| m.legacy_instance)
        .collect();
    assert_eq!(ids, [Some((2, 0)), Some((3, 0)), Some((9, 0))]);
}

struct CsvFile {
    name: &'static str,
    fields: usize,
    rows: usize,
    /// From `uuid` or `gpu_uuid`, in the first row.
    uuid: Option<&'static str>,
    /// From `name` or `gpu_name`.
    product: Option<&'static str>,
    /// From `pci.bus_id` or `gpu_bus_id`.
    bus: Option<&'static str>,
    memory_total: Option<&'static str>,
}

const CSV: &[CsvFile] = &[
    CsvFile {
        name: "h100-80gb-hbm3-590.48.01-linux__compute-apps-load.csv",
        fields: 8,
        rows: 3,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA H100 80GB HBM3"),
        bus: Some("00000000:00:09.0"),
        memory_total: None,
    },
    CsvFile {
        name: "h100-80gb-hbm3-590.48.01-linux__query-gpu-idle.csv",
        fields: 212,
        rows: 1,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA H100 80GB HBM3"),
        bus: Some("00000000:00:09.0"),
        memory_total: Some("81559 MiB"),
    },
    CsvFile {
        name: "h100-mig-590.48.01-linux__compute-apps-load.csv",
        fields: 8,
        rows: 3,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA H100 80GB HBM3"),
        bus: Some("00000000:00:09.0"),
        memory_total: None,
    },
    CsvFile {
        name: "h100-mig-590.48.01-linux__query-gpu-idle.csv",
        fields: 212,
        rows: 1,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA H100 80GB HBM3"),
        bus: Some("00000000:00:09.0"),
        memory_total: Some("81559 MiB"),
    },
    CsvFile {
        name: "h200-590.48.01-linux__compute-apps-load.csv",
        fields: 8,
        rows: 3,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA H200"),
        bus: Some("00000000:83:00.0"),
        memory_total: None,
    },
    CsvFile {
        name: "h200-590.48.01-linux__query-gpu-idle.csv",
        fields: 212,
        rows: 1,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA H200"),
        bus: Some("00000000:83:00.0"),
        memory_total: Some("143771 MiB"),
    },
    CsvFile {
        name: "h200-mig-590.48.01-linux__compute-apps-load.csv",
        fields: 8,
        rows: 3,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA H200"),
        bus: Some("00000000:83:00.0"),
        memory_total: None,
    },
    CsvFile {
        name: "h200-mig-590.48.01-linux__query-gpu-idle.csv",
        fields: 212,
        rows: 1,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA H200"),
        bus: Some("00000000:83:00.0"),
        memory_total: Some("143771 MiB"),
    },
    CsvFile {
        name: "l40s-595.80-linux__compute-apps-load.csv",
        fields: 8,
        rows: 2,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA L40S"),
        bus: Some("00000000:01:00.0"),
        memory_total: None,
    },
    CsvFile {
        name: "l40s-595.80-linux__query-gpu-idle.csv",
        fields: 202,
        rows: 1,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA L40S"),
        bus: Some("00000000:01:00.0"),
        memory_total: Some("46068 MiB"),
    },
    CsvFile {
        name: "netdata__tesla-p100-query-gpu.csv",
        fields: 15,
        rows: 1,
        uuid: Some("GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6"),
        product: Some("Tesla P100-PCIE-16GB"),
        bus: None,
        memory_total: None,
    },
    CsvFile {
        name: "rtx2080super-591.86-windows__compute-apps-load.csv",
        fields: 8,
        rows: 12,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA GeForce RTX 2080 SUPER"),
        bus: Some("00000000:0C:00.0"),
        memory_total: None,
    },
    CsvFile {
        name: "rtx2080super-591.86-windows__query-gpu-idle.csv",
        fields: 210,
        rows: 1,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA GeForce RTX 2080 SUPER"),
        bus: Some("00000000:0C:00.0"),
        memory_total: Some("8192 MiB"),
    },
    CsvFile {
        name: "rtx2080super-595.71.05-linux__compute-apps-load.csv",
        fields: 8,
        rows: 2,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA GeForce RTX 2080 SUPER"),
        bus: Some("00000000:0C:00.0"),
        memory_total: None,
    },
    CsvFile {
        name: "rtx2080super-595.71.05-linux__query-gpu-idle.csv",
        fields: 202,
        rows: 1,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA GeForce RTX 2080 SUPER"),
        bus: Some("00000000:0C:00.0"),
        memory_total: Some("8192 MiB"),
    },
    CsvFile {
        name: "rtx2080super-610.57.04-linux__compute-apps-load.csv",
        fields: 8,
        rows: 2,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA GeForce RTX 2080 SUPER"),
        bus: Some("00000000:0C:00.0"),
        memory_total: None,
    },
    CsvFile {
        name: "rtx2080super-610.57.04-linux__query-gpu-idle.csv",
        fields: 241,
        rows: 1,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA GeForce RTX 2080 SUPER"),
        bus: Some("00000000:0C:00.0"),
        memory_total: Some("8192 MiB"),
    },
    CsvFile {
        name: "rtx2080super-610.62-windows__compute-apps-load.csv",
        fields: 8,
        rows: 21,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA GeForce RTX 2080 SUPER"),
        bus: Some("00000000:0C:00.0"),
        memory_total: None,
    },
    CsvFile {
        name: "rtx2080super-610.62-windows__query-gpu-idle.csv",
        fields: 239,
        rows: 1,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA GeForce RTX 2080 SUPER"),
        bus: Some("00000000:0C:00.0"),
        memory_total: Some("8192 MiB"),
    },
    CsvFile {
        name: "rtx4080super-595.71.05-linux__compute-apps-load.csv",
        fields: 8,
        rows: 3,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA GeForce RTX 4080 SUPER"),
        bus: Some("00000000:01:00.0"),
        memory_total: None,
    },
    CsvFile {
        name: "rtx4080super-595.71.05-linux__query-gpu-idle.csv",
        fields: 202,
        rows: 1,
        uuid: Some("GPU-00000000-0000-0000-0000-000000000000"),
        product: Some("NVIDIA GeForce RTX 4080 SUPER"),
        bus: Some("00000000:01:00.0"),
        memory_total: Some("16376 MiB"),
    },
];

#[test]
fn smi_csv_every_file() {
    assert_same_files("smi-csv", CSV.iter().map(|f| f.name));
    for file in CSV {
        let text = String::from_utf8(read("smi-csv", file.name)).unwrap();
        let table = csv::parse_table(&text).unwrap_or_else(|e| panic!("{}: {e}", file.name));
        assert_eq!(table.fields.len(), file.fields, "{}", file.name);
        assert_eq!(table.rows.len(), file.rows, "{}", file.name);
        let first = &table.rows[0];
        let get = |a: &str, b: &str| first.get(a).or_else(|| first.get(b)).map(String::as_str);
        assert_eq!(get("uuid", "gpu_uuid"), file.uuid, "{}", file.name);
        assert_eq!(get("name", "gpu_name"), file.product, "{}", file.name);
        assert_eq!(get("pci.bus_id", "gpu_bus_id"), file.bus, "{}", file.name);
        assert_eq!(
            get("memory.total", "memory.total"),
            file.memory_total,
            "{}",
            file.name
        );
        if let Some(total) = file.memory_total {
            assert!(value::mebibytes(total).is_some(), "{}", file.name);
        }
        if file.name.contains("compute-apps") {
            // Every line is a process of the one GPU; none has a `type` column to filter on.
            let counts = csv::compute_app_counts_from_table(&table);
            assert_eq!(
                counts.values().sum::<u32>() as usize,
                file.rows,
                "{}",
                file.name
            );
        }
    }
}

#[test]
fn smi_csv_windows_paths_with_spaces_stay_whole() {
    let text = String::from_utf8(read(
        "smi-csv",
        "rtx2080super-591.86-windows__compute-apps-load.csv",
    ))
    .unwrap();
    let table = csv::parse_table(&text).unwrap();
    assert!(
        table
            .rows
            .iter()
            .any(|r| r.get("process_name").map(String::as_str)
                == Some("C:\\Program Files\\NZXT CAM\\NZXT CAM.exe"))
    );
    assert!(
        table
            .rows
            .iter()
            .all(|r| !r.contains_key("used_gpu_memory")),
        "[N/A] is absent"
    );
    assert_eq!(
        table.units.get("used_gpu_memory").map(String::as_str),
        Some("MiB")
    );
}

/// (file, GPU rows, GPU0's CPU affinity, GPU0's NUMA affinity); `None` rows: not a matrix.
type TopoExpectation = (
    &'static str,
    Option<usize>,
    Option<&'static str>,
    Option<&'static str>,
);

const TOPO: &[TopoExpectation] = &[
    (
        "go-gpuallocator-17__8x-rtx4090-2nic.txt",
        Some(8),
        Some("0-55,112-167"),
        Some("0"),
    ),
    (
        "h100-80gb-hbm3-590.48.01-linux.txt",
        Some(1),
        Some("0-19"),
        Some("0"),
    ),
    (
        "h100-mig-590.48.01-linux.txt",
        Some(1),
        Some("0-19"),
        Some("0"),
    ),
    ("h200-590.48.01-linux.txt", Some(1), Some("0-23"), Some("0")),
    (
        "h200-mig-590.48.01-linux.txt",
        Some(1),
        Some("0-23"),
        Some("0"),
    ),
    ("l40s-595.80-linux.txt", Some(1), Some("0-7"), Some("0")),
    ("rtx2080super-591.86-windows.txt", None, None, None),
    (
        "rtx2080super-595.71.05-linux.txt",
        Some(1),
        Some("0-23"),
        Some("0"),
    ),
    (
        "rtx2080super-610.57.04-linux.txt",
        Some(1),
        Some("0-23"),
        Some("0"),
    ),
    ("rtx2080super-610.62-windows.txt", Some(1), None, None),
    (
        "rtx4080super-595.71.05-linux.txt",
        Some(1),
        Some("0-15"),
        Some("0"),
    ),
];

#[test]
fn topo_every_file() {
    assert_same_files("topo", TOPO.iter().map(|f| f.0));
    for (name, rows, cpu, numa) in TOPO {
        let text = String::from_utf8(read("topo", name)).unwrap();
        let parsed = topo::parse(&text);
        let Some(rows) = rows else {
            assert!(parsed.is_err(), "{name}: a failure text is not a matrix");
            continue;
        };
        let topology = parsed.unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(topology.gpus.len(), *rows, "{name}");
        let gpu0 = &topology.gpus[0];
        assert_eq!(gpu0.index, 0, "{name}");
        assert_eq!(gpu0.peers.get(&0).map(String::as_str), Some("X"), "{name}");
        assert_eq!(gpu0.cpu_affinity.as_deref(), *cpu, "{name}");
        assert_eq!(gpu0.numa_affinity.as_deref(), *numa, "{name}");
        assert_eq!(
            gpu0.gpu_numa_id, None,
            "{name}: N/A everywhere in the corpus"
        );
        insta::with_settings!({ snapshot_suffix => *name, prepend_module_to_snapshot => false }, {
            insta::assert_yaml_snapshot!("topo", topology);
        });
    }
}

#[test]
fn topo_eight_gpus_two_nics() {
    let text = String::from_utf8(read("topo", "go-gpuallocator-17__8x-rtx4090-2nic.txt")).unwrap();
    let topology = topo::parse(&text).unwrap();
    let gpu6 = &topology.gpus[6];
    assert_eq!(gpu6.peers.len(), 8);
    assert_eq!(gpu6.peers.get(&0).map(String::as_str), Some("SYS"));
    assert_eq!(gpu6.nics.get("NIC0").map(String::as_str), Some("PHB"));
    assert_eq!(gpu6.nics.get("NIC1").map(String::as_str), Some("PHB"));
    assert_eq!(gpu6.numa_node(), Some(1));
    assert_eq!(
        topology.gpus[4].cpu_affinity.as_deref(),
        Some("56-111,168-223")
    );
}

/// What a file in the mig folder holds, with its row count.
#[derive(Debug, Clone, Copy)]
enum MigKind {
    /// `nvidia-smi -L` (checked against `MIG_LIST`).
    List,
    Profiles(usize),
    Placements(usize),
    GpuInstances(usize),
    ComputeInstances(usize),
    /// Other commands' output and errors: no listing.
    Other,
}

use MigKind::{ComputeInstances, GpuInstances, List, Other, Placements, Profiles};

const MIG: &[(&str, MigKind)] = &[
    ("a100-40gb-mig-cgi-C__nvidia-mig-user-guide.txt", Other),
    ("a100-40gb-mig-cgi-no-C__nvidia-mig-user-guide.txt", Other),
    (
        "a100-40gb-mig-cgi-partial-failure__nvidia-mig-user-guide.txt",
        Other,
    ),
    ("a100-40gb-mig-dci__nvidia-mig-user-guide.txt", Other),
    ("a100-40gb-mig-dgi__nvidia-mig-user-guide.txt", Other),
    (
        "a100-40gb-mig-lgipp__nvidia-mig-user-guide.txt",
        Placements(7),
    ),
    (
        "a100-40gb-old-mig-cci-no-ci-id__nvidia-mig-user-guide.txt",
        Other,
    ),
    (
        "a100-40gb-old-mig-lci-no-placement__nvidia-mig-user-guide.txt",
        ComputeInstances(3),
    ),
    (
        "a100-40gb-old-mig-lgi-2x3g__nvidia-mig-user-guide.txt",
        GpuInstances(2),
    ),
    (
        "a100-40gb-old-mig-lgi-3-2-1-1__nvidia-mig-user-guide.txt",
        GpuInstances(4),
    ),
    (
        "a100-40gb-old-mig-lgi-7x1g.5gb__nvidia-cloud-native-docs.txt",
        GpuInstances(7),
    ),
    (
        "a100-40gb-r450-L-old-mig-uuid-7x1g__nvidia-cloud-native-docs.txt",
        List,
    ),
    (
        "a100-40gb-r450-L-old-mig-uuid-mixed__nvidia-cloud-native-docs.txt",
        List,
    ),
    (
        "a100-40gb-r470-L-8gpu-mixed__nvidia-mig-user-guide.txt",
        List,
    ),
    (
        "a30-pre-r525-mig-lgi-4x1g.6gb__summer-lo-docker-configuration.txt",
        GpuInstances(4),
    ),
    (
        "a30-pre-r525-mig-lgip-all-used__summer-lo-docker-configuration.txt",
        Profiles(4),
    ),
    (
        "a30-pre-r525-mig-lgipp__summer-lo-docker-configuration.txt",
        Placements(4),
    ),
    (
        "gh200-480gb-550.54.15-L-mig__kf-cuanschutz-gh-logs.txt",
        List,
    ),
    (
        "gh200-480gb-550.54.15-mig-cgi-C__kf-cuanschutz-gh-logs.txt",
        Other,
    ),
    (
        "gh200-480gb-550.54.15-mig-cgi-error-insufficient-resources__kf-cuanschutz-gh-logs.txt",
        Other,
    ),
    (
        "gh200-480gb-550.54.15-mig-lgip__kf-cuanschutz-gh-logs.txt",
        Profiles(7),
    ),
    (
        "h100-80gb-hbm3-L-7x1g.10gb-crlf__nvidia-cloud-native-docs.txt",
        List,
    ),
    (
        "h100-80gb-hbm3-L-mixed-crlf__nvidia-cloud-native-docs.txt",
        List,
    ),
    (
        "h100-80gb-hbm3-r570-L-mig-1c.3g__nvidia-mig-user-guide.txt",
        List,
    ),
    (
        "h100-mig-590.48.01__nvidia-smi-default-table-with-mig-devices.txt",
        Other,
    ),
    (
        "h100-nvl-560.35.03-mig-lgip__alizeechen11-mig-and-mps.txt",
        Profiles(7),
    ),
    (
        "h100-nvl-560.35.03-mig-lgipp__alizeechen11-mig-and-mps.txt",
        Placements(7),
    ),
    (
        "h200-mig-590.48.01__nvidia-smi-default-table-with-mig-devices.txt",
        Other,
    ),
    (
        "rtx-pro-6000-blackwell-server-610.43.02-L-8gpu-32mig__kubesimplify-blog.txt",
        List,
    ),
    (
        "rtx-pro-6000-blackwell-server-610.43.02-mig-cgi-C-4x1g__kubesimplify-blog.txt",
        Other,
    ),
    (
        "rtx-pro-6000-blackwell-server-610.43.02-mig-cgi-C-mixed__kubesimplify-blog.txt",
        Other,
    ),
    (
        "rtx-pro-6000-blackwell-server-610.43.02-mig-dci__kubesimplify-blog.txt",
        Other,
    ),
    (
        "rtx-pro-6000-blackwell-server-610.43.02-mig-dgi-error-in-use__kubesimplify-blog.txt",
        Other,
    ),
    (
        "rtx-pro-6000-blackwell-server-610.43.02-mig-dgi__kubesimplify-blog.txt",
        Other,
    ),
    (
        "rtx-pro-6000-blackwell-server-610.43.02-mig-lci__kubesimplify-blog.txt",
        ComputeInstances(4),
    ),
    (
        "rtx-pro-6000-blackwell-server-610.43.02-mig-lgi-4x1g__kubesimplify-blog.txt",
        GpuInstances(4),
    ),
    (
        "rtx-pro-6000-blackwell-server-610.43.02-mig-lgi-mixed__kubesimplify-blog.txt",
        GpuInstances(3),
    ),
    (
        "rtx-pro-6000-blackwell-server-610.43.02-mig-lgip__kubesimplify-blog.txt",
        Profiles(11),
    ),
    (
        "rtx-pro-6000-blackwell-server-610.43.02-mig-lgipp__kubesimplify-blog.txt",
        Placements(11),
    ),
];

#[test]
fn mig_every_file() {
    assert_same_files("mig", MIG.iter().map(|f| f.0));
    for (name, kind) in MIG {
        let text = String::from_utf8(read("mig", name)).unwrap();
        // Every reader reads every file without panicking.
        let profiles = mig::parse_profiles(&text);
        let placements = mig::parse_placements(&text);
        let gis = mig::parse_gpu_instances(&text);
        let cis = mig::parse_compute_instances(&text);
        let listed = list::parse(&text);
        let count = |r: Result<usize, mig::MigError>| r.unwrap_or_else(|e| panic!("{name}: {e}"));
        let snapshot = |value: serde_json::Value| {
            insta::with_settings!({ snapshot_suffix => *name, prepend_module_to_snapshot => false }, {
                insta::assert_yaml_snapshot!("mig", value);
            });
        };
        match kind {
            List => assert!(
                MIG_LIST.iter().any(|f| f.name == *name),
                "{name}: add it to MIG_LIST"
            ),
            Profiles(n) => {
                assert_eq!(
                    count(profiles.as_ref().map(Vec::len).map_err(Clone::clone)),
                    *n,
                    "{name}"
                );
                snapshot(serde_json::to_value(profiles.unwrap()).unwrap());
            }
            Placements(n) => {
                assert_eq!(
                    count(placements.as_ref().map(Vec::len).map_err(Clone::clone)),
                    *n,
                    "{name}"
                );
                snapshot(serde_json::to_value(placements.unwrap()).unwrap());
            }
            GpuInstances(n) => {
                assert_eq!(
                    count(gis.as_ref().map(Vec::len).map_err(Clone::clone)),
                    *n,
                    "{name}"
                );
                snapshot(serde_json::to_value(gis.unwrap()).unwrap());
            }
            ComputeInstances(n) => {
                assert_eq!(
                    count(cis.as_ref().map(Vec::len).map_err(Clone::clone)),
                    *n,
                    "{name}"
                );
                snapshot(serde_json::to_value(cis.unwrap()).unwrap());
            }
            Other => {
                assert!(profiles.map_or(true, |v| v.is_empty()), "{name}");
                assert!(placements.map_or(true, |v| v.is_empty()), "{name}");
                assert!(gis.map_or(true, |v| v.is_empty()), "{name}");
                assert!(cis.map_or(true, |v| v.is_empty()), "{name}");
                assert!(listed.map_or(true, |v| v.is_empty()), "{name}");
            }
        }
    }
}

#[test]
fn mig_specific_facts() {
    let text = |name: &str| String::from_utf8(read("mig", name)).unwrap();

    let gh200 = mig::parse_profiles(&text(
        "gh200-480gb-550.54.15-mig-lgip__kf-cuanschutz-gh-logs.txt",
    ))
    .unwrap();
    let p = gh200.iter().find(|p| p.name == "3g.48gb").unwrap();
    assert_eq!(
        (p.id, p.memory.as_deref(), p.memory_unit.as_deref()),
        (9, Some("46.50"), Some("GiB"))
    );
    assert_eq!((p.multiprocessors, p.copy_engines), (Some(60), Some(3)));
    let full = gh200.iter().find(|p| p.name == "7g.96gb").unwrap();
    assert_eq!(
        (full.multiprocessors, full.copy_engines, full.optical_flow),
        (Some(132), Some(8), Some(1))
    );

    let a30 = mig::parse_profiles(&text(
        "a30-pre-r525-mig-lgip-all-used__summer-lo-docker-configuration.txt",
    ))
    .unwrap();
    assert!(a30.iter().all(|p| p.instances_free == Some(0)));
    assert_eq!(
        a30.iter().find(|p| p.id == 0).unwrap().memory_mib(),
        Some(24064)
    );

    let pro = mig::parse_profiles(&text(
        "rtx-pro-6000-blackwell-server-610.43.02-mig-lgip__kubesimplify-blog.txt",
    ))
    .unwrap();
    assert!(pro.iter().any(|p| p.name == "1g.24gb+me.all" && p.id == 65));

    let grid = mig::parse_placements(&text(
        "rtx-pro-6000-blackwell-server-610.43.02-mig-lgipp__kubesimplify-blog.txt",
    ))
    .unwrap();
    assert_eq!(grid[0].starts, [0, 3, 6, 9]);
    assert_eq!((grid[10].profile_id, grid[10].size), (32, 12));

    let mixed = mig::parse_gpu_instances(&text(
        "rtx-pro-6000-blackwell-server-610.43.02-mig-lgi-mixed__kubesimplify-blog.txt",
    ))
    .unwrap();
    let ids: Vec<u32> = mixed.iter().map(|g| g.instance_id).collect();
    assert_eq!(ids, [5, 6, 1], "table order, not id order");
    assert_eq!(
        mixed[2].placement,
        Some(mig::Placement { start: 0, size: 6 })
    );

    let old = mig::parse_compute_instances(&text(
        "a100-40gb-old-mig-lci-no-placement__nvidia-mig-user-guide.txt",
    ))
    .unwrap();
    assert!(
        old.iter()
            .all(|c| c.placement.is_none() && c.name == "1c.3g.20gb" && c.gpu_instance_id == 1)
    );
    let new = mig::parse_compute_instances(&text(
        "rtx-pro-6000-blackwell-server-610.43.02-mig-lci__kubesimplify-blog.txt",
    ))
    .unwrap();
    let gis: Vec<u32> = new.iter().map(|c| c.gpu_instance_id).collect();
    assert_eq!(gis, [3, 4, 5, 6]);
}
