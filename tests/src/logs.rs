//! Capturing `tracing` output in a test.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::{Interest, Subscriber};
use tracing::{Dispatch, Event, Metadata};
use tracing_subscriber::fmt::MakeWriter;

/// Everything logged on this thread while the returned guard lives, as text
/// lines (`LEVEL target: message key=value...`).
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Starts capturing every event at TRACE and above on the current thread.
    ///
    /// Use a current-thread runtime, so the code under test runs here.
    pub fn start() -> (Captured, tracing::subscriber::DefaultGuard) {
        Undecided::keep_registered();
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .without_time()
            .finish();
        let guard = tracing::subscriber::set_default(subscriber);
        (captured, guard)
    }

    /// The captured lines so far.
    pub fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The captured lines at `level` (`"WARN"`, `"DEBUG"`...) containing `text`.
    pub fn matching(&self, level: &str, text: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|line| line.trim_start().starts_with(level) && line.contains(text))
            .collect()
    }
}

/// A subscriber that never records, kept registered for the whole process
/// so `tracing` never decides once and for all that an event is unwanted.
///
/// While exactly one subscriber is registered, `tracing` asks only the
/// *calling thread's* subscriber whether an event is wanted, the first time
/// that event is reached, and keeps the answer for every thread. A thread
/// with no subscriber answers "never", so a test thread capturing logs would
/// miss every event some other thread happened to reach first. With this one
/// registered too, there are always two, the answer is "sometimes", and each
/// event asks the subscriber of the thread it happens on.
struct Undecided;

impl Undecided {
    fn keep_registered() {
        static KEPT: OnceLock<Dispatch> = OnceLock::new();
        KEPT.get_or_init(|| Dispatch::new(Undecided));
    }
}

impl Subscriber for Undecided {
    fn register_callsite(&self, _: &'static Metadata<'static>) -> Interest {
        Interest::sometimes()
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::OFF)
    }

    fn enabled(&self, _: &Metadata<'_>) -> bool {
        false
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, _: &Event<'_>) {}

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::Captured;

    fn say_first_seen_elsewhere() {
        tracing::warn!("an event first seen on a thread with no subscriber");
    }

    /// Another test's thread, with no subscriber of its own, can be the first
    /// to reach an event (a runtime shutting down there drops a give-back
    /// task, say). That must not hide the event from a test capturing it.
    #[test]
    fn an_event_first_seen_on_a_thread_with_no_subscriber_is_still_captured() {
        let (captured, _logging) = Captured::start();
        std::thread::spawn(say_first_seen_elsewhere)
            .join()
            .expect("the other thread");
        say_first_seen_elsewhere();
        assert_eq!(
            captured.matching("WARN", "first seen on a thread").len(),
            1,
            "captured: {:?}",
            captured.lines()
        );
    }
}
