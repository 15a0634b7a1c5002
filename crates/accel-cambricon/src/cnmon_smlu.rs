//! cnmon's sMLU commands (spec/cambricon.md §4.4 and addendum C1–C2): turning a card's sMLU
//! mode on (`cnmon set`), its profile table (`cnmon smlu -c <n> -p`), and making and destroying
//! profiles and instances (`-CP`, `-C`, `-D`, `-DP`). The module owns the argvs and reads what
//! cnmon prints; it runs nothing (the allocator, [`crate::smlu`], runs them).
//!
//! Everything here is read from the strings and the disassembly of the 5.10.22 cnmon binary: no
//! output of any of these commands was ever captured (**UNMEASURED**, addendum C7), so each
//! answer is read by its words, never by its position or its exit status (HAZARDS.md item 12:
//! refusals are plain stdout lines that may exit 0). A text that is none of the known answers
//! is a refusal quoting its first line (standard error first), never a success.
//!
//! **The mode switch is spelled two ways** (HAZARDS.md item 7, a documented conflict): the
//! 5.10.22 option table has `-S`/`--smlu_mode=<0|1|OFF|ON>` and no `-smlu`; HAMi's guide and the
//! described system's remediation text say `cnmon set -c N -smlu on`. Which one a node's cnmon
//! takes is read off its own usage text (`cnmon set -h`, [`parse_usage`]), never guessed; a
//! usage that names neither is a cnmon without sMLU.
//!
//! **`-CP` asks on stdin** (item 8): the MLU quota (1–100), then the memory size in MiB; both
//! answers go in with trailing newlines ([`create_profile_input`]), and the call is always
//! bounded (after a non-number cnmon discards input up to a newline that never comes).

/// The `set` subcommand's usage text, which names the sMLU mode option this cnmon takes.
pub const SET_USAGE_ARGV: &[&str] = &["cnmon", "set", "-h"];

/// How this node's cnmon spells "turn card N's sMLU mode on/off".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeSpelling {
    /// `cnmon set -c N -S 1` / `-S 0` (the 5.10.22 option table: `-S`, `--smlu_mode`).
    ShortS,
    /// `cnmon set -c N -smlu on` / `off` (HAMi's guide, the described system's remediation).
    SmluOnOff,
}

impl ModeSpelling {
    /// The argv turning card `card`'s mode on or off.
    pub fn argv(self, card: u32, on: bool) -> Vec<String> {
        let (option, value) = match (self, on) {
            (ModeSpelling::ShortS, true) => ("-S", "1"),
            (ModeSpelling::ShortS, false) => ("-S", "0"),
            (ModeSpelling::SmluOnOff, true) => ("-smlu", "on"),
            (ModeSpelling::SmluOnOff, false) => ("-smlu", "off"),
        };
        ["cnmon", "set", "-c", &card.to_string(), option, value]
            .map(str::to_string)
            .to_vec()
    }

    /// The command line, for messages.
    pub fn command(self, card: u32, on: bool) -> String {
        self.argv(card, on).join(" ")
    }
}

/// Both spellings the sources give, for a message where this node's cnmon named neither.
pub fn both_spellings(card: u32, on: bool) -> String {
    format!(
        "`{}` (cnmon 5.10.22's option) or `{}` (HAMi's spelling)",
        ModeSpelling::ShortS.command(card, on),
        ModeSpelling::SmluOnOff.command(card, on)
    )
}

/// The words of a usage text: options are split off at blanks, commas, `=`, brackets and `/`.
fn usage_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| c.is_whitespace() || matches!(c, ',' | '=' | '[' | ']' | '<' | '>' | '|'))
        .filter(|w| !w.is_empty())
}

