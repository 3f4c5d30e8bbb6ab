//! The report written as it is produced: each object's part (its text
//! lines, its JSON result, its SARIF results) goes out when the object is
//! judged, and the end (summary, errors, notes) when the run is done, so a
//! run over a whole cluster holds one object's report at a time. The bytes
//! are those of the whole document rendered at once: [`render`] is the same
//! writer fed a report kept in memory.
//!
//! SARIF names the invocation's outcome (errors, notifications) before the
//! results: its results wait in an unnamed temporary file, not in memory,
//! until the end is known.

use std::fs::File;
use std::io::{self, Seek, Write};

use serde::Serialize;
use serde_json::Value;

use crate::report::{self, ObjectReport, Report};
use crate::sarif;

/// How a report is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One line per image that needs attention, then notes, errors and the
    /// summary; `fixed`: worded as `check --fix` words them.
    Text {
        fixed: bool,
    },
    Json,
    Sarif,
}

/// What a run adds to the end of its report (`audit` over several
/// clusters: the table of which cluster runs what): `text` before the
/// notes, `json` as members after `summary`.
#[derive(Debug, Default)]
pub struct Extra {
    pub text: String,
    pub json: serde_json::Map<String, Value>,
}

/// What sees each object a [`Writer`] writes.
type Observer<'w> = Box<dyn FnMut(&ObjectReport) + 'w>;

/// Makes writers of a document's parts ([`Writer::fragments`]): each
/// writes the objects only, into an unlinked temporary file, e.g. one
/// cluster's part of a fleet's report, written as it is read while other
/// clusters are, and added whole by [`Writer::append`] in its turn. Memory
/// holds one object at a time.
#[derive(Debug, Clone, Copy)]
pub struct Fragments {
    format: Format,
    clusters: bool,
}

impl Fragments {
    /// A new part; its file is made now (a file descriptor or two held
    /// until it is appended).
    pub fn writer(self) -> io::Result<Writer<'static>> {
        let file = temporary()?;
        let back = file.try_clone()?;
        let mut part = match self.format {
            // SARIF's results go to its spill, a file of its own.
            Format::Sarif => Writer::new(self.format, io::sink())?,
            _ => Writer::new(self.format, file)?,
        };
        part.clusters = self.clusters;
        part.part = Some(back);
        Ok(part)
    }
}

/// SARIF results on their way: the policy results spilled to a file, the
/// registry's (few: only with `--registry`, only what it cannot serve)
/// kept to follow them.
struct Spill {
    file: io::BufWriter<File>,
    registry: Vec<String>,
}

/// Writes a report object by object; see the module.
pub struct Writer<'w> {
    /// `None`: reports are taken and dropped ([`Writer::discard`]).
    out: Option<Box<dyn Write + 'w>>,
    format: Format,
    /// Results written so far (JSON and SARIF), to place the separators.
    written: usize,
    spill: Option<Spill>,
    /// The first write that failed (a closed pipe): nothing more is
    /// written, and [`Writer::finish`] returns it.
    failed: Option<io::Error>,
    /// Text lines start with the cluster an object was read from: a run
    /// over several ([`Writer::naming_clusters`]).
    clusters: bool,
    /// A part of a document ([`Writer::fragment`]): its file, read back
    /// when [`Writer::append`] adds it to the whole.
    part: Option<File>,
    /// Sees each object as it is written ([`Writer::observing`]).
    observe: Option<Observer<'w>>,
}

impl<'w> Writer<'w> {
    /// A writer of `format` to `out`. `Err` only for SARIF, whose
    /// temporary file could not be made.
    pub fn new(format: Format, out: impl Write + 'w) -> io::Result<Self> {
        let spill = match format {
            Format::Sarif => Some(Spill {
                file: io::BufWriter::new(temporary()?),
                registry: Vec::new(),
            }),
            _ => None,
        };
        Ok(Self {
            out: Some(Box::new(io::BufWriter::new(out))),
            format,
            written: 0,
            spill,
            failed: None,
            clusters: false,
            part: None,
            observe: None,
        })
    }

    /// A writer that takes each report and drops it: a pass that only
    /// learns (what `--registry` verifies), or the background audit, which
    /// counts and gathers but prints nothing.
    pub fn discard() -> Self {
        Self {
            out: None,
            format: Format::Text { fixed: false },
            written: 0,
            spill: None,
            failed: None,
            clusters: false,
            part: None,
            observe: None,
        }
    }

