//! Write a Weir stage in Rust as one plain function over a borrowed message.
//!
//! ```
//! use weir_sdk::{Message, Outcome};
//!
//! /// Drops messages without a value, passes the rest on unchanged.
//! #[weir_sdk::stage]
//! fn non_empty(msg: &Message<'_>) -> Outcome {
//!     match msg.value() {
//!         Some(v) if !v.is_empty() => Outcome::Keep,
//!         _ => Outcome::drop(),
//!     }
//! }
//! # fn main() {
//! # let m = weir_sdk::testing::TestMessage::value("x");
//! # assert_eq!(non_empty(&m.borrow()), Outcome::Keep);
//! # }
//! ```
//!
//! A stage that needs configuration names an `init` function; its result is handed to every
//! call:
//!
//! ```
//! use weir_sdk::{Config, Message, Outcome};
//!
//! struct Limit(usize);
//!
//! fn setup(config: &Config) -> Result<Limit, String> {
//!     Ok(Limit(config.parse_or("max_bytes", 1024)?))
//! }
//!
//! #[weir_sdk::stage(init = setup)]
//! fn small(msg: &Message<'_>, limit: &Limit) -> Outcome {
//!     if msg.value().map_or(0, <[u8]>::len) > limit.0 {
//!         Outcome::reject("too large")
//!     } else {
//!         Outcome::Keep
//!     }
//! }
//! # fn main() {}
//! ```
//!
//! The attribute keeps the function as it is (so it unit-tests natively, see [`testing`]) and,
//! when compiling for `wasm32`, exports it through both the typed `weir:stage/stage` contract and
//! the packed `weir:stage/batch` fast path. Build with
//! `cargo build --release --target wasm32-wasip2` and crate type `cdylib`.
#![deny(missing_docs)]

mod config;
#[cfg(feature = "json")]
pub mod json;
mod message;
mod outcome;
pub mod state;
pub mod testing;

#[cfg(target_arch = "wasm32")]
#[doc(hidden)]
pub mod __private;

/// The stage's heap: talc, much faster than wasi-libc's dlmalloc on allocation-heavy stages.
/// Single-threaded wasm only (no `atomics`), which is what `wasm32-wasip2` is.
#[cfg(all(
    feature = "fast-alloc",
    target_arch = "wasm32",
    not(target_feature = "atomics")
))]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();

pub use config::Config;
pub use message::{Message, OutMessage};
pub use outcome::Outcome;
pub use weir_sdk_macro::{filter, stage};

/// Log levels for [`log`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Very detailed.
    Trace,
    /// For debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Something looks wrong.
    Warn,
    /// Something is wrong.
    Error,
}

/// Logs a line into the host's logs, tagged with the stage's name. Natively it prints to stderr.
///
/// ```
/// use weir_sdk::{log, Level, Message, Outcome};
///
/// fn process(msg: &Message<'_>) -> Outcome {
///     if msg.value().is_none() {
///         log(Level::Warn, &format!("offset {}: no value", msg.offset()));
///     }
///     Outcome::Keep
/// }
/// # process(&weir_sdk::testing::TestMessage::value("v").borrow());
/// ```
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    __private::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level:?}] {message}");
}

/// A stage: state made once by `init`, then one call per message.
///
/// The [`stage`] and [`filter`] attributes implement this for you; implement it by hand only for
/// shapes they do not cover, then call [`export_stage!`].
pub trait Stage: Sized + 'static {
    /// Builds the stage from its YAML `config`; an error stops the pipeline at start-up.
    fn init(config: &Config) -> Result<Self, String>;
    /// Decides what becomes of one message.
    fn process(&self, msg: &Message<'_>) -> Outcome;
}

/// Exports a [`Stage`] implementation as the component's stage (both contract shapes).
#[macro_export]
macro_rules! export_stage {
    ($t:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            ::std::thread_local! {
                static STATE: ::std::cell::RefCell<::std::option::Option<$t>> =
                    const { ::std::cell::RefCell::new(::std::option::Option::None) };
            }
            struct Exports;
            impl $crate::__private::StageGuest for Exports {
                fn init(
                    config: ::std::vec::Vec<(::std::string::String, ::std::string::String)>,
                ) -> ::std::result::Result<(), ::std::string::String> {
                    $crate::__private::init::<$t>(&STATE, config)
                }
                fn process(
                    msg: $crate::__private::WitMessage,
                    meta: $crate::__private::WitMetadata,
                ) -> $crate::__private::WitOutcome {
                    $crate::__private::process_typed::<$t>(&STATE, msg, meta)
                }
            }
            impl $crate::__private::BatchGuest for Exports {
                fn process_batch(input: ::std::vec::Vec<u8>) -> ::std::vec::Vec<u8> {
                    $crate::__private::process_batch::<$t>(&STATE, &input)
                }
            }
    $crate::__private::__export_stage!(Exports with_types_in $crate::__private::bindings);
        };
    };
}
