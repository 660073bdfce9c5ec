//! A hostile stage for the host's packed-answer reader: `process-batch` writes a valid answer
//! (keep, or the message twice, or a reject, by offset) and then spoils it, or answers random
//! bytes. Plain wit-bindgen and `weir-abi`, no SDK (whose answers are always well formed).
//!
//! Config: `mode` = `valid` (no spoiling: the control), `mutate` (one to three mutations:
//! flipped bits, overwritten lengths, cuts, inserted bytes) or `random` (0–64 random bytes);
//! `seed` (a number). The mutation depends on the seed and the batch's first offset and size
//! only, so a run is reproducible. The typed `process` keeps every message.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({ world: "stage-fast", path: "../../wit", generate_all });

use std::sync::Mutex;

use exports::weir::stage::batch::Guest as BatchGuest;
use exports::weir::stage::stage::Guest;
use weir::stage::types::{Message, Metadata, Outcome};

static CONFIG: Mutex<(String, u64)> = Mutex::new((String::new(), 0));

struct Forge;

impl Guest for Forge {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        let get = |k: &str| config.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let mode = get("mode").unwrap_or_else(|| "mutate".into());
        if !["valid", "mutate", "random"].contains(&mode.as_str()) {
            return Err(format!("unknown mode `{mode}`"));
        }
        let seed = get("seed")
            .map_or(Ok(1), |s| s.parse())
            .map_err(|e| format!("seed: {e}"))?;
        *CONFIG.lock().unwrap() = (mode, seed);
        Ok(())
    }

    fn process(msg: Message, _meta: Metadata) -> Outcome {
        Outcome::Next(vec![msg])
    }
}

/// xorshift64*: small and deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

impl BatchGuest for Forge {
    fn process_batch(input: Vec<u8>) -> Vec<u8> {
        let (mode, seed) = CONFIG.lock().unwrap().clone();
        let reader = weir_abi::BatchReader::new(&input).expect("the host writes valid batches");
        let count = reader.count as usize;
        let msgs: Vec<_> = reader.map(|m| m.expect("valid batch")).collect();
        let first = msgs.first().map_or(0, |m| m.offset as u64);
        let mut rng = Rng((seed ^ first.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ count as u64) | 1);
        if mode == "random" {
            let n = rng.below(65);
            return (0..n).map(|_| rng.next() as u8).collect();
        }
        let mut w = weir_abi::ResultWriter::new(count);
        for m in &msgs {
            match m.offset % 3 {
                0 => w.keep(),
                1 => {
                    w.next(2);
                    for _ in 0..2 {
                        w.message(m.timestamp, None, m.key, m.value, m.headers.iter());
                    }
                }
                _ => w.reject("forged reject"),
            }
        }
        let mut buf = w.finish();
        if mode == "valid" {
            return buf;
        }
        for _ in 0..1 + rng.below(3) {
            let n = buf.len();
            match rng.below(5) {
                0 if n > 0 => buf[rng.below(n)] ^= 1 << rng.below(8),
                1 if n > 0 => buf[rng.below(n)] = rng.next() as u8,
                2 if n >= 4 => {
                    let at = rng.below(n - 3);
                    let v = [
                        0u32,
                        1,
                        u32::MAX,
                        u32::MAX - 1,
                        1 << 20,
                        rng.below(64) as u32,
                    ][rng.below(6)];
                    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
                }
                3 => buf.truncate(rng.below(n + 1)),
                _ => {
                    let at = rng.below(n + 1);
                    let extra: Vec<u8> = (0..1 + rng.below(8)).map(|_| rng.next() as u8).collect();
                    buf.splice(at..at, extra);
                }
            }
        }
        buf
    }
}

export!(Forge);
