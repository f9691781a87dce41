//! The waiter registry's own tests.

use super::*;
use std::time::Duration;

#[test]
fn a_waiter_that_leaves_takes_its_key_out_of_the_map() {
    // Without this, every key ever waited on would stay in memory.
    let waiters = Arc::new(Waiters::default());
    let first = waiters.register("k");
    let second = waiters.register("k");
    assert_eq!(waiters.len(), 1, "one entry per key");
    drop(first);
    assert_eq!(waiters.len(), 1, "the second waiter keeps the entry");
    drop(second);
    assert_eq!(waiters.len(), 0, "the last waiter removes it");
}

#[test]
fn a_wakeup_made_from_an_interest_leaves_no_key_behind() {
    // The wakeup keeps what passes its wake on beside the interest; if
    // that kept the key's entry alive, the last waiter to leave would
    // not take the key out, and a store listening per key would listen
    // for it for good.
    let (waiters, mut changes) = Waiters::watched();
    let waiters = Arc::new(waiters);
    let wakeup = waiters.register("k").into_wakeup();
    drop(wakeup);
    assert_eq!(waiters.len(), 0, "the key left with its last waiter");
    assert_eq!(changes.try_recv(), Ok(Watch::Start("k".into())));
    assert_eq!(
        changes.try_recv(),
        Ok(Watch::Stop("k".into())),
        "and listening for it stops"
    );
}

#[test]
fn the_first_waiter_for_a_key_and_the_last_to_leave_are_announced_once() {
    // A store listening per key subscribes on Start and unsubscribes on
    // Stop; a second waiter for the same key must change neither.
    let (waiters, mut changes) = Waiters::watched();
    let waiters = Arc::new(waiters);
    let first = waiters.register("a");
    let second = waiters.register("a");
    let other = waiters.register("b");
    drop(first);
    drop(second);
    let again = waiters.register("a");
    drop(other);
    drop(again);
    let mut seen = Vec::new();
    while let Ok(change) = changes.try_recv() {
        seen.push(change);
    }
    assert_eq!(
        seen,
        [
            Watch::Start("a".into()),
            Watch::Start("b".into()),
            Watch::Stop("a".into()),
            Watch::Start("a".into()),
            Watch::Stop("b".into()),
            Watch::Stop("a".into()),
        ]
    );
}

#[tokio::test]
async fn each_admitted_reader_wakes_the_next_waiter_of_its_key() {
    // One release wakes one waiter; readers let in pass the wake on, so
    // every waiting reader of the process gets in, one after another.
    let waiters = Arc::new(Waiters::default());
    let mut waiting: Vec<_> = (0..3)
        .map(|_| Box::pin(waiters.register_reader("k")))
        .collect();
    let other = Box::pin(waiters.register("other"));
    waiters.released("k");
    for round in 0..3 {
        let woken = waiting
            .iter_mut()
            .position(|interest| {
                let mut cx = Context::from_waker(std::task::Waker::noop());
                interest.as_mut().poll(&mut cx).is_ready()
            })
            .unwrap_or_else(|| panic!("round {round}: nobody was woken"));
        drop(waiting.remove(woken));
        waiters.reader_admitted("k");
    }
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut other = other;
    assert!(
        other.as_mut().poll(&mut cx).is_pending(),
        "the waiters of another key sleep on"
    );
}

/// Whether `interest` has been woken, without waiting.
fn is_woken(interest: &mut Pin<Box<Interest>>) -> bool {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    interest.as_mut().poll(&mut cx).is_ready()
}

#[tokio::test]
async fn a_release_wakes_a_waiting_writer_before_the_readers() {
    // The readers waiting here are held off by the writer's claim (or
    // would be by the writer once in): waking one of them instead would
    // leave the writer asleep through the release it waits for.
    let waiters = Arc::new(Waiters::default());
    let mut reader = Box::pin(waiters.register_reader("k"));
    let mut writer = Box::pin(waiters.register("k"));
    assert!(waiters.has_writers("k"));
    waiters.released("k");
    assert!(is_woken(&mut writer), "the writer is woken");
    assert!(!is_woken(&mut reader), "the reader sleeps on");
    drop(writer);
    assert!(!waiters.has_writers("k"));
    waiters.released("k");
    assert!(
        is_woken(&mut reader),
        "with no writer waiting, a reader is woken"
    );
}

