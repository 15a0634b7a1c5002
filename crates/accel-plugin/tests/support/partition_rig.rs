//! The kubelet emulator over real unix sockets in front of one manufacturer's partitions, on a
//! copy of a stateful recorded host (its `mig-state.json` and what follows it under `root/`
//! change with the vendor tool's `mig` commands): what T-Head's and Hygon's partition
//! scenarios share. Each names its backend's row; the rig is the rest.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use accel_backend::Backend;
use accel_backend::mig_cli::replay::{MigState, STATE_FILE};
use accel_backend::respond::{EngineFacts, InjectionStrategy, ResponderSetup};
use accel_core::inventory::Accelerator;
use accel_core::ledger::Seat;
use accel_host::{Commands, FsHost, Host, RecordedCommands};
use accel_plugin::pods::{MemoryPods, Pod};
use accel_plugin::service::{Offer, Orphans};
use accel_plugin::settings::Settings;
use accel_plugin::testing::{self, Admission, CommandLog, Kubelet, Run};
use accel_plugin::{Config, DevicePlugins, Partitions};

/// One manufacturer's side of the rig.
pub struct Side {
    /// The recorded host under testdata/hosts.
    pub recorded: &'static str,
    /// Its backends-registry row (the responder factory, the replay, the partitioner).
    pub backend: Backend,
    /// Its detector over the copy.
    pub detect: fn(&dyn Host, &dyn Commands) -> Vec<Accelerator>,
    /// The resources registration is waited for.
    pub resources: &'static [&'static str],
    /// The file-name prefix of its ownership marker (`thead-mig-`).
    pub marker_prefix: &'static str,
}

pub struct Rig {
    pub dir: tempfile::TempDir,
    pub kubelet: Kubelet,
    pub plugins: Option<DevicePlugins>,
    pub config: Config,
    pub accelerators: Vec<Accelerator>,
    /// Every program the plugins ran on the host, to wait until a pass has looked.
    pub log: Arc<CommandLog>,
    resources: &'static [&'static str],
    marker_prefix: &'static str,
}

