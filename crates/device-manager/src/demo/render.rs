//! The demo's report for a person at a terminal: per step the verdict and folded request, the
//! grant (GPU, family, env / mounts / devices), the ledger as a table; at the end the `Devices`
//! objects as YAML. Colour only when asked for (stdout is a terminal and `NO_COLOR` is unset).

use std::fmt::Write as _;

use super::report::{GrantView, LedgerView, PodOutcome, Report, Step};

/// ANSI styles, or nothing.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    pub colour: bool,
}

impl Style {
    fn paint(self, code: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
    fn head(self, text: &str) -> String {
        self.paint("1;36", text)
    }
    fn good(self, text: &str) -> String {
        self.paint("32", text)
    }
    fn bad(self, text: &str) -> String {
        self.paint("1;31", text)
    }
    fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }
}

/// The whole report as text.
pub fn render(report: &Report, style: Style) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", style.head("device-manager demo"));
    for (node, host) in &report.hosts {
        match report.manufacturers.get(node) {
            Some(m) => {
                let _ = writeln!(out, "  {node}: {m}, recorded host {host}");
            }
            None => {
                let _ = writeln!(out, "  {node}: recorded host {host}");
            }
        }
    }
    for step in &report.steps {
        out.push('\n');
        step_text(&mut out, step, style);
    }
    for (node, devices) in &report.devices {
        out.push('\n');
        let _ = writeln!(out, "{}", style.head(&format!("Devices {node}")));
        match serde_yaml::to_string(devices) {
            Ok(yaml) => out.push_str(&yaml),
            Err(e) => {
                let _ = writeln!(out, "(cannot be shown as YAML: {e})");
            }
        }
    }
    out
}

fn step_text(out: &mut String, step: &Step, style: Style) {
    let _ = writeln!(
        out,
        "{}",
        style.head(&format!("── {}. {} ──", step.number, step.title))
    );
    for pod in &step.pods {
        pod_text(out, pod, style);
    }
    for note in &step.notes {
        for line in note.lines() {
            let _ = writeln!(out, "  {line}");
        }
    }
    if let Some(xid) = &step.xid {
        let health = if xid.health == "Healthy" {
            style.good(&xid.health)
        } else {
            style.bad(&xid.health)
        };
        let _ = writeln!(out, "  GPU {} token: {health}", xid.gpu.index);
    }
    if let Some(reclaim) = &step.reclaim {
        let _ = writeln!(
            out,
            "  partition tokens Healthy: {} before, {} while held, {} after the reclaim",
            reclaim.tokens_before, reclaim.tokens_while_held, reclaim.tokens_after
        );
    }
    if let Some(restart) = &step.restart {
        let verdict = if restart.equal {
            style.good("ledger unchanged")
        } else {
            style.bad("ledger changed")
        };
        let _ = writeln!(out, "  restart of {}: {verdict}", restart.node);
        if !restart.unhealthy_after.is_empty() {
            let _ = writeln!(
                out,
                "  still out of service: {}",
                restart.unhealthy_after.join(", ")
            );
        }
    }
    if let Some(ledger) = &step.ledger {
        ledger_text(out, ledger, style);
    }
}

fn pod_text(out: &mut String, pod: &PodOutcome, style: Style) {
    let _ = writeln!(out, "  pod {}/{}", pod.namespace, pod.pod);
    let verdict = if pod.allowed {
        style.good("allowed")
    } else {
        style.bad("denied")
    };
    let _ = writeln!(out, "    webhook   {verdict}");
    if let Some(message) = &pod.message {
        let _ = writeln!(out, "              {}", style.bad(message));
    }
    for op in &pod.patch {
        let value = op.get("value").map(|v| format!(" {v}")).unwrap_or_default();
        let _ = writeln!(
            out,
            "    mutate    {} {}{value}",
            op.get("op")
                .and_then(serde_json::Value::as_str)
                .unwrap_or(""),
            op.get("path")
                .and_then(serde_json::Value::as_str)
                .unwrap_or("")
        );
    }
    for (container, limits) in &pod.request {
        let keys: Vec<String> = limits.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let _ = writeln!(out, "    request   {container}: {}", keys.join(" "));
    }
    if let Some(node) = &pod.node {
        let _ = writeln!(out, "    node      {node}");
    }
    if let Some(error) = &pod.error {
        let _ = writeln!(out, "    refused   {}", style.bad(error));
    }
    for grant in &pod.grants {
        grant_text(out, grant);
    }
}

