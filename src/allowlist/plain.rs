//! Plain lists: one `repo[:tag]@digest` per line, `#` comments.

use std::io::BufRead;
use std::sync::Arc;

use super::entries::{Entries, promotable};
use super::error::LoadError;
use super::{Origin, Provenance};
use crate::yaml::stream::{self, Failure};

/// The entries of a plain list, one `repo[:tag]@digest` per line.
pub(super) fn read(out: &mut Entries<'_>, file: &str, text: Box<dyn BufRead + '_>) -> Result<usize, Failure> {
    let shared: Arc<str> = file.into();
    let provenance = out
        .builder
        .provenance(Provenance::of(shared.clone(), "plain list".to_owned()));
    let mut entries = 0;
    let mut n = 0;
    stream::for_each_line(text, |line| {
        n += 1;
        let content = match line.find('#') {
            Some(i) if i == 0 || line[..i].ends_with(char::is_whitespace) => &line[..i],
            _ => line,
        }
        .trim();
        if content.is_empty() {
            return;
        }
        let error = |message: String| LoadError {
            file: file.to_owned(),
            line: Some(n),
            entry: Some(content.to_owned()),
            message,
        };
        let origin = Origin {
            file: shared.clone(),
            line: n,
            provenance,
        };
        match promotable(content) {
            Ok((repo, digest, tag)) => {
                let tags: Vec<&str> = tag.into_iter().collect();
                match out.builder.promote(&repo, digest, &tags, &origin) {
                    Ok(()) => entries += 1,
                    Err(c) => out.errors.push(error(c.to_string())),
                }
            }
            Err(message) => out.errors.push(error(message)),
        }
    })?;
    Ok(entries)
}
