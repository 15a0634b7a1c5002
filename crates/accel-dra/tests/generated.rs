//! The committed code in `src/gen/` is exactly what protox + tonic-prost-build make of the
//! `.proto` files; with `ACCEL_DRA_REGENERATE=1` this test rewrites it instead.

use std::path::Path;

const PROTO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/proto");
const GEN_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src/gen");
const FILES: [&str; 3] = [
    "k8s.io.kubelet.pkg.apis.dra.v1.rs",
    "pluginregistration.rs",
    "v1alpha1.rs",
];

fn generate(out: &Path) {
    let descriptors = protox::compile(
        [
            "dra/v1/api.proto",
            "pluginregistration/v1/api.proto",
            "dra-health/v1alpha1/api.proto",
        ],
        [PROTO_DIR],
    )
    .expect("the .proto files compile");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .btree_map(".")
        .out_dir(out)
        .compile_fds(descriptors)
        .expect("code generation succeeds");
}

#[test]
fn committed_code_matches_the_protos() {
    let temp = tempfile::tempdir().unwrap();
    generate(temp.path());
    let regenerate = std::env::var_os("ACCEL_DRA_REGENERATE").is_some();
    let mut stale = Vec::new();
    for file in FILES {
        let fresh = std::fs::read_to_string(temp.path().join(file)).unwrap();
        let committed_path = Path::new(GEN_DIR).join(file);
        if regenerate {
            std::fs::write(&committed_path, &fresh).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
        if committed != fresh {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "src/gen/{stale:?} differ from the .proto files; run ACCEL_DRA_REGENERATE=1 cargo test -p accel-dra --test generated"
    );
}
