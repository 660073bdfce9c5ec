//! The `weir` command line: everything lives in the library's `cli` module.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    no_transparent_huge_pages();
    weir::cli::main()
}

/// mimalloc marks its arenas for transparent huge pages (its `allow_thp` option), and a huge
/// page stays resident as a whole however little of it is in use. Measured on an hour's soak
/// (issue 28; docs/operations.md): with them, 350-500 MB of the process's resident memory was
/// allocator arena for a heap whose peak heaptrack measured at 26 MB, and it rose in steps; without
/// them, 55 MB, flat. So they are off for this process (its threads and children), as
/// `MIMALLOC_ALLOW_THP=0` would do, from before the pipeline allocates anything of size.
fn no_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_THP_DISABLE) takes only integers and touches no memory of ours.
    #[allow(unsafe_code)]
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
