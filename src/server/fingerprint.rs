//! How the reload thread tells that a file may have changed without
//! reading it.
//!
//! Mounted ConfigMaps and Secrets change by an atomic swap of the `..data`
//! symlink, not by a write to the file, so watching the file's inode misses
//! updates. Instead every source is stat'ed, following symlinks: a swap
//! shows up as a new inode, an edit as a new size or time.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::Path;

/// A hash of `value`, to compare with the last one seen.
pub fn fingerprint<T: Hash + ?Sized>(value: &T) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

/// Identity, size and modification time of each file, symlinks followed; or
/// the error, so a missing file is a state of its own.
pub fn stat_of(files: &[&Path]) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut h = DefaultHasher::new();
    for f in files {
        f.hash(&mut h);
        match std::fs::metadata(f) {
            Ok(m) => (
                m.dev(),
                m.ino(),
                m.len(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            )
                .hash(&mut h),
            Err(e) => e.kind().hash(&mut h),
        }
    }
    h.finish()
}
