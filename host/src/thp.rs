//! Transparent huge pages off for this process.
//!
//! mimalloc marks its arenas for transparent huge pages (its `allow_thp` option), and a huge
//! page stays resident as a whole however little of it is in use. Measured on an hour's soak
//! (issue 28; docs/operations.md): with them, 350-500 MB of the process's resident memory was
//! allocator arena for a heap whose peak heaptrack measured at 26 MB, and it rose in steps;
//! without them, 55 MB, flat. They also cost time: the kernel zeroes a whole 2 MiB page at
//! the first touch of any byte of it (a fifth of a state benchmark's time, issue 26). So the
//! `weir` binary turns them off first thing, and the benchmarks do the same to measure what
//! the binary runs.
#![allow(unsafe_code)]

/// Turns transparent huge pages off for this process (its threads and children), as
/// `MIMALLOC_ALLOW_THP=0` would do. Call it before anything of size is allocated.
pub fn disable() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_THP_DISABLE) takes only integers and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
