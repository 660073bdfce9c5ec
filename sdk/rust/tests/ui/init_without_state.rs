use weir_sdk::{Config, Message, Outcome};

fn setup(_c: &Config) -> Result<u32, String> {
    Ok(1)
}

#[weir_sdk::stage(init = setup)]
fn stateless(_msg: &Message<'_>) -> Outcome {
    Outcome::Keep
}

fn main() {}
