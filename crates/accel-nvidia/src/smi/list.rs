//! The `nvidia-smi -L` reader: the GPUs by index, product and UUID, with their MIG children.
//!
//! `-L` is the only place where MIG devices' UUIDs and profile names appear
//! (`  MIG 1g.10gb     Device  0: (UUID: MIG-…)`, `1c.3g.71gb` for compute-instance slices, and
//! R450's `MIG-GPU-<uuid>/<gi>/<ci>`). Lines may end in CRLF and be indented by documentation
//! renderings; lines it does not recognise are skipped. It must not run nvidia-smi.

use serde::Serialize;

/// The argv of the listing this module reads.
pub const LIST_ARGV: &[&str] = &["nvidia-smi", "-L"];

/// Why a text is not a `-L` listing at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListError {
    /// The text names no GPU and is not nvidia-smi's "no devices" answer.
    #[error("nvidia-smi -L output lists no GPU: first line {0:?}")]
    NotAList(String),
}

/// One `GPU n: …` line and the MIG lines under it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedGpu {
    /// nvidia-smi's index for the GPU.
    pub index: u32,
    pub product: String,
    pub uuid: Option<String>,
    pub mig_devices: Vec<ListedMig>,
}

/// One `MIG <profile> Device n: (UUID: …)` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedMig {
    /// The profile name without the `MIG ` prefix (`1g.10gb`, `1c.3g.71gb`).
    pub profile: String,
    /// The MIG device's index under its GPU (restarts at 0 for each GPU).
    pub device_index: u32,
    pub uuid: Option<String>,
    /// The GPU and compute instance ids spelled inside an R450-era UUID
    /// (`MIG-GPU-<uuid>/<gi>/<ci>`); `None` for the opaque `MIG-<uuid>` form.
    pub legacy_instance: Option<(u32, u32)>,
}

/// Reads `nvidia-smi -L`. Empty output and "No devices found." are an empty list.
pub fn parse(text: &str) -> Result<Vec<ListedGpu>, ListError> {
    let mut gpus: Vec<ListedGpu> = Vec::new();
    let mut first_other: Option<&str> = None;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(gpu) = gpu_line(line) {
            gpus.push(gpu);
        } else if let Some(mig) = mig_line(line) {
            // A MIG line before any GPU line belongs to nothing we can name.
            if let Some(parent) = gpus.last_mut() {
                parent.mig_devices.push(mig);
            }
        } else if first_other.is_none() {
            first_other = Some(line);
        }
    }
    match first_other {
        Some(line) if gpus.is_empty() && !line.to_ascii_lowercase().starts_with("no devices") => {
            Err(ListError::NotAList(line.chars().take(120).collect()))
        }
        _ => Ok(gpus),
    }
}

/// `GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-…)`.
fn gpu_line(line: &str) -> Option<ListedGpu> {
    let rest = line.strip_prefix("GPU ")?;
    let (index, rest) = rest.split_once(':')?;
    let index = index.trim().parse().ok()?;
    let rest = rest.trim();
    let (product, uuid) = match rest.rsplit_once("(UUID:") {
        Some((product, tail)) => (product.trim(), uuid_in(tail)),
        None => (rest, None),
    };
    Some(ListedGpu {
        index,
        product: product.to_string(),
        uuid,
        mig_devices: Vec::new(),
    })
}

/// `MIG 1g.10gb     Device  0: (UUID: MIG-…)`.
fn mig_line(line: &str) -> Option<ListedMig> {
    let rest = line.strip_prefix("MIG ")?;
    let (head, tail) = rest.split_once(':')?;
    let mut words = head.split_whitespace();
    let profile = words.next()?.to_string();
    if words.next()? != "Device" {
        return None;
    }
    let device_index = words.next()?.parse().ok()?;
    let uuid = tail.split_once("(UUID:").and_then(|(_, t)| uuid_in(t));
    let legacy_instance = uuid.as_deref().and_then(legacy_ids);
    Some(ListedMig {
        profile,
        device_index,
        uuid,
        legacy_instance,
    })
}

/// The UUID before the closing parenthesis.
fn uuid_in(tail: &str) -> Option<String> {
    let uuid = tail.split(')').next()?.trim();
    (!uuid.is_empty()).then(|| uuid.to_string())
}

/// `MIG-GPU-<uuid>/7/0` → (7, 0).
fn legacy_ids(uuid: &str) -> Option<(u32, u32)> {
    let rest = uuid.strip_prefix("MIG-GPU-")?;
    let mut parts = rest.rsplitn(3, '/');
    let ci = parts.next()?.parse().ok()?;
    let gi = parts.next()?.parse().ok()?;
    parts.next()?;
    Some((gi, ci))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_with_mig_children_and_crlf() {
        let text = "GPU 0: NVIDIA H200 (UUID: GPU-aaa)\r\n  MIG 1c.3g.71gb  Device  0: (UUID: MIG-111)\r\n  MIG 2g.35gb     Device  1: (UUID: MIG-222)\r\nGPU 1: NVIDIA H200 (UUID: GPU-bbb)\r\n";
        let gpus = parse(text).unwrap();
        assert_eq!(gpus.len(), 2);
        assert_eq!(gpus[0].product, "NVIDIA H200");
        assert_eq!(gpus[0].uuid.as_deref(), Some("GPU-aaa"));
        assert_eq!(gpus[0].mig_devices[0].profile, "1c.3g.71gb");
        assert_eq!(gpus[0].mig_devices[0].uuid.as_deref(), Some("MIG-111"));
        assert_eq!(gpus[0].mig_devices[1].device_index, 1);
        assert!(gpus[1].mig_devices.is_empty());
    }

    #[test]
    fn r450_mig_uuid() {
        let text = "GPU 0: A100-SXM4-40GB (UUID: GPU-4200ccc0-2667-d4cb-9137-f932c716232a)\n  MIG 1g.5gb Device 3: (UUID: MIG-GPU-4200ccc0-2667-d4cb-9137-f932c716232a/10/0)\n";
        let mig = &parse(text).unwrap()[0].mig_devices[0];
        assert_eq!(mig.device_index, 3);
        assert_eq!(mig.legacy_instance, Some((10, 0)));
        assert_eq!(
            mig.uuid.as_deref(),
            Some("MIG-GPU-4200ccc0-2667-d4cb-9137-f932c716232a/10/0")
        );
    }

    #[test]
    fn no_devices_and_garbage() {
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(parse("No devices found.\n"), Ok(vec![]));
        assert!(matches!(
            parse("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."),
            Err(ListError::NotAList(_))
        ));
    }

    #[test]
    fn product_without_uuid_and_indented_lines() {
        let gpus = parse(" GPU 3: Tesla K80\n").unwrap();
        assert_eq!(
            (
                gpus[0].index,
                gpus[0].product.as_str(),
                gpus[0].uuid.as_deref()
            ),
            (3, "Tesla K80", None)
        );
    }
}
