//! `wasi:keyvalue` linked into stages: the bindings' side of a stage's buckets. What the
//! calls do is the state's ([`crate::state::kv::Kv`], which an instance's store holds); this
//! turns the guest's resources, strings and lists into its calls, and its errors into the
//! interface's.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker, Resource, WasmList, WasmStr};
use wasmtime::StoreContextMut;

use super::bindings::wasi::keyvalue::{atomics, batch, store};
use super::bindings::weir::stage::state_limits;
use super::bindings::{BucketHandle, CasHandle, KeyResponse, KvError};
use super::StageState;
use crate::state::kv::{CallWrites, Kv, KvError as StateError};

/// The interface's error for the state's.
fn wit(e: StateError) -> KvError {
    match e {
        StateError::AccessDenied => KvError::AccessDenied,
        StateError::Other(why) => KvError::Other(why),
    }
}

/// Links `wasi:keyvalue` store, atomics and batch.
pub fn add_to_linker(linker: &mut Linker<StageState>) -> wasmtime::Result<()> {
    store::add_to_linker::<StageState, HasSelf<StageState>>(linker, |s| s)?;
    atomics::add_to_linker::<StageState, HasSelf<StageState>>(linker, |s| s)?;
    batch::add_to_linker::<StageState, HasSelf<StageState>>(linker, |s| s)?;
    state_limits::add_to_linker::<StageState, HasSelf<StageState>>(linker, |s| s)?;
    add_borrowing(linker)
}

/// Keys up to this long are copied out of the guest's memory onto the stack for a `get`.
const KEY_ON_STACK: usize = 128;

/// `get` and `set-many`, the calls a stateful stage makes for its every message, again
/// (shadowing the generated ones): with the key and values read in the guest's memory, not
/// lifted into a `String` and a `Vec` each first (two allocations and copies per key and
/// value that the state then copies into its own shared key and value anyway).
fn add_borrowing(linker: &mut Linker<StageState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut store = linker.instance("wasi:keyvalue/store@0.2.0-draft2")?;
    store.func_wrap(
        "[method]bucket.get",
        |mut cx: StoreContextMut<'_, StageState>,
         (b, key): (Resource<BucketHandle>, WasmStr)|
         -> wasmtime::Result<(Result<Option<Vec<u8>>, KvError>,)> {
            let mut on_stack = [0u8; KEY_ON_STACK];
            let on_heap: String;
            let key: &str = {
                let text = key.to_str(&cx)?;
                match on_stack.get_mut(..text.len()) {
                    Some(buf) => {
                        buf.copy_from_slice(text.as_bytes());
                        std::str::from_utf8(buf)?
                    }
                    None => {
                        on_heap = text.into_owned();
                        &on_heap
                    }
                }
            };
            let s = cx.data_mut();
            Ok((bucket_of(s, &b).and_then(|bucket| s.kv.get(bucket, key).map_err(wit)),))
        },
    )?;
    let mut batch = linker.instance("wasi:keyvalue/batch@0.2.0-draft2")?;
    batch.func_wrap(
        "set-many",
        |mut cx: StoreContextMut<'_, StageState>,
         (b, pairs): (Resource<BucketHandle>, WasmList<(WasmStr, WasmList<u8>)>)|
         -> wasmtime::Result<(Result<(), KvError>,)> {
            let pairs: Vec<(WasmStr, WasmList<u8>)> =
                pairs.iter(&mut cx)?.collect::<wasmtime::Result<_>>()?;
            set_many_borrowed(&mut cx, &b, &pairs).map(|r| (r,))
        },
    )?;
    let mut limits = linker.instance("weir:stage/state-limits@0.1.0")?;
    limits.func_wrap(
        "write-packed",
        |mut cx: StoreContextMut<'_, StageState>,
         (b, packed): (Resource<BucketHandle>, WasmList<u8>)|
         -> wasmtime::Result<(Result<(), KvError>,)> {
            let bucket = match bucket_of(cx.data_mut(), &b) {
                Ok(bucket) => bucket,
                Err(e) => return Ok((Err(e),)),
            };
            add_from_guest(&mut cx, |cx, kv, writes| {
                Ok(kv
                    .unpack_into(writes, bucket, packed.as_le_slice(cx))
                    .map_err(wit))
            })
            .map(|r| (r,))
        },
    )?;
    Ok(())
}

