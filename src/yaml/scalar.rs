//! Plain scalars by the YAML 1.2 core schema: what one written plain
//! reads as, and whether a string can be written plain and read back as
//! itself.

use saphyr_parser::{ScalarStyle, Tag};
use serde_json::{Number, Value};

/// Resolves a scalar by the YAML 1.2 core schema: only plain scalars can be
/// anything but strings.
pub(super) fn resolve(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> Value {
    if style != ScalarStyle::Plain {
        return Value::String(text.to_owned());
    }
    // `!` alone is the non-specific tag: the scalar is a string (spec 6.28).
    // saphyr-parser hands it out as handle "!" with no suffix, or as no
    // handle with suffix "!" (`- ! 12`).
    if let Some(tag) = tag
        && (tag.is_yaml_core_schema() && tag.suffix == "str"
            || tag.handle == "!" && tag.suffix.is_empty()
            || tag.handle.is_empty() && tag.suffix == "!")
    {
        return Value::String(text.to_owned());
    }
    resolve_plain(text).unwrap_or_else(|| Value::String(text.to_owned()))
}

fn resolve_plain(text: &str) -> Option<Value> {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Some(Value::Null),
        "true" | "True" | "TRUE" => return Some(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Value::Bool(false)),
        _ => {}
    }
    let first = *text.as_bytes().first()?;
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.')) {
        return None;
    }
    if let Some(oct) = text.strip_prefix("0o") {
        return u64::from_str_radix(oct, 8).ok().map(Value::from);
    }
    if let Some(hex) = text.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok().map(Value::from);
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        let t = text.strip_prefix('+').unwrap_or(text);
        if let Ok(i) = t.parse::<i64>() {
            return Some(Value::from(i));
        }
        if let Ok(u) = t.parse::<u64>() {
            return Some(Value::from(u));
        }
        return t
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number);
    }
    if is_core_float(digits) {
        return text
            .strip_prefix('+')
            .unwrap_or(text)
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map(Value::Number);
    }
    // .inf and .nan have no JSON form; leaving them strings is what a JSON
    // consumer would get anyway.
    None
}

/// `(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`
fn is_core_float(s: &str) -> bool {
    let (mantissa, exponent) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((int, frac)) => {
            (!int.is_empty() || !frac.is_empty())
                && int.bytes().all(|b| b.is_ascii_digit())
                && frac.bytes().all(|b| b.is_ascii_digit())
                && !(int.is_empty() && frac.is_empty())
        }
        None => !mantissa.is_empty() && mantissa.bytes().all(|b| b.is_ascii_digit()),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit())
    });
    mantissa_ok && exponent_ok
}

/// Whether `value` can stand as a plain scalar and still read as this string
/// in both block and flow context. Deliberately narrow: image references.
pub fn is_plain_safe(value: &str) -> bool {
    let b = value.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'/' | b':' | b'@'))
        && resolve_plain(value).is_none()
}