    /// Text lines name the cluster each object was read from, `context: `
    /// before the object (JSON and SARIF name it in every result's source).
    pub fn naming_clusters(mut self) -> Self {
        self.clusters = true;
        self
    }

    /// What makes the parts of this writer's document: see [`Fragments`].
    pub fn fragments(&self) -> Fragments {
        Fragments {
            format: self.format,
            clusters: self.clusters,
        }
    }

    /// `observe` sees each object as it is written.
    pub fn observing(mut self, observe: impl FnMut(&ObjectReport) + 'w) -> Self {
        self.observe = Some(Box::new(observe));
        self
    }

    /// Adds a [`Writer::fragment`]'s objects after those written so far.
    /// A failure to write ends the writing, as a closed pipe does
    /// ([`Writer::finish`] returns it).
    pub fn append(&mut self, part: Writer<'_>) {
        if self.failed.is_none()
            && let Err(e) = self.copy(part)
        {
            self.failed = Some(e);
        }
    }

    fn copy(&mut self, mut part: Writer<'_>) -> io::Result<()> {
        if let Some(e) = part.failed.take() {
            return Err(e);
        }
        let (written, mut file) = match part.spill.take() {
            Some(spill) => {
                let file = spill.file.into_inner().map_err(io::IntoInnerError::into_error)?;
                let own = self.spill.as_mut().expect("a SARIF writer has its spill");
                own.registry.extend(spill.registry);
                (part.written, file)
            }
            None => {
                if let Some(mut out) = part.out.take() {
                    out.flush()?;
                }
                (part.written, part.part.take().expect("a fragment keeps its file"))
            }
        };
        file.rewind()?;
        let text = matches!(self.format, Format::Text { .. });
        if written == 0 && !text {
            return Ok(());
        }
        let separator = match (self.written, self.format) {
            (_, Format::Text { .. }) => "",
            (0, Format::Json) => "{\n  \"results\": [\n",
            (0, _) => "",
            _ => ",\n",
        };
        self.written += written;
        let sink: &mut dyn Write = match (&mut self.spill, &mut self.out) {
            (Some(spill), _) => &mut spill.file,
            (None, Some(out)) => out,
            (None, None) => return Ok(()),
        };
        sink.write_all(separator.as_bytes())?;
        io::copy(&mut file, sink)?;
        Ok(())
    }

    /// Writes the objects `report` holds and takes them out of it: what
    /// a run calls after each object it may no longer take back.
    pub fn flush(&mut self, report: &mut Report) {
        let registry = report.summary.registry.is_some();
        for object in report.results.drain(..) {
            if let Some(observe) = &mut self.observe {
                observe(&object);
            }
            self.object(&object, registry);
        }
    }

    fn object(&mut self, object: &ObjectReport, registry: bool) {
        let Some(out) = self.out.as_mut().filter(|_| self.failed.is_none()) else {
            return;
        };
        let done = match self.format {
            Format::Text { fixed } => {
                let mut lines = String::new();
                report::object_lines(object, fixed, &mut lines);
                if let Some(cluster) = object.source.strip_prefix("cluster:").filter(|_| self.clusters) {
                    lines = lines.lines().map(|l| format!("{cluster}: {l}\n")).collect();
                }
                out.write_all(lines.as_bytes())
            }
            Format::Json => {
                let at = match self.written {
                    // A fragment's first object: the whole places it.
                    0 if self.part.is_some() => "",
                    0 => "{\n  \"results\": [\n",
                    _ => ",\n",
                };
                self.written += 1;
                let result = indented(object, 4);
                out.write_all(at.as_bytes())
                    .and_then(|()| out.write_all(result.as_bytes()))
            }
            Format::Sarif => self.sarif_results(object, registry),
        };
        if let Err(e) = done {
            self.failed = Some(e);
        }
    }

    fn sarif_results(&mut self, object: &ObjectReport, registry: bool) -> io::Result<()> {
        let spill = self.spill.as_mut().expect("a SARIF writer has its spill");
        let (policy, from_registry) = sarif::object_results(registry, object);
        for result in policy {
            if self.written > 0 {
                spill.file.write_all(b",\n")?;
            }
            self.written += 1;
            spill.file.write_all(indented(&result, 8).as_bytes())?;
        }
        spill
            .registry
            .extend(from_registry.iter().map(|r| indented(r, 8)));
        Ok(())
    }

