//! The device nodes Cambricon's driver creates, by name (spec §4.2, the vendor device plugin's
//! defaults): one card node per MLU named by cnDev's device index, the optional per-card
//! message, RPC, communication and IPC nodes, and two node-level control nodes. The module owns
//! the names; the detector reads which card nodes exist and the responder which to hand out.

use accel_host::Host;

/// The node-level control node.
pub const CTL: &str = "/dev/cambricon_ctl";
/// The node-level GPU-direct node (optional).
pub const GDR: &str = "/dev/cambricon_gdr";
/// The card node's prefix: `/dev/cambricon_dev<N>`.
pub const CARD_PREFIX: &str = "cambricon_dev";

/// The card node of driver index `index` (required in every whole-card answer).
pub fn card(index: u32) -> String {
    format!("/dev/{CARD_PREFIX}{index}")
}

/// The optional per-card nodes of driver index `index`, in the order they are handed out.
pub fn per_card_optional(index: u32) -> [String; 5] {
    [
        format!("/dev/cambr-msgq:{index}"),
        format!("/dev/cambr-rpc:{index}"),
        format!("/dev/cmsg_ctrl{index}"),
        format!("/dev/commu{index}"),
        ipcm(index),
    ]
}

/// The card's IPC node (optional), which a sliced answer hands with the card node.
pub fn ipcm(index: u32) -> String {
    format!("/dev/cambricon_ipcm{index}")
}

/// The node-level nodes handed out once per answer, after every card's, when present.
pub const NODE_LEVEL: [&str; 2] = [CTL, GDR];

/// The driver indexes `/dev` has a card node for (`cambricon_dev<N>`), ascending.
pub fn card_indexes(host: &dyn Host) -> Vec<u32> {
    let mut out: Vec<u32> = host
        .list("/dev")
        .unwrap_or_default()
        .iter()
        .filter_map(|name| name.strip_prefix(CARD_PREFIX))
        .filter_map(|n| n.parse().ok())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}
