//! `HostTools`: every manufacturer's tool run as the host installed it.
//!
//! The node daemon runs in an image that carries no vendor tool: `nvidia-smi`, `npu-smi`,
//! `cnmon`, `hy-smi`, … ship with the host's driver, matched to the kernel module they talk to,
//! and link the host's libraries. So a tool is looked for *on the host* — under the host root
//! (`/host` in the DaemonSet, `/` on the node itself), in the host's own search path followed by
//! the directories where that vendor's packages install it (each manufacturer's row names them
//! once; a setting may replace them) — and run *inside* the host root (`chroot <root> <path>
//! <args>`, with `PATH` the same search path and `LD_LIBRARY_PATH` the vendor's library
//! directories that exist), so it finds its libraries where its installer put them. On the node
//! itself (root `/`) it runs directly.
//!
//! It is a [`Commands`]: the same deadline, the same process-group kill, the same typed
//! failures as every other run, and the caller's argv (`npu-smi info`) in every message. A tool
//! found nowhere is [`CommandError::NotInstalled`], and the first time a program is missing the
//! log says where it was looked for. A program no row names (the image's own `chroot`, `sh`) runs
//! from this process's `PATH`, as [`SystemCommands`] runs it. This module runs programs; it must
//! not interpret their output.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use super::system::{Launch, SystemCommands, is_executable, run_launch};
use super::{CommandError, CommandOutput, Commands};

/// The host's own search path, as a root login shell on the usual distributions has it: what
/// every manufacturer's tools are looked for in first.
pub const HOST_SEARCH_PATH: &[&str] = &[
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
];

/// The program that enters the host root, looked up on this process's `PATH` (the image's
/// `/usr/sbin/chroot`).
pub const CHROOT: &str = "chroot";

/// The most symbolic links followed while finding one tool (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// Where one manufacturer's tools are looked for on the host, in host paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolPlaces {
    /// The programs these places are for (`npu-smi`).
    pub programs: Vec<String>,
    /// The directories searched, in order.
    pub search: Vec<String>,
    /// The directories handed to the tool in `LD_LIBRARY_PATH`, where they exist on the host.
    pub library_dirs: Vec<String>,
}

impl ToolPlaces {
    /// The places of a manufacturer's `programs`: the host's search path, then the vendor's
    /// `install_dirs` (each once, in that order).
    pub fn vendor(programs: &[&str], install_dirs: &[&str], library_dirs: &[&str]) -> ToolPlaces {
        let mut search: Vec<String> = Vec::new();
        for dir in HOST_SEARCH_PATH.iter().chain(install_dirs) {
            if !search.iter().any(|d| d == dir) {
                search.push((*dir).to_string());
            }
        }
        ToolPlaces {
            programs: programs.iter().map(|p| (*p).to_string()).collect(),
            search,
            library_dirs: library_dirs.iter().map(|d| (*d).to_string()).collect(),
        }
    }

    /// The same programs searched for in `search` instead (a setting's override).
    pub fn searching(mut self, search: Vec<String>) -> ToolPlaces {
        self.search = search;
        self
    }

    /// The `PATH` a found tool runs with: its search path, then whatever of the host's own
    /// search path it lacks (a search path narrowed by a setting must not keep the tool from
    /// the host's `sh` or `cat`).
    pub fn tool_path(&self) -> String {
        let mut dirs: Vec<&str> = self.search.iter().map(String::as_str).collect();
        for dir in HOST_SEARCH_PATH {
            if !dirs.contains(dir) {
                dirs.push(dir);
            }
        }
        dirs.join(":")
    }
}

/// A place on the host that is not one absolute directory.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{dir:?} is not an absolute host directory")]
pub struct NotAHostDir {
    pub dir: String,
}

/// Reads a `PATH`-style list of host directories (`/opt/a/bin:/usr/bin`); every entry must be
/// absolute, empty entries are skipped.
pub fn parse_search_path(text: &str) -> Result<Vec<String>, NotAHostDir> {
    text.split(':')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(|d| {
            if d.starts_with('/') {
                Ok(d.trim_end_matches('/').to_string())
                    .map(|d| if d.is_empty() { "/".to_string() } else { d })
            } else {
                Err(NotAHostDir { dir: d.to_string() })
            }
        })
        .collect()
}