#[tokio::test]
async fn a_writer_that_leaves_without_seeing_its_wake_passes_it_to_a_reader() {
    // Tokio passes an unseen wake on within its own queue; with no other
    // writer there, the readers would never hear of the release.
    let waiters = Arc::new(Waiters::default());
    let mut reader = Box::pin(waiters.register_reader("k"));
    let writer = waiters.register("k");
    waiters.released("k");
    assert!(!is_woken(&mut reader), "the wake went to the writer");
    drop(writer);
    assert!(
        is_woken(&mut reader),
        "and passed to the reader when it left"
    );
}

#[tokio::test]
async fn a_writer_that_saw_its_wake_passes_nothing_on() {
    let waiters = Arc::new(Waiters::default());
    let mut reader = Box::pin(waiters.register_reader("k"));
    let mut writer = Box::pin(waiters.register("k"));
    waiters.released("k");
    assert!(is_woken(&mut writer));
    drop(writer);
    assert!(
        !is_woken(&mut reader),
        "the wake was the writer's, and used"
    );
}

#[tokio::test]
async fn a_woken_writers_pass_on_wakes_the_next_waiter() {
    // What a woken writer that left before its next attempt was
    // answered calls (see `Wakeup::new`): its wake was for
    // somebody who would try.
    let waiters = Arc::new(Waiters::default());
    let mut reader = Box::pin(waiters.register_reader("k"));
    let mut writer = Box::pin(waiters.register("k"));
    waiters.released("k");
    assert!(is_woken(&mut writer), "the writer is woken first");
    let pass_on = writer.pass_on();
    pass_on();
    assert!(is_woken(&mut reader), "the pass-on reached the reader");
    drop(writer);
    drop(reader);
    // With everybody gone, it wakes nobody and keeps nothing.
    let gone = waiters.register("k").pass_on();
    assert_eq!(waiters.len(), 0, "the key left with its last waiter");
    gone();
    assert_eq!(waiters.len(), 0);
}

#[tokio::test]
async fn a_woken_writer_no_longer_counts_so_the_next_release_reaches_a_reader() {
    // A writer's wakeup is kept after it resolves, until its next
    // attempt: a release meanwhile must not go to its empty queue, where
    // nobody would hear it if the writer then leaves without trying.
    let waiters = Arc::new(Waiters::default());
    let mut reader = Box::pin(waiters.register_reader("k"));
    let mut previous = Box::pin(waiters.register("k"));
    waiters.released("k");
    assert!(is_woken(&mut previous), "the writer is woken first");
    assert!(!waiters.has_writers("k"), "and no longer waits");
    waiters.released("k");
    drop(previous);
    assert!(
        is_woken(&mut reader),
        "the second release reached the reader"
    );
}

#[tokio::test]
async fn an_unseen_wake_handed_on_while_a_woken_round_is_kept_reaches_a_reader() {
    let waiters = Arc::new(Waiters::default());
    let mut reader = Box::pin(waiters.register_reader("k"));
    let mut previous = Box::pin(waiters.register("k"));
    waiters.released("k");
    assert!(is_woken(&mut previous));
    // The next round registers, is woken, and leaves before seeing it
    // (its attempt failed), then the kept round goes.
    let next = waiters.register("k");
    waiters.released("k");
    drop(next);
    drop(previous);
    assert!(is_woken(&mut reader), "the wake the next round never saw");
}

#[tokio::test]
async fn a_release_announced_before_the_waiter_sleeps_still_wakes_it() {
    // Interest is registered before the acquire script runs; a release
    // heard between the script's answer and the sleep must not be lost.
    let waiters = Arc::new(Waiters::default());
    let interest = waiters.register("k");
    waiters.released("k");
    tokio::time::timeout(Duration::from_secs(10), interest)
        .await
        .expect("an early notification must still wake the waiter");
}

