//! Parsers for flag values that several commands share.

use std::time::Duration;

/// A flag value that is not a duration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DurationError {
    /// Digits only, but too many seconds to count.
    #[error("'{text}': {source}")]
    Seconds {
        text: String,
        source: std::num::ParseIntError,
    },
    #[error("'{text}' is not a duration (e.g. 500ms, 10s, 2m): {source}")]
    Unparsed {
        text: String,
        source: humantime::DurationError,
    },
    /// Zero where only a time to wait makes sense (a timeout, a deadline).
    #[error("'{text}': must be more than zero (e.g. 500ms, 10s, 2m)")]
    Zero { text: String },
}

/// `500ms`, `10s`, `2m`, `1h 30m` (humantime), or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let text = s.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse()
            .map(Duration::from_secs)
            .map_err(|source| DurationError::Seconds {
                text: text.to_owned(),
                source,
            });
    }
    humantime::parse_duration(text).map_err(|source| DurationError::Unparsed {
        text: text.to_owned(),
        source,
    })
}

/// [`parse_duration`], zero refused: a timeout of `0s` is taken by no one
/// as "no time at all", and the request it bounded then failed as if the
/// cluster or registry could not be reached.
pub fn parse_positive_duration(s: &str) -> Result<Duration, DurationError> {
    match parse_duration(s)? {
        Duration::ZERO => Err(DurationError::Zero {
            text: s.trim().to_owned(),
        }),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_more_than_zero() {
        assert_eq!(parse_positive_duration("10s"), Ok(Duration::from_secs(10)));
        for zero in ["0", "0s", " 0ms "] {
            assert_eq!(
                parse_positive_duration(zero).unwrap_err().to_string(),
                format!("'{}': must be more than zero (e.g. 500ms, 10s, 2m)", zero.trim())
            );
        }
    }

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
            let err = parse_duration(bad).unwrap_err().to_string();
            assert!(
                err.contains("is not a duration") || err.contains(bad),
                "{bad}: {err}"
            );
        }
    }
}
