//! The one place the WIT contract is turned into Rust (host side).

wasmtime::component::bindgen!({
    world: "stage-fast",
    path: "../wit",
    // Arguments are lowered from borrowed slices: no per-message clones on the typed path.
    ownership: Borrowing { duplicate_if_necessary: true },
    // A stage's state (`wasi:keyvalue`): the host's handles behind the guest's resources.
    with: {
        "wasi:keyvalue/store.bucket": crate::engine::bindings::BucketHandle,
        "wasi:keyvalue/atomics.cas": crate::engine::bindings::CasHandle,
    },
});

/// The host's side of a guest `bucket`: which of the stage's buckets.
#[derive(Debug)]
pub struct BucketHandle {
    pub(super) bucket: u16,
}

/// The host's side of a guest `cas`: a key and the value it had when the handle was made.
#[derive(Debug)]
pub struct CasHandle {
    pub(super) bucket: u16,
    pub(super) key: std::sync::Arc<str>,
    pub(super) seen: Option<Vec<u8>>,
}

pub use self::wasi::keyvalue::store::{Error as KvError, KeyResponse};

pub use self::exports::weir::stage::batch::{Guest as BatchGuest, GuestIndices as BatchIndices};
pub use self::exports::weir::stage::stage::{Guest as StageGuest, GuestIndices as StageIndices};
pub use self::weir::stage::types::{
    HeaderParam as WitHeader, MessageParam as WitMessage, Metadata as WitMetadata,
    Outcome as WitOutcome,
};

/// The export a component must have to be a stage.
pub const STAGE_EXPORT: &str = "weir:stage/stage@0.1.0";
/// The export that marks the packed fast path.
pub const BATCH_EXPORT: &str = "weir:stage/batch@0.1.0";
