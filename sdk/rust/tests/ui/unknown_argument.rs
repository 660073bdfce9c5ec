use weir_sdk::{Message, Outcome};

#[weir_sdk::stage(setup = f)]
fn s(_msg: &Message<'_>) -> Outcome {
    Outcome::Keep
}

fn main() {}
