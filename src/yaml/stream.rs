//! Text read from a byte stream a chunk at a time, for loading a large
//! allowlist without holding its text: a 50,000-repository Allowlist is
//! 11 MiB of YAML, held beside the old allowlist and the new one during a
//! reload if it were read whole first.

use std::cell::RefCell;
use std::io::{self, BufRead};
use std::rc::Rc;

/// Why a stream ended before its end: what the loader reports instead of
/// whatever the parser made of the text cut short.
#[derive(Debug)]
pub enum Failure {
    Read(io::Error),
    NotUtf8,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Read(e) => write!(f, "cannot read: {e}"),
            Self::NotUtf8 => f.write_str("is not UTF-8 text"),
        }
    }
}

/// Where a [`Chars`] leaves its failure: the parser owns the iterator, the
/// loader asks after the parse.
pub type FailureSlot = Rc<RefCell<Option<Failure>>>;

/// The characters of UTF-8 bytes read from `R`. A read error or bytes that
/// are not UTF-8 end them, and are left in the slot.
pub struct Chars<R> {
    reader: R,
    /// The chunk being handed out, decoded, and how far.
    decoded: String,
    at: usize,
    /// The start of a character the chunk cut in two.
    carry: Vec<u8>,
    /// Set once the stream has ended (or failed) after `decoded`.
    ended: bool,
    /// A failure found after the part of the chunk that decoded: reported
    /// once that part has been handed out.
    pending: Option<Failure>,
    failure: FailureSlot,
}

impl<R: BufRead> Chars<R> {
    pub fn new(reader: R) -> (Self, FailureSlot) {
        let failure = FailureSlot::default();
        let chars = Self {
            reader,
            decoded: String::new(),
            at: 0,
            carry: Vec::new(),
            ended: false,
            pending: None,
            failure: failure.clone(),
        };
        (chars, failure)
    }

    /// Decodes the next chunk into `decoded`; false at the end.
    fn refill(&mut self) -> bool {
        self.decoded.clear();
        self.at = 0;
        if let Some(f) = self.pending.take() {
            self.fail(f);
        }
        while !self.ended {
            let chunk = match self.reader.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.fail(Failure::Read(e));
                    break;
                }
            };
            if chunk.is_empty() {
                if !self.carry.is_empty() {
                    self.fail(Failure::NotUtf8);
                }
                self.ended = true;
                break;
            }
            let used = chunk.len();
            // Only a chunk that starts mid-character is copied before it
            // is decoded.
            let joined;
            let bytes: &[u8] = if self.carry.is_empty() {
                chunk
            } else {
                self.carry.extend_from_slice(chunk);
                joined = std::mem::take(&mut self.carry);
                &joined
            };
            let (valid, rest) = match std::str::from_utf8(bytes) {
                Ok(s) => (s, &[][..]),
                Err(e) => {
                    let (valid, rest) = bytes.split_at(e.valid_up_to());
                    // error_len None: the chunk ends inside a character.
                    if e.error_len().is_some() {
                        self.pending = Some(Failure::NotUtf8);
                        self.ended = true;
                    }
                    (std::str::from_utf8(valid).unwrap_or_default(), rest)
                }
            };
            self.decoded.push_str(valid);
            if !self.ended {
                self.carry.extend_from_slice(rest);
            }
            self.reader.consume(used);
            if !self.decoded.is_empty() {
                return true;
            }
        }
        if let Some(f) = self.pending.take() {
            self.fail(f);
        }
        false
    }

    fn fail(&mut self, failure: Failure) {
        self.ended = true;
        self.failure.borrow_mut().get_or_insert(failure);
    }
}

impl<R: BufRead> Iterator for Chars<R> {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        loop {
            if let Some(c) = self.decoded[self.at..].chars().next() {
                self.at += c.len_utf8();
                return Some(c);
            }
            if !self.refill() {
                return None;
            }
        }
    }
}

