//! amd-smi's output: `static --json` (identity, VRAM, driver per GPU) and `version` (`--json`
//! or its one-line text). Both top-level shapes are read (a bare list up to amd-smi 25.x,
//! `{"gpu_data": […]}` from 26.x), text before the document (a permission notice) is skipped,
//! and every field is looked up by presence, never by release: a value may be a number, a
//! string, `{"value": …, "unit": …}` or `"N/A"` (the fixtures' HAZARDS.md, items 18–23).

use serde_json::Value;

use accel_core::busid::BusId;

use crate::text::{clean, hex_u64, product_name, unique_id};

/// Why a document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SmiError {
    #[error("{what}: no JSON document in the output")]
    NoDocument { what: String },
    #[error("{what}: not JSON: {reason}")]
    NotJson { what: String, reason: String },
    #[error("{what}: no GPU list (expected a list or an object with \"gpu_data\")")]
    NoGpuList { what: String },
}

/// The JSON document in a tool's output, skipping any text printed before it.
pub fn document(what: &str, text: &str) -> Result<Value, SmiError> {
    let start = text
        .find(['{', '['])
        .ok_or_else(|| SmiError::NoDocument { what: what.into() })?;
    let mut stream = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
    match stream.next() {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(SmiError::NotJson {
            what: what.into(),
            reason: e.to_string(),
        }),
        None => Err(SmiError::NoDocument { what: what.into() }),
    }
}

/// A field as text: strings cleaned (`N/A` is absent), numbers printed, `{"value": v}` its value.
pub fn text(value: Option<&Value>) -> Option<String> {
    match value? {
        Value::String(s) => clean(s),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Object(o) => text(o.get("value")),
        _ => None,
    }
}

/// A field as a whole number (a number, a decimal string, or `{"value": n}`).
pub fn number(value: Option<&Value>) -> Option<u64> {
    match value? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => clean(s).and_then(|s| s.parse().ok()),
        Value::Object(o) => number(o.get("value")),
        _ => None,
    }
}

/// A figure with its unit as megabytes (`{"value": 196592, "unit": "MB"}`, which amd-smi means
/// as MiB); a figure in GB is scaled.
fn mebibytes(value: Option<&Value>) -> Option<u64> {
    let v = value?;
    let figure = number(Some(v))?;
    let unit = v.get("unit").and_then(Value::as_str).unwrap_or("MB");
    match unit.to_ascii_uppercase().as_str() {
        "MB" | "MIB" => Some(figure),
        "GB" | "GIB" => figure.checked_mul(1024),
        "B" => Some(figure >> 20),
        _ => None,
    }
}

fn path<'a>(value: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(value, |v, k| v.get(k))
}

/// One GPU of `amd-smi static --json`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StaticGpu {
    /// amd-smi's own index (BDF order; never used to join sources).
    pub gpu: Option<u64>,
    pub bus_id: Option<BusId>,
    /// `asic.asic_serial`, normalised.
    pub unique_id: Option<u64>,
    /// `asic.market_name`; `None` for a placeholder or a bare PCI id
    /// ([`crate::text::product_name`]).
    pub market_name: Option<String>,
    /// `board.product_name`, by the same rule.
    pub board_name: Option<String>,
    pub device_id: Option<u16>,
    pub compute_units: Option<u32>,
    pub gfx_target: Option<String>,
    pub vram_mib: Option<u64>,
    /// `driver.version` when it is a driver's version ([`driver_version`]): an inbox kernel
    /// driver puts the kernel's `/proc/version` there.
    pub driver_version: Option<String>,
    pub vbios_version: Option<String>,
    pub serial: Option<String>,
    /// Every identity field read `N/A` (a user without render-group access): the GPU is there,
    /// its facts are not readable.
    pub identity_unreadable: bool,
}

/// The per-GPU list of a document in either top-level shape.
fn gpu_list<'a>(what: &str, doc: &'a Value) -> Result<&'a [Value], SmiError> {
    match doc {
        Value::Array(list) => Ok(list),
        Value::Object(o) => match o.get("gpu_data") {
            Some(Value::Array(list)) => Ok(list),
            _ => Err(SmiError::NoGpuList { what: what.into() }),
        },
        _ => Err(SmiError::NoGpuList { what: what.into() }),
    }
}

/// Reads `amd-smi static --json`.
pub fn parse_static(text_out: &str) -> Result<Vec<StaticGpu>, SmiError> {
    let what = "amd-smi static --json";
    let doc = document(what, text_out)?;
    Ok(gpu_list(what, &doc)?.iter().map(static_gpu).collect())
}