/// Runs the manufacturers' tools inside the host root, everything else from this process's
/// `PATH`.
#[derive(Debug)]
pub struct HostTools {
    /// The host's root as this process sees it (`/host`, or `/`).
    root: PathBuf,
    /// Each named program's places.
    places: BTreeMap<String, ToolPlaces>,
    /// Programs no row names, and `chroot` itself.
    own: SystemCommands,
    /// The programs already said to be missing (said once).
    said_missing: Mutex<BTreeSet<String>>,
}

impl HostTools {
    /// A runner for the host whose root is `root`, knowing every manufacturer's `places`. A
    /// program two rows name (`rocm-smi`: AMD's, and Hygon's fork of it) is looked for in the
    /// first row's places, then the second's, and gets the library directories of both.
    pub fn new(root: impl Into<PathBuf>, places: impl IntoIterator<Item = ToolPlaces>) -> Self {
        let mut by_program: BTreeMap<String, ToolPlaces> = BTreeMap::new();
        for place in places {
            for program in &place.programs {
                let merged = by_program
                    .entry(program.clone())
                    .or_insert_with(|| ToolPlaces {
                        programs: vec![program.clone()],
                        ..ToolPlaces::default()
                    });
                for dir in &place.search {
                    if !merged.search.contains(dir) {
                        merged.search.push(dir.clone());
                    }
                }
                for dir in &place.library_dirs {
                    if !merged.library_dirs.contains(dir) {
                        merged.library_dirs.push(dir.clone());
                    }
                }
            }
        }
        HostTools {
            root: root.into(),
            places: by_program,
            own: SystemCommands::new(),
            said_missing: Mutex::new(BTreeSet::new()),
        }
    }

    /// Whether the host root is this process's own `/` (the tool then runs without `chroot`).
    fn on_the_host_itself(&self) -> bool {
        self.root == Path::new("/")
    }

    /// The places `program` is looked for in; `None` for a program no row names.
    pub fn places(&self, program: &str) -> Option<&ToolPlaces> {
        self.places.get(program)
    }

    /// The host path of `program` (`/usr/local/Ascend/driver/tools/npu-smi`): the first
    /// executable file of that name in its search path, links followed inside the host root;
    /// `None` when the host has none or no row names it.
    pub fn locate(&self, program: &str) -> Option<String> {
        let places = self.places.get(program)?;
        if program.is_empty() || program.contains('/') {
            return None;
        }
        places
            .search
            .iter()
            .map(|dir| format!("{}/{program}", dir.trim_end_matches('/')))
            .find(|host_path| {
                resolve_in_root(&self.root, host_path).is_some_and(|p| is_executable(&p))
            })
    }

    /// The library directories of `places` that exist on the host, then the inherited
    /// `LD_LIBRARY_PATH`; `None` when there is nothing to set.
    fn library_path(&self, places: &ToolPlaces) -> Option<OsString> {
        let mut dirs: Vec<OsString> = places
            .library_dirs
            .iter()
            .filter(|d| resolve_in_root(&self.root, d).is_some_and(|p| p.is_dir()))
            .map(OsString::from)
            .collect();
        if dirs.is_empty() {
            return None;
        }
        if let Some(inherited) = std::env::var_os("LD_LIBRARY_PATH").filter(|v| !v.is_empty()) {
            dirs.push(inherited);
        }
        Some(dirs.join(OsStr::new(":")))
    }

    fn say_missing(&self, program: &str, places: &ToolPlaces) {
        let mut said = self.said_missing.lock().unwrap_or_else(|e| e.into_inner());
        if said.insert(program.to_string()) {
            tracing::warn!(
                "{program}: not installed on the host: looked for in {} under the host root {}",
                places.search.join(":"),
                self.root.display()
            );
        }
    }
}

impl Commands for HostTools {
    fn run(&self, argv: &[&str], deadline: Duration) -> Result<CommandOutput, CommandError> {
        self.launch(argv, None, deadline)
    }

    fn run_with_input(
        &self,
        argv: &[&str],
        input: &[u8],
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        self.launch(argv, Some(input), deadline)
    }

    fn search_note(&self, program: &str) -> Option<String> {
        let places = self.places.get(program)?;
        Some(format!(
            "looked for in {} under the host root {}",
            places.search.join(":"),
            self.root.display()
        ))
    }