    /// Writes what `report` still holds and the end of the document.
    /// `fixed`: `check --fix`'s count of images still denied (text).
    pub fn finish(self, report: &mut Report, fixed: Option<usize>) -> io::Result<()> {
        self.finish_with(report, fixed, &Extra::default())
    }

    /// [`Writer::finish`], with `extra` at the end.
    pub fn finish_with(mut self, report: &mut Report, fixed: Option<usize>, extra: &Extra) -> io::Result<()> {
        self.flush(report);
        self.end(report, fixed, extra)
    }

    /// Writes the end of the document: the summary, errors and notes.
    fn end(mut self, report: &Report, fixed: Option<usize>, extra: &Extra) -> io::Result<()> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let Some(mut out) = self.out.take() else {
            return Ok(());
        };
        // Errors reach standard error whatever the format: a CI log shows
        // why a run failed although its report went to a file. The text
        // report leaves them there alone; JSON and SARIF keep them too.
        say("error", "", &report.errors);
        match self.format {
            Format::Text { .. } => {
                out.write_all(extra.text.as_bytes())?;
                out.write_all(report::text_end(report, fixed).as_bytes())?;
            }
            Format::Json => {
                let start = match self.written {
                    0 => "{\n  \"results\": [],",
                    _ => "\n  ],",
                };
                let tail = report::json_tail(report, &extra.json);
                // The tail is a document of its own: its `{` opened ours.
                out.write_all(start.as_bytes())?;
                out.write_all(&tail.as_bytes()[1..])?;
                out.write_all(b"\n")?;
            }
            Format::Sarif => self.sarif_end(report, &extra.json, &mut out)?,
        }
        out.flush()
    }

    fn sarif_end(
        &mut self,
        report: &Report,
        extra: &serde_json::Map<String, Value>,
        out: &mut impl Write,
    ) -> io::Result<()> {
        const MARK: &str = "digest-gate:results";
        let spill = self.spill.take().expect("a SARIF writer has its spill");
        let mut document = sarif::document(report, Value::String(MARK.into()));
        // A run's properties bag carries what is not a result (SARIF 3.8).
        if let (false, Some(run)) = (extra.is_empty(), document.pointer_mut("/runs/0")) {
            run["properties"] = Value::Object(extra.clone());
        }
        let text = serde_json::to_string_pretty(&document).expect("SARIF serialises");
        let (head, tail) = text
            .split_once(&format!("\"{MARK}\""))
            .expect("the mark is in the document");
        out.write_all(head.as_bytes())?;
        let mut file = spill.file.into_inner().map_err(io::IntoInnerError::into_error)?;
        if self.written + spill.registry.len() == 0 {
            out.write_all(b"[]")?;
        } else {
            out.write_all(b"[\n")?;
            file.rewind()?;
            io::copy(&mut file, out)?;
            for (i, r) in spill.registry.iter().enumerate() {
                if self.written > 0 || i > 0 {
                    out.write_all(b",\n")?;
                }
                out.write_all(r.as_bytes())?;
            }
            out.write_all(b"\n      ]")?;
        }
        out.write_all(tail.as_bytes())?;
        out.write_all(b"\n")
    }
}

/// `value` as pretty JSON, every line indented by `by` spaces: how it
/// stands nested in the whole document (serde_json writes no line break
/// inside a string).
fn indented(value: &impl Serialize, by: usize) -> String {
    let text = serde_json::to_string_pretty(value).expect("reports serialise");
    let pad = " ".repeat(by);
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        out.push_str(&pad);
        out.push_str(line);
    }
    out
}

