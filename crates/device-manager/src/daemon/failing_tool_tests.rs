//! Issue 42 item 3, through the daemon, for every manufacturer: on a running node whose vendor
//! tool then goes missing, hangs, exits non-zero or prints what cannot be read, the last good
//! inventory and its grants stand — every token still served, the Pod's grant still charged,
//! the failure said naming the tool — and once the tool answers again nothing has moved. Each
//! manufacturer's recorded multi-card host, its own responder (the backend's factory, as
//! `serve` builds it), the kubelet emulator over real unix sockets.

use std::sync::{Arc, Mutex};

use accel_core::Manufacturer;
use accel_host::{CommandError, CommandOutput, Commands, RecordedCommands};
use accel_plugin::pods::Pod;
use accel_plugin::testing;
use accel_testkit::failing_tool::{FAILED_STDERR, ToolFailure, UNREADABLE_OUTPUT};

use super::test_support::{
    Rig, SETTLE, backend_plugin_config, copy_host, data_dir, refresh, whole_resource,
};
use super::*;

const BOOT: &str = "5d1c7f0e-42aa-4c1e-9d0b-7e3f2a6b8c94";

/// Each manufacturer's multi-card recorded host and the tool its detector names the cards
/// with.
const NINE: [(Manufacturer, &str, &str); 9] = [
    (Manufacturer::Nvidia, "hgx-h100-8gpu", "nvidia-smi"),
    (Manufacturer::Amd, "amd-8x-mi300x", "amd-smi"),
    (Manufacturer::Ascend, "ascend-8x-910b2", "npu-smi"),
    (
        Manufacturer::Cambricon,
        "cambricon-8x-mlu370-cnmon-v5",
        "cnmon",
    ),
    (Manufacturer::Hygon, "hygon-4x-k100ai", "hy-smi"),
    (Manufacturer::Iluvatar, "iluvatar-16x-bi-v150", "ixsmi"),
    (Manufacturer::Metax, "metax-8x-c500", "mx-smi"),
    (Manufacturer::Mthreads, "mthreads-8x-s4000", "mthreads-gmi"),
    (Manufacturer::Thead, "thead-16x-zw810e", "ppu-smi"),
];

/// The recorded host's programs, with one of them made to fail on demand, the way a live
/// tool fails (a hang answers at once with what the runner says after the deadline).
#[derive(Clone)]
struct Breakable {
    recorded: Arc<dyn Commands>,
    broken: Arc<Mutex<Option<(String, ToolFailure)>>>,
}

impl Breakable {
    fn break_tool(&self, program: &str, failure: ToolFailure) {
        *self.broken.lock().unwrap() = Some((program.to_string(), failure));
    }

    fn mend(&self) {
        *self.broken.lock().unwrap() = None;
    }

    fn failing(&self, program: &str) -> Option<ToolFailure> {
        match &*self.broken.lock().unwrap() {
            Some((broken, failure)) if broken == program => Some(*failure),
            _ => None,
        }
    }
}

impl Commands for Breakable {
    fn run(
        &self,
        argv: &[&str],
        deadline: std::time::Duration,
    ) -> Result<CommandOutput, CommandError> {
        let program = argv.first().copied().unwrap_or_default();
        match self.failing(program) {
            None => self.recorded.run(argv, deadline),
            Some(ToolFailure::Missing) => Err(CommandError::NotInstalled {
                program: program.to_string(),
            }),
            Some(ToolFailure::Hangs) => Err(CommandError::TimedOut {
                argv: argv.join(" "),
                deadline,
                partial: CommandOutput::default(),
            }),
            Some(ToolFailure::ExitsNonZero) => Ok(CommandOutput {
                status: Some(1),
                stdout: Vec::new(),
                stderr: FAILED_STDERR.as_bytes().to_vec(),
            }),
            Some(ToolFailure::Unreadable) => Ok(CommandOutput {
                status: Some(0),
                stdout: UNREADABLE_OUTPUT.as_bytes().to_vec(),
                stderr: Vec::new(),
            }),
        }
    }

    fn is_installed(&self, program: &str) -> bool {
        self.failing(program) != Some(ToolFailure::Missing) && self.recorded.is_installed(program)
    }
}

