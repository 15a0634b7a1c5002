//! The durable node-local ownership record of a partition (spec §1.6): written, atomically and
//! fsync'd (`accel_host::atomic`), together with the instance the allocator made, before the
//! container is answered; it survives a restart and is what reuse, reclaim and the SSH sidecar
//! read. Where and in what shape is the backend's [`RecordLayout`]:
//!
//! - [`RecordLayout::Partitions`] (NVIDIA): one JSON file per container,
//!   `<data-dir>/partitions/<pod-uid>_<container>.json`, this project's own fields (below);
//! - [`RecordLayout::PodMarker`] (T-Head, spec §6.4): the described system's per-card marker
//!   `<data-dir>/pods/<pod-uid>/c-<container>/<prefix><card UUID>.json` (directory 0777, file
//!   0600) with its keys, the profile in the vendor's spelling, plus this project's `gpuIndex`,
//!   `created` and `deviceIDs` (absent from a marker the described system wrote: read without
//!   them). A marker is invalid when `podUID`, `card`, `profile` or `migUUID` is empty, when
//!   `card` is not the UUID its file name carries, or when `podUID`/`container` are not the
//!   directory's; a container directory holding two markers is an error too (one partition per
//!   container here).
//!
//! Decision (the pages are silent on path, format and fields): the fields are the GPU (UUID and
//! index), the profile as the vendor spells it, the GPU and compute instance ids, the placement,
//! the MIG UUID, the Pod UID, the container, the time it was made (Unix seconds) and the
//! kubelet's device IDs (so the grant can be rebuilt from the record alone). A record
//! that does not parse is a one-line error naming the file; it is never guessed at or acted on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use accel_backend::chores::{CONTAINER_PREFIX, WRITABLE_BY_ANY_USER, is_component};
use accel_backend::partition::{MarkerSpelling, RecordLayout};
use serde::{Deserialize, Serialize};

/// The folder of `--data-dir` that holds the records ([`RecordLayout::Partitions`]).
pub const DIR: &str = "partitions";
/// The folder of `--data-dir` that holds the Pods' directories ([`RecordLayout::PodMarker`]).
pub const PODS_DIR: &str = "pods";

/// One partition's owner and instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OwnershipRecord {
    pub gpu_uuid: Option<String>,
    /// The GPU's index here (absent from a marker the described system wrote).
    pub gpu_index: Option<u32>,
    /// The profile in the published spelling (`3g.40gb`, `4g.48gb`).
    pub profile: String,
    /// The vendor's profile id (absent in records written before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<u32>,
    pub gpu_instance: u32,
    pub compute_instance: u32,
    pub start: u32,
    pub size: u32,
    /// The instance's device UUID (`MIG-…`).
    pub mig_uuid: String,
    pub pod_uid: String,
    pub container: String,
    /// When it was made, in Unix seconds.
    pub created: u64,
    /// The kubelet's device IDs the container was granted it with (absent in records written
    /// before they were kept: the ledger then learns them from the container's next Allocate).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub device_ids: Vec<String>,
    /// The vendor's own facts its marker carries ([`MarkerSpelling::required`]: Hygon's
    /// `pciBusID`, `confPath`), by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vendor: BTreeMap<String, String>,
}

/// The described system's marker (spec §6.4), with this project's additions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Marker {
    #[serde(rename = "podUID")]
    pod_uid: String,
    container: String,
    card: String,
    /// The vendor's spelling (`4g48gb`).
    profile: String,
    #[serde(rename = "profileID", default)]
    profile_id: u32,
    #[serde(rename = "giID")]
    gi_id: u32,
    #[serde(rename = "ciID")]
    ci_id: u32,
    #[serde(rename = "migUUID")]
    mig_uuid: String,
    /// The compute slices of the profile (its `<n>g` prefix); 0 when the name has none.
    #[serde(rename = "computeSlices", default)]
    compute_slices: u32,
    start: u32,
    length: u32,
    #[serde(rename = "gpuIndex", default, skip_serializing_if = "Option::is_none")]
    gpu_index: Option<u32>,
    #[serde(default)]
    created: u64,
    #[serde(rename = "deviceIDs", default, skip_serializing_if = "Vec::is_empty")]
    device_ids: Vec<String>,
    /// Every other key: the vendor's own ([`MarkerSpelling::required`]), and what a later
    /// release writes, kept as read.
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

/// The compute slices a profile name states (`4g.48gb`, `3g.40gb` → 4, 3; vendor naming).
fn compute_slices(profile: &str) -> u32 {
    profile
        .split_once('g')
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or(0)
}

