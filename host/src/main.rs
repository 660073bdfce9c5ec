//! The `weir` command line: everything lives in the library's `cli` module.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Huge pages off before the pipeline allocates anything of size (see `weir::thp`).
    weir::thp::disable();
    weir::cli::main()
}