    fn is_installed(&self, program: &str) -> bool {
        if self.places.contains_key(program) {
            self.locate(program).is_some()
        } else {
            self.own.is_installed(program)
        }
    }
}

impl HostTools {
    /// Runs `argv` (its input, when given, on standard input) as the host installed it.
    fn launch(
        &self,
        argv: &[&str],
        input: Option<&[u8]>,
        deadline: Duration,
    ) -> Result<CommandOutput, CommandError> {
        let Some(program) = argv.first() else {
            return Err(CommandError::Empty);
        };
        let Some(places) = self.places.get(*program) else {
            return match input {
                Some(input) => self.own.run_with_input(argv, input, deadline),
                None => self.own.run(argv, deadline),
            };
        };
        let Some(host_path) = self.locate(program) else {
            self.say_missing(program, places);
            return Err(CommandError::NotInstalled {
                program: program.to_string(),
            });
        };
        let mut env = vec![("PATH", OsString::from(places.tool_path()))];
        if let Some(libraries) = self.library_path(places) {
            env.push(("LD_LIBRARY_PATH", libraries));
        }
        let tool_args = argv[1..].iter().map(OsStr::new);
        if self.on_the_host_itself() {
            let path = PathBuf::from(&host_path);
            let launch = Launch {
                program: &path,
                args: tool_args.collect(),
                env,
                input,
            };
            return run_launch(&launch, argv, deadline);
        }
        let Some(chroot) = self.own.find_program(CHROOT) else {
            return Err(CommandError::Io {
                argv: argv.join(" "),
                source: std::io::Error::other(format!(
                    "{program} is on the host at {host_path}, but this image has no {CHROOT} on its PATH to run it inside the host root {}",
                    self.root.display()
                )),
            });
        };
        let mut args = vec![self.root.as_os_str(), OsStr::new(&host_path)];
        args.extend(tool_args);
        let launch = Launch {
            program: &chroot,
            args,
            env,
            input,
        };
        run_launch(&launch, argv, deadline)
    }
}

/// Where `host_path` (absolute, in the host's view) is on this process's filesystem, every
/// symbolic link followed as the host would follow it: an absolute target from the host root,
/// `..` never above it. `None` when a component is missing or the links loop.
pub fn resolve_in_root(root: &Path, host_path: &str) -> Option<PathBuf> {
    let mut pending: Vec<OsString> = parts(Path::new(host_path));
    pending.reverse();
    let mut done = PathBuf::new();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            done.pop();
            continue;
        }
        let candidate = done.join(&part);
        let on_disk = root.join(&candidate);
        let meta = std::fs::symlink_metadata(&on_disk).ok()?;
        if !meta.file_type().is_symlink() {
            done = candidate;
            continue;
        }
        links += 1;
        if links > MAX_LINKS {
            return None;
        }
        let target = std::fs::read_link(&on_disk).ok()?;
        if target.is_absolute() {
            done = PathBuf::new();
        }
        let mut more = parts(&target);
        more.reverse();
        pending.extend(more);
    }
    Some(root.join(done))
}

