//! The `weir` command line: everything lives in the library's `cli` module.

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    weir::cli::main()
}
