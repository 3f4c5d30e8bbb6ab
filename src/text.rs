//! Text that reaches people: messages, warnings and log fields echo strings
//! from the request (container names, images), so each goes through
//! [`one_line`] — control characters escaped, length bounded — and long
//! lists through [`first`].

use std::borrow::Cow;

/// Where a string over its bound is cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Keep the start; the last character kept is `…`.
    End,
    /// Keep `head` characters and `tail` characters around `…`, and say how
    /// long the original was: for image references, whose digest is at the
    /// end.
    Middle { head: usize, tail: usize },
}

/// `s` on one line and at most `max` characters (counted after escaping, for
/// [`Cut::End`]; of the input, for [`Cut::Middle`]). Only control characters
/// are escaped: quotes and non-ASCII read fine in every place this is shown.
/// Borrowed when nothing needs changing, which is almost always.
pub fn one_line(s: &str, max: usize, cut: Cut) -> Cow<'_, str> {
    let clean = !s.contains(char::is_control);
    match cut {
        Cut::End => {
            if clean && (s.len() <= max || s.chars().count() <= max) {
                return Cow::Borrowed(s);
            }
            let mut out = String::with_capacity(s.len().min(4 * max) + 4);
            let mut chars = escaped(s);
            let mut count = 0;
            while let Some(c) = chars.next() {
                if count + 1 == max {
                    // One more character fits only if it is the last one.
                    out.push(if chars.next().is_none() { c } else { '…' });
                    return Cow::Owned(out);
                }
                out.push(c);
                count += 1;
            }
            Cow::Owned(out)
        }
        Cut::Middle { head, tail } => {
            let long = s.chars().count() > max;
            if !long {
                return if clean {
                    Cow::Borrowed(s)
                } else {
                    Cow::Owned(escaped(s).collect())
                };
            }
            let start: String = s.chars().take(head).flat_map(escape).collect();
            let end: Vec<char> = s.chars().rev().take(tail).collect();
            let end: String = end.into_iter().rev().flat_map(escape).collect();
            Cow::Owned(format!("{start}…{end} ({} bytes)", s.len()))
        }
    }
}

/// [`one_line`] for an owned string: returns `s` itself when it needs no
/// change, so the common case neither allocates nor copies.
pub fn one_line_owned(s: String, max: usize, cut: Cut) -> String {
    match one_line(&s, max, cut) {
        Cow::Owned(changed) => changed,
        Cow::Borrowed(_) => s,
    }
}

fn escape(c: char) -> impl Iterator<Item = char> {
    let (escaped, kept) = if c.is_control() {
        (Some(c.escape_default()), None)
    } else {
        (None, Some(c))
    };
    escaped.into_iter().flatten().chain(kept)
}

fn escaped(s: &str) -> impl Iterator<Item = char> + '_ {
    s.chars().flat_map(escape)
}

/// The first `max` items and how many were left out, for "…, and N more".
pub fn first<T>(mut items: Vec<T>, max: usize) -> (Vec<T>, usize) {
    let more = items.len().saturating_sub(max);
    items.truncate(max);
    (items, more)
}

/// An error and its sources, `a: b: c`, without repeats (hyper, kube and
/// reqwest often include their source's text in their own).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// `one` when `n` is 1, else `many`: `"{n} cluster{}"`.
pub fn plural<'a>(n: usize, one: &'a str, many: &'a str) -> &'a str {
    if n == 1 { one } else { many }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_short_text_is_borrowed() {
        assert!(matches!(
            one_line("container \"ovms\"", 120, Cut::End),
            Cow::Borrowed(_)
        ));
        assert!(matches!(
            one_line("quay.io/x@sha256:ab", 200, Cut::Middle { head: 120, tail: 40 }),
            Cow::Borrowed(_)
        ));
    }

    #[test]
    fn end_cut_keeps_exactly_max_characters() {
        assert_eq!(one_line("abcdef", 6, Cut::End), "abcdef");
        assert_eq!(one_line("abcdefg", 6, Cut::End), "abcde…");
        // Escapes count: "\n" becomes two characters.
        assert_eq!(one_line("ab\ncd", 6, Cut::End), "ab\\ncd");
        assert_eq!(one_line("ab\ncde", 6, Cut::End), "ab\\nc…");
        assert_eq!(one_line("é\"\u{7}", 10, Cut::End), "é\"\\u{7}");
        let long = "é".repeat(300);
        assert_eq!(one_line(&long, 120, Cut::End).chars().count(), 120);
    }

    #[test]
    fn middle_cut_keeps_both_ends_and_the_length() {
        let image = format!("quay.io/{}@sha256:{}", "a".repeat(300), "f".repeat(64));
        let shown = one_line(&image, 200, Cut::Middle { head: 120, tail: 40 });
        assert!(shown.starts_with("quay.io/aaaa"));
        assert!(shown.contains(&format!("…{} (", "f".repeat(40))));
        assert!(shown.ends_with(&format!("({} bytes)", image.len())));
        assert_eq!(one_line("a\tb", 200, Cut::Middle { head: 1, tail: 1 }), "a\\tb");
    }

    #[test]
    fn first_counts_what_it_leaves_out() {
        assert_eq!(first(vec![1, 2, 3], 2), (vec![1, 2], 1));
        assert_eq!(first(vec![1], 2), (vec![1], 0));
    }
}
