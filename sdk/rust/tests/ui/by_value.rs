use weir_sdk::{Message, Outcome};

#[weir_sdk::stage]
fn by_value(_msg: Message<'_>) -> Outcome {
    Outcome::Keep
}

fn main() {}