/// Now, in Unix seconds.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The records of one node, in its backend's layout.
#[derive(Debug, Clone)]
pub struct Store {
    data_dir: PathBuf,
    layout: RecordLayout,
}

impl Store {
    pub fn new(data_dir: impl Into<PathBuf>, layout: RecordLayout) -> Store {
        Store {
            data_dir: data_dir.into(),
            layout,
        }
    }

    /// This project's own layout under `data_dir` ([`RecordLayout::Partitions`]).
    pub fn generic(data_dir: impl Into<PathBuf>) -> Store {
        Store::new(data_dir, RecordLayout::Partitions)
    }

    /// The file of one container's record; for a marker, the card's UUID names it.
    pub fn path(
        &self,
        pod_uid: &str,
        container: &str,
        card: Option<&str>,
    ) -> Result<PathBuf, String> {
        match self.layout {
            RecordLayout::Partitions => Ok(self
                .data_dir
                .join(DIR)
                .join(format!("{pod_uid}_{container}.json"))),
            RecordLayout::PodMarker(spelling) => {
                let card = card.ok_or_else(|| {
                    format!("{pod_uid}/{container}: a partition marker names its card by UUID, and the card has none")
                })?;
                if !is_component(card) {
                    return Err(format!(
                        "{pod_uid}/{container}: card {card:?} names no marker file"
                    ));
                }
                Ok(self
                    .container_dir(pod_uid, container)?
                    .join(format!("{}{card}.json", spelling.prefix)))
            }
        }
    }

    fn container_dir(&self, pod_uid: &str, container: &str) -> Result<PathBuf, String> {
        if !is_component(pod_uid) || !is_component(container) {
            return Err(format!(
                "pod {pod_uid:?} container {container:?}: not one path component each"
            ));
        }
        Ok(self
            .data_dir
            .join(PODS_DIR)
            .join(pod_uid)
            .join(format!("{CONTAINER_PREFIX}{container}")))
    }

    /// Writes a record atomically (temp file, fsync, rename; mode 0600).
    pub fn write(&self, record: &OwnershipRecord) -> Result<(), String> {
        let path = self.path(
            &record.pod_uid,
            &record.container,
            record.gpu_uuid.as_deref(),
        )?;
        let text = match self.layout {
            RecordLayout::Partitions => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
                }
                serde_json::to_string_pretty(record)
            }
            RecordLayout::PodMarker(spelling) => {
                if let Some(dir) = path.parent() {
                    accel_backend::chores::make_dir(dir, Some(WRITABLE_BY_ANY_USER))
                        .map_err(|e| e.to_string())?;
                }
                serde_json::to_string_pretty(&marker_of(record, spelling))
            }
        };
        let mut text = text.map_err(|e| format!("{}: {e}", path.display()))?;
        text.push('\n');
        accel_host::atomic::write_atomic(&path, text.as_bytes()).map_err(|e| e.to_string())
    }

    /// Reads one container's record: `Ok(None)` when there is none.
    pub fn read(&self, pod_uid: &str, container: &str) -> Result<Option<OwnershipRecord>, String> {
        match self.layout {
            RecordLayout::Partitions => read_file(&self.path(pod_uid, container, None)?),
            RecordLayout::PodMarker(spelling) => {
                let dir = self.container_dir(pod_uid, container)?;
                let found = markers_in(&dir, spelling)?;
                match found.as_slice() {
                    [] => Ok(None),
                    [one] => read_marker(one, pod_uid, container, spelling).map(Some),
                    [first, ..] => Err(format!(
                        "{}: {} partition markers for one container; none is acted on (first {})",
                        dir.display(),
                        found.len(),
                        first.display()
                    )),
                }
            }
        }
    }

    /// Every record, and a one-line error for each file that is not one.
    pub fn read_all(&self) -> (Vec<OwnershipRecord>, Vec<String>) {
        match self.layout {
            RecordLayout::Partitions => read_all_generic(&self.data_dir.join(DIR)),
            RecordLayout::PodMarker(_) => {
                let mut records = Vec::new();
                let mut errors = Vec::new();
                let pods = accel_backend::chores::PodDirs::new(self.data_dir.join(PODS_DIR));
                for dir in pods.containers() {
                    match self.read(&dir.pod_uid, &dir.container) {
                        Ok(Some(record)) => records.push(record),
                        Ok(None) => {}
                        Err(e) => errors.push(e),
                    }
                }
                (records, errors)
            }
        }
    }

    /// Removes one container's record (absent is fine).
    pub fn remove(&self, pod_uid: &str, container: &str) -> Result<(), String> {
        let paths = match self.layout {
            RecordLayout::Partitions => vec![self.path(pod_uid, container, None)?],
            RecordLayout::PodMarker(spelling) => {
                markers_in(&self.container_dir(pod_uid, container)?, spelling)?
            }
        };
        for path in paths {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
        Ok(())
    }
}