/// `set-many` of pairs in the guest's memory: all or nothing (every value is checked against
/// `state.max_value` before any is written). A key that is not UTF-8 traps, as a lifted
/// `string` does.
fn set_many_borrowed(
    cx: &mut StoreContextMut<'_, StageState>,
    b: &Resource<BucketHandle>,
    pairs: &[(WasmStr, WasmList<u8>)],
) -> wasmtime::Result<Result<(), KvError>> {
    let bucket = match bucket_of(cx.data_mut(), b) {
        Ok(bucket) => bucket,
        Err(e) => return Ok(Err(e)),
    };
    add_from_guest(cx, |cx, kv, writes| {
        for (k, v) in pairs {
            let key = k.to_str(cx)?;
            match kv.encoded(&key, Some(v.as_le_slice(cx))) {
                Ok(value) => writes.push(bucket, &key, value),
                Err(e) => return Ok(Err(wit(e))),
            }
        }
        Ok(Ok(()))
    })
}

/// Adds to the call's writes what `add` reads in the guest's memory: all of it, or none when
/// `add` answers an error or traps (or no call is in progress). The call's writes are taken
/// out of the store meanwhile, so that `add` may read the guest's memory while it adds.
fn add_from_guest<'a>(
    cx: &mut StoreContextMut<'a, StageState>,
    add: impl FnOnce(
        &StoreContextMut<'a, StageState>,
        &Kv,
        &mut CallWrites,
    ) -> wasmtime::Result<Result<(), KvError>>,
) -> wasmtime::Result<Result<(), KvError>> {
    let mut writes = cx.data_mut().kv.take_writes();
    let kv = &cx.data().kv;
    let added = writes.all_or_none(
        |w| match kv.in_call() {
            Ok(()) => add(cx, kv, w),
            Err(e) => Ok(Err(wit(e))),
        },
        |added| matches!(added, Ok(Ok(()))),
    );
    cx.data_mut().kv.put_back_writes(writes);
    added
}

impl state_limits::Host for StageState {
    fn max_value(&mut self) -> u64 {
        self.kv.max_value()
    }

    fn cache_epoch(&mut self) -> state_limits::Epoch {
        let (current, replaces) = self.kv.cache_epoch();
        state_limits::Epoch {
            current,
            replaces,
            keep_bytes: self.kv.keep_bytes(),
        }
    }

    fn write_packed(&mut self, b: Resource<BucketHandle>, packed: Vec<u8>) -> Result<(), KvError> {
        // (Shadowed by the borrowing one in `add_borrowing`, which the linker calls.)
        let bucket = bucket_of(self, &b)?;
        let mut writes = self.kv.take_writes();
        let kv = &self.kv;
        let unpacked = kv
            .in_call()
            .and_then(|()| kv.unpack(&mut writes, bucket, &packed));
        self.kv.put_back_writes(writes);
        unpacked.map_err(wit)
    }
}

fn bucket_of(s: &mut StageState, b: &Resource<BucketHandle>) -> Result<u16, KvError> {
    s.table()
        .get(b)
        .map(|h| h.bucket)
        .map_err(|e| KvError::Other(e.to_string()))
}

impl store::Host for StageState {
    fn open(&mut self, identifier: String) -> Result<Resource<BucketHandle>, KvError> {
        let bucket = self.kv.bucket(&identifier).map_err(wit)?;
        self.table()
            .push(BucketHandle { bucket })
            .map_err(|e| KvError::Other(e.to_string()))
    }
}

impl store::HostBucket for StageState {
    fn get(&mut self, b: Resource<BucketHandle>, key: String) -> Result<Option<Vec<u8>>, KvError> {
        let bucket = bucket_of(self, &b)?;
        self.kv.get(bucket, &key).map_err(wit)
    }

    fn set(
        &mut self,
        b: Resource<BucketHandle>,
        key: String,
        value: Vec<u8>,
    ) -> Result<(), KvError> {
        let bucket = bucket_of(self, &b)?;
        self.kv.put(bucket, &key, Some(&value)).map_err(wit)
    }

    fn delete(&mut self, b: Resource<BucketHandle>, key: String) -> Result<(), KvError> {
        let bucket = bucket_of(self, &b)?;
        self.kv.put(bucket, &key, None).map_err(wit)
    }

