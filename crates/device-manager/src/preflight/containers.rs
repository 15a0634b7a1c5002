//! The host's container CLI, driven through `chroot <host-root>` with accel-host's bounded
//! command runner (so a recorded host replays it): which CLI the node's kubelet uses, the stale
//! sweep of labelled probes, and the probe's command line built from a responder's injection.
//! Nothing here decides a row; it runs or prints commands and reports what came back.

use std::time::Duration;

use accel_backend::preflight::ContainerCli;
use accel_backend::respond::Injection;
use accel_host::{CommandError, CommandOutput, Commands};

use super::kubelet::KubeletFacts;

/// The label every probe carries (and the sweep removes by).
pub const LABEL: &str = "gpustack.ai/preflight=true";
/// The containerd namespace probes run in under nerdctl.
pub const NAMESPACE: &str = "gpustack-preflight";
/// How long a CLI query (version, listing, removal) may take.
pub const QUERY_DEADLINE: Duration = Duration::from_secs(30);
/// How long one probe container may take, an image pull included.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(300);

/// The host's container CLI as resolved: which one, and the containerd socket for nerdctl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    pub cli: ContainerCli,
    /// nerdctl's `--address` (the kubelet's containerd socket), when one was named.
    pub address: Option<String>,
    /// How it was chosen (`--runtime`, the kubelet's endpoint, probing).
    pub source: String,
}

/// The resolution's answer: a CLI, or why no container step will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    Found(Runtime),
    /// No CLI runs probes here; every container step is printed instead.
    None {
        reason: String,
    },
}

/// Runs host programs as `chroot <root> …`.
pub struct HostShell<'a> {
    pub commands: &'a dyn Commands,
    /// The host's root as this process sees it (`/host`).
    pub root: String,
}

impl HostShell<'_> {
    /// The full argv of a host command.
    pub fn argv(&self, command: &[String]) -> Vec<String> {
        let mut argv = vec!["chroot".to_string(), self.root.clone()];
        argv.extend(command.iter().cloned());
        argv
    }

    /// Runs a host command; `Err` carries a one-line reason.
    pub fn run(&self, command: &[String], deadline: Duration) -> Result<CommandOutput, String> {
        let argv = self.argv(command);
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        self.commands.run(&refs, deadline).map_err(|e| match e {
            CommandError::NotInstalled { .. } => format!("{}: not found", refs.join(" ")),
            other => other.to_string(),
        })
    }

    /// Whether the host has `program` (its `--version` answers).
    pub fn has(&self, program: &str) -> bool {
        self.run(
            &[program.to_string(), "--version".to_string()],
            QUERY_DEADLINE,
        )
        .is_ok_and(|o| o.success())
    }
}

/// The command line as one string, each argument quoted when the shell would split it.
pub fn shell_text(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,@+%".contains(&b))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn socket_path(endpoint: &str) -> String {
    endpoint.trim_start_matches("unix://").to_string()
}

/// Picks the container CLI: `--runtime` when given; else the kubelet's CRI endpoint (containerd
/// → nerdctl, else ctr; cri-dockerd → docker; CRI-O → none); else the first of docker, nerdctl,
/// ctr the host has. A host root without the host's process table probes nothing.
pub fn resolve(
    shell: &HostShell<'_>,
    forced: Option<ContainerCli>,
    kubelet: &KubeletFacts,
) -> Resolution {
    let address = kubelet
        .endpoint
        .as_ref()
        .filter(|e| e.value.contains("containerd"))
        .map(|e| socket_path(&e.value));
    if let Some(cli) = forced {
        return Resolution::Found(Runtime {
            cli,
            address,
            source: "--runtime".into(),
        });
    }
    if !kubelet.proc_readable {
        return Resolution::None {
            reason: "the host root shows no host process table (proc/<pid>/cmdline), so no container CLI is probed".into(),
        };
    }
    if let Some(endpoint) = &kubelet.endpoint {
        let source = format!("CRI endpoint {} ({})", endpoint.value, endpoint.source);
        let v = endpoint.value.as_str();
        if v.contains("containerd") {
            for cli in [ContainerCli::Nerdctl, ContainerCli::Ctr] {
                if shell.has(cli.program()) {
                    return Resolution::Found(Runtime {
                        cli,
                        address,
                        source,
                    });
                }
            }
            return Resolution::None {
                reason: format!("{source}: the host has neither nerdctl nor ctr"),
            };
        }
        if v.contains("docker") {
            if shell.has("docker") {
                return Resolution::Found(Runtime {
                    cli: ContainerCli::Docker,
                    address: None,
                    source,
                });
            }
            return Resolution::None {
                reason: format!("{source}: the host has no docker CLI"),
            };
        }
        return Resolution::None {
            reason: format!("{source}: no container CLI preflight drives serves this runtime"),
        };
    }
    for cli in [
        ContainerCli::Docker,
        ContainerCli::Nerdctl,
        ContainerCli::Ctr,
    ] {
        if shell.has(cli.program()) {
            return Resolution::Found(Runtime {
                cli,
                address: None,
                source: format!(
                    "no CRI endpoint named; {} answered on the host",
                    cli.program()
                ),
            });
        }
    }
    Resolution::None {
        reason: "no CRI endpoint named and the host has none of docker, nerdctl, ctr".into(),
    }
}