fn marker_of(record: &OwnershipRecord, spelling: MarkerSpelling) -> Marker {
    let vendor = (spelling.vendor)(&record.profile);
    Marker {
        pod_uid: record.pod_uid.clone(),
        container: record.container.clone(),
        card: record.gpu_uuid.clone().unwrap_or_default(),
        compute_slices: compute_slices(&vendor),
        profile: vendor,
        profile_id: record.profile_id.unwrap_or(0),
        gi_id: record.gpu_instance,
        ci_id: record.compute_instance,
        mig_uuid: record.mig_uuid.clone(),
        start: record.start,
        length: record.size,
        gpu_index: record.gpu_index,
        created: record.created,
        device_ids: record.device_ids.clone(),
        rest: record
            .vendor
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect(),
    }
}

/// The marker files in one container directory, in name order (none when it is absent).
fn markers_in(dir: &Path, spelling: MarkerSpelling) -> Result<Vec<PathBuf>, String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    };
    let mut found: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(spelling.prefix) && name.ends_with(".json")
        })
        .map(|e| e.path())
        .collect();
    found.sort();
    Ok(found)
}

fn read_marker(
    path: &Path,
    pod_uid: &str,
    container: &str,
    spelling: MarkerSpelling,
) -> Result<OwnershipRecord, String> {
    let bad = |why: String| format!("{}: not a partition marker ({why})", path.display());
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let marker: Marker = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    let named = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let named = named
        .strip_prefix(spelling.prefix)
        .and_then(|n| n.strip_suffix(".json"))
        .unwrap_or_default();
    for (key, value) in [
        ("podUID", &marker.pod_uid),
        ("card", &marker.card),
        ("profile", &marker.profile),
        ("migUUID", &marker.mig_uuid),
    ] {
        if value.is_empty() {
            return Err(bad(format!("{key} is empty")));
        }
    }
    let mut vendor = BTreeMap::new();
    for key in spelling.required {
        match marker.rest.get(*key) {
            Some(serde_json::Value::String(v)) if !v.is_empty() => {
                vendor.insert((*key).to_string(), v.clone());
            }
            _ => return Err(bad(format!("{key} is empty"))),
        }
    }
    if marker.card != named {
        return Err(bad(format!(
            "card {:?} is not the {named:?} its file name carries",
            marker.card
        )));
    }
    if marker.pod_uid != pod_uid || marker.container != container {
        return Err(bad(format!(
            "it names pod {:?} container {:?}, its directory pod {pod_uid:?} container {container:?}",
            marker.pod_uid, marker.container
        )));
    }
    Ok(OwnershipRecord {
        gpu_uuid: Some(marker.card),
        gpu_index: marker.gpu_index,
        profile: (spelling.published)(&marker.profile),
        profile_id: Some(marker.profile_id),
        gpu_instance: marker.gi_id,
        compute_instance: marker.ci_id,
        start: marker.start,
        size: marker.length,
        mig_uuid: marker.mig_uuid,
        pod_uid: marker.pod_uid,
        container: marker.container,
        created: marker.created,
        device_ids: marker.device_ids,
        vendor,
    })
}

fn read_file(path: &Path) -> Result<Option<OwnershipRecord>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: not a partition ownership record ({e})", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