fn pod_with(uid: &str, resource: &str) -> Pod {
    Pod {
        name: format!("trainer-{uid}"),
        ..testing::pod(uid, 1_700_000_000, &[("main", &[(resource, "1")])])
    }
}

/// The accelerators' identities, in order.
fn identities(inventory: &Inventory) -> Vec<(u32, Option<String>)> {
    inventory
        .manufacturers
        .iter()
        .flat_map(|s| s.accelerators.iter())
        .map(|a| (a.index, a.uuid.clone()))
        .collect()
}

/// The first accelerator whose facts differ between two inventories, both sides as JSON.
fn first_difference(now: &Inventory, good: &Inventory) -> String {
    let all = |i: &Inventory| -> Vec<serde_json::Value> {
        i.manufacturers
            .iter()
            .flat_map(|s| s.accelerators.iter())
            .map(|a| serde_json::to_value(a).unwrap())
            .collect()
    };
    all(now)
        .into_iter()
        .zip(all(good))
        .find(|(a, b)| a != b)
        .map_or_else(
            || "the manufacturers' versions".to_string(),
            |(a, b)| format!("now {a} was {b}"),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_tool_never_replaces_what_is_known_for_any_manufacturer() {
    for (manufacturer, host_name, program) in NINE {
        let host = copy_host(host_name, BOOT);
        let data = tempfile::tempdir().unwrap();
        let data = data_dir(&data);
        let commands = Breakable {
            recorded: Arc::new(RecordedCommands::load(host.path()).unwrap()),
            broken: Arc::new(Mutex::new(None)),
        };
        let mut node = Node::open(host.path()).unwrap();
        node.commands = Box::new(commands.clone());
        let options = super::test_support::options(manufacturer, &data);
        let daemon = Arc::new(Daemon::prepare(node, options).unwrap());
        let whole = whole_resource(manufacturer);
        let rig = Rig::start(daemon.clone(), &data, backend_plugin_config, &[whole]).await;
        let good = daemon.inventory();
        let served = rig.kubelet.devices(whole).len();
        assert!(served > 0, "{manufacturer}: the good pass serves tokens");
        rig.kubelet.create(pod_with("uid-a", whole));
        let admitted = tokio::time::timeout(SETTLE, rig.kubelet.admit("uid-a"))
            .await
            .unwrap_or_else(|_| panic!("{manufacturer}: admitting a Pod hung"));
        admitted.unwrap_or_else(|e| panic!("{manufacturer}: a whole card is granted: {e}"));
        let grants = || rig.plugins.as_ref().unwrap().ledger().grants().len();
        assert_eq!(grants(), 1, "{manufacturer}");

        for failure in ToolFailure::ALL {
            commands.break_tool(program, failure);
            let refreshed = refresh(&daemon).await;
            let now = daemon.inventory();
            assert_eq!(
                identities(&now),
                identities(&good),
                "{manufacturer}, {program} {failure}: the accelerators and their identities stand"
            );
            assert_eq!(
                now.hash(),
                good.hash(),
                "{manufacturer}, {program} {failure}: every fact stands (labels, capacity and the Devices spec unchanged); first difference: {}",
                first_difference(&now, &good)
            );
            assert_eq!(
                rig.kubelet.devices(whole).len(),
                served,
                "{manufacturer}, {program} {failure}: every token is still served"
            );
            assert_eq!(
                grants(),
                1,
                "{manufacturer}, {program} {failure}: the grant stands"
            );
            // Not measured: the pass's note; measured from the kernel alone (NVIDIA's procfs,
            // AMD's KFD): the section's notes.
            let said = refreshed
                .notes
                .iter()
                .chain(now.manufacturers.iter().flat_map(|s| s.notes.iter()))
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            assert!(
                said.contains(program),
                "{manufacturer}, {program} {failure}: the failure names the tool: {said}"
            );
            commands.mend();
        }
        let mended = refresh(&daemon).await;
        assert_eq!(identities(&daemon.inventory()), identities(&good));
        assert!(
            !mended
                .notes
                .iter()
                .any(|n| n.contains("kept the last detection")),
            "{manufacturer}: measured again once the tool answers: {:?}",
            mended.notes
        );
        assert_eq!(grants(), 1, "{manufacturer}");
        rig.stop().await;
    }
}