/// A field as a figure (a number, a decimal string, or `{"value": x}`); `N/A` is absent.
fn figure(value: Option<&Value>) -> Option<f64> {
    match value? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => clean(s).and_then(|s| s.parse().ok()),
        Value::Object(o) => figure(o.get("value")),
        _ => None,
    }
    .filter(|f| f.is_finite())
}

/// One GPU's live usage in `amd-smi metric --json`: the readings the usage gauges show
/// (`device_manager_gpu_*`), each absent when amd-smi says `N/A` or leaves it out. Not yet
/// sampled by `serve` (docs/ARCHITECTURE.md, "AMD, the second backend": what that needs).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricGpu {
    /// amd-smi's own index: joined to `static --json`'s `gpu` for the board's identity.
    pub gpu: Option<u64>,
    /// `usage.gfx_activity`, percent.
    pub utilization_percent: Option<f64>,
    /// `mem_usage.used_vram` (amd-smi's MB are MiB).
    pub memory_used_mib: Option<u64>,
    /// `mem_usage.total_vram`.
    pub memory_total_mib: Option<u64>,
    /// `temperature.edge`, else `temperature.hotspot`, degrees Celsius.
    pub temperature_c: Option<f64>,
    /// `power.socket_power`, watts.
    pub power_w: Option<f64>,
}

/// Reads `amd-smi metric --json`.
pub fn parse_metric(text_out: &str) -> Result<Vec<MetricGpu>, SmiError> {
    let what = "amd-smi metric --json";
    let doc = document(what, text_out)?;
    Ok(gpu_list(what, &doc)?.iter().map(metric_gpu).collect())
}

fn metric_gpu(g: &Value) -> MetricGpu {
    let watts = |v: Option<&Value>| {
        let unit = v.and_then(|v| v.get("unit")).and_then(Value::as_str);
        match unit {
            None | Some("W") => figure(v),
            Some("mW") => figure(v).map(|f| f / 1000.0),
            Some(_) => None,
        }
    };
    MetricGpu {
        gpu: number(g.get("gpu")),
        utilization_percent: figure(path(g, &["usage", "gfx_activity"])),
        memory_used_mib: mebibytes(path(g, &["mem_usage", "used_vram"])),
        memory_total_mib: mebibytes(path(g, &["mem_usage", "total_vram"])),
        temperature_c: figure(path(g, &["temperature", "edge"]))
            .or_else(|| figure(path(g, &["temperature", "hotspot"]))),
        power_w: watts(path(g, &["power", "socket_power"])),
    }
}

fn static_gpu(g: &Value) -> StaticGpu {
    let asic = |k: &str| path(g, &["asic", k]);
    let gfx = text(asic("target_graphics_version")).map(|t| {
        if t.starts_with("gfx") {
            t
        } else {
            format!("gfx{t}")
        }
    });
    let identity_unreadable = ["market_name", "device_id", "asic_serial", "vendor_id"]
        .iter()
        .all(|k| text(asic(k)).is_none());
    StaticGpu {
        gpu: number(g.get("gpu")),
        bus_id: text(path(g, &["bus", "bdf"])).and_then(|b| b.parse().ok()),
        unique_id: text(asic("asic_serial")).and_then(|s| unique_id(&s)),
        market_name: text(asic("market_name")).and_then(|n| product_name(&n)),
        board_name: text(path(g, &["board", "product_name"])).and_then(|n| product_name(&n)),
        device_id: text(asic("device_id"))
            .and_then(|d| hex_u64(&d))
            .and_then(|d| u16::try_from(d).ok()),
        compute_units: number(asic("num_compute_units")).and_then(|n| u32::try_from(n).ok()),
        gfx_target: gfx,
        vram_mib: mebibytes(path(g, &["vram", "size"])),
        driver_version: driver_version(text(path(g, &["driver", "version"]))),
        vbios_version: text(path(g, &["ifwi", "version"]))
            .or_else(|| text(path(g, &["vbios", "version"]))),
        serial: text(path(g, &["board", "product_serial"])),
        identity_unreadable,
    }
}

/// What `amd-smi version` reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Versions {
    pub tool: Option<String>,
    pub library: Option<String>,
    pub rocm: Option<String>,
    /// The amdgpu driver's version; `None` when the field is missing or carries the kernel's
    /// whole `/proc/version` (an inbox driver has no version of its own).
    pub amdgpu: Option<String>,
}

/// A driver version worth reporting: a dotted figure, not a kernel banner (an inbox driver's
/// `/proc/version`, squashed or not). Every source of the driver's version goes through it.
pub fn driver_version(text: Option<String>) -> Option<String> {
    text.filter(|t| {
        t.len() <= 32
            && t.chars().next().is_some_and(|c| c.is_ascii_digit())
            && t.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
    })
}

