//! vcann-rt's per-container quota file, `npu_info.config` (spec/ascend.md §5.3): what one
//! logical slice of one physical NPU may use, read by `libvruntime.so` inside the container.
//! Rendering, reading back and the choice of the virtual NPU id are pure; the responder writes
//! the file.

use std::collections::BTreeSet;

/// Where the container reads the file.
pub const CONTAINER_PATH: &str = "/etc/enpu/vcann-rt/npu_info.config";
/// Where it lies under the container's working directory on the host.
pub const WORKDIR_PATH: &str = "etc/enpu/vcann-rt/npu_info.config";
/// `scheduling-policy=2`: elastic (1 is fixed-share, 3 best-effort); always written.
pub const SCHEDULING_POLICY_ELASTIC: u32 = 2;

/// One slice's quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpuConfig {
    /// The chip's physical id (what `/dev/davinci<N>` numbers).
    pub physical_npu_id: u32,
    /// The slice's number on that chip, lowest free.
    pub virtual_npu_id: u32,
    /// The AI-core share, percent.
    pub aicore_quota: u32,
    /// The memory quota, MiB.
    pub memory_quota_mib: u64,
    /// The shared-memory segment's name: the accelerator's id with every blank a `-`.
    pub shm_id: String,
}

impl NpuConfig {
    /// The shm id of an accelerator id (`E281A66C 140C979` → `E281A66C-140C979`).
    pub fn shm_id_of(uuid: &str) -> String {
        uuid.replace(' ', "-")
    }

    /// The file's text, key for key as §5.3 gives it.
    pub fn render(&self) -> String {
        format!(
            "physical-npu-id={}\nvirtual-npu-id={}\naicore-quota={}\nmemory-quota={}\nshm-id={}\nscheduling-policy={}\n",
            self.physical_npu_id,
            self.virtual_npu_id,
            self.aicore_quota,
            self.memory_quota_mib,
            self.shm_id,
            SCHEDULING_POLICY_ELASTIC
        )
    }
}

/// A value of an `npu_info.config` (`key=value` lines).
pub fn value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// The (physical, virtual) ids a written file names.
pub fn ids(text: &str) -> Option<(u32, u32)> {
    let physical = u32::try_from(value(text, "physical-npu-id")?).ok()?;
    let virtual_id = u32::try_from(value(text, "virtual-npu-id")?).ok()?;
    Some((physical, virtual_id))
}

/// The lowest virtual id not in `used`.
pub fn lowest_free(used: &BTreeSet<u32>) -> u32 {
    (0..).find(|i| !used.contains(i)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_key_for_key_and_reads_back() {
        let c = NpuConfig {
            physical_npu_id: 5,
            virtual_npu_id: 1,
            aicore_quota: 30,
            memory_quota_mib: 16384,
            shm_id: NpuConfig::shm_id_of("E281A66C 140C979"),
        };
        let text = c.render();
        assert_eq!(
            text,
            "physical-npu-id=5\nvirtual-npu-id=1\naicore-quota=30\nmemory-quota=16384\nshm-id=E281A66C-140C979\nscheduling-policy=2\n"
        );
        assert_eq!(ids(&text), Some((5, 1)));
        assert_eq!(lowest_free(&BTreeSet::from([0, 1, 3])), 2);
    }
}
