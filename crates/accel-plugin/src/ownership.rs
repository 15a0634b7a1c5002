//! The durable node-local ownership record of a partition (spec §1.6): written, atomically and
//! fsync'd (`accel_host::atomic`), together with the instance the allocator made, before the
//! container is answered; it survives a restart and is what reuse, reclaim and the SSH sidecar
//! read. One JSON file per container, `<data-dir>/partitions/<pod-uid>_<container>.json`.
//!
//! Decision (the pages are silent on path, format and fields): the fields are the GPU (UUID and
//! index), the profile as the vendor spells it, the GPU and compute instance ids, the placement,
//! the MIG UUID, the Pod UID, the container, the time it was made (Unix seconds) and the
//! kubelet's device IDs (so the grant can be rebuilt from the record alone). A record
//! that does not parse is a one-line error naming the file; it is never guessed at or acted on.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// The folder of `--data-dir` that holds the records.
pub const DIR: &str = "partitions";

/// One partition's owner and instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OwnershipRecord {
    pub gpu_uuid: Option<String>,
    pub gpu_index: u32,
    /// The profile as the vendor spells it (`3g.40gb`).
    pub profile: String,
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
}

/// Now, in Unix seconds.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The record file of one container.
pub fn path(data_dir: &Path, pod_uid: &str, container: &str) -> PathBuf {
    data_dir
        .join(DIR)
        .join(format!("{pod_uid}_{container}.json"))
}

/// Writes a record atomically (temp file, fsync, rename; mode 0600).
pub fn write(data_dir: &Path, record: &OwnershipRecord) -> Result<(), String> {
    let path = path(data_dir, &record.pod_uid, &record.container);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut text =
        serde_json::to_string_pretty(record).map_err(|e| format!("{}: {e}", path.display()))?;
    text.push('\n');
    accel_host::atomic::write_atomic(&path, text.as_bytes()).map_err(|e| e.to_string())
}

/// Reads one container's record: `Ok(None)` when there is none.
pub fn read(
    data_dir: &Path,
    pod_uid: &str,
    container: &str,
) -> Result<Option<OwnershipRecord>, String> {
    read_file(&path(data_dir, pod_uid, container))
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

/// Every record under `data_dir`, and a one-line error for each file that is not one.
pub fn read_all(data_dir: &Path) -> (Vec<OwnershipRecord>, Vec<String>) {
    let dir = data_dir.join(DIR);
    let mut records = Vec::new();
    let mut errors = Vec::new();
    let entries = match std::fs::read_dir(&dir) {
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

/// Removes one container's record (absent is fine).
pub fn remove(data_dir: &Path, pod_uid: &str, container: &str) -> Result<(), String> {
    let path = path(data_dir, pod_uid, container);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> OwnershipRecord {
        OwnershipRecord {
            gpu_uuid: Some("GPU-a".into()),
            gpu_index: 0,
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
        }
    }

    #[test]
    fn written_read_back_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &record()).unwrap();
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
        write(dir.path(), &record()).unwrap();
        let bad = path(dir.path(), "uid-b", "main");
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
}