/// The lines of UTF-8 text read from `R`, without their line ending (`\n`
/// or `\r\n`), as [`str::lines`] gives them. Stops at the first read error
/// or line that is not UTF-8, with the failure.
pub fn for_each_line<R: BufRead>(reader: R, mut f: impl FnMut(&str)) -> Result<(), Failure> {
    lines_while(reader, |l| {
        f(l);
        true
    })
}

/// [`for_each_line`] while `f` says to go on: a scan that has seen what it
/// looks for need not read the rest of a large file.
pub fn lines_while<R: BufRead>(mut reader: R, mut f: impl FnMut(&str) -> bool) -> Result<(), Failure> {
    let mut line = Vec::new();
    loop {
        line.clear();
        // read_until retries an interrupted read itself.
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(Failure::Read(e)),
        }
        let mut end = line.len();
        if line[..end].ends_with(b"\n") {
            end -= 1;
            if line[..end].ends_with(b"\r") {
                end -= 1;
            }
        }
        if !f(std::str::from_utf8(&line[..end]).map_err(|_| Failure::NotUtf8)?) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufReader, Read};

    use proptest::prelude::*;

    use super::*;

    fn decoded(bytes: &[u8], chunk: usize) -> (String, Option<Failure>) {
        let (chars, failure) = Chars::new(BufReader::with_capacity(chunk, bytes));
        let text: String = chars.collect();
        let failure = failure.borrow_mut().take();
        (text, failure)
    }

    fn lines(bytes: &[u8], chunk: usize) -> (Vec<String>, Result<(), Failure>) {
        let mut out = Vec::new();
        let result = for_each_line(BufReader::with_capacity(chunk, bytes), |l| out.push(l.to_owned()));
        (out, result)
    }

    proptest! {
        #[test]
        fn any_text_decodes_whole_in_any_chunks(text in "\\PC{0,200}", chunk in 1usize..8) {
            let (got, failure) = decoded(text.as_bytes(), chunk);
            prop_assert!(failure.is_none());
            prop_assert_eq!(got, text);
        }

        #[test]
        fn lines_are_those_str_lines_gives(text in "(\\PC{0,20}(\r\n|\n|\r)?){0,10}", chunk in 1usize..8) {
            let (got, result) = lines(text.as_bytes(), chunk);
            prop_assert!(result.is_ok());
            prop_assert_eq!(got, text.lines().collect::<Vec<_>>());
        }
    }

    #[test]
    fn bytes_that_are_not_utf8_end_the_text_where_they_start() {
        for chunk in 1..6 {
            // é, then a lone continuation byte, then more text.
            let (got, failure) = decoded(b"ab\xc3\xa9c\x80de", chunk);
            assert_eq!(got, "abéc", "chunk {chunk}");
            assert!(matches!(failure, Some(Failure::NotUtf8)), "chunk {chunk}");
            // A character cut off by the end of the stream.
            let (got, failure) = decoded(b"ab\xe2\x82", chunk);
            assert_eq!(got, "ab");
            assert!(matches!(failure, Some(Failure::NotUtf8)));
        }
        let (got, result) = lines(b"one\ntw\xffo\nthree\n", 4);
        assert_eq!(got, ["one"]);
        assert!(matches!(result, Err(Failure::NotUtf8)));
    }

    /// Gives `text`, then fails.
    struct Failing<'a>(&'a [u8]);

    impl Read for Failing<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Err(io::Error::other("the disk is gone"));
            }
            self.0.read(buf)
        }
    }

    #[test]
    fn a_read_error_ends_the_text_and_is_kept() {
        let (chars, failure) = Chars::new(BufReader::with_capacity(2, Failing(b"key: v")));
        assert_eq!(chars.collect::<String>(), "key: v");
        let failure = failure.borrow_mut().take();
        assert_eq!(failure.unwrap().to_string(), "cannot read: the disk is gone");
        let mut seen = Vec::new();
        let result = for_each_line(BufReader::new(Failing(b"a\nb")), |l| seen.push(l.to_owned()));
        assert_eq!(seen, ["a"]);
        assert_eq!(result.unwrap_err().to_string(), "cannot read: the disk is gone");
    }
}
