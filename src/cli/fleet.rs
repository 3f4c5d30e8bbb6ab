//! `audit` over several clusters (`--context a --context b`,
//! `--all-contexts`): each read concurrently, at most `--parallel` at once
//! and each within `--cluster-deadline`; each cluster's objects written
//! to its part of the report as they are judged, the parts appended in the
//! order named, every line naming its cluster; then which cluster runs
//! which digest ([`fleet::Table`]), a summary per cluster and for the
//! fleet. A cluster not wholly read is an error naming it (exit 2) and
//! holds no other back.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use futures::StreamExt;

use super::audit::{AuditArgs, Failed, Run, prepared, read_note, said_what_was_read, scope};
use super::interrupt::{self, Cut, Interrupt};
use super::progress;
use crate::audit;
use crate::fleet::{self, Status};
use crate::output::{Extra, Writer};
use crate::report::{self, Report};

/// One cluster's read, done or not.
struct Outcome {
    cluster: fleet::Cluster,
    read: Option<Read>,
}

/// What a cluster read gave.
struct Read {
    found: audit::Audit,
    /// What was read and from where.
    note: String,
    /// Its objects' part of the report, written as they were read.
    part: Writer<'static>,
    /// Which references it runs.
    table: fleet::Table,
}

/// `audit` over the clusters the contexts name.
pub(super) fn run(args: &AuditArgs) -> u8 {
    prepared(args, fleet)
}

