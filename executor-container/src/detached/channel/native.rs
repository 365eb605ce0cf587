//! A channel message's native line: the step in fields for
//! `knotless-agent` ([`super::super::agent`]), which then starts it
//! without a shell of its own. The shell's loop takes the line for a
//! comment; the agent runs a message without one (or with one it cannot
//! read) through the shell's start. The channel adds one record of its
//! own, `m` and the key the step's status file is signed with
//! ([`super::super::signed`]).

use executor_core::script::quote;

/// What the native line begins with.
pub const NATIVE: &str = "#knotless-native ";

/// The native line (without its newline) of the start whose end marks
/// carry `key`: its files' `prefix`, `script` (the start's `$1`), `own`
/// (what is the step's own in the start's text: `_kfl=FLAGS;
/// _kpre=PRELUDE` and a newline) and the folder it runs in. `None` where
/// the agent could not start it as the shell would: a prelude other than
/// the exports, unsets and `cd` a backend writes, a NUL anywhere, or a
/// folder that is not absolute.
///
/// ```
/// use executor_container::detached::native_line;
/// let own = "_kfl=-ec; _kpre='export A='\\''x'\\''; cd '\\''/w'\\'' && '\n";
/// let line = native_line("ab", "/k/stepio-s", "make", own, Some("/src")).unwrap();
/// assert!(line.starts_with("#knotless-native "));
/// assert_eq!(native_line("ab", "/k/stepio-s", "make", "_kfl=-ec; _kpre='echo hi; '\n", None), None);
/// ```
pub fn native_line(
    key: &str,
    prefix: &str,
    script: &str,
    own: &str,
    working_dir: Option<&str>,
) -> Option<String> {
    let rest = own.strip_prefix("_kfl=")?.strip_suffix('\n')?;
    let (flags, quoted) = rest.split_once("; _kpre=")?;
    if !matches!(flags, "-ec" | "-e") {
        return None;
    }
    let (prelude, after) = unquote(quoted)?;
    if !after.is_empty() {
        return None;
    }
    let mut records = vec![('k', key), ('p', prefix), ('f', flags), ('s', script)];
    if let Some(dir) = working_dir {
        if !dir.starts_with('/') {
            return None;
        }
        records.push(('w', dir));
    }
    records.push(('P', &prelude));
    let ops = prelude_records(&prelude)?;
    let mut line = NATIVE.to_string();
    for (kind, value) in records
        .iter()
        .map(|(k, v)| (*k, (*v).to_string()))
        .chain(ops)
    {
        push_record(&mut line, kind, &value)?;
    }
    Some(line)
}

/// Adds the record `KIND VALUE` to a native `line`: the kind's byte, the
/// value and a NUL, in hex. `None` for a value with a NUL, which would
/// end it early.
pub(super) fn push_record(line: &mut String, kind: char, value: &str) -> Option<()> {
    if value.contains('\0') || !kind.is_ascii() {
        return None;
    }
    let record = [&[kind as u8], value.as_bytes(), &[0]].concat();
    line.extend(record.iter().map(|b| format!("{b:02x}")));
    Some(())
}

/// The records of a prelude, in order: `e NAME=VALUE` for `export
/// NAME='VALUE'; `, `r NAME=VAR` for `export NAME="$VAR"; `, `u NAME`
/// for each name of `unset A B; `, `d DIR` for a last `cd 'DIR' && `.
fn prelude_records(mut prelude: &str) -> Option<Vec<(char, String)>> {
    let mut records = Vec::new();
    while !prelude.is_empty() {
        if let Some(rest) = prelude.strip_prefix("export ") {
            let (name, value) = rest.split_once('=')?;
            if !super::is_variable_name(name) {
                return None;
            }
            if let Some(var) = value.strip_prefix("\"$") {
                let (var, rest) = var.split_once("\"; ")?;
                if !super::is_variable_name(var) {
                    return None;
                }
                records.push(('r', format!("{name}={var}")));
                prelude = rest;
            } else {
                let (value, rest) = unquote(value)?;
                records.push(('e', format!("{name}={value}")));
                prelude = rest.strip_prefix("; ")?;
            }
        } else if let Some(rest) = prelude.strip_prefix("unset ") {
            let (names, rest) = rest.split_once("; ")?;
            for name in names.split(' ') {
                if !super::is_variable_name(name) {
                    return None;
                }
                records.push(('u', name.to_string()));
            }
            prelude = rest;
        } else if let Some(rest) = prelude.strip_prefix("cd ") {
            let (dir, rest) = unquote(rest)?;
            if rest != " && " {
                return None;
            }
            records.push(('d', dir));
            prelude = "";
        } else {
            return None;
        }
    }
    Some(records)
}

/// A word [`quote`] made, at the start of `text`: its value and what
/// follows it.
fn unquote(text: &str) -> Option<(String, &str)> {
    let mut value = String::new();
    let mut rest = text.strip_prefix('\'')?;
    loop {
        let (part, after) = rest.split_once('\'')?;
        value.push_str(part);
        match after.strip_prefix("\\''") {
            Some(more) => {
                value.push('\'');
                rest = more;
            }
            None => {
                debug_assert_eq!(&quote(&value), &text[..text.len() - after.len()]);
                return Some((value, after));
            }
        }
    }
}

#[cfg(test)]
mod tests;
