use weir_sdk::Message;

#[weir_sdk::stage]
fn no_return(_msg: &Message<'_>) {}

fn main() {}