impl Rig {
    pub async fn new(side: Side) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let host = dir.path().join("host");
        accel_testkit::copy_tree(&accel_testkit::recorded_host(side.recorded), &host).unwrap();
        let recorded: Box<dyn Commands> = Box::new(RecordedCommands::load(&host).unwrap());
        let wrap = side
            .backend
            .replay
            .expect("a stateful recorded host's replay");
        let log = CommandLog::over(Arc::from(wrap(&host, recorded)));
        let commands: Arc<dyn Commands> = log.clone();
        let files: Arc<dyn Host> = Arc::new(FsHost::new(host.join("root")));
        let accelerators = (side.detect)(files.as_ref(), commands.as_ref());
        let seats: Vec<Seat> = accelerators
            .iter()
            .map(|a| Seat::from_accelerator(a, 128))
            .collect();
        let responder = (side.backend.responder)(ResponderSetup {
            scratch: None,
            strategy: InjectionStrategy::Envvar,
            runtime_major: Some(0),
            pod_dir_root: dir.path().join("data/pods"),
            preload_dir: dir.path().join("data/preload"),
            library_dir: "/var/lib/gpustack/operator/lib".into(),
            engine: Arc::new(EngineFacts::default()),
            accelerators: accelerators.clone(),
            host: Some(files.clone()),
            commands: Some(commands.clone()),
            runtime_class: None,
            writes: None,
        });
        let partitioner = side.backend.partitioner.expect("a partitioner");
        // As serve does: the partitioner put on the node's files where it reads them.
        let partitioner = partitioner.on_host(files).unwrap_or(partitioner);
        let kubelet = Kubelet::start(&dir.path().join("kubelet"), MemoryPods::new()).await;
        let config = Config {
            kubelet_dir: dir.path().join("kubelet"),
            data_dir: dir.path().join("data"),
            settings: Settings::default(),
            offer: Offer {
                sliced: false,
                ..Offer::of(side.backend.manufacturer)
            },
            seats,
            responder,
            poll_interval: Duration::from_millis(20),
            metrics: Default::default(),
            partitions: Some(Partitions {
                partitioner,
                commands,
                orphans: Orphans::default(),
            }),
        };
        let mut rig = Rig {
            dir,
            kubelet,
            plugins: None,
            config,
            accelerators,
            log,
            resources: side.resources,
            marker_prefix: side.marker_prefix,
        };
        rig.start_plugins().await;
        rig
    }

    pub async fn start_plugins(&mut self) {
        let pods = Arc::new(self.kubelet.pods().clone());
        let plugins = DevicePlugins::start(self.config.clone(), pods)
            .await
            .unwrap();
        self.kubelet.wait_for(self.resources).await;
        self.plugins = Some(plugins);
    }

    pub async fn restart_plugins(&mut self) {
        if let Some(p) = self.plugins.take() {
            p.stop().await;
        }
        self.start_plugins().await;
    }

    pub fn plugins(&self) -> &DevicePlugins {
        self.plugins.as_ref().unwrap()
    }

    pub fn state_file(&self) -> PathBuf {
        self.dir.path().join("host").join(STATE_FILE)
    }

    pub fn state(&self) -> MigState {
        MigState::load(&self.state_file()).unwrap()
    }

    /// Marks the first instance busy (a process on it) or idle.
    pub fn set_busy(&self, busy: bool) {
        let mut state = self.state();
        state.instances[0].busy = busy;
        state.save(&self.state_file()).unwrap();
    }

    /// A host-absolute path inside the copy's `root/`.
    pub fn host(&self, path: &str) -> PathBuf {
        self.dir
            .path()
            .join("host/root")
            .join(path.trim_start_matches('/'))
    }

    /// The ownership marker of `uid`'s `main` container on `card`.
    pub fn marker(&self, uid: &str, card: &str) -> PathBuf {
        self.dir.path().join(format!(
            "data/pods/{uid}/c-main/{}{card}.json",
            self.marker_prefix
        ))
    }

    pub fn read_marker(&self, uid: &str, card: &str) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.marker(uid, card)).unwrap()).unwrap()
    }

    pub async fn wait_state(&self, what: &str, check: impl Fn(&MigState) -> bool) {
        testing::wait_read(what, || self.state(), check).await;
    }

    pub async fn wait_gone(&self, what: &str, path: &Path) {
        testing::wait_until(what, || !path.exists()).await;
    }

    /// How many runs so far `matching` holds for.
    pub fn runs(&self, matching: impl Fn(&Run) -> bool) -> usize {
        self.log.count(matching)
    }

    /// Waits until `count` more runs than `since` match: a pass has looked.
    pub async fn wait_runs(
        &self,
        what: &str,
        since: usize,
        count: usize,
        matching: impl Fn(&Run) -> bool,
    ) {
        self.log.wait_runs(what, matching, since + count).await;
    }

    /// The kubelet's retry of `uid`'s `main` container's Allocate for `resource`.
    pub async fn allocate_again(
        &self,
        uid: &str,
        resource: &str,
    ) -> Result<accel_plugin::api::deviceplugin::ContainerAllocateResponse, tonic::Status> {
        let held = self.kubelet.held(uid, "main", resource);
        let again = self.kubelet.allocate_raw(resource, held).await?;
        Ok(again.container_responses.into_iter().next().unwrap())
    }
}

/// A Pod whose `main` container asks one partition of `profile` (`partitioned` the family
/// key), with the visibility sidecar `sshd` when `visibility` names its key.
pub fn owner(uid: &str, partitioned: &str, profile: &str, visibility: Option<&str>) -> Pod {
    let main: &[(&str, &str)] = &[(partitioned, "1"), (profile, "1")];
    match visibility {
        Some(key) => {
            let sshd: &[(&str, &str)] = &[(key, "1")];
            testing::pod(uid, 1_700_000_000, &[("main", main), ("sshd", sshd)])
        }
        None => testing::pod(uid, 1_700_000_000, &[("main", main)]),
    }
}

/// `host=container:permissions` of each device an admitted container got for `resource`.
pub fn devices(admission: &Admission, container: &str, resource: &str) -> Vec<String> {
    admission[container][resource]
        .devices
        .iter()
        .map(|d| format!("{}={}:{}", d.host_path, d.container_path, d.permissions))
        .collect()
}
