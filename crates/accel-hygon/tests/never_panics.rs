//! Every Hygon parser takes any bytes without panicking: the tools' and the host's files are
//! untrusted input. Random text, text built from the formats' fragments, and mutated real
//! captures.

use std::sync::OnceLock;

use accel_hygon::{detector, health, hysmi, module, registry, rocminfo, vdev};
use proptest::prelude::*;

fn corpus() -> &'static [Vec<u8>] {
    static CORPUS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        accel_testkit::read_captures(
            &accel_testkit::shared_fixtures("hygon"),
            &["hy-smi", "rocm-smi", "rocminfo", "dev"],
        )
    })
}

fn read_all(s: &str) {
    let _ = hysmi::parse_json("hy-smi", s);
    let _ = hysmi::parse_table(s);
    let _ = hysmi::product_name(s);
    let _ = rocminfo::parse(s);
    let _ = registry::parse_dev(s);
    let _ = registry::parse_ci_name(s);
    let _ = registry::parse_mig_uuid(s);
    if let Ok(conf) = registry::parse_conf(s) {
        let _ = registry::parse_conf(&conf.render());
    }
    let _ = accel_hygon::mig::se_units(s);
    let _ = registry::dev_index(s);
    let _ = module::parse_version(s);
    let _ = detector::parse_umc_err_count(s);
    let _ = health::parse_healthcheck(s);
    if let Ok(conf) = vdev::parse(s) {
        assert_eq!(
            vdev::parse(&vdev::render(&conf)).map(|c| c.cu_mask),
            Ok(conf.cu_mask)
        );
    }
}

fn fragments() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("{".to_string()),
        Just("ue: 18446744073709551616\n".to_string()),
        Just("HCU[0]          : Bus Id : 0000:09:00.0         : Healthy\n".to_string()),
        Just("DCU[4294967296]:Bus Id:ff:ff.f:\n".to_string()),
        Just("}".to_string()),
        Just(", \"card1\": {".to_string()),
        Just("\"card0\": {\"Unique ID\": \"ffffffffffffffff\"".to_string()),
        Just("\"vram Total Memory (MiB)\": \"N/A\"".to_string()),
        Just("DCU  Temp  AvgPwr  VRAM%  DCU%\n".to_string()),
        Just("0    49.0C  118.0W  0%  0%\n".to_string()),
        Just("*******\nAgent 1\n*******\n".to_string()),
        Just("  Compute Unit:  12(0xc)\n".to_string()),
        Just("PciBusId: 0000:09:00.0\n".to_string()),
        Just("cu_mask: 0xffffffffffffffff\n".to_string()),
        Just("vdev_id: 199\npipe_id: 19\ncu_count: 1\n".to_string()),
        Just("dev12gi3ci0.conf".to_string()),
        Just("mig_uuid: ".to_string()),
        Just("\u{1b}[37m".to_string()),
        "[ -~]{0,12}".prop_map(String::from),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn random_text(s in "\\PC{0,400}") {
        read_all(&s);
    }

    #[test]
    fn fragments_of_the_formats(s in fragments()) {
        read_all(&s);
    }

    #[test]
    fn mutated_captures(m in accel_testkit::mutate::mutation(), pick in 0usize..64) {
        let corpus = corpus();
        prop_assume!(!corpus.is_empty());
        let original = &corpus[pick % corpus.len()];
        read_all(&String::from_utf8_lossy(&m.apply(original)));
    }
}
