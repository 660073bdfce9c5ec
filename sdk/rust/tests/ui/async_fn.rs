use weir_sdk::{Message, Outcome};

#[weir_sdk::stage]
async fn later(_msg: &Message<'_>) -> Outcome {
    Outcome::Keep
}

fn main() {}