/// The normal and `..` components of a path, in order (root and `.` dropped).
fn parts(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    const LONG: Duration = Duration::from_secs(20);

    fn executable(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn ascend() -> ToolPlaces {
        ToolPlaces::vendor(
            &["npu-smi"],
            &["/usr/local/Ascend/driver/tools"],
            &["/usr/local/Ascend/driver/lib64"],
        )
    }

    #[test]
    fn the_host_search_path_comes_first_then_the_vendors_directories() {
        let places = ToolPlaces::vendor(&["x"], &["/opt/x/bin", "/usr/bin"], &[]);
        assert_eq!(
            places.search,
            [
                "/usr/local/sbin",
                "/usr/local/bin",
                "/usr/sbin",
                "/usr/bin",
                "/sbin",
                "/bin",
                "/opt/x/bin"
            ]
        );
    }

    #[test]
    fn a_program_two_rows_name_is_looked_for_in_both_rows_places() {
        let amd = ToolPlaces::vendor(
            &["amd-smi", "rocm-smi"],
            &["/opt/rocm/bin"],
            &["/opt/rocm/lib"],
        );
        let hygon = ToolPlaces::vendor(
            &["hy-smi", "rocm-smi"],
            &["/opt/hyhal/bin"],
            &["/opt/hyhal/lib"],
        );
        let tools = HostTools::new("/", [amd, hygon]);
        let rocm = tools.places("rocm-smi").unwrap();
        assert_eq!(
            rocm.search[HOST_SEARCH_PATH.len()..],
            ["/opt/rocm/bin", "/opt/hyhal/bin"]
        );
        assert_eq!(rocm.library_dirs, ["/opt/rocm/lib", "/opt/hyhal/lib"]);
        assert_eq!(
            tools.places("hy-smi").unwrap().search[HOST_SEARCH_PATH.len()..],
            ["/opt/hyhal/bin"]
        );
    }

    #[test]
    fn a_search_path_setting_is_absolute_host_directories() {
        assert_eq!(
            parse_search_path(" /opt/a/bin/ ::/usr/bin").unwrap(),
            ["/opt/a/bin", "/usr/bin"]
        );
        assert_eq!(
            parse_search_path("/opt/a:bin").unwrap_err(),
            NotAHostDir { dir: "bin".into() }
        );
        assert_eq!(parse_search_path("/").unwrap(), ["/"]);
    }

    #[test]
    fn a_tool_is_found_in_the_vendors_directory_through_the_hosts_links() {
        let root = tempfile::tempdir().unwrap();
        let tool = root.path().join("usr/local/Ascend/driver/tools/npu-smi");
        executable(&tool, "#!/bin/sh\n");
        // A link as installers make them: absolute, meaning the host's own path.
        std::fs::create_dir_all(root.path().join("usr/local/sbin")).unwrap();
        symlink(
            "/usr/local/Ascend/driver/tools/npu-smi",
            root.path().join("usr/local/sbin/npu-smi"),
        )
        .unwrap();
        let tools = HostTools::new(root.path(), [ascend()]);
        assert_eq!(
            tools.locate("npu-smi").as_deref(),
            Some("/usr/local/sbin/npu-smi")
        );
        std::fs::remove_file(root.path().join("usr/local/sbin/npu-smi")).unwrap();
        assert_eq!(
            tools.locate("npu-smi").as_deref(),
            Some("/usr/local/Ascend/driver/tools/npu-smi")
        );
        assert!(tools.is_installed("npu-smi"));
    }

    #[test]
    fn links_never_leave_the_host_root() {
        let root = tempfile::tempdir().unwrap();
        // `sh` exists on this machine, never inside the root: a link to it must not count.
        std::fs::create_dir_all(root.path().join("usr/bin")).unwrap();
        symlink("/bin/sh", root.path().join("usr/bin/npu-smi")).unwrap();
        symlink("../../../../../../bin/sh", root.path().join("usr/bin/loop")).unwrap();
        assert_eq!(resolve_in_root(root.path(), "/usr/bin/npu-smi"), None);
        assert_eq!(
            resolve_in_root(root.path(), "/usr/bin/loop"),
            None,
            "`..` stops at the host root"
        );
        let tools = HostTools::new(root.path(), [ascend()]);
        assert!(!tools.is_installed("npu-smi"));
        assert!(matches!(
            tools.run(&["npu-smi", "info"], LONG),
            Err(CommandError::NotInstalled { program }) if program == "npu-smi"
        ));
    }

    #[test]
    fn a_link_loop_is_not_a_tool() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("usr/bin")).unwrap();
        symlink("/usr/bin/b", root.path().join("usr/bin/a")).unwrap();
        symlink("/usr/bin/a", root.path().join("usr/bin/b")).unwrap();
        assert_eq!(resolve_in_root(root.path(), "/usr/bin/a"), None);
    }

    #[test]
    fn a_file_that_is_not_executable_is_not_the_tool() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("usr/bin")).unwrap();
        std::fs::write(root.path().join("usr/bin/npu-smi"), "").unwrap();
        let tools = HostTools::new(root.path(), [ascend()]);
        assert_eq!(tools.locate("npu-smi"), None);
    }

    /// On the node itself (root `/`) the tool runs directly, with the search path and the
    /// vendor's library directories that exist in its environment.
    #[test]
    fn on_the_host_itself_the_tool_runs_directly_with_its_search_path() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("vendor/bin");
        let lib = dir.path().join("vendor/lib");
        std::fs::create_dir_all(&lib).unwrap();
        executable(
            &bin.join("acme-smi"),
            "#!/bin/sh\necho \"args=$*\"\necho \"PATH=$PATH\"\necho \"LD=$LD_LIBRARY_PATH\"\n",
        );
        let bin_text = bin.display().to_string();
        let lib_text = lib.display().to_string();
        let missing_lib = dir.path().join("nowhere").display().to_string();
        let places = ToolPlaces::vendor(
            &["acme-smi"],
            &[bin_text.as_str()],
            &[missing_lib.as_str(), lib_text.as_str()],
        );
        let tools = HostTools::new("/", [places.clone()]);
        let out = tools.run(&["acme-smi", "-q", "a b"], LONG).unwrap();
        let text = out.stdout_text();
        assert!(text.contains("args=-q a b\n"), "{text}");
        assert!(
            text.contains(&format!("PATH={}\n", places.search.join(":"))),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l == format!("LD={lib_text}") || l.starts_with(&format!("LD={lib_text}:"))),
            "only the library directory that exists, first: {text}"
        );
        // A search path a setting narrowed still runs the tool with the host's own after it.
        let narrowed =
            ToolPlaces::vendor(&["acme-smi"], &[], &[]).searching(vec![bin_text.clone()]);
        let tools = HostTools::new("/", [narrowed.clone()]);
        let out = tools.run(&["acme-smi"], LONG).unwrap();
        assert!(
            out.stdout_text()
                .contains(&format!("PATH={bin_text}:{}\n", HOST_SEARCH_PATH.join(":"))),
            "{}",
            out.stdout_text()
        );
        // Not in any of its places: not installed, whatever this process's PATH holds.
        let elsewhere = ToolPlaces::vendor(&["sh"], &[], &[]).searching(vec![bin_text]);
        let tools = HostTools::new("/", [elsewhere]);
        assert!(!tools.is_installed("sh"));
        assert!(matches!(
            tools.run(&["sh", "-c", "true"], LONG),
            Err(CommandError::NotInstalled { .. })
        ));
    }

    #[test]
    fn a_host_tool_reads_its_input_on_standard_input() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        executable(
            &bin.join("ask-smi"),
            "#!/bin/sh\nread q\nread m\necho \"quota=$q memory=$m args=$*\"\n",
        );
        let bin_text = bin.display().to_string();
        let tools = HostTools::new(
            "/",
            [ToolPlaces::vendor(&["ask-smi"], &[bin_text.as_str()], &[])],
        );
        let out = tools
            .run_with_input(&["ask-smi", "-CP"], b"25\n4096\n", LONG)
            .unwrap();
        assert_eq!(out.stdout_text(), "quota=25 memory=4096 args=-CP\n");
        // A program no row names gets its input too.
        let out = tools
            .run_with_input(&["sh", "-c", "cat"], b"own\n", LONG)
            .unwrap();
        assert_eq!(out.stdout_text(), "own\n");
    }

    #[test]
    fn a_program_no_row_names_runs_from_this_process_path() {
        let root = tempfile::tempdir().unwrap();
        let tools = HostTools::new(root.path(), [ascend()]);
        assert!(tools.is_installed("sh"));
        let out = tools.run(&["sh", "-c", "echo own"], LONG).unwrap();
        assert_eq!(out.stdout_text(), "own\n");
    }

    #[test]
    fn the_deadline_holds_for_a_host_tool() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        executable(&bin.join("slow-smi"), "#!/bin/sh\necho started\nsleep 30\n");
        let bin_text = bin.display().to_string();
        let places = ToolPlaces::vendor(&["slow-smi"], &[bin_text.as_str()], &[]);
        let tools = HostTools::new("/", [places]);
        let started = std::time::Instant::now();
        let err = tools
            .run(&["slow-smi", "-q"], Duration::from_millis(300))
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5));
        match err {
            CommandError::TimedOut { argv, partial, .. } => {
                assert_eq!(argv, "slow-smi -q", "the caller's argv is named");
                assert_eq!(partial.stdout_text(), "started\n");
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
    }
}