fn grant_text(out: &mut String, grant: &GrantView) {
    let gpus: Vec<String> = grant
        .gpus
        .iter()
        .map(|g| match &g.uuid {
            Some(uuid) => format!("GPU {} ({uuid})", g.index),
            None => format!("GPU {}", g.index),
        })
        .collect();
    let _ = writeln!(
        out,
        "    grant     {} ← {} [{}] on {}",
        grant.container,
        grant.resource,
        grant.family,
        if gpus.is_empty() {
            "no GPU".to_string()
        } else {
            gpus.join(", ")
        }
    );
    if let Some(partition) = &grant.partition {
        let _ = writeln!(out, "              partition {partition}");
    }
    for (k, v) in &grant.env {
        let _ = writeln!(out, "              env {k}={v}");
    }
    for m in &grant.mounts {
        let ro = if m.read_only { " (ro)" } else { "" };
        let _ = writeln!(
            out,
            "              mount {} → {}{ro}",
            m.host_path, m.container_path
        );
    }
    for d in &grant.devices {
        let _ = writeln!(
            out,
            "              device {} → {} ({})",
            d.host_path, d.container_path, d.permissions
        );
    }
    for (k, v) in &grant.annotations {
        let _ = writeln!(out, "              annotation {k}={v}");
    }
    for name in &grant.cdi_devices {
        let _ = writeln!(out, "              cdi {name}");
    }
}

fn ledger_text(out: &mut String, ledger: &LedgerView, style: Style) {
    let _ = writeln!(out, "  ledger of {}", ledger.node);
    let header = format!(
        "    {:<3} {:<14} {:<9} {:<11} {:>5} {:>6} {:>7}  {}",
        "GPU", "UUID", "HEALTH", "MODE", "USED", "SHARES", "SLICES", "HOLDERS"
    );
    let _ = writeln!(out, "{}", style.dim(&header));
    for row in &ledger.rows {
        let uuid = row
            .uuid
            .as_deref()
            .map(|u| u.chars().take(12).collect::<String>() + "…")
            .unwrap_or_default();
        let health = format!("{:<9}", if row.healthy { "healthy" } else { "UNHEALTHY" });
        let health = if row.healthy {
            health
        } else {
            style.bad(&health)
        };
        let used = format!(
            "{}%",
            (row.used_units * 100).div_ceil(accel_core::units::UNITS_PER_ACCELERATOR)
        );
        let _ = writeln!(
            out,
            "    {:<3} {:<14} {} {:<11} {:>5} {:>6} {:>7}  {}",
            row.index,
            uuid,
            health,
            row.mode,
            used,
            format!("{}/10", row.shares),
            format!("{}/{}", row.slices, row.slice_capacity),
            row.holders.join(", ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{Style, render};
    use crate::demo::report::{PodOutcome, Report, Step};

    fn report() -> Report {
        Report {
            hosts: [("node-a".to_string(), "h".to_string())].into(),
            manufacturers: [("node-a".to_string(), "nvidia".to_string())].into(),
            steps: vec![Step {
                number: 1,
                name: "rejected".into(),
                title: "refused".into(),
                pods: vec![PodOutcome {
                    pod: "p".into(),
                    namespace: "demo".into(),
                    message: Some("no".into()),
                    ..PodOutcome::default()
                }],
                ..Step::default()
            }],
            devices: Default::default(),
        }
    }

    #[test]
    fn colour_codes_only_when_asked_for() {
        let plain = render(&report(), Style { colour: false });
        assert!(!plain.contains('\x1b'), "{plain}");
        assert!(plain.contains("webhook   denied"), "{plain}");
        let coloured = render(&report(), Style { colour: true });
        assert!(coloured.contains("\x1b[1;31mdenied\x1b[0m"), "{coloured}");
    }
}