/// Reads `amd-smi version --json` (a list of one object, or the object).
pub fn parse_version_json(text_out: &str) -> Result<Versions, SmiError> {
    let what = "amd-smi version --json";
    let doc = document(what, text_out)?;
    let o = match &doc {
        Value::Array(list) => list.first().cloned().unwrap_or(Value::Null),
        other => other.clone(),
    };
    Ok(Versions {
        tool: text(o.get("version")),
        library: text(o.get("amdsmi_library_version")),
        rocm: text(o.get("rocm_version")),
        amdgpu: driver_version(text(o.get("amdgpu_version"))),
    })
}

/// Reads `amd-smi version`'s text line (`AMDSMI Tool: … | ROCm version: 6.4.1 | amdgpu version:
/// 6.10.5 | …`), wherever it sits in the output.
pub fn parse_version_text(text_out: &str) -> Option<Versions> {
    let line = text_out.lines().find(|l| l.contains("AMDSMI Tool:"))?;
    let mut v = Versions::default();
    for field in line.split(" | ") {
        let Some((key, value)) = field.split_once(':') else {
            continue;
        };
        let value = clean(value);
        match key.trim() {
            "AMDSMI Tool" => v.tool = value,
            "AMDSMI Library version" => v.library = value,
            "ROCm version" => v.rocm = value,
            "amdgpu version" => v.amdgpu = driver_version(value),
            _ => {}
        }
    }
    Some(v)
}

