// Above #[tokio::test] (the right order), #[locked] would make the test
// return `Result<Option<()>, _>`, which a test cannot return: the error
// must name `contended = "error"` and a `Result<(), E>` return.
use lock_core::locked;

#[locked(name = "db-tests", ttl = "30s")]
#[tokio::test]
async fn uses_the_database() {}

fn main() {}