impl Runtime {
    /// The CLI with its global flags (nerdctl's socket and namespace).
    fn base(&self) -> Vec<String> {
        let mut argv = vec![self.cli.program().to_string()];
        match self.cli {
            ContainerCli::Nerdctl => {
                if let Some(a) = &self.address {
                    argv.extend(["--address".into(), a.clone()]);
                }
                argv.extend(["--namespace".into(), NAMESPACE.into()]);
            }
            ContainerCli::Ctr => {
                if let Some(a) = &self.address {
                    argv.extend(["--address".into(), a.clone()]);
                }
                argv.extend(["--namespace".into(), NAMESPACE.into()]);
            }
            ContainerCli::Docker => {}
        }
        argv
    }

    /// Lists the labelled containers (every state).
    pub fn list_command(&self) -> Vec<String> {
        let mut argv = self.base();
        match self.cli {
            ContainerCli::Ctr => argv.extend(
                [
                    "containers",
                    "list",
                    "-q",
                    "labels.\"gpustack.ai/preflight\"==true",
                ]
                .map(String::from),
            ),
            _ => argv.extend(
                ["ps", "-aq", "--filter"]
                    .map(String::from)
                    .into_iter()
                    .chain([format!("label={LABEL}")]),
            ),
        }
        argv
    }

    /// Removes containers by id.
    pub fn remove_command(&self, ids: &[String]) -> Vec<String> {
        let mut argv = self.base();
        match self.cli {
            ContainerCli::Ctr => argv.extend(["containers".to_string(), "delete".to_string()]),
            _ => argv.extend(["rm".to_string(), "-f".to_string()]),
        }
        argv.extend(ids.iter().cloned());
        argv
    }

    /// A probe's command line: one-shot, labelled, named for the accelerator, given exactly
    /// the injection (environment, mounts, device nodes, annotations) plus the device flags,
    /// never privileged. `host_path` maps a mount's source to the host's view of it.
    pub fn run_command(
        &self,
        name: &str,
        device_flags: &[String],
        injection: &Injection,
        host_path: &dyn Fn(&str) -> String,
        image: &str,
        script: &str,
    ) -> Vec<String> {
        let mut argv = self.base();
        argv.extend(["run".into(), "--rm".into(), "--name".into(), name.into()]);
        argv.extend(["--label".into(), LABEL.into()]);
        argv.extend(device_flags.iter().cloned());
        for (k, v) in &injection.envs {
            argv.extend(["-e".into(), format!("{k}={v}")]);
        }
        for m in &injection.mounts {
            let ro = if m.read_only { ":ro" } else { "" };
            argv.extend([
                "-v".into(),
                format!("{}:{}{ro}", host_path(&m.host_path), m.container_path),
            ]);
        }
        for d in &injection.devices {
            argv.extend([
                "--device".into(),
                format!("{}:{}:{}", d.host_path, d.container_path, d.permissions),
            ]);
        }
        for (k, v) in &injection.annotations {
            argv.extend(["--annotation".into(), format!("{k}={v}")]);
        }
        argv.extend([image.into(), "sh".into(), "-c".into(), script.into()]);
        argv
    }
}

/// What one sweep did: `Err` with the reason when the listing or a removal failed.
pub fn sweep(shell: &HostShell<'_>, runtime: &Runtime) -> Result<usize, String> {
    let list = runtime.list_command();
    let listed = shell.run(&list, QUERY_DEADLINE)?;
    if !listed.success() {
        return Err(format!(
            "{} exited {}: {}",
            shell_text(&shell.argv(&list)),
            status_text(&listed),
            first_line(&listed.stderr_text())
        ));
    }
    let ids: Vec<String> = listed
        .stdout_text()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    let remove = runtime.remove_command(&ids);
    let removed = shell.run(&remove, QUERY_DEADLINE)?;
    if !removed.success() {
        return Err(format!(
            "{} exited {}: {}",
            shell_text(&shell.argv(&remove)),
            status_text(&removed),
            first_line(&removed.stderr_text())
        ));
    }
    Ok(ids.len())
}

/// An exit status as text (`signal` when a signal ended it).
pub fn status_text(output: &CommandOutput) -> String {
    output
        .status
        .map_or_else(|| "on a signal".to_string(), |s| s.to_string())
}

/// The first non-empty line of a text, or `(nothing on stderr)`.
pub fn first_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(nothing on stderr)")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use accel_backend::respond::Mount;

    #[test]
    fn a_probe_gets_exactly_the_injection_and_host_paths() {
        let runtime = Runtime {
            cli: ContainerCli::Nerdctl,
            address: Some("/run/containerd/containerd.sock".into()),
            source: "t".into(),
        };
        let mut injection = Injection::default();
        injection.envs.insert("A".into(), "1".into());
        injection.mounts.push(Mount {
            container_path: "/c".into(),
            host_path: "/host/var/x".into(),
            read_only: true,
        });
        let argv = runtime.run_command(
            "n",
            &["--gpus".into(), "all".into()],
            &injection,
            &|p| p.trim_start_matches("/host").to_string(),
            "img",
            "echo hi",
        );
        assert_eq!(
            shell_text(&argv),
            "nerdctl --address /run/containerd/containerd.sock --namespace gpustack-preflight run --rm --name n --label gpustack.ai/preflight=true --gpus all -e A=1 -v /var/x:/c:ro img sh -c 'echo hi'"
        );
        assert!(!argv.iter().any(|a| a == "--privileged"));
    }
}