#[tokio::test]
async fn every_observer_hears_each_change_and_no_waiter_hears_an_acquire() {
    // An election's observers all need to read the new leader; a waiter
    // woken by a new holder would only try and fail, and an observer must
    // never take the one wake a release sends a waiter.
    let waiters = Arc::new(Waiters::default());
    let mut writer = Box::pin(waiters.register("k"));
    let mut observers: Vec<_> = (0..2).map(|_| Box::pin(waiters.observe("k"))).collect();
    let mut cx = Context::from_waker(std::task::Waker::noop());
    waiters.changed("k");
    for observer in &mut observers {
        assert!(
            observer.as_mut().poll(&mut cx).is_ready(),
            "each observer hears the acquire"
        );
    }
    assert!(writer.as_mut().poll(&mut cx).is_pending(), "no waiter does");
    drop(observers);
    let mut observers: Vec<_> = (0..2).map(|_| Box::pin(waiters.observe("k"))).collect();
    waiters.released("k");
    for observer in &mut observers {
        assert!(
            observer.as_mut().poll(&mut cx).is_ready(),
            "each observer hears the release"
        );
    }
    assert!(
        writer.as_mut().poll(&mut cx).is_ready(),
        "and the waiter is woken for it"
    );
    drop(observers);
    drop(writer);
    assert!(waiters.is_empty(), "observers leave no key behind");
}

#[tokio::test]
async fn an_observer_that_leaves_unwoken_passes_no_wake_on() {
    // Observers are woken all together: one that leaves has no wake of a
    // waiter's to give back, and giving one would wake a waiter for nothing.
    let waiters = Arc::new(Waiters::default());
    let mut writer = Box::pin(waiters.register("k"));
    let observer = waiters.observe("k");
    waiters.changed("k");
    drop(observer);
    let mut cx = Context::from_waker(std::task::Waker::noop());
    assert!(
        writer.as_mut().poll(&mut cx).is_pending(),
        "the waiter still waits"
    );
}

#[tokio::test]
async fn a_writer_that_stops_waiting_wakes_the_readers_it_stood_in_front_of() {
    // The release woke the writer, not the reader behind it; the writer
    // then found readers of another process in, and gave up. Nothing
    // holds the reader off now, and nobody else will wake it: without the
    // writer's leaving wake it sleeps until its nap ends.
    let waiters = Arc::new(Waiters::default());
    let mut reader = Box::pin(waiters.register_reader("k"));
    let mut writer = waiters.register("k").into_wakeup();
    waiters.released("k");
    assert!(writer.woken_now().is_some(), "the release woke the writer");
    assert!(!is_woken(&mut reader), "and not the reader");
    drop(writer);
    assert!(
        is_woken(&mut reader),
        "the writer left without the lease: the reader is woken"
    );
}

#[tokio::test]
async fn a_writer_that_goes_on_or_leaves_behind_another_writer_wakes_no_reader() {
    // A writer whose next attempt was answered still waits (or holds the
    // name): the readers stay behind it. One that leaves while another
    // writer of the process waits leaves the readers behind that one.
    let waiters = Arc::new(Waiters::default());
    let mut reader = Box::pin(waiters.register_reader("k"));
    let mut answered = waiters.register("k").into_wakeup();
    answered.answered();
    drop(answered);
    assert!(!is_woken(&mut reader), "a writer that went on wakes nobody");
    let other = waiters.register("k");
    drop(waiters.register("k").into_wakeup());
    assert!(
        !is_woken(&mut reader),
        "another writer waits: the reader stays behind it"
    );
    drop(other);
    // That plain registration left without a wakeup of its own, as a
    // reader's does: no leaving wake.
    assert!(!is_woken(&mut reader));
    drop(waiters.register_reader("k").into_wakeup());
    assert!(
        !is_woken(&mut reader),
        "a reader that leaves holds nobody off"
    );
}

#[tokio::test]
async fn a_writer_that_stops_waiting_takes_its_claim_back_before_waking_the_readers() {
    // Woken first, a reader would meet the claim, and nap until it ends.
    let waiters = Arc::new(Waiters::default());
    let mut reader = Box::pin(waiters.register_reader("k"));
    let (taking, taken) = tokio::sync::oneshot::channel::<()>();
    let (go, gate) = tokio::sync::oneshot::channel::<()>();
    let writer = waiters.register("k").into_wakeup_withdrawing(async move {
        let _ = taking.send(());
        let _ = gate.await;
    });
    drop(writer);
    tokio::time::timeout(Duration::from_secs(10), taken)
        .await
        .expect("the claim is taken back once the writer leaves")
        .expect("the withdrawal ran");
    assert!(
        !is_woken(&mut reader),
        "the reader is not woken while the claim is still there"
    );
    go.send(()).expect("the withdrawal waits");
    tokio::time::timeout(Duration::from_secs(10), reader)
        .await
        .expect("the claim taken back, the reader is woken");
}
