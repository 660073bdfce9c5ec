//! A hostile test fixture. What it does depends on the message value:
//! `trap` panics, `loop` never returns, `bomb` allocates until memory runs out, `huge` emits a
//! 16 MiB value, `flood` emits 100,000 empty messages, `fail` fails the pipeline, `reject` rejects, `dup` emits two copies; `slow` spins 20 ms and keeps the message; `leak` keeps 1 MiB for good
//! per call (the instance's heap grows until a fresh one starts); anything
//! else passes unchanged. `read-file`, `env` and `net` reject with what the sandbox allowed. With config `init_error` set, `init` fails with that text.
//! With config `count_in: BUCKET`, every message first adds 1 to the keys `seen` and its value
//! in that state bucket (before it misbehaves), so tests see which writes were kept; a bucket
//! that cannot be opened rejects the message with the error. With config `get_set: BUCKET`,
//! every message first reads its key's value in that bucket and sets it to the message's
//! value (one `get` and one `set`: what the state benchmarks measure). With config
//! `write_in_init: BUCKET`, `init` writes to that bucket and fails with what the write
//! answered. With config `list_in: BUCKET`, a message sets its key in that bucket (value
//! `delete`: deletes it), lists the bucket's keys and goes on with them as its value, joined
//! by `,`; with config `open_in_init: "true"` too, that bucket is opened once in `init` and
//! kept for every message (what the SDK's docs say a stage may do).
use weir_sdk::state::Bucket;
use weir_sdk::{Config, Message, Outcome};

/// The parsed config: the bucket to count in.
pub struct Setup {
    count_in: Option<String>,
    get_set: Option<String>,
    list_in: Option<String>,
    /// Config `open_in_init`: the `list_in` bucket, opened in `init` and kept.
    held: Option<Bucket>,
}

/// Reads the config.
pub fn setup(config: &Config) -> Result<Setup, String> {
    if let Some(name) = config.get("write_in_init") {
        // What a write in `init` answers (the host's state is open only in a call).
        let answer = Bucket::open(name).and_then(|b| b.set("k", b"v"));
        return Err(format!("write in init: {answer:?}"));
    }
    match config.get("init_error") {
        Some(e) => Err(e.to_owned()),
        None => {
            let list_in = config.get("list_in").map(str::to_owned);
            let held = match (&list_in, config.get("open_in_init")) {
                (Some(name), Some("true")) => {
                    Some(Bucket::open(name).map_err(|e| format!("open in init: {e}"))?)
                }
                _ => None,
            };
            Ok(Setup {
                count_in: config.get("count_in").map(str::to_owned),
                get_set: config.get("get_set").map(str::to_owned),
                list_in,
                held,
            })
        }
    }
}

/// Misbehaves on request.
#[weir_sdk::stage(init = setup)]
pub fn misbehave(msg: &Message<'_>, setup: &Setup) -> Outcome {
    // (Text only where it is used as text: the requests are matched as bytes, so a message
    // that asks for nothing costs no UTF-8 check, in the state benchmarks' rows alike.)
    let value = || msg.value_str().unwrap_or("");
    if let Some(name) = &setup.count_in {
        let counted = Bucket::open(name).and_then(|b| {
            b.increment("seen", 1)?;
            b.increment(value(), 1)
        });
        if let Err(e) = counted {
            return Outcome::reject(format!("state: {e}"));
        }
    }
    if let Some(name) = &setup.get_set {
        let key = msg.key_str().unwrap_or_default();
        let done = Bucket::open(name).and_then(|b| {
            std::hint::black_box(b.get(key)?);
            b.set(key, msg.value().unwrap_or_default())
        });
        if let Err(e) = done {
            return Outcome::reject(format!("state: {e}"));
        }
    }
    if let Some(name) = &setup.list_in {
        let key = msg.key_str().unwrap_or_default();
        let list = |b: &Bucket| {
            match value() {
                "delete" => b.delete(key)?,
                value => b.set(key, value)?,
            }
            b.keys()
        };
        let listed = match &setup.held {
            Some(b) => list(b),
            None => Bucket::open(name).and_then(|b| list(&b)),
        };
        return match listed {
            Ok(keys) => Outcome::map(msg.to_owned().value(keys.join(","))),
            Err(e) => Outcome::reject(format!("state: {e}")),
        };
    }
    match msg.value().unwrap_or_default() {
        b"trap" => panic!("misbehave: asked to trap at offset {}", msg.offset()),
        b"loop" => {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        b"bomb" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                hoard.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&hoard);
            }
        }
        b"leak" => {
            static HOARD: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());
            HOARD.lock().unwrap().push(vec![1u8; 1 << 20]);
            Outcome::Keep
        }
        b"huge" => Outcome::map(msg.to_owned().value(vec![b'x'; 16 << 20])),
        b"flood" => Outcome::Next(vec![weir_sdk::OutMessage::default(); 100_000]),
        b"fail" => Outcome::fail(format!("asked to fail at offset {}", msg.offset())),
        b"reject" => Outcome::reject("asked to reject"),
        b"dup" => Outcome::Next(vec![msg.to_owned(), msg.to_owned()]),
        b"slow" => {
            let t = std::time::Instant::now();
            while t.elapsed() < std::time::Duration::from_millis(20) {
                std::hint::spin_loop();
            }
            Outcome::Keep
        }
        // Sandbox probes: report what the guest could reach.
        b"read-file" => Outcome::reject(match std::fs::read_to_string("/etc/hostname") {
            Ok(_) => "probe: file read allowed".to_owned(),
            Err(e) => format!("probe: file read denied: {e}"),
        }),
        b"env" => Outcome::reject(format!(
            "probe: {} environment variables",
            std::env::vars().count()
        )),
        b"net" => Outcome::reject(match std::net::TcpStream::connect("127.0.0.1:1") {
            Ok(_) => "probe: network allowed".to_owned(),
            Err(e) => format!("probe: network denied: {e}"),
        }),
        _ => Outcome::Keep,
    }
}
