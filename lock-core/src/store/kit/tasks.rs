//! The background tasks a store runs for as long as it lives: a release
//! listener, a watch stream, a sweeper.
//!
//! A spawned tokio task outlives the handle that spawned it. A store that
//! keeps only its `JoinHandle` and is dropped leaves its listener running,
//! holding a connection and waking nobody, until the runtime shuts down.
//! [`Background`] aborts them all when the store's shared state goes.

use std::future::Future;

use tokio::task::JoinHandle;

/// Tasks that end when this value is dropped.
///
/// Keep one in the state a store's handles share (behind its `Arc`), so the
/// tasks stop with the last handle:
///
#[cfg_attr(feature = "store-kit", doc = "```")]
#[cfg_attr(not(feature = "store-kit"), doc = "```ignore")]
/// use lock_core::store::kit::Background;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let mut tasks = Background::new();
/// tasks.spawn(async { /* listen for releases */ });
/// drop(tasks); // the listener is aborted
/// # }
/// ```
#[derive(Debug, Default)]
pub struct Background {
    tasks: Vec<JoinHandle<()>>,
}

impl Background {
    /// No tasks yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Spawns `task` on the current tokio runtime, to be aborted with the
    /// rest.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime, as [`tokio::spawn`] does.
    pub fn spawn(&mut self, task: impl Future<Output = ()> + Send + 'static) {
        self.tasks.push(tokio::spawn(task));
    }

    /// Takes charge of a task already spawned.
    pub fn adopt(&mut self, task: JoinHandle<()>) {
        self.tasks.push(task);
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    // A listener left running after its store is gone holds a connection
    // for nothing until the runtime ends.
    #[tokio::test]
    async fn dropping_the_tasks_aborts_every_one() {
        let (sender, receiver) = tokio::sync::oneshot::channel::<()>();
        let mut tasks = Background::new();
        tasks.spawn(async move {
            // Holds `sender` until aborted.
            let _sender = sender;
            std::future::pending::<()>().await;
        });
        drop(tasks);
        let ended = tokio::time::timeout(Duration::from_secs(10), receiver).await;
        assert!(
            matches!(ended, Ok(Err(_))),
            "the aborted task dropped its sender: {ended:?}"
        );
    }
}
