//! A command-line tool ends quietly when the reader of its output goes away (`weir inspect X |
//! head`): Rust ignores SIGPIPE, so a write to a closed pipe would fail and `println!` would
//! panic with a backtrace. The default action (end the process) is put back at start-up of
//! the verbs that print and end.
#![allow(unsafe_code)]

/// Restores SIGPIPE's default action.
pub fn restore_default() {
    // SAFETY: setting a signal's disposition to SIG_DFL at start-up, before any thread runs;
    // no handler code is involved.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
