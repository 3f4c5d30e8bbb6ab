//! Flags read from `DIGEST_GATE_*` variables, as people set variables: a
//! switch takes `1`/`0`, `yes`/`no`, `on`/`off` as well as `true`/`false`,
//! and a value the variable got wrong is named by the variable, not by a
//! flag the user never typed.

use std::ffi::OsString;

use clap::builder::BoolishValueParser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, ArgAction, Command};

/// `command` with every switch that reads a variable reading it as a
/// boolean is written in environments (clap's default takes only `true`
/// and `false`: `DIGEST_GATE_FIX=1` was refused).
pub fn boolish(command: Command) -> Command {
    command
        .mut_args(|arg| match (arg.get_env().is_some(), arg.get_action()) {
            (true, ArgAction::SetTrue) => arg.value_parser(BoolishValueParser::new()),
            _ => arg,
        })
        .mut_subcommands(boolish)
}

/// When `error` is about a value that came from a variable (its flag not
/// on `argv`), the message naming the variable: `DIGEST_GATE_MODE=enforcee:
/// …`. `None` leaves clap's own.
pub fn named_by_variable(error: &clap::Error, command: &Command, argv: &[OsString]) -> Option<String> {
    if !matches!(error.kind(), ErrorKind::InvalidValue | ErrorKind::ValueValidation) {
        return None;
    }
    let flag = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.split_whitespace().next()?.to_owned(),
        _ => return None,
    };
    let value = match error.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(s)) => s.clone(),
        _ => return None,
    };
    let arg = find(command, &flag)?;
    if typed(arg, argv) {
        return None;
    }
    let variable = arg.get_env()?.to_string_lossy().into_owned();
    let set = std::env::var_os(&variable)?.to_string_lossy().into_owned();
    if !set.contains(&value) {
        return None;
    }
    let why = match error.get(ContextKind::ValidValue) {
        Some(ContextValue::Strings(valid)) => format!("not one of {}", valid.join(", ")),
        _ => std::error::Error::source(error).map_or_else(|| "invalid value".to_owned(), ToString::to_string),
    };
    let hint = match error.get(ContextKind::SuggestedValue) {
        Some(ContextValue::String(s)) => format!(" (did you mean {s}?)"),
        _ => String::new(),
    };
    Some(format!("{variable}={set} (the variable of {flag}): {why}{hint}"))
}

/// The argument `flag` (`--mode`, `-n`) names, in any subcommand.
fn find<'c>(command: &'c Command, flag: &str) -> Option<&'c Arg> {
    let named = |arg: &&Arg| match flag.strip_prefix("--") {
        Some(long) => arg.get_long() == Some(long),
        None => flag
            .strip_prefix('-')
            .and_then(|s| s.chars().next())
            .is_some_and(|c| arg.get_short() == Some(c)),
    };
    command
        .get_arguments()
        .find(named)
        .or_else(|| command.get_subcommands().find_map(|sub| find(sub, flag)))
}

/// Whether the command line itself gives `arg`.
fn typed(arg: &Arg, argv: &[OsString]) -> bool {
    argv.iter().filter_map(|a| a.to_str()).any(|a| {
        let long = arg
            .get_long()
            .and_then(|l| a.strip_prefix("--").and_then(|rest| rest.strip_prefix(l)))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('='));
        let short = arg.get_short().is_some_and(|s| {
            a.strip_prefix('-')
                .is_some_and(|rest| !rest.starts_with('-') && rest.starts_with(s))
        });
        long || short
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn command() -> Command {
        Command::new("t").subcommand(
            Command::new("run")
                .arg(
                    Arg::new("mode")
                        .long("mode")
                        .env("T_MODE")
                        .value_parser(["audit", "enforce"]),
                )
                .arg(
                    Arg::new("fix")
                        .long("fix")
                        .env("T_FIX")
                        .action(ArgAction::SetTrue),
                ),
        )
    }

    /// What a variable reads is tested on the binary (tests/cli.rs): the
    /// process environment is not the unit tests' to set. Here: a switch
    /// made boolish is still a switch on the command line.
    #[test]
    fn a_boolish_switch_is_still_a_switch() {
        let cmd = boolish(command());
        let fix = |argv: &[&str]| {
            let m = cmd.clone().try_get_matches_from(argv).unwrap();
            m.subcommand_matches("run").unwrap().get_flag("fix")
        };
        assert!(fix(&["t", "run", "--fix"]));
        assert!(!fix(&["t", "run"]));
    }

    #[test]
    fn only_a_flag_not_typed_is_blamed_on_its_variable() {
        let cmd = command();
        let arg = find(&cmd, "--mode").unwrap();
        assert!(typed(arg, &["t", "run", "--mode", "x"].map(OsString::from)));
        assert!(typed(arg, &["t", "run", "--mode=x"].map(OsString::from)));
        assert!(!typed(arg, &["t", "run", "--modes"].map(OsString::from)));
        assert!(!typed(arg, &["t", "run"].map(OsString::from)));
    }
}
