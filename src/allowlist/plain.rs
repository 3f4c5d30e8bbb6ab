//! Plain lists: one `repo[:tag]@digest` per line, `#` comments.

use std::io::BufRead;
use std::sync::Arc;

use super::error::LoadError;
use super::load::{Loader, promotable};
use super::{Origin, Provenance};
use crate::yaml::stream::{self, Failure};

// === impl Loader ===

impl Loader {
    pub(super) fn plain_list(&mut self, file: &str, text: Box<dyn BufRead + '_>) -> Result<usize, Failure> {
        let shared: Arc<str> = file.into();
        let provenance = self
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
                    match self.builder.promote(&repo, digest, &tags, &origin) {
                        Ok(()) => entries += 1,
                        Err(c) => self.errors.push(error(c.to_string())),
                    }
                }
                Err(message) => self.errors.push(error(message)),
            }
        })?;
        Ok(entries)
    }
}
