//! The `gpustack-cpu-info` NodeFeatureRule as the worker applies it, rendered as YAML for review
//! (an insta snapshot: a change to the rule shows in the diff).

#[test]
fn the_cpu_info_rule() {
    insta::assert_yaml_snapshot!(accel_kube::nfr::cpu_info_rule());
}
