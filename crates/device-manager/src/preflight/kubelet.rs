//! What the node's kubelet says about itself, read under the host root: its command line in
//! the host's process table, the configuration file and drop-in directory that command line
//! names, and, with no kubelet running, kubeadm's flags file, the kubelet's default
//! configuration and the distribution's drop-in tree. Two facts are taken from them: the CRI
//! endpoint (which container CLI preflight drives) and the TopologyManager policy (the
//! document's topology section). A fact no source names stays unnamed: never a default.

use accel_host::Host;

/// kubeadm's flags file.
pub const KUBEADM_FLAGS: &str = "var/lib/kubelet/kubeadm-flags.env";
/// The kubelet configuration kubeadm writes.
pub const KUBELET_CONFIG: &str = "var/lib/kubelet/config.yaml";
/// The distribution's drop-in tree (`--config-dir` when a unit names none).
pub const DROP_IN_DIR: &str = "etc/kubernetes/kubelet.conf.d";

/// One fact and the source that named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub value: String,
    /// Where it was read (`kubelet command line (pid 812)`, `/var/lib/kubelet/config.yaml`).
    pub source: String,
}

/// What the kubelet's sources name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletFacts {
    /// The host's process table was readable (a `proc/<pid>/cmdline` under the host root).
    pub proc_readable: bool,
    /// The running kubelet's pid, when one was found.
    pub pid: Option<u32>,
    pub endpoint: Option<Named>,
    pub topology_policy: Option<Named>,
    /// What could not be read, for the document's notes.
    pub notes: Vec<String>,
}

/// The value of `--name` in an argv (`--name=value` or `--name value`); the last one wins, as
/// the kubelet's flag parsing has it.
pub fn flag(argv: &[String], name: &str) -> Option<String> {
    let long = format!("--{name}");
    let with_eq = format!("{long}=");
    let mut found = None;
    let mut it = argv.iter();
    while let Some(arg) = it.next() {
        if let Some(v) = arg.strip_prefix(&with_eq) {
            found = Some(v.to_string());
        } else if *arg == long
            && let Some(v) = it.next()
        {
            found = Some(v.clone());
        }
    }
    found.filter(|v| !v.is_empty())
}

/// The running kubelet: `(proc readable, Some((pid, argv)))`.
fn find_kubelet(host: &dyn Host) -> (bool, Option<(u32, Vec<String>)>) {
    let Ok(names) = host.list("proc") else {
        return (false, None);
    };
    let mut readable = false;
    let mut pids: Vec<u32> = names.iter().filter_map(|n| n.parse().ok()).collect();
    pids.sort_unstable();
    for pid in pids {
        let Ok(bytes) = host.read(&format!("proc/{pid}/cmdline")) else {
            continue;
        };
        readable = true;
        let argv: Vec<String> = bytes
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let is_kubelet = argv
            .first()
            .is_some_and(|a| a.rsplit('/').next() == Some("kubelet"));
        if is_kubelet {
            return (true, Some((pid, argv)));
        }
    }
    (readable, None)
}

/// The two keys a kubelet configuration (or drop-in) may set.
#[derive(Debug, Default)]
struct ConfigKeys {
    endpoint: Option<String>,
    policy: Option<String>,
}

