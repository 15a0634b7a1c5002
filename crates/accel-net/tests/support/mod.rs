//! The RDMA captures as trees a reader can walk: the archives unpacked with `tar`, the extracted
//! subtrees with their links made links again (the shared copy stores each symbolic link as a
//! file holding its target's text, with no newline: exactly the count SOURCES.md gives per
//! subtree), and procfs' ttar archive written out.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn fixtures() -> PathBuf {
    accel_testkit::shared_fixtures("rdma")
}

/// Unpacks `archive` into `into` and returns the folder holding `sys/` (an hwloc tarball's one
/// top folder, or `into` itself).
pub fn unpack(archive: &Path, into: &Path) -> PathBuf {
    let status = Command::new("tar")
        .arg("xf")
        .arg(archive)
        .arg("-C")
        .arg(into)
        .status()
        .expect("tar runs");
    assert!(status.success(), "tar xf {}", archive.display());
    if into.join("sys").is_dir() {
        return into.to_path_buf();
    }
    let tops: Vec<PathBuf> = std::fs::read_dir(into)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("sys").is_dir())
        .collect();
    assert_eq!(tops.len(), 1, "{}: one top folder", archive.display());
    tops[0].clone()
}

fn is_link_text(bytes: &[u8]) -> Option<String> {
    if bytes.ends_with(b"\n") {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    (text.starts_with("../") && !text.contains(char::is_whitespace)).then(|| text.to_string())
}

/// Copies the subtree `from` into `to`, turning every link-text file back into a link; returns
/// how many links it made.
pub fn relink(from: &Path, to: &Path) -> usize {
    let mut made = 0;
    copy(from, to, &mut made);
    made
}

fn copy(from: &Path, to: &Path, made: &mut usize) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let source = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            copy(&source, &target, made);
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&source).unwrap(), &target).unwrap();
            *made += 1;
        } else {
            let bytes = std::fs::read(&source).unwrap();
            match is_link_text(&bytes) {
                Some(link) => {
                    std::os::unix::fs::symlink(link, &target).unwrap();
                    *made += 1;
                }
                None => std::fs::write(&target, bytes).unwrap(),
            }
        }
    }
}

/// Writes the `fixtures/sys/` part of a ttar archive under `to` (so `to/sys/…`): `Directory:`,
/// `Path:` + `Lines:` (with `NULLBYTE` and a last line's `EOF` marker) and `SymlinkTo:` records.
pub fn untar_ttar(archive: &Path, to: &Path) {
    let text = std::fs::read_to_string(archive).unwrap();
    let mut lines = text.lines().peekable();
    let place = |p: &str| -> Option<PathBuf> {
        p.strip_prefix("fixtures/")
            .filter(|r| r.starts_with("sys"))
            .map(|r| to.join(r))
    };
    while let Some(line) = lines.next() {
        if let Some(dir) = line.strip_prefix("Directory: ") {
            if let Some(dir) = place(dir) {
                std::fs::create_dir_all(dir).unwrap();
            }
        } else if let Some(path) = line.strip_prefix("Path: ") {
            let next = lines.next().unwrap_or_default();
            if let Some(count) = next.strip_prefix("Lines: ") {
                let count: usize = count.trim().parse().unwrap();
                let mut body = String::new();
                for _ in 0..count {
                    let l = lines.next().unwrap_or_default();
                    match l.strip_suffix("EOF") {
                        Some(last) => body.push_str(last),
                        None => {
                            body.push_str(l);
                            body.push('\n');
                        }
                    }
                }
                if let Some(file) = place(path) {
                    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                    std::fs::write(file, body.replace("NULLBYTE", "\0")).unwrap();
                }
            } else if let Some(link) = next.strip_prefix("SymlinkTo: ")
                && let Some(file) = place(path)
            {
                std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                std::os::unix::fs::symlink(link, file).unwrap();
            }
        }
    }
}