    fn exists(&mut self, b: Resource<BucketHandle>, key: String) -> Result<bool, KvError> {
        let bucket = bucket_of(self, &b)?;
        Ok(self.kv.get(bucket, &key).map_err(wit)?.is_some())
    }

    fn list_keys(
        &mut self,
        b: Resource<BucketHandle>,
        cursor: Option<String>,
    ) -> Result<KeyResponse, KvError> {
        let bucket = bucket_of(self, &b)?;
        let (keys, next) = self.kv.list_keys(bucket, cursor.as_deref()).map_err(wit)?;
        Ok(KeyResponse { keys, cursor: next })
    }

    fn drop(&mut self, b: Resource<BucketHandle>) -> wasmtime::Result<()> {
        self.table().delete(b)?;
        Ok(())
    }
}

impl atomics::Host for StageState {
    fn increment(
        &mut self,
        b: Resource<BucketHandle>,
        key: String,
        delta: i64,
    ) -> Result<i64, KvError> {
        let bucket = bucket_of(self, &b)?;
        self.kv.increment(bucket, &key, delta).map_err(wit)
    }

    fn swap(&mut self, cas: Resource<CasHandle>, value: Vec<u8>) -> Result<(), atomics::CasError> {
        let h = self
            .table()
            .delete(cas)
            .map_err(|e| atomics::CasError::StoreError(KvError::Other(e.to_string())))?;
        let slot = (h.bucket, h.key);
        let now = self
            .kv
            .get(slot.0, &slot.1)
            .map_err(|e| atomics::CasError::StoreError(wit(e)))?;
        if now != h.seen {
            let fresh = self
                .table()
                .push(CasHandle {
                    bucket: slot.0,
                    key: slot.1,
                    seen: now.clone(),
                })
                .map_err(|e| atomics::CasError::StoreError(KvError::Other(e.to_string())))?;
            return Err(atomics::CasError::CasFailed((fresh, now)));
        }
        self.kv
            .put(slot.0, &slot.1, Some(&value))
            .map_err(|e| atomics::CasError::StoreError(wit(e)))
    }
}

impl atomics::HostCas for StageState {
    fn new(
        &mut self,
        b: Resource<BucketHandle>,
        key: String,
    ) -> Result<Resource<CasHandle>, KvError> {
        Ok(self.new_with_read(b, key)?.0)
    }

    fn new_with_read(
        &mut self,
        b: Resource<BucketHandle>,
        key: String,
    ) -> Result<(Resource<CasHandle>, Option<Vec<u8>>), KvError> {
        let slot = (bucket_of(self, &b)?, Arc::<str>::from(key));
        let seen = self.kv.get(slot.0, &slot.1).map_err(wit)?;
        let h = self
            .table()
            .push(CasHandle {
                bucket: slot.0,
                key: slot.1,
                seen: seen.clone(),
            })
            .map_err(|e| KvError::Other(e.to_string()))?;
        Ok((h, seen))
    }

    fn drop(&mut self, c: Resource<CasHandle>) -> wasmtime::Result<()> {
        self.table().delete(c)?;
        Ok(())
    }
}

impl batch::Host for StageState {
    fn get_many(
        &mut self,
        b: Resource<BucketHandle>,
        keys: Vec<String>,
    ) -> Result<Vec<(String, Option<Vec<u8>>)>, KvError> {
        let bucket = bucket_of(self, &b)?;
        keys.into_iter()
            .map(|k| {
                let v = self.kv.get(bucket, &k).map_err(wit)?;
                Ok((k, v))
            })
            .collect()
    }

    fn set_many(
        &mut self,
        b: Resource<BucketHandle>,
        key_values: Vec<(String, Vec<u8>)>,
    ) -> Result<(), KvError> {
        // (Shadowed by `set_many_borrowed`, which the linker calls; the same checks.)
        let bucket = bucket_of(self, &b)?;
        self.kv
            .put_many(
                bucket,
                key_values.iter().map(|(k, v)| (k.as_str(), v.as_slice())),
            )
            .map_err(wit)
    }

    fn delete_many(&mut self, b: Resource<BucketHandle>, keys: Vec<String>) -> Result<(), KvError> {
        let bucket = bucket_of(self, &b)?;
        for k in keys {
            self.kv.put(bucket, &k, None).map_err(wit)?;
        }
        Ok(())
    }
}
