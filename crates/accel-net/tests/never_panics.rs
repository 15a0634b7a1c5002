//! The network reader takes any tree without panicking: every attribute it reads of a real
//! capture mutated (bit flips, format bytes, cut lines), and trees of random links (loops,
//! `..` past the root, absolute targets, links to files) built from scratch. Only panics fail;
//! what each read answers is the corpus test's business.

mod support;

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use accel_core::interfaces::{all_links_failed, rdma_labels, significant};
use accel_host::FsHost;
use accel_net::{read_interfaces, verbs_device};
use accel_testkit::mutate::{Mutation, mutation};
use proptest::prelude::*;

/// The 32em64t capture unpacked once, and the attribute files the reader reads in it.
fn capture() -> &'static (tempfile::TempDir, PathBuf, Vec<PathBuf>) {
    static CAPTURE: OnceLock<(tempfile::TempDir, PathBuf, Vec<PathBuf>)> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let top = support::unpack(
            &support::fixtures().join("hwloc__32em64t-2n8c+dax+nvme+mic+dimms.tar.bz2"),
            dir.path(),
        );
        let mut files = Vec::new();
        collect(&top.join("sys/devices"), &mut files);
        files.retain(|f| {
            let name = f.file_name().unwrap().to_string_lossy();
            [
                "mtu",
                "operstate",
                "carrier",
                "numa_node",
                "local_cpulist",
                "vendor",
                "device",
                "state",
                "phys_state",
                "ibdev",
            ]
            .contains(&name.as_ref())
        });
        assert!(files.len() > 10, "the attributes the reader reads");
        (dir, top, files)
    })
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            collect(&entry.path(), out);
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
}

fn read_everything(root: &Path) {
    let host = FsHost::new(root);
    if let Ok(list) = read_interfaces(&host) {
        let _ = rdma_labels(&list, &[]);
        let _ = significant(&list);
        let _ = all_links_failed(&list);
        for i in &list {
            let _ = verbs_device(&host, &i.rdma_device);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn mutated_attributes_never_panic(edits in prop::collection::vec(mutation(), 4)) {
        let (_keep, top, files) = capture();
        let copy = tempfile::tempdir().unwrap();
        let made = support::relink(top, copy.path());
        prop_assert!(made > 0);
        for (k, m) in edits.iter().enumerate() {
            let file = &files[(k * 7919 + m.edits.len()) % files.len()];
            let target = copy.path().join(file.strip_prefix(top).unwrap());
            let original = std::fs::read(file).unwrap();
            std::fs::write(&target, Mutation::apply(m, &original)).unwrap();
        }
        read_everything(copy.path());
    }

    #[test]
    fn random_links_never_panic(
        entries in prop::collection::vec(
            (0usize..6, prop::sample::select(vec![
                "../../devices/virtual/net/x", "../../devices/pci0000:00/0000:00:01.0/net/e",
                "..", "../..", "../../../../../../..", "/etc", "self", "loop", "", ".",
                "../../devices/pci0000:00/0000:00:01.0", "device", "../../class/net",
            ])),
            1..12,
        ),
        files in prop::collection::vec((0usize..6, "[ -~]{0,12}"), 0..6),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let places = [
            "sys/class/net/a", "sys/class/net/b", "sys/class/infiniband/i",
            "sys/devices/pci0000:00/0000:00:01.0/net/e/device",
            "sys/devices/pci0000:00/0000:00:01.0/virtfn0",
            "sys/devices/pci0000:00/0000:00:01.0/infiniband/i/device",
        ];
        for p in ["sys/class/net", "sys/class/infiniband", "sys/devices/virtual/net/x",
                  "sys/devices/pci0000:00/0000:00:01.0/net/e",
                  "sys/devices/pci0000:00/0000:00:01.0/infiniband/i/ports/1"] {
            std::fs::create_dir_all(root.join(p)).unwrap();
        }
        for (place, target) in entries {
            let _ = symlink(target, root.join(places[place]));
        }
        let attributes = [
            "sys/devices/pci0000:00/0000:00:01.0/net/e/mtu",
            "sys/devices/pci0000:00/0000:00:01.0/numa_node",
            "sys/devices/pci0000:00/0000:00:01.0/infiniband/i/ports/1/state",
            "sys/devices/pci0000:00/0000:00:01.0/infiniband/i/ports/1/phys_state",
            "sys/devices/virtual/net/x/operstate",
            "sys/class/net/c",
        ];
        for (place, text) in files {
            let _ = std::fs::write(root.join(attributes[place]), text);
        }
        read_everything(root);
    }
}