fn fleet(run: &Run<'_>, runtime: &tokio::runtime::Runtime, writer: Writer<'_>) -> u8 {
    let args = run.args;
    let clusters = match args.clusters.clusters() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let loaded = match run.shared() {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    let mut writer = writer.naming_clusters();
    let names: Vec<String> = clusters.iter().map(|(c, _)| c.name.clone()).collect();
    let mut table = fleet::Table::new(names);
    let mut fleet_report = Report::default();
    let mut told = Vec::new();
    let mut shared = Shared::new();
    let bars = progress::Fleet::new(args.quiet);
    let deadline = args.clusters.deadline();
    let interrupt = Interrupt::listen(runtime);
    runtime.block_on(async {
        let parts = writer.fragments();
        let reads = clusters.iter().map(|(context, also)| {
            let bar = bars.cluster(&context.name);
            one(
                run,
                loaded.as_ref(),
                (context, also),
                parts,
                (deadline, &interrupt),
                bar,
            )
        });
        let mut done = futures::stream::iter(reads).buffered(usize::from(args.clusters.parallel));
        let mut at = 0;
        while let Some(outcome) = done.next().await {
            let cluster = outcome.cluster;
            match outcome.read {
                Some(read) => {
                    table.merge(at, read.table);
                    bars.suspend(|| writer.append(read.part));
                    merge(
                        &mut fleet_report,
                        &mut shared,
                        &cluster.context,
                        read.found,
                        read.note,
                    );
                }
                None => fleet_report.errors.push(format!(
                    "cluster \"{}\" ({}) not read ({}): {}",
                    cluster.context,
                    cluster.server,
                    cluster.status,
                    cluster.error.as_deref().unwrap_or_default()
                )),
            }
            told.push(cluster);
            at += 1;
        }
    });
    fleet_report.notes.extend(
        shared
            .into_iter()
            .map(|(note, clusters)| format!("{}: {note}", clusters.join(", "))),
    );
    finish(writer, fleet_report, ending(&table, &told), &interrupt)
}

/// Ends the fleet's report (with the interruption, if one came) and gives
/// the exit code.
fn finish(writer: Writer<'_>, mut fleet_report: Report, extra: Extra, interrupt: &Interrupt) -> u8 {
    if interrupt.happened() {
        fleet_report.errors.push(interrupt::SAID.to_owned());
    }
    let _ = writer.finish_with(&mut fleet_report, None, &extra);
    match interrupt.happened() {
        true => interrupt::EXIT,
        false => report::exit_code(&fleet_report),
    }
}

/// Reads one cluster within `deadline`, its objects written to `part`
/// as they are judged, each noted in a table of its own.
async fn one(
    run: &Run<'_>,
    loaded: Option<&crate::allowlist::Loaded>,
    (context, also): (&audit::Context, &[String]),
    parts: crate::output::Fragments,
    (deadline, interrupt): (Duration, &Interrupt),
    bar: indicatif::ProgressBar,
) -> Outcome {
    let mut cluster = fleet::Cluster {
        context: context.name.clone(),
        also: also.to_vec(),
        server: context.server.clone(),
        status: Status::Ok,
        error: None,
        summary: report::Summary::default(),
    };
    let table = Rc::new(RefCell::new(fleet::Table::new(vec![context.name.clone()])));
    let read = async {
        if let Some(why) = &context.unusable {
            return Err(Failed::from(audit::AuditError::Config(why.clone())));
        }
        let seen = Rc::clone(&table);
        let mut part = parts
            .writer()
            .map_err(|e| Failed::from(format!("cannot write the report: {e}")))?
            .observing(move |object| seen.borrow_mut().add(0, object));
        let settings = run.args.clusters.connection.settings(Some(context.name.clone()));
        let connection = audit::Connection::open(&settings).await?;
        let target = run.target(scope(run.args, &connection));
        let mut found = run
            .cluster(&connection, loaded, &target, Some(&mut part), &bar)
            .await?;
        said_what_was_read(run.args, &connection, &mut found);
        Ok::<_, Failed>((read_note(&connection, &found), found, part))
    };
    let result = interrupt.within(deadline, read).await;
    bar.finish_and_clear();
    match result {
        Ok(Ok((note, found, part))) => {
            cluster.status = match (&found.stopped, found.report.errors.is_empty()) {
                (None, true) => Status::Ok,
                _ => Status::Partial,
            };
            if cluster.status != Status::Ok {
                cluster.error = Some(found.report.errors.join("; "));
            }
            cluster.summary = found.report.summary.clone();
            let table = table.take();
            Outcome {
                cluster,
                read: Some(Read {
                    found,
                    note,
                    part,
                    table,
                }),
            }
        }
        Ok(Err(failed)) => {
            cluster.status = match &failed.cause {
                Some(audit::AuditError::Config(_)) => Status::Config,
                Some(audit::AuditError::Unreachable(_)) => Status::Unreachable,
                _ => Status::Failed,
            };
            cluster.error = Some(failed.message);
            Outcome { cluster, read: None }
        }
        Err(Cut::Deadline(late)) => {
            cluster.status = Status::Deadline;
            cluster.error = Some(late);
            Outcome { cluster, read: None }
        }
        Err(Cut::Interrupted) => {
            cluster.status = Status::Interrupted;
            cluster.error = Some("not finished when the run was interrupted".to_owned());
            Outcome { cluster, read: None }
        }
    }
}

/// Adds cluster `name`'s counts, errors and notes to the fleet's, each
/// naming the cluster; a note is kept in `shared` to be said once for
/// every cluster that gives it.
fn merge(fleet: &mut Report, shared: &mut Shared, name: &str, found: audit::Audit, read: String) {
    let report = found.report;
    fleet.summary.add(&report.summary);
    fleet
        .errors
        .extend(report.errors.into_iter().map(|e| format!("{name}: {e}")));
    fleet.notes.push(read);
    for note in report.notes {
        match shared.iter_mut().find(|(text, _)| *text == note) {
            Some((_, clusters)) => clusters.push(name.to_owned()),
            None => shared.push((note, vec![name.to_owned()])),
        }
    }
}

/// Notes several clusters gave alike, said once naming them all.
type Shared = Vec<(String, Vec<String>)>;

/// The end of a fleet's report: which cluster runs what, the table, a
/// line per cluster and one for the fleet (text); `clusters` and `images`
/// (JSON, and SARIF's run properties).
fn ending(table: &fleet::Table, clusters: &[fleet::Cluster]) -> Extra {
    let read = clusters.iter().filter(|c| c.status.was_read()).count();
    let mut text = String::new();
    table.incident_lines(read, &mut text);
    table.text(read, &mut text);
    for c in clusters {
        let also = if c.also.is_empty() {
            String::new()
        } else {
            format!(", also context {}", c.also.join(", "))
        };
        let told = match (&c.status, &c.error) {
            (Status::Ok | Status::Partial, _) => format!("{}: {}", c.status, c.summary.checked(false)),
            (status, error) => format!("{status}: {}", error.as_deref().unwrap_or_default()),
        };
        text.push_str(&format!(
            "cluster \"{}\" ({}{also}): {told}\n",
            c.context, c.server
        ));
    }
    let not_wholly: Vec<&str> = clusters
        .iter()
        .filter(|c| c.status != Status::Ok)
        .map(|c| c.context.as_str())
        .collect();
    text.push_str(&format!(
        "{} cluster{}: {} read wholly{}\n",
        clusters.len(),
        crate::text::plural(clusters.len(), "", "s"),
        clusters.len() - not_wholly.len(),
        if not_wholly.is_empty() {
            String::new()
        } else {
            format!(", {} not: {}", not_wholly.len(), not_wholly.join(", "))
        }
    ));
    let mut json = serde_json::Map::new();
    json.insert(
        "clusters".into(),
        serde_json::to_value(clusters).expect("clusters serialise"),
    );
    json.insert("images".into(), table.json());
    Extra { text, json }
}