/// `major.minor` of a version (`7.2.1` → `7.2`), the runtime version the labels carry.
pub fn major_minor(version: &str) -> Option<String> {
    let mut parts = version.split('.');
    let major = parts
        .next()
        .filter(|p| p.chars().all(|c| c.is_ascii_digit()) && !p.is_empty())?;
    let minor: String = parts
        .next()
        .map(|p| p.chars().take_while(char::is_ascii_digit).collect())
        .unwrap_or_default();
    if minor.is_empty() {
        Some(major.to_string())
    } else {
        Some(format!("{major}.{minor}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_come_in_every_shape() {
        let v: Value = serde_json::from_str(
            r#"{"a": {"value": 750, "unit": "W"}, "b": "N/A", "c": 3, "d": "12"}"#,
        )
        .unwrap();
        assert_eq!(number(v.get("a")), Some(750));
        assert_eq!(number(v.get("b")), None);
        assert_eq!(number(v.get("c")), Some(3));
        assert_eq!(number(v.get("d")), Some(12));
    }

    #[test]
    fn a_field_reads_as_text_in_every_shape() {
        let v: Value = serde_json::from_str(
            r#"{"n": 304, "b": true, "o": {"value": "gfx942", "unit": null}, "s": " MI300X ",
                "na": "N/A", "l": [1]}"#,
        )
        .unwrap();
        assert_eq!(text(v.get("n")).as_deref(), Some("304"));
        assert_eq!(text(v.get("b")).as_deref(), Some("true"));
        assert_eq!(text(v.get("o")).as_deref(), Some("gfx942"));
        assert_eq!(text(v.get("s")).as_deref(), Some("MI300X"));
        assert_eq!(text(v.get("na")), None);
        assert_eq!(text(v.get("l")), None);
        assert_eq!(text(v.get("missing")), None);
    }

    #[test]
    fn a_figure_reads_from_a_number_a_string_or_a_value_object() {
        let v: Value = serde_json::from_str(
            r#"{"n": 51.5, "s": "12.25", "o": {"value": "7.5", "unit": "W"}, "na": "N/A",
                "x": "12 W", "b": true}"#,
        )
        .unwrap();
        assert_eq!(figure(v.get("n")), Some(51.5));
        assert_eq!(figure(v.get("s")), Some(12.25));
        assert_eq!(figure(v.get("o")), Some(7.5));
        assert_eq!(figure(v.get("na")), None);
        assert_eq!(figure(v.get("x")), None);
        assert_eq!(figure(v.get("b")), None);
    }

    #[test]
    fn memory_figures_read_as_mebibytes_in_every_unit() {
        let v: Value = serde_json::from_str(
            r#"{"mb": {"value": 196592, "unit": "MB"}, "mib": {"value": 10, "unit": "MiB"},
                "gb": {"value": 192, "unit": "GB"}, "b": {"value": 205084689384, "unit": "B"},
                "bare": 512, "odd": {"value": 1, "unit": "TB"}}"#,
        )
        .unwrap();
        assert_eq!(mebibytes(v.get("mb")), Some(196_592));
        assert_eq!(mebibytes(v.get("mib")), Some(10));
        assert_eq!(mebibytes(v.get("gb")), Some(196_608));
        // 205084689384 B is 195584 MiB and 1000 bytes: rounded down.
        assert_eq!(mebibytes(v.get("b")), Some(195_584));
        assert_eq!(mebibytes(v.get("bare")), Some(512));
        assert_eq!(mebibytes(v.get("odd")), None);
    }

    #[test]
    fn a_driver_version_is_a_short_dotted_figure() {
        for version in ["6.16.13", "6.10.5", "6.8.0-79-generic", "1"] {
            assert_eq!(
                driver_version(Some(version.into())).as_deref(),
                Some(version)
            );
        }
        for not_one in [
            // A squashed banner, even a short one with only the allowed characters.
            "Linuxversion6.8.0-79-generic",
            "Linux version 6.8.0-79-generic (buildd@lcy02-amd64-049)",
            // Dotted, but longer than any driver version.
            "6.8.0-79-generic-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "6.8.0 (x86_64)",
            "",
        ] {
            assert_eq!(driver_version(Some(not_one.into())), None, "{not_one}");
        }
        assert_eq!(driver_version(None), None);
    }

    #[test]
    fn the_version_line_names_the_tool_library_rocm_and_driver() {
        let v = parse_version_text(
            "some notice\nAMDSMI Tool: 24.5.1+c5106a9 | AMDSMI Library version: 24.5.2.0 | ROCm version: 6.1.2 | amdgpu version: 6.7.0 | stray",
        )
        .unwrap();
        assert_eq!(
            v,
            Versions {
                tool: Some("24.5.1+c5106a9".into()),
                library: Some("24.5.2.0".into()),
                rocm: Some("6.1.2".into()),
                amdgpu: Some("6.7.0".into()),
            }
        );
        assert_eq!(parse_version_text("no version here"), None);
    }

    #[test]
    fn a_static_document_drops_placeholder_names_and_a_banner_driver() {
        let doc = r#"[{"gpu": 0, "asic": {"market_name": "0x74a1", "device_id": "0x74a1"},
                       "board": {"product_name": "AMD Instinct MI300X OAM"},
                       "driver": {"name": "amdgpu", "version": "Linux version 6.8.0-79-generic (buildd@lcy02)"}},
                      {"gpu": 1, "asic": {"market_name": "AMD Instinct MI300X"},
                       "board": {"product_name": "N/A"}, "driver": {"version": "6.16.13"}}]"#;
        let gpus = parse_static(doc).unwrap();
        assert_eq!(gpus[0].market_name, None);
        assert_eq!(
            gpus[0].board_name.as_deref(),
            Some("AMD Instinct MI300X OAM")
        );
        assert_eq!(gpus[0].device_id, Some(0x74a1));
        assert_eq!(gpus[0].driver_version, None);
        assert_eq!(gpus[1].market_name.as_deref(), Some("AMD Instinct MI300X"));
        assert_eq!(gpus[1].board_name, None);
        assert_eq!(gpus[1].driver_version.as_deref(), Some("6.16.13"));
    }

    #[test]
    fn a_kernel_banner_is_no_driver_version() {
        let v = parse_version_text(
            "AMDSMI Tool: 25.3.0+ede62f2 | ROCm version: 6.4.0 | amdgpu version: Linuxversion6.8.0-79-generic(buildd@lcy02)#79 | amd_hsmp version: N/A",
        )
        .unwrap();
        assert_eq!(v.rocm.as_deref(), Some("6.4.0"));
        assert_eq!(v.amdgpu, None);
        assert_eq!(major_minor("7.2.1").as_deref(), Some("7.2"));
        assert_eq!(major_minor("6").as_deref(), Some("6"));
        assert_eq!(major_minor("x"), None);
    }

    #[test]
    fn a_metric_document_reads_in_either_shape_with_absent_readings_absent() {
        // The 26.x wrapper; N/A and missing sections are absent; mW scaled; no edge sensor:
        // the hotspot.
        let doc = r#"{"gpu_data": [
            {"gpu": 3,
             "usage": {"gfx_activity": "N/A"},
             "power": {"socket_power": {"value": 750000, "unit": "mW"}},
             "temperature": {"edge": "N/A", "hotspot": {"value": 51, "unit": "C"}},
             "mem_usage": {"total_vram": {"value": 192, "unit": "GB"}, "used_vram": "N/A"}},
            {"gpu": 4}
        ]}"#;
        let gpus = parse_metric(doc).unwrap();
        assert_eq!(
            gpus[0],
            MetricGpu {
                gpu: Some(3),
                utilization_percent: None,
                memory_used_mib: None,
                memory_total_mib: Some(196_608),
                temperature_c: Some(51.0),
                power_w: Some(750.0),
            }
        );
        assert_eq!(
            gpus[1],
            MetricGpu {
                gpu: Some(4),
                ..Default::default()
            }
        );
        assert_eq!(
            parse_metric("{}").unwrap_err().to_string(),
            "amd-smi metric --json: no GPU list (expected a list or an object with \"gpu_data\")"
        );
    }
}
