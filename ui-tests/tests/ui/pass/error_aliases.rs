//! Every error alias the docs name compiles with `#[locked]` and returns
//! lock errors through it: `std::io::Result`, `anyhow::Result`, and an
//! application's own alias.

use lock_core::{LockManager, locked, registry};

/// An application's own error type.
#[derive(Debug)]
pub struct AppError(#[allow(dead_code)] lock_core::Error);

impl From<lock_core::Error> for AppError {
    fn from(error: lock_core::Error) -> Self {
        AppError(error)
    }
}

/// An application's own alias.
pub type AppResult<T> = Result<T, AppError>;

#[locked(name = "io-job", ttl = "5s", contended = "error")]
async fn with_io() -> std::io::Result<u64> {
    Ok(1)
}

#[locked(name = "anyhow-job", ttl = "5s")]
async fn with_anyhow() -> anyhow::Result<u64> {
    Ok(2)
}

#[locked(name = "app-job", ttl = "5s")]
async fn with_app_alias() -> AppResult<u64> {
    Ok(3)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(registry::with_manager(LockManager::memory(), async {
        assert_eq!(with_io().await.expect("io"), 1);
        assert_eq!(with_anyhow().await.expect("anyhow"), Some(2));
        assert_eq!(with_app_alias().await.expect("app"), Some(3));
        // A lock error arrives through each: contention as io's WouldBlock.
        let held = registry::manager()
            .lock("io-job", std::time::Duration::from_secs(5))
            .acquire()
            .await
            .expect("acquire");
        let contended = with_io().await.expect_err("held");
        assert_eq!(contended.kind(), std::io::ErrorKind::WouldBlock);
        drop(held);
    }));
}
