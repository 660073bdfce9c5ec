use weir_sdk::{Message, Outcome};

#[weir_sdk::stage]
fn s(_msg: &Message<'_>, _a: &u8, _b: &u8) -> Outcome {
    Outcome::Keep
}

fn main() {}
