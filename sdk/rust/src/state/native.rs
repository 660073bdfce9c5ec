use std::cell::RefCell;
use std::collections::BTreeMap;

type Buckets = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

thread_local! {
    static BUCKETS: RefCell<Buckets> = const { RefCell::new(BTreeMap::new()) };
}

pub fn with<R>(bucket: &str, f: impl FnOnce(&BTreeMap<String, Vec<u8>>) -> R) -> R {
    BUCKETS.with(|b| f(b.borrow_mut().entry(bucket.to_owned()).or_default()))
}

pub fn set(bucket: &str, key: &str, value: Option<&[u8]>) -> Result<(), super::Error> {
    BUCKETS.with(|b| {
        let mut b = b.borrow_mut();
        let m = b.entry(bucket.to_owned()).or_default();
        match value {
            Some(v) => m.insert(key.to_owned(), v.to_vec()),
            None => m.remove(key),
        };
    });
    Ok(())
}

pub fn reset() {
    BUCKETS.with(|b| b.borrow_mut().clear());
}
