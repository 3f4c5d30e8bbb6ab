//! Parsers for flag values that several commands share.

use std::time::Duration;

/// `500ms`, `10s`, `2m`, `1h 30m` (humantime), or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        return s
            .parse()
            .map(Duration::from_secs)
            .map_err(|e| format!("'{s}': {e}"));
    }
    humantime::parse_duration(s).map_err(|e| format!("'{s}' is not a duration (e.g. 500ms, 10s, 2m): {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units_or_as_bare_seconds() {
        for (text, want) in [
            ("500ms", Duration::from_millis(500)),
            ("10s", Duration::from_secs(10)),
            ("2m", Duration::from_secs(120)),
            ("1h 30m", Duration::from_secs(5400)),
            ("1m30s", Duration::from_secs(90)),
            ("1.5s", Duration::from_millis(1500)),
            ("0s", Duration::ZERO),
            ("15", Duration::from_secs(15)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text}");
        }
        for bad in ["", "soon", "-1s", "1.5.2s", "10 parsecs"] {
            let err = parse_duration(bad).unwrap_err();
            assert!(
                err.contains("is not a duration") || err.contains(bad),
                "{bad}: {err}"
            );
        }
    }
}
