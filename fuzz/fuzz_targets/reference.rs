//! The image reference parser: never panics, and whatever parses displays as
//! itself and parses the same again.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(r) = digest_gate::reference::parse(text) {
        assert_eq!(r.to_string(), text);
        assert_eq!(digest_gate::reference::parse(&r.to_string()), Ok(r));
        let _ = r.canonical_repository(Some("docker.io"));
    }
});
