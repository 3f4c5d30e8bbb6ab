//! Allocator tuning, so that reloading a large allowlist does not grow the
//! pod toward its memory limit.

/// Makes every large block (an allowlist's tables and text, a file read)
/// a mapping of its own, whatever was freed before. glibc otherwise raises
/// its mapping threshold to the size of the largest mapped block freed, so
/// after the first reload the next allowlist's tables would be carved from
/// the heap, copied as they grow and left fragmented when freed; as
/// mappings they grow in place and go back to the kernel whole.
pub fn map_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a glibc tunable, under glibc's own arena
    // lock; any thread may call it at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Gives the pages the previous allowlist and the files' text occupied back
/// to the kernel. glibc returns memory only from the top of a heap; the old
/// allowlist sits in the middle of one (the new one was built in the
/// reload thread's arena), so without this every reload would leave its
/// predecessor's pages resident and the pod would grow toward its limit.
/// A request still holding the old snapshot frees it later; the next
/// reload's trim returns that.
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own arenas, under their locks,
    // and may be called from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}