fn read_config(host: &dyn Host, path: &str) -> Result<Option<ConfigKeys>, String> {
    let text = match host.read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let value: serde_yaml::Value =
        serde_yaml::from_str(&text).map_err(|e| format!("/{path}: not YAML ({e})"))?;
    let key = |k: &str| {
        value
            .get(k)
            .and_then(serde_yaml::Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    Ok(Some(ConfigKeys {
        endpoint: key("containerRuntimeEndpoint"),
        policy: key("topologyManagerPolicy"),
    }))
}

/// A drop-in directory's `*.conf` files in lexical order, later ones overriding earlier ones
/// (the kubelet's own merge order). Each fact carries the file that named it last.
fn read_drop_ins(
    host: &dyn Host,
    dir: &str,
    notes: &mut Vec<String>,
) -> (Option<Named>, Option<Named>) {
    let (mut endpoint, mut policy) = (None, None);
    let Ok(mut names) = host.list(dir) else {
        return (None, None);
    };
    names.sort();
    for name in names.iter().filter(|n| n.ends_with(".conf")) {
        let path = format!("{}/{name}", dir.trim_end_matches('/'));
        match read_config(host, &path) {
            Ok(Some(keys)) => {
                let source = format!("/{path}");
                if let Some(v) = keys.endpoint {
                    endpoint = Some(Named {
                        value: v,
                        source: source.clone(),
                    });
                }
                if let Some(v) = keys.policy {
                    policy = Some(Named { value: v, source });
                }
            }
            Ok(None) => {}
            Err(e) => notes.push(e),
        }
    }
    (endpoint, policy)
}

/// kubeadm's flags file as an argv (`KUBELET_KUBEADM_ARGS="--a=b --c d"`).
fn kubeadm_argv(host: &dyn Host) -> Option<Vec<String>> {
    let text = host.read_to_string(KUBEADM_FLAGS).ok()?;
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("KUBELET_KUBEADM_ARGS="))?;
    let value = line.trim().trim_matches('"').trim_matches('\'');
    Some(
        std::iter::once("kubelet".to_string())
            .chain(value.split_whitespace().map(str::to_string))
            .collect(),
    )
}

fn path_of(value: &str) -> String {
    value.trim_start_matches('/').to_string()
}

/// Reads the kubelet's sources under the host root.
pub fn read(host: &dyn Host) -> KubeletFacts {
    let (proc_readable, running) = find_kubelet(host);
    let mut facts = KubeletFacts {
        proc_readable,
        ..KubeletFacts::default()
    };
    let first = |slot: &mut Option<Named>, candidate: Option<Named>| {
        if slot.is_none() {
            *slot = candidate;
        }
    };
    let config_keys = |facts: &mut KubeletFacts, path: &str| -> (Option<Named>, Option<Named>) {
        match read_config(host, path) {
            Ok(Some(keys)) => {
                let source = format!("/{}", path.trim_start_matches('/'));
                (
                    keys.endpoint.map(|v| Named {
                        value: v,
                        source: source.clone(),
                    }),
                    keys.policy.map(|v| Named { value: v, source }),
                )
            }
            Ok(None) => (None, None),
            Err(e) => {
                facts.notes.push(e);
                (None, None)
            }
        }
    };
    if let Some((pid, argv)) = running {
        // The running kubelet: its flags win, then its drop-ins, then its configuration file.
        facts.pid = Some(pid);
        let source = format!("kubelet command line (pid {pid})");
        let named = |v: String| Named {
            value: v,
            source: source.clone(),
        };
        facts.endpoint = flag(&argv, "container-runtime-endpoint").map(named);
        facts.topology_policy = flag(&argv, "topology-manager-policy").map(named);
        if let Some(dir) = flag(&argv, "config-dir") {
            let (e, p) = read_drop_ins(host, &path_of(&dir), &mut facts.notes);
            first(&mut facts.endpoint, e);
            first(&mut facts.topology_policy, p);
        }
        if let Some(config) = flag(&argv, "config") {
            let (e, p) = config_keys(&mut facts, &path_of(&config));
            first(&mut facts.endpoint, e);
            first(&mut facts.topology_policy, p);
        }
        return facts;
    }
    // No kubelet running: the first source naming a fact wins.
    if let Some(argv) = kubeadm_argv(host) {
        let named = |v: String| Named {
            value: v,
            source: format!("/{KUBEADM_FLAGS}"),
        };
        facts.endpoint = flag(&argv, "container-runtime-endpoint").map(named);
        facts.topology_policy = flag(&argv, "topology-manager-policy").map(named);
    }
    let (e, p) = config_keys(&mut facts, KUBELET_CONFIG);
    first(&mut facts.endpoint, e);
    first(&mut facts.topology_policy, p);
    let (e, p) = read_drop_ins(host, DROP_IN_DIR, &mut facts.notes);
    first(&mut facts.endpoint, e);
    first(&mut facts.topology_policy, p);
    facts
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_host::FsHost;

    fn host_with(files: &[(&str, &[u8])]) -> (tempfile::TempDir, FsHost) {
        let dir = tempfile::tempdir().unwrap();
        for (path, content) in files {
            let p = dir.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }
        let host = FsHost::new(dir.path());
        (dir, host)
    }

    #[test]
    fn flags_take_both_spellings_and_the_last_wins() {
        let argv: Vec<String> = ["kubelet", "--config", "/a", "--config=/b", "--x="]
            .map(String::from)
            .to_vec();
        assert_eq!(flag(&argv, "config").as_deref(), Some("/b"));
        assert_eq!(flag(&argv, "x"), None);
        assert_eq!(flag(&argv, "y"), None);
    }

    #[test]
    fn the_running_kubelets_flag_wins_over_its_config() {
        let (_d, host) = host_with(&[
            ("proc/1/cmdline", b"/sbin/init\0"),
            (
                "proc/812/cmdline",
                b"/usr/bin/kubelet\0--config=/etc/k/config.yaml\0--container-runtime-endpoint=unix:///run/x.sock\0",
            ),
            (
                "etc/k/config.yaml",
                b"containerRuntimeEndpoint: unix:///run/containerd/containerd.sock\ntopologyManagerPolicy: single-numa-node\n",
            ),
            // Not read while a kubelet runs.
            (KUBELET_CONFIG, b"topologyManagerPolicy: restricted\n"),
        ]);
        let facts = read(&host);
        assert!(facts.proc_readable);
        assert_eq!(facts.pid, Some(812));
        let endpoint = facts.endpoint.unwrap();
        assert_eq!(endpoint.value, "unix:///run/x.sock");
        assert_eq!(endpoint.source, "kubelet command line (pid 812)");
        let policy = facts.topology_policy.unwrap();
        assert_eq!(policy.value, "single-numa-node");
        assert_eq!(policy.source, "/etc/k/config.yaml");
    }

    #[test]
    fn a_drop_in_overrides_the_config_file_and_later_drop_ins_win() {
        let (_d, host) = host_with(&[
            (
                "proc/9/cmdline",
                b"kubelet\0--config\0/etc/k/config.yaml\0--config-dir=/etc/k/conf.d\0",
            ),
            ("etc/k/config.yaml", b"topologyManagerPolicy: none\n"),
            (
                "etc/k/conf.d/10-a.conf",
                b"topologyManagerPolicy: restricted\n",
            ),
            (
                "etc/k/conf.d/20-b.conf",
                b"topologyManagerPolicy: best-effort\n",
            ),
        ]);
        let policy = read(&host).topology_policy.unwrap();
        assert_eq!(policy.value, "best-effort");
        assert_eq!(policy.source, "/etc/k/conf.d/20-b.conf");
    }

    #[test]
    fn without_a_kubelet_kubeadm_flags_come_first_then_the_config() {
        let (_d, host) = host_with(&[
            ("proc/1/cmdline", b"/sbin/init\0"),
            (
                KUBEADM_FLAGS,
                b"KUBELET_KUBEADM_ARGS=\"--container-runtime-endpoint=unix:///var/run/cri-dockerd.sock --pod-infra-container-image=x\"\n",
            ),
            (KUBELET_CONFIG, b"topologyManagerPolicy: restricted\n"),
        ]);
        let facts = read(&host);
        assert_eq!(facts.pid, None);
        assert_eq!(
            facts.endpoint.unwrap().source,
            "/var/lib/kubelet/kubeadm-flags.env"
        );
        assert_eq!(facts.topology_policy.unwrap().value, "restricted");
    }

    #[test]
    fn nothing_named_stays_unnamed_and_a_host_without_proc_says_so() {
        let (_d, host) = host_with(&[("etc/hostname", b"n\n")]);
        let facts = read(&host);
        assert!(!facts.proc_readable);
        assert_eq!(facts.endpoint, None);
        assert_eq!(facts.topology_policy, None);
    }

    #[test]
    fn an_unreadable_config_is_a_note_not_a_guess() {
        let (_d, host) = host_with(&[
            ("proc/5/cmdline", b"kubelet\0--config=/c.yaml\0"),
            ("c.yaml", b"topologyManagerPolicy: [\n"),
        ]);
        let facts = read(&host);
        assert_eq!(facts.topology_policy, None);
        assert!(
            facts.notes[0].contains("/c.yaml: not YAML"),
            "{:?}",
            facts.notes
        );
    }

    #[test]
    fn odd_bytes_and_odd_yaml_name_nothing_and_never_panic() {
        let (_d, host) = host_with(&[
            ("proc/7/cmdline", b"\xff\xfe\0--config\0"),
            ("proc/8/cmdline", b""),
            (
                "proc/9/cmdline",
                b"kubelet\0--config=/c.yaml\0--config-dir\0",
            ),
            ("c.yaml", b"- a list\n- not a map\n"),
            (KUBEADM_FLAGS, b"KUBELET_KUBEADM_ARGS=\""),
        ]);
        let facts = read(&host);
        assert_eq!(facts.pid, Some(9));
        assert_eq!(facts.endpoint, None);
        assert_eq!(facts.topology_policy, None);
        let (_d, host) = host_with(&[("c.yaml", b"topologyManagerPolicy: 5\n")]);
        assert!(
            read_config(&host, "c.yaml")
                .unwrap()
                .unwrap()
                .policy
                .is_none()
        );
    }
}
