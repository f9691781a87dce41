// A function returning another crate's error type, which can neither take
// lock errors nor be given an `impl From` here: the message says what can
// be done instead.
use lock_core::locked;

#[locked(name = "render", ttl = "5s")]
async fn render() -> Result<String, std::fmt::Error> {
    Ok(String::new())
}

fn main() {}