fn read_all_generic(dir: &Path) -> (Vec<OwnershipRecord>, Vec<String>) {
    let mut records = Vec::new();
    let mut errors = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (records, errors),
        Err(e) => {
            errors.push(format!("{}: {e}", dir.display()));
            return (records, errors);
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    for path in paths {
        match read_file(&path) {
            Ok(Some(record)) => records.push(record),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    (records, errors)
}

/// Reads one container's record in this project's own layout ([`Store::generic`]).
pub fn read(
    data_dir: &Path,
    pod_uid: &str,
    container: &str,
) -> Result<Option<OwnershipRecord>, String> {
    Store::generic(data_dir).read(pod_uid, container)
}

/// Every record in this project's own layout ([`Store::generic`]).
pub fn read_all(data_dir: &Path) -> (Vec<OwnershipRecord>, Vec<String>) {
    Store::generic(data_dir).read_all()
}

/// Removes one container's record in this project's own layout ([`Store::generic`]).
pub fn remove(data_dir: &Path, pod_uid: &str, container: &str) -> Result<(), String> {
    Store::generic(data_dir).remove(pod_uid, container)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> OwnershipRecord {
        OwnershipRecord {
            gpu_uuid: Some("GPU-a".into()),
            gpu_index: Some(0),
            profile_id: Some(9),
            profile: "3g.40gb".into(),
            gpu_instance: 1,
            compute_instance: 0,
            start: 4,
            size: 4,
            mig_uuid: "MIG-x".into(),
            pod_uid: "uid-a".into(),
            container: "main".into(),
            created: 1_700_000_000,
            device_ids: vec!["GPU-a::0".into()],
            vendor: BTreeMap::new(),
        }
    }

    #[test]
    fn written_read_back_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        Store::generic(dir.path()).write(&record()).unwrap();
        assert_eq!(read(dir.path(), "uid-a", "main"), Ok(Some(record())));
        let (all, errors) = read_all(dir.path());
        assert_eq!((all, errors), (vec![record()], vec![]));
        remove(dir.path(), "uid-a", "main").unwrap();
        assert_eq!(read(dir.path(), "uid-a", "main"), Ok(None));
        remove(dir.path(), "uid-a", "main").unwrap();
    }

    #[test]
    fn a_corrupt_record_is_one_line_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::generic(dir.path());
        store.write(&record()).unwrap();
        let bad = store.path("uid-b", "main", None).unwrap();
        std::fs::write(&bad, "{\"gpuIndex\": \"zero\"").unwrap();
        let (all, errors) = read_all(dir.path());
        assert_eq!(all, vec![record()]);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with(&bad.display().to_string())
                && errors[0].contains("not a partition ownership record")
                && !errors[0].contains('\n'),
            "{errors:?}"
        );
        assert!(read(dir.path(), "uid-b", "main").is_err());
    }

    // A vendor spelling for the tests: `4g.48gb` ↔ `4g48gb` (T-Head's shape, not its code).
    fn undot(p: &str) -> String {
        p.replacen("g.", "g", 1)
    }
    fn dot(p: &str) -> String {
        match p.split_once('g') {
            Some((n, rest)) if !rest.starts_with('.') => format!("{n}g.{rest}"),
            _ => p.to_string(),
        }
    }
    fn markers(dir: &Path) -> Store {
        Store::new(
            dir,
            RecordLayout::PodMarker(MarkerSpelling {
                prefix: "vendor-mig-",
                vendor: undot,
                published: dot,
                required: &[],
            }),
        )
    }
    fn card_record() -> OwnershipRecord {
        OwnershipRecord {
            gpu_uuid: Some("GPU-c0ffee".into()),
            profile: "4g.48gb".into(),
            profile_id: Some(3),
            ..record()
        }
    }

    #[test]
    fn a_marker_is_the_cards_file_in_the_containers_directory_with_the_vendor_spelling() {
        let dir = tempfile::tempdir().unwrap();
        let store = markers(dir.path());
        store.write(&card_record()).unwrap();
        let path = dir
            .path()
            .join("pods/uid-a/c-main/vendor-mig-GPU-c0ffee.json");
        assert_eq!(
            store.path("uid-a", "main", Some("GPU-c0ffee")),
            Ok(path.clone())
        );
        let on_disk: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(on_disk["podUID"], "uid-a");
        assert_eq!(on_disk["card"], "GPU-c0ffee");
        assert_eq!(
            on_disk["profile"], "4g48gb",
            "the vendor's spelling on disk"
        );
        assert_eq!(on_disk["profileID"], 3);
        assert_eq!(
            (on_disk["giID"].clone(), on_disk["ciID"].clone()),
            (1.into(), 0.into())
        );
        assert_eq!(on_disk["computeSlices"], 4);
        assert_eq!(
            (on_disk["start"].clone(), on_disk["length"].clone()),
            (4.into(), 4.into())
        );
        assert_eq!(on_disk["migUUID"], "MIG-x");
        // Read back in the published spelling, and found by the node-wide walk.
        assert_eq!(store.read("uid-a", "main"), Ok(Some(card_record())));
        assert_eq!(store.read_all(), (vec![card_record()], vec![]));
        // The generic layout does not see it, and removal takes it away.
        assert_eq!(read_all(dir.path()), (vec![], vec![]));
        store.remove("uid-a", "main").unwrap();
        assert_eq!(store.read("uid-a", "main"), Ok(None));
        assert!(!path.exists());
    }

    #[test]
    fn a_marker_the_described_system_wrote_reads_without_our_additions() {
        let dir = tempfile::tempdir().unwrap();
        let store = markers(dir.path());
        let path = dir.path().join("pods/uid-s/c-app/vendor-mig-GPU-9.json");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            r#"{"podUID":"uid-s","container":"app","card":"GPU-9","profile":"2g24gb",
               "profileID":5,"giID":7,"ciID":0,"migUUID":"MIG-s","computeSlices":2,
               "start":2,"length":2}"#,
        )
        .unwrap();
        let got = store.read("uid-s", "app").unwrap().unwrap();
        assert_eq!(
            (
                got.gpu_uuid.as_deref(),
                got.gpu_index,
                got.profile.as_str(),
                got.profile_id
            ),
            (Some("GPU-9"), None, "2g.24gb", Some(5))
        );
        assert_eq!(
            (got.gpu_instance, got.start, got.size, got.created),
            (7, 2, 2, 0)
        );
        assert!(got.device_ids.is_empty());
    }

    #[test]
    fn a_marker_that_lies_about_its_place_or_has_a_twin_is_refused_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let store = markers(dir.path());
        let base = dir.path().join("pods/uid-a/c-main");
        std::fs::create_dir_all(&base).unwrap();
        let write = |name: &str, card: &str, pod: &str, mig: &str| {
            let text = format!(
                r#"{{"podUID":"{pod}","container":"main","card":"{card}","profile":"1g12gb",
                    "giID":1,"ciID":0,"migUUID":"{mig}","start":0,"length":1}}"#
            );
            std::fs::write(base.join(name), text).unwrap();
        };
        let refused = |why: &str| {
            let e = store.read("uid-a", "main").unwrap_err();
            assert!(e.contains(why) && !e.contains('\n'), "{why}: {e}");
            let (all, errors) = store.read_all();
            assert!(all.is_empty() && errors.len() == 1, "{all:?} {errors:?}");
        };
        write("vendor-mig-GPU-1.json", "GPU-2", "uid-a", "MIG-1");
        refused("is not the \"GPU-1\" its file name carries");
        write("vendor-mig-GPU-1.json", "GPU-1", "uid-b", "MIG-1");
        refused("its directory pod \"uid-a\"");
        write("vendor-mig-GPU-1.json", "GPU-1", "uid-a", "");
        refused("migUUID is empty");
        write("vendor-mig-GPU-1.json", "GPU-1", "uid-a", "MIG-1");
        assert!(store.read("uid-a", "main").unwrap().is_some());
        write("vendor-mig-GPU-2.json", "GPU-2", "uid-a", "MIG-2");
        refused("2 partition markers for one container");
        // A card without a UUID cannot name its marker.
        let mut nameless = card_record();
        nameless.gpu_uuid = None;
        assert!(
            store
                .write(&nameless)
                .unwrap_err()
                .contains("names its card by UUID")
        );
    }

    #[test]
    fn a_markers_vendor_keys_are_written_and_a_marker_without_them_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(
            dir.path(),
            RecordLayout::PodMarker(MarkerSpelling {
                prefix: "hygon-mig-",
                vendor: undot,
                published: dot,
                required: &["pciBusID", "confPath"],
            }),
        );
        let record = OwnershipRecord {
            vendor: BTreeMap::from([
                ("pciBusID".to_string(), "0000:0f:00.0".to_string()),
                (
                    "confPath".to_string(),
                    "/etc/dmi_mig_config/ci/dev0gi3ci0.conf".to_string(),
                ),
            ]),
            ..card_record()
        };
        store.write(&record).unwrap();
        let path = store.path("uid-a", "main", Some("GPU-c0ffee")).unwrap();
        let on_disk: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(on_disk["pciBusID"], "0000:0f:00.0");
        assert_eq!(
            on_disk["confPath"],
            "/etc/dmi_mig_config/ci/dev0gi3ci0.conf"
        );
        assert_eq!(store.read("uid-a", "main"), Ok(Some(record)));
        // The described system fails closed on an empty confPath; so does this one.
        let mut bare = on_disk.clone();
        bare["confPath"] = "".into();
        std::fs::write(&path, serde_json::to_vec(&bare).unwrap()).unwrap();
        let refused = store.read("uid-a", "main").unwrap_err();
        assert!(refused.contains("confPath is empty"), "{refused}");
    }
}