/// The sMLU mode option `cnmon set`'s usage text names: `-S` or `--smlu_mode` (5.10.22's
/// table; preferred where both are named), else `-smlu`; `None` when it names neither (a cnmon
/// without sMLU, or a text that is no usage at all, e.g. `cndev init failed: …`).
pub fn parse_usage(text: &str) -> Option<ModeSpelling> {
    let mut smlu = false;
    for word in usage_words(text) {
        match word {
            "-S" | "--smlu_mode" => return Some(ModeSpelling::ShortS),
            "-smlu" => smlu = true,
            _ => {}
        }
    }
    smlu.then_some(ModeSpelling::SmluOnOff)
}

/// What `cnmon set … <mode>` answered (addendum C1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModeAnswer {
    /// `The device SMLU mode is ON now.` (`OFF`): written, and read back so.
    Now { on: bool },
    /// `The device SMLU mode is already ON now.` (`OFF`).
    Already { on: bool },
    /// `This device doesn't support setting SMLU mode.`: the card or driver has no sMLU.
    NotSupported,
    /// Anything else (`This device is busy.`, `Permission denied.`, `Optional mode:0/OFF 1/ON`,
    /// `cndevCheckErrors(…)`, a usage text): its first line.
    Refused(String),
}

/// The first non-blank line printed, standard error first.
pub fn said(stdout: &str, stderr: &str) -> String {
    stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no output")
        .to_string()
}

/// Reads `cnmon set`'s answer.
pub fn parse_mode_answer(stdout: &str, stderr: &str) -> ModeAnswer {
    let cleaned = accel_backend::text::clean(stdout);
    for line in cleaned.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("The device SMLU mode is ") else {
            if line.starts_with("This device doesn't support setting SMLU mode") {
                return ModeAnswer::NotSupported;
            }
            continue;
        };
        let (already, rest) = match rest.strip_prefix("already ") {
            Some(r) => (true, r),
            None => (false, rest),
        };
        let on = if rest.starts_with("ON") {
            true
        } else if rest.starts_with("OFF") {
            false
        } else {
            continue;
        };
        return if already {
            ModeAnswer::Already { on }
        } else {
            ModeAnswer::Now { on }
        };
    }
    ModeAnswer::Refused(said(&cleaned, stderr))
}

/// The profile table of card `card`.
pub fn profiles_argv(card: u32) -> Vec<String> {
    smlu_argv(card, &["-p"])
}

/// Makes a profile on card `card` (the answers go on stdin: [`create_profile_input`]).
pub fn create_profile_argv(card: u32) -> Vec<String> {
    smlu_argv(card, &["-CP"])
}

/// The two answers `-CP` asks for, each with its newline: the MLU quota in percent, then the
/// memory size in MiB.
pub fn create_profile_input(quota_percent: u32, memory_mib: u64) -> Vec<u8> {
    format!("{quota_percent}\n{memory_mib}\n").into_bytes()
}

/// Makes an instance of profile `profile` on card `card`.
pub fn create_instance_argv(card: u32, profile: u32) -> Vec<String> {
    smlu_argv(card, &["-C", &profile.to_string()])
}

/// Destroys instance `instance` of card `card`.
pub fn destroy_instance_argv(card: u32, instance: u32) -> Vec<String> {
    smlu_argv(card, &["-D", &instance.to_string()])
}

/// Destroys profile `profile` of card `card`.
pub fn destroy_profile_argv(card: u32, profile: u32) -> Vec<String> {
    smlu_argv(card, &["-DP", &profile.to_string()])
}

/// `cnmon smlu -c <card> <action…>`; values as separate words (whether `-C3` parses is
/// UNMEASURED).
fn smlu_argv(card: u32, action: &[&str]) -> Vec<String> {
    ["cnmon", "smlu", "-c", &card.to_string()]
        .iter()
        .chain(action)
        .map(|s| s.to_string())
        .collect()
}