/// An unnamed temporary file: created new, then unlinked, so nothing is
/// left behind whatever ends the run.
pub fn temporary() -> io::Result<File> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir();
    let name = format!(
        "digest-gate-{}-{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let path = dir.join(name);
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// Each of `lines` on standard error, one line each (`{level}: {prefix}{line}`,
/// control characters escaped): what a run's report also says, for a
/// reader whose report went to a file or a pipe. A closed standard error
/// is no reason to stop.
pub fn say(level: &str, prefix: &str, lines: &[String]) {
    let mut stderr = io::stderr().lock();
    for line in lines {
        let line = crate::text::one_line(line, usize::MAX, crate::text::Cut::End);
        let _ = writeln!(stderr, "{level}: {prefix}{line}");
    }
}

/// The whole report in `format`, from a report kept in memory.
pub fn render(report: &Report, format: Format, fixed: Option<usize>) -> String {
    let mut out = Vec::new();
    let mut writer = Writer::new(format, &mut out).expect("a temporary file for SARIF");
    let registry = report.summary.registry.is_some();
    for object in &report.results {
        writer.object(object, registry);
    }
    writer
        .end(report, fixed, &Extra::default())
        .expect("writing to memory succeeds");
    String::from_utf8(out).expect("reports are UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{BAD, GOOD, REPO, incident_allowlist};

    fn report(objects: usize) -> Report {
        let list = incident_allowlist();
        let mut report = Report::default();
        for i in 0..objects {
            let image = if i % 2 == 0 {
                format!("{REPO}@{BAD}")
            } else {
                format!("{REPO}@{GOOD}")
            };
            let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("p{i}"), "namespace": "models"},
                "spec": {"containers": [{"name": "ovms", "image": image}]}});
            let j = crate::judge::judge(&pod, None, &crate::policy::Policy::default(), &list);
            report.push(ObjectReport::new("cluster:e2e".into(), &pod, &j, &list, |_| None));
        }
        report.notes.push("a note".into());
        report
    }

    /// What serde_json writes for the whole document at once, as the
    /// report was written before it was written as it goes.
    fn whole_json(report: &Report) -> String {
        #[derive(Serialize)]
        struct Out<'a> {
            results: &'a [ObjectReport],
            summary: &'a report::Summary,
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            notes: &'a [String],
        }
        let mut s = serde_json::to_string_pretty(&Out {
            results: &report.results,
            summary: &report.summary,
            notes: &report.notes,
        })
        .unwrap();
        s.push('\n');
        s
    }

    fn whole_sarif(report: &Report) -> String {
        let registry = report.summary.registry.is_some();
        let results: Vec<Value> = report
            .results
            .iter()
            .flat_map(|o| sarif::object_results(registry, o).0)
            .collect();
        let mut s = serde_json::to_string_pretty(&sarif::document(report, Value::Array(results))).unwrap();
        s.push('\n');
        s
    }

    #[test]
    fn written_as_it_goes_is_the_whole_document() {
        for n in [0, 1, 3] {
            let r = report(n);
            assert_eq!(render(&r, Format::Json, None), whole_json(&r), "{n} objects");
            assert_eq!(render(&r, Format::Sarif, None), whole_sarif(&r), "{n} objects");
            let mut streamed = Vec::new();
            let mut w = Writer::new(Format::Json, &mut streamed).unwrap();
            let mut live = r.clone();
            for _ in 0..n {
                let one = live.results.remove(0);
                let mut step = Report {
                    results: vec![one],
                    ..Report::default()
                };
                w.flush(&mut step);
            }
            w.finish(&mut live, None).unwrap();
            assert_eq!(String::from_utf8(streamed).unwrap(), whole_json(&r));
        }
        let text = render(&report(3), Format::Text { fixed: false }, None);
        assert_eq!(text.lines().filter(|l| l.contains(": rewrite: ")).count(), 2);
        assert!(
            text.ends_with("note: a note\n3 objects checked: 1 allowed, 2 to rewrite, 0 denied, 0 skipped\n")
        );
    }

    #[test]
    fn fragments_appended_are_the_whole_document() {
        for format in [Format::Json, Format::Sarif, Format::Text { fixed: false }] {
            for split in [0, 1, 3] {
                let whole = report(3);
                let mut out = Vec::new();
                let mut w = Writer::new(format, &mut out).unwrap();
                let seen = std::cell::Cell::new(0);
                let mut parts = Vec::new();
                for results in [&whole.results[..split], &[], &whole.results[split..]] {
                    let mut part = w
                        .fragments()
                        .writer()
                        .unwrap()
                        .observing(|_| seen.set(seen.get() + 1));
                    part.flush(&mut Report {
                        results: results.to_vec(),
                        ..Report::default()
                    });
                    parts.push(part);
                }
                for part in parts {
                    w.append(part);
                }
                let mut end = Report {
                    results: Vec::new(),
                    ..whole.clone()
                };
                w.finish(&mut end, None).unwrap();
                assert_eq!(seen.get(), 3);
                assert_eq!(
                    String::from_utf8(out).unwrap(),
                    render(&whole, format, None),
                    "{format:?}, split at {split}"
                );
            }
        }
    }
}
