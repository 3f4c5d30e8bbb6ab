//! The report of `allowlist verify`: a line per digest that needs action,
//! or one JSON document with every digest.

use std::fmt::Write as _;

use serde::Serialize;

use super::verify::Verification;
use crate::published::{Counts, State, TagState};

/// Everything verified, and what could not be started.
#[derive(Debug, Serialize)]
pub struct VerifyReport {
    pub images: Vec<Verification>,
    pub summary: Summary,
    /// Warnings and errors that are not about one digest (credential
    /// helpers not run, …).
    pub errors: Vec<String>,
}

/// Counts by state.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub digests: usize,
    #[serde(flatten)]
    pub states: Counts,
    pub tags_moved: usize,
    pub tags_missing: usize,
    pub tags_unverifiable: usize,
    pub requests: u64,
}

impl VerifyReport {
    pub fn new(images: Vec<Verification>, errors: Vec<String>, requests: u64) -> Self {
        let mut s = Summary {
            digests: images.len(),
            requests,
            ..Summary::default()
        };
        for v in &images {
            s.states.add(v.state);
            for t in &v.tags {
                match t.state {
                    TagState::Ok => {}
                    TagState::Moved => s.tags_moved += 1,
                    TagState::Missing => s.tags_missing += 1,
                    TagState::Unverifiable => s.tags_unverifiable += 1,
                }
            }
        }
        Self {
            images,
            summary: s,
            errors,
        }
    }

    /// 1 when a digest's Pods would not start; else 2 when one could not be
    /// checked (never a pass for what was not checked); else 0. Tags do not
    /// count: a digest is the pin.
    pub fn exit_code(&self) -> u8 {
        if self.images.iter().any(|v| v.state.fails()) {
            1
        } else if self.summary.states.unverifiable > 0 {
            2
        } else {
            0
        }
    }

    pub fn json(&self) -> String {
        let mut out = serde_json::to_string_pretty(self).unwrap_or_default();
        out.push('\n');
        out
    }

    /// `FILE:LINE: REPO@DIGEST: STATE: why (promoted by …; checked at …)`
    /// for each digest that is not ok, a line for each tag that moved or is
    /// gone, and a summary.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for e in &self.errors {
            let _ = writeln!(out, "warning: {e}");
        }
        for v in &self.images {
            let at = v
                .promotions
                .first()
                .map(|p| format!("{}:{}: ", p.file, p.line))
                .unwrap_or_default();
            let by = v
                .promotions
                .first()
                .map(|p| format!("promoted by {}; ", p.by))
                .unwrap_or_default();
            let checked = v
                .location
                .as_deref()
                .unwrap_or("every location a node pulls from");
            if v.state != State::Ok {
                let _ = writeln!(
                    out,
                    "{at}{}@{}: {}: {} ({by}checked at {checked})",
                    v.repository, v.digest, v.state, v.detail
                );
            }
            for t in &v.tags {
                let said = match (t.state, &t.digest, &t.detail) {
                    (TagState::Ok, _, _) => continue,
                    (TagState::Moved, Some(now), _) => {
                        format!("moved: it names {now} now, not the promoted digest")
                    }
                    (state, _, Some(why)) => format!("{state}: {why}"),
                    (state, _, None) => state.to_string(),
                };
                let _ = writeln!(out, "{at}{}:{}: tag {said}", v.repository, t.tag);
            }
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "verified {} promoted digest(s): {} ok, {} missing, {} not runnable, {} platform missing, {} unverifiable; tags: {} moved, {} missing, {} unverifiable ({} registry request(s))",
            s.digests,
            s.states.ok,
            s.states.missing,
            s.states.not_runnable,
            s.states.platform_missing,
            s.states.unverifiable,
            s.tags_moved,
            s.tags_missing,
            s.tags_unverifiable,
            s.requests
        );
        out
    }
}