/// Why a `cnmon smlu` action did not do what it was asked (addendum C2's messages).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `The SMLU mode of this device is disabled.` (even the tables need the mode on).
    #[error("cnmon says the card's sMLU mode is disabled")]
    ModeDisabled,
    /// `Permission denied.` (not root, or the card is a virtual function).
    #[error("cnmon says: Permission denied.")]
    PermissionDenied,
    /// `This device doesn't support smlu function.`: printed for NOT_SUPPORTED and for any
    /// unexpected code, out of space included (HAZARDS.md item 9), so it proves little.
    #[error("cnmon says: This device doesn't support smlu function.")]
    NoSmluFunction,
    /// `Out of resources when creating mlu instance.`
    #[error("cnmon says: Out of resources when creating mlu instance.")]
    OutOfResources,
    /// `This MLU Instance is in use.`
    #[error("cnmon says: This MLU Instance is in use.")]
    InUse,
    /// `Please input the correct … ID.` / `… Profile Information.`: no such object or value.
    #[error("cnmon says: {0}")]
    Rejected(String),
    /// Anything else: the first line printed (standard error first).
    #[error("cnmon says: {0}")]
    Other(String),
}

/// The refusal a text that is no success says.
fn refusal(stdout: &str, stderr: &str) -> Refusal {
    for line in stdout.lines().map(str::trim) {
        let known = match line {
            l if l.starts_with("The SMLU mode of this device is disabled") => Refusal::ModeDisabled,
            l if l.starts_with("Permission denied") => Refusal::PermissionDenied,
            l if l.starts_with("This device doesn't support smlu function") => {
                Refusal::NoSmluFunction
            }
            l if l.starts_with("Out of resources when creating mlu instance") => {
                Refusal::OutOfResources
            }
            l if l.starts_with("This MLU Instance is in use") => Refusal::InUse,
            l if l.starts_with("Please input the correct") => Refusal::Rejected(l.to_string()),
            _ => continue,
        };
        return known;
    }
    Refusal::Other(said(stdout, stderr))
}

/// The number after `label` in `line`.
fn number_after(line: &str, label: &str) -> Option<u32> {
    let at = line.find(label)? + label.len();
    let digits: String = line[at..]
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The line starting `prefix` (blanks and ANSI codes aside).
fn line_with<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines().map(str::trim).find(|l| l.starts_with(prefix))
}

/// `Successfully created smlu profile ID <p> on card <c>.` → `p` (the prompts before it are
/// skipped).
pub fn parse_created_profile(stdout: &str, stderr: &str) -> Result<u32, Refusal> {
    let cleaned = accel_backend::text::clean(stdout);
    line_with(&cleaned, "Successfully created smlu profile")
        .and_then(|l| number_after(l, "profile ID"))
        .ok_or_else(|| refusal(&cleaned, stderr))
}

/// `Successfully created smlu instance ID <i> on card <c>, using profile ID <p>` → `(i, p)`.
pub fn parse_created_instance(stdout: &str, stderr: &str) -> Result<(u32, Option<u32>), Refusal> {
    let cleaned = accel_backend::text::clean(stdout);
    line_with(&cleaned, "Successfully created smlu instance")
        .and_then(|l| {
            Some((
                number_after(l, "instance ID")?,
                number_after(l, "profile ID"),
            ))
        })
        .ok_or_else(|| refusal(&cleaned, stderr))
}

/// `Successfully destroyed mlu instance ID <i> on card <c>` (MIM's words: "mlu", not "smlu").
pub fn parse_destroyed_instance(stdout: &str, stderr: &str) -> Result<u32, Refusal> {
    let cleaned = accel_backend::text::clean(stdout);
    line_with(&cleaned, "Successfully destroyed")
        .filter(|l| l.contains("instance"))
        .and_then(|l| number_after(l, "instance ID"))
        .ok_or_else(|| refusal(&cleaned, stderr))
}

/// `Successfully destroyed profile ID <p> on card <c>`.
pub fn parse_destroyed_profile(stdout: &str, stderr: &str) -> Result<u32, Refusal> {
    let cleaned = accel_backend::text::clean(stdout);
    line_with(&cleaned, "Successfully destroyed profile")
        .and_then(|l| number_after(l, "profile ID"))
        .ok_or_else(|| refusal(&cleaned, stderr))
}

/// One row of the profile table (`-p`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmluProfile {
    pub card: Option<u32>,
    /// The profile's name (the driver's are `<ipu %>p.<MiB>mb`).
    pub name: Option<String>,
    pub id: u32,
    /// `Instances Free/Total`.
    pub free: Option<u32>,
    pub total: Option<u32>,
    /// `Quota MLU`, percent.
    pub quota_percent: Option<u32>,
    /// `Quota MemorySize`, MiB.
    pub memory_mib: Option<u64>,
}

/// A `<n>/<m>` word.
fn free_total(word: &str) -> Option<(u32, u32)> {
    let (a, b) = word.split_once('/')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// The name and the id at the end of a row's first words: the id is the last word when it is a
/// number, else the digits a 20-character name runs into (`%-20s%-2d`, HAZARDS.md item 11;
/// the driver's names end in `mb`, so the trailing digits are the id).
fn name_and_id(words: &[&str]) -> Option<(Option<String>, u32)> {
    let (last, names) = words.split_last()?;
    if let Ok(id) = last.parse::<u32>() {
        let name = names.join(" ");
        return Some(((!name.is_empty()).then_some(name), id));
    }
    let digits = last.len() - last.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    let (glued, id) = last.split_at(last.len() - digits);
    let mut name: Vec<&str> = names.to_vec();
    name.push(glued);
    Some((Some(name.join(" ")), id.parse().ok()?))
}

/// One profile row: `| <card> <name><id> <free>/<total> <quota>% <MiB> MiB |`, anchored on the
/// free/total pair (item 11), never on column offsets.
fn profile_row(line: &str) -> Option<SmluProfile> {
    let inner = line.trim().trim_matches('|');
    let words: Vec<&str> = inner.split_whitespace().collect();
    let pair = words.iter().position(|w| free_total(w).is_some())?;
    let (free, total) = free_total(words[pair])?;
    let (card, rest) = words[..pair].split_first()?;
    let (name, id) = name_and_id(rest)?;
    let after = &words[pair + 1..];
    let quota_percent = after
        .iter()
        .find_map(|w| w.strip_suffix('%'))
        .and_then(|n| n.parse().ok());
    let memory_mib = after
        .iter()
        .position(|w| w.eq_ignore_ascii_case("MiB"))
        .and_then(|at| at.checked_sub(1))
        .and_then(|at| after[at].parse().ok())
        .or_else(|| {
            after
                .iter()
                .find_map(|w| w.strip_suffix("MiB"))
                .and_then(|n| n.parse().ok())
        });
    Some(SmluProfile {
        card: card.parse().ok(),
        name,
        id,
        free: Some(free),
        total: Some(total),
        quota_percent,
        memory_mib,
    })
}

/// Reads the profile table (`cnmon smlu -c <n> -p`): the rows under the `|====` rule of the
/// table headed `Profile … Instances … Quota`. A header followed by `This device doesn't
/// support smlu function.` is an empty list (addendum C2); no header is the refusal cnmon
/// printed instead (`The SMLU mode of this device is disabled.`, …).
pub fn parse_profiles(stdout: &str, stderr: &str) -> Result<Vec<SmluProfile>, Refusal> {
    let cleaned = accel_backend::text::clean(stdout);
    let lines: Vec<&str> = cleaned.lines().collect();
    let Some(header) = lines.iter().position(|l| {
        let words: Vec<&str> = l.split(|c: char| c.is_whitespace() || c == '|').collect();
        words.contains(&"Profile") && words.contains(&"Instances")
    }) else {
        return Err(refusal(&cleaned, stderr));
    };
    let body = lines[header..]
        .iter()
        .position(|l| l.trim_start().starts_with("|="))
        .map_or(header + 1, |at| header + at + 1);
    Ok(lines[body.min(lines.len())..]
        .iter()
        .filter(|l| l.trim_start().starts_with('|'))
        .filter_map(|l| profile_row(l))
        .collect())
}

/// The profile table as the 5.10.22 printf formats lay it out (for the recorded host's replay
/// and tests; each line padded to 88 columns).
pub fn render_profiles(rows: &[SmluProfile]) -> String {
    let rule = format!("+{}+\n", "-".repeat(86));
    let pad = |text: String| format!("{text:<87}|\n");
    let mut out = rule.clone();
    out.push_str(&pad("| MLU instance profiles:".into()));
    out.push_str(&rule);
    out.push_str(&pad(
        "| Card   Name                Profile    Instances        Quota".into(),
    ));
    out.push_str(&pad(
        "|                            ID         Free/Total       MLU    MemorySize".into(),
    ));
    out.push_str(&format!("|{}|\n", "=".repeat(86)));
    for p in rows {
        out.push_str(&pad(format!(
            "| {:<4}   {:<20}{:<2}         {:>3}/{:<3}          {:<6} {:>22}",
            p.card.unwrap_or(0),
            p.name.as_deref().unwrap_or(""),
            p.id,
            p.free.unwrap_or(0),
            p.total.unwrap_or(0),
            format!("{}%", p.quota_percent.unwrap_or(0)),
            format!("{} MiB", p.memory_mib.unwrap_or(0)),
        )));
        out.push_str(&rule);
    }
    out
}

/// The quota words a profile name carries (`25p.4096mb`), the driver's naming (addendum C2).
pub fn profile_name(quota_percent: u32, memory_mib: u64) -> String {
    format!("{quota_percent}p.{memory_mib}mb")
}

/// Whether a text is cnmon's refusal to run at all without a driver (addendum C6).
pub fn no_driver(stdout: &str, stderr: &str) -> bool {
    stdout.contains("CNDEV_ERROR_NO_DRIVER") || stderr.contains("CNDEV_ERROR_NO_DRIVER")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_usage_names_the_spelling_this_cnmon_takes() {
        // The 5.10.22 option table, as its help prints the options (the layout is UNMEASURED).
        let v5 = "Usage: cnmon set [OPTIONS]\n  -c, --card=<int>           only set card X\n  -S, --smlu_mode=<string>   only set card X's SMLU mode: 0/OFF 1/ON. Requires administrator privileges\n  -M, --mim_mode=<string>    ...\n";
        assert_eq!(parse_usage(v5), Some(ModeSpelling::ShortS));
        assert_eq!(
            parse_usage("  --smlu_mode=ON|OFF\n"),
            Some(ModeSpelling::ShortS)
        );
        let hami =
            "Usage: cnmon set [OPTIONS]\n  -c <card>\n  -smlu <on|off>   set card's SMLU mode\n";
        assert_eq!(parse_usage(hami), Some(ModeSpelling::SmluOnOff));
        // Neither: a cnmon without sMLU, or no usage at all.
        assert_eq!(
            parse_usage(
                "Usage: cnmon set [OPTIONS]\n  -c, --card=<int>\n  -s, --sriov_mode=<string>\n"
            ),
            None
        );
        assert_eq!(
            parse_usage("cndev init failed: CNDEV_ERROR_NO_DRIVER.\n"),
            None
        );
        assert_eq!(ModeSpelling::ShortS.command(3, true), "cnmon set -c 3 -S 1");
        assert_eq!(
            ModeSpelling::SmluOnOff.command(3, false),
            "cnmon set -c 3 -smlu off"
        );
    }

    #[test]
    fn mode_answers_are_read_by_their_words() {
        let read = |s: &str| parse_mode_answer(s, "");
        assert_eq!(
            read("The device SMLU mode is ON now.\n"),
            ModeAnswer::Now { on: true }
        );
        assert_eq!(
            read("The device SMLU mode is already OFF now.\n"),
            ModeAnswer::Already { on: false }
        );
        assert_eq!(
            read("This device doesn't support setting SMLU mode.\n"),
            ModeAnswer::NotSupported
        );
        assert_eq!(
            read("This device is busy.\n"),
            ModeAnswer::Refused("This device is busy.".into())
        );
        assert_eq!(
            parse_mode_answer(
                "",
                "cndevCheckErrors(13): CNDEV_ERROR_NO_PERMISSION, from file a.c, line 9.\n"
            ),
            ModeAnswer::Refused(
                "cndevCheckErrors(13): CNDEV_ERROR_NO_PERMISSION, from file a.c, line 9.".into()
            )
        );
    }

    #[test]
    fn create_and_destroy_answers_give_their_ids_or_the_refusal() {
        let cp = "Please input MLU quota:(1 - 100)\nPlease input memory size quota:(1 - 23308 MiB)\nSuccessfully created smlu profile ID 3 on card 0.\n    MLU Quota: 25\n    MemorySize Quota: 4096 MiB\n";
        assert_eq!(parse_created_profile(cp, ""), Ok(3));
        assert_eq!(
            parse_created_profile(
                "Please input MLU quota:(1 - 100)\nThis device doesn't support smlu function.\n",
                ""
            ),
            Err(Refusal::NoSmluFunction)
        );
        assert_eq!(
            parse_created_instance(
                "Successfully created smlu instance ID 2 on card 0, using profile ID 3\n",
                ""
            ),
            Ok((2, Some(3)))
        );
        assert_eq!(
            parse_created_instance("Out of resources when creating mlu instance.\n", ""),
            Err(Refusal::OutOfResources)
        );
        assert_eq!(
            parse_destroyed_instance("Successfully destroyed mlu instance ID 2 on card 0\n", ""),
            Ok(2)
        );
        assert_eq!(
            parse_destroyed_instance("This MLU Instance is in use.\n", ""),
            Err(Refusal::InUse)
        );
        assert_eq!(
            parse_destroyed_profile("Successfully destroyed profile ID 3 on card 0\n", ""),
            Ok(3)
        );
        assert_eq!(
            parse_destroyed_profile(
                "",
                "cndevCheckErrors(15): CNDEV_ERROR_IN_USE, from file x, line 1.\n"
            ),
            Err(Refusal::Other(
                "cndevCheckErrors(15): CNDEV_ERROR_IN_USE, from file x, line 1.".into()
            ))
        );
        assert_eq!(
            parse_created_instance("The SMLU mode of this device is disabled.\n", ""),
            Err(Refusal::ModeDisabled)
        );
    }

    fn profile(id: u32, name: &str, free: u32, total: u32, q: u32, mib: u64) -> SmluProfile {
        SmluProfile {
            card: Some(0),
            name: Some(name.into()),
            id,
            free: Some(free),
            total: Some(total),
            quota_percent: Some(q),
            memory_mib: Some(mib),
        }
    }

    #[test]
    fn the_profile_table_reads_back_and_a_glued_name_gives_its_id() {
        let rows = vec![
            profile(0, "100p.23308mb", 1, 1, 100, 23308),
            profile(1, "50p.11654mb", 2, 2, 50, 11654),
            // A 20-character name runs straight into the id (item 11).
            profile(12, "25p.4096mb-abcdefghi", 3, 4, 25, 4096),
        ];
        let text = render_profiles(&rows);
        assert!(text.contains("25p.4096mb-abcdefghi12"), "{text}");
        assert_eq!(parse_profiles(&text, ""), Ok(rows));
        // The header then the empty-list words: no profiles.
        let empty = format!(
            "{}This device doesn't support smlu function.\n",
            render_profiles(&[])
        );
        assert_eq!(parse_profiles(&empty, ""), Ok(Vec::new()));
        assert_eq!(
            parse_profiles("The SMLU mode of this device is disabled.\n", ""),
            Err(Refusal::ModeDisabled)
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in ".{0,300}") {
            let _ = parse_usage(&text);
            let _ = parse_mode_answer(&text, &text);
            let _ = parse_profiles(&text, "");
            let _ = parse_created_profile(&text, "");
            let _ = parse_created_instance(&text, "");
            let _ = parse_destroyed_instance(&text, "");
            let _ = parse_destroyed_profile(&text, "");
        }
    }
}
