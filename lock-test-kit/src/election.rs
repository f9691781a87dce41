//! The election suite: one leader per name, terms that only grow, handing
//! over at once on resignation, the lost signal, `lead`'s loop, observers
//! that see each leader in order, and campaigns that leave nothing behind
//! when they are cut off, on any store.
//!
//! [`election_contract!`](crate::election_contract) generates one test per
//! behaviour. The candidates here share one manager (one process); the
//! workspace's own tests run candidates in several processes as well. Time
//! bounds are hang guards: an election TTL here is long (30 s), so a
//! candidate that waits out its leader's TTL instead of being woken fails
//! the guard.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use lock_core::{Election, Error, Leader, Leadership, LockManager, Observe, Term};

use crate::counted::Counted;
use crate::ms;

/// Longer than every hang guard: a handover that waits for the TTL fails.
const LONG: Duration = Duration::from_secs(30);
const HANG_GUARD: Duration = Duration::from_secs(10);

/// `None` (and the refusal checked) on a store that keeps no fencing
/// tokens: it cannot hold elections, and must say so rather than hand out
/// terms that could go backwards.
async fn refused_without_fencing(locks: &LockManager, name: &str) -> Option<()> {
    if locks.store().fencing() {
        return Some(());
    }
    let refused = locks.election(name, LONG).campaign().await;
    assert!(
        matches!(refused, Err(Error::Unsupported { .. })),
        "a store without fencing tokens refuses elections: {refused:?}"
    );
    None
}

async fn campaign(election: &Election) -> Leadership {
    tokio::time::timeout(HANG_GUARD, election.campaign())
        .await
        .expect("the campaign ends within the hang guard")
        .expect("campaign")
}

/// Three candidates at once: exactly one leads, `leader()` names it and its
/// term, and the others are still waiting.
pub async fn one_candidate_leads_and_the_others_wait(locks: LockManager) {
    if refused_without_fencing(&locks, "one-leads").await.is_none() {
        return;
    }
    let candidates: Vec<_> = (0..3)
        .map(|n| {
            let election = locks
                .election("one-leads", LONG)
                .label(format!("candidate-{n}"));
            tokio::spawn(async move { election.campaign().await.map(|l| (n, l)) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let done: Vec<_> = candidates.iter().filter(|c| c.is_finished()).collect();
    assert_eq!(
        done.len(),
        1,
        "exactly one candidate leads; the others wait"
    );
    let mut leading = None;
    let mut waiting = Vec::new();
    for candidate in candidates {
        if candidate.is_finished() {
            leading = Some(candidate.await.expect("task").expect("campaign"));
        } else {
            waiting.push(candidate);
        }
    }
    let (n, leadership) = leading.expect("one leads");
    let leader = locks
        .election("one-leads", LONG)
        .leader()
        .await
        .expect("leader")
        .expect("somebody leads");
    assert_eq!(
        leader.label(),
        format!("candidate-{n}"),
        "the leader's label"
    );
    assert_eq!(leader.term(), leadership.term(), "the leader's term");
    assert!(leader.since().is_some(), "when its term began");
    assert!(
        leader.remaining_ttl() <= LONG && leader.remaining_ttl() > LONG / 2,
        "its lease's remaining TTL: {:?}",
        leader.remaining_ttl()
    );
    for candidate in waiting {
        candidate.abort();
        let _ = candidate.await;
    }
    assert!(leadership.resign().await.expect("resign"), "it still led");
}

/// A leader that resigns hands over at once: the next candidate leads
/// without waiting out the TTL, with a greater term. Dropping leadership
/// does the same.
pub async fn a_resignation_or_a_drop_hands_over_at_once(locks: LockManager) {
    if refused_without_fencing(&locks, "hand-over").await.is_none() {
        return;
    }
    let election = locks.election("hand-over", LONG);
    let first = campaign(&election).await;
    let next = tokio::spawn({
        let election = election.clone();
        async move { election.campaign().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !next.is_finished(),
        "the next candidate waits while one leads"
    );
    let first_term = first.term();
    assert!(first.resign().await.expect("resign"), "it still led");
    let second = tokio::time::timeout(HANG_GUARD, next)
        .await
        .expect("the next candidate leads at once, not after the 30 s TTL")
        .expect("task")
        .expect("campaign");
    assert!(
        second.term() > first_term,
        "terms grow: {} then {}",
        first_term,
        second.term()
    );

    let third = tokio::spawn({
        let election = election.clone();
        async move { election.campaign().await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second_term = second.term();
    drop(second);
    let third = tokio::time::timeout(HANG_GUARD, third)
        .await
        .expect("a dropped leadership hands over at once")
        .expect("task")
        .expect("campaign");
    assert!(
        third.term() > second_term,
        "terms grow: {} then {}",
        second_term,
        third.term()
    );
    third.resign().await.expect("resign");
    assert_eq!(
        election.leader().await.expect("leader"),
        None,
        "nobody leads"
    );
}

/// Leadership renews itself: it outlives many TTLs without being lost.
pub async fn leadership_renews_itself_past_many_ttls(locks: LockManager) {
    if refused_without_fencing(&locks, "renews").await.is_none() {
        return;
    }
    let ttl = ms(&locks, 300);
    let election = locks.election("renews", ttl);
    let leadership = campaign(&election).await;
    tokio::time::sleep(ttl * 4).await;
    assert!(!leadership.is_lost(), "renewed every ttl/3, never lost");
    let leader = election
        .leader()
        .await
        .expect("leader")
        .expect("still leads");
    assert_eq!(leader.term(), leadership.term(), "the same term throughout");
    assert!(leadership.resign().await.expect("resign"), "still ours");
}

/// A leader whose lease is taken away (an operator freed it) learns so:
/// `lost()` resolves at its next renewal, and another candidate leads.
pub async fn lost_resolves_when_the_lease_is_taken_away(locks: LockManager) {
    if refused_without_fencing(&locks, "taken-away")
        .await
        .is_none()
    {
        return;
    }
    let ttl = ms(&locks, 600);
    let election = locks.election("taken-away", ttl);
    let leadership = campaign(&election).await;
    assert!(!leadership.is_lost(), "leads");
    let freed = locks
        .lock("taken-away", ttl)
        .force_release()
        .await
        .expect("force_release");
    assert!(freed, "the operator freed the leader's lease");
    let next = campaign(&election).await;
    tokio::time::timeout(HANG_GUARD, leadership.lost())
        .await
        .expect("lost() resolves once a renewal finds the lease gone");
    assert!(leadership.is_lost(), "and says so after");
    assert!(
        next.term() > leadership.term(),
        "the next leader's term is greater"
    );
    assert!(
        !leadership.resign().await.expect("resign"),
        "resigning a lost leadership frees nothing"
    );
    assert!(!next.is_lost(), "the new leader still leads");
    next.resign().await.expect("resign");
}

/// `lead` runs the work while leading, drops it the moment leadership is
/// lost, campaigns again and runs it anew for its next term; it returns
/// what the work returns, and the `Term`s it handed out say they ended.
pub async fn lead_drops_the_work_on_loss_and_leads_again(locks: LockManager) {
    if refused_without_fencing(&locks, "lead").await.is_none() {
        return;
    }
    let ttl = ms(&locks, 600);
    let election = locks.election("lead", ttl);
    let calls = Arc::new(AtomicU32::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    let lead = tokio::spawn({
        let (election, calls, dropped) =
            (election.clone(), Arc::clone(&calls), Arc::clone(&dropped));
        async move {
            let mut terms = Vec::new();
            election
                .lead(|term| {
                    let call = calls.fetch_add(1, Ordering::SeqCst);
                    terms.push(term.clone());
                    let dropped = Arc::clone(&dropped);
                    let terms = terms.clone();
                    async move {
                        if call == 0 {
                            // The first term works until it is dropped.
                            let _flag = SetOnDrop(dropped);
                            std::future::pending::<()>().await;
                        }
                        Ok::<_, Error>(terms)
                    }
                })
                .await
        }
    });
    let observed = locks.election("lead", ttl);
    tokio::time::timeout(HANG_GUARD, async {
        while observed.leader().await.expect("leader").is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the lead loop leads");
    assert!(
        locks
            .lock("lead", ttl)
            .force_release()
            .await
            .expect("force_release"),
        "the leader's lease is taken away"
    );
    let terms = tokio::time::timeout(HANG_GUARD, lead)
        .await
        .expect("the second term's work returns")
        .expect("task")
        .expect("lead");
    assert!(
        dropped.load(Ordering::SeqCst),
        "the first term's work was dropped"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the work ran once per term"
    );
    assert!(
        terms[1].number() > terms[0].number(),
        "the second term is greater: {terms:?}"
    );
    // A `Term` the work kept (or handed to a task it spawned) says when
    // its term ended, however it ended.
    assert!(
        terms.iter().all(Term::is_lost),
        "both terms ended: the first lost, the second resigned as its work returned: {terms:?}"
    );
    assert_eq!(
        observed.leader().await.expect("leader"),
        None,
        "the work returned: its leadership resigned"
    );
}

/// Work that ignores its argument, the natural code for work that needs no
/// term, runs: three candidates on one election each lead in turn, run the
/// work while leading, never two at once, and `lead` returns what it
/// returned. A `lead` that let the argument's drop end the term would drop
/// the work before polling it and campaign again, round after round: the
/// work would never run while the store was hammered.
pub async fn lead_runs_work_that_ignores_its_argument_one_candidate_at_a_time(locks: LockManager) {
    if refused_without_fencing(&locks, "ignored").await.is_none() {
        return;
    }
    let running = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let runs = Arc::new(AtomicU32::new(0));
    let mut candidates: Vec<_> = (0..3)
        .map(|n| {
            let label = format!("candidate-{n}");
            let election = locks.election("ignored", LONG).label(&label);
            let counts = (Arc::clone(&running), Arc::clone(&most), Arc::clone(&runs));
            tokio::spawn(async move {
                let observed = election.clone();
                election
                    .lead(|_term| {
                        let (running, most, runs) = counts.clone();
                        let (observed, label) = (observed.clone(), label.clone());
                        async move {
                            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                            most.fetch_max(now, Ordering::SeqCst);
                            let leader = observed.leader().await.expect("leader");
                            assert_eq!(
                                leader.as_ref().map(Leader::label),
                                Some(label.as_str()),
                                "the work runs while its own candidate leads"
                            );
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            running.fetch_sub(1, Ordering::SeqCst);
                            runs.fetch_add(1, Ordering::SeqCst);
                            Ok::<_, Error>(label)
                        }
                    })
                    .await
            })
        })
        .collect();
    let finished = tokio::time::timeout(HANG_GUARD, async {
        let mut returned = Vec::new();
        for candidate in &mut candidates {
            returned.push(candidate.await.expect("candidate task").expect("lead"));
        }
        returned
    })
    .await;
    for candidate in &candidates {
        candidate.abort();
    }
    let runs = runs.load(Ordering::SeqCst);
    assert!(
        runs > 0,
        "three candidates leading with work that ignores its argument ran the work {runs} \
         times in {HANG_GUARD:?}"
    );
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "one candidate at a time runs the work"
    );
    let returned = finished.expect("each candidate's `lead` returns once its work has run");
    assert_eq!(runs, 3, "each candidate ran the work once");
    assert_eq!(
        returned,
        ["candidate-0", "candidate-1", "candidate-2"],
        "`lead` returns what the work returned"
    );
    assert_eq!(
        locks
            .election("ignored", LONG)
            .leader()
            .await
            .expect("leader"),
        None,
        "the work returned: each leadership was given back"
    );
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// An observer sees who leads when it starts, each new leader with a
/// greater term, and `None` once nobody leads, without waiting out TTLs.
pub async fn observers_see_each_leader_in_order(locks: LockManager) {
    if refused_without_fencing(&locks, "observed").await.is_none() {
        return;
    }
    let a = locks.election("observed", LONG).label("a");
    let b = locks.election("observed", LONG).label("b");
    let mut observe = a.observe();
    assert_eq!(
        next_change(&mut observe).await,
        None,
        "nobody leads at first"
    );
    let leading_a = campaign(&a).await;
    let seen = next_change(&mut observe).await.expect("a leads");
    assert_eq!((seen.label(), seen.term()), ("a", leading_a.term()));
    leading_a.resign().await.expect("resign");
    assert_eq!(
        next_change(&mut observe).await,
        None,
        "nobody leads after a resigned"
    );
    let leading_b = campaign(&b).await;
    let seen = next_change(&mut observe).await.expect("b leads");
    assert_eq!((seen.label(), seen.term()), ("b", leading_b.term()));
    drop(leading_b);
    assert_eq!(
        next_change(&mut observe).await,
        None,
        "nobody leads after b's leadership was dropped"
    );
}

/// An observer on another store handle (another process, as far as this
/// process's own announcements go) is told of each change by the store,
/// and reads the store only when told or when the leader's lease would
/// have run out: not round after round while nothing changes.
pub async fn an_observer_elsewhere_is_told_and_reads_only_when_told(locks: LockManager) {
    if refused_without_fencing(&locks, "told").await.is_none() {
        return;
    }
    if !locks.store().is_shared() {
        // Per-process: no other handle to tell.
        return;
    }
    let counted = Counted::new(Arc::clone(locks.store()));
    let elsewhere = LockManager::new(counted.clone()).with_prefix(locks.prefix());
    let ttl = ms(&locks, 300);
    let election = locks.election("told", ttl).label("here");
    let mut observe = elsewhere.election("told", ttl).observe();
    assert_eq!(
        next_change(&mut observe).await,
        None,
        "nobody leads at first"
    );
    let leading = campaign(&election).await;
    let seen = next_change(&mut observe)
        .await
        .expect("told of the new leader");
    assert_eq!((seen.label(), seen.term()), ("here", leading.term()));
    // Three TTLs of one leader renewing itself: nothing to report, and
    // the store read about once per lease at most.
    let before = counted.reads();
    let quiet = tokio::time::timeout(ttl * 3, observe.next_change()).await;
    assert!(
        quiet.is_err(),
        "no change while one leader renews: {quiet:?}"
    );
    let read = counted.reads() - before;
    assert!(
        read <= 10,
        "the observer read the store {read} times in three TTLs of one leader"
    );
    let term = leading.term();
    leading.resign().await.expect("resign");
    assert_eq!(
        next_change(&mut observe).await,
        None,
        "told of the resignation"
    );
    let next = campaign(&election).await;
    let seen = next_change(&mut observe)
        .await
        .expect("told of the next leader");
    assert!(
        seen.term() > term,
        "a greater term: {} after {term}",
        seen.term()
    );
    next.resign().await.expect("resign");
}

/// A lease of whole seconds, at least three and a second above the
/// store's shortest: long enough to have a last second of its own.
fn seconds_lease(locks: &LockManager) -> Duration {
    let shortest = locks.store().min_ttl() + Duration::from_secs(1);
    let whole = shortest.as_secs() + u64::from(shortest.subsec_nanos() > 0);
    Duration::from_secs(whole.max(3))
}

/// An observer whose read missed a live leader (a read that raced the
/// renewal moving the leader's lease, and found nobody) shows that leader
/// again within one TTL: after a `None`, the term shown before it is a
/// change again. Otherwise one misread would have every later read of the
/// same term skipped as stale, and the observer would say nobody leads for
/// as long as the leader lives.
pub async fn an_observer_that_misread_nobody_shows_the_live_leader_again(locks: LockManager) {
    if refused_without_fencing(&locks, "misread").await.is_none() {
        return;
    }
    let counted = Counted::new(Arc::clone(locks.store()));
    let observing = LockManager::new(counted.clone()).with_prefix(locks.prefix());
    let ttl = seconds_lease(&locks);
    let election = locks.election("misread", ttl).label("live");
    let leading = campaign(&election).await;
    let mut observe = observing.election("misread", ttl).observe();
    let seen = next_change(&mut observe)
        .await
        .expect("the leader is shown");
    assert_eq!(seen.term(), leading.term(), "the leader's term is shown");
    // The observer reads again when the lease it saw would have ended
    // (the leader has renewed it since): that read misses.
    counted.miss_next_read();
    assert_eq!(
        next_change(&mut observe).await,
        None,
        "the read that missed the leader shows nobody leading"
    );
    let again = tokio::time::timeout(ttl, observe.next_change())
        .await
        .unwrap_or_else(|_| {
            panic!("the live leader is shown again within one TTL ({ttl:?}) of the misread")
        })
        .expect("the live leader is shown again, not nobody");
    assert_eq!(
        (again.label(), again.term()),
        ("live", leading.term()),
        "the same leader and term: it never stopped leading"
    );
    assert!(
        !leading.is_lost(),
        "the leader led throughout: only the observer's read missed it"
    );
    leading.resign().await.expect("resign");
}

/// An observer whose leader died unannounced (killed, cut off) reads the
/// store again when the leader's lease should have ended, and not round
/// after round in its last second. A store that keeps whole seconds (etcd)
/// says how many whole seconds a lease has left; an observer told 0 in
/// that last second, reading again 20 ms after "0 s from now", would read
/// about fifty times before the lease was gone.
pub async fn an_observer_reads_a_dying_leaders_store_at_most_twice_in_its_last_second(
    locks: LockManager,
) {
    if refused_without_fencing(&locks, "dying").await.is_none() {
        return;
    }
    let leader_side = Counted::new(Arc::clone(locks.store()));
    let observer_side = Counted::new(Arc::clone(locks.store()));
    let leaders = LockManager::new(leader_side.clone()).with_prefix(locks.prefix());
    let observers = LockManager::new(observer_side.clone()).with_prefix(locks.prefix());
    let ttl = seconds_lease(&locks);
    let started = tokio::time::Instant::now();
    let leading = campaign(&leaders.election("dying", ttl)).await;
    // The leader dies: no renewal and no resignation of it reaches the
    // store again, and its lease runs out at its TTL.
    leader_side.cut_off();
    // Followed all along, as an application follows it: a stream polled
    // only now and then reads when polled, not when it would.
    let mut observe = observers.election("dying", ttl).observe();
    let (shown, mut changes) = tokio::sync::mpsc::unbounded_channel();
    let following =
        tokio::spawn(async move { while shown.send(observe.next_change().await).is_ok() {} });
    let seen = tokio::time::timeout(HANG_GUARD, changes.recv())
        .await
        .expect("the observer shows who leads")
        .flatten()
        .expect("the leader is shown while its lease lasts");
    assert_eq!(seen.term(), leading.term(), "the dying leader's term");
    // The lease began after `started`, so it lasts past `started + ttl`:
    // from a second before that, the observer is in its last second.
    tokio::time::sleep_until(started + ttl - Duration::from_secs(1)).await;
    let before = observer_side.reads();
    let gone = tokio::time::timeout(ttl + HANG_GUARD, changes.recv())
        .await
        .expect("the observer is told the leader is gone")
        .expect("the observer is followed");
    following.abort();
    assert_eq!(
        gone, None,
        "nobody leads once the dead leader's lease ran out"
    );
    let reads = observer_side.reads() - before;
    assert!(
        reads <= 2,
        "the observer read the store {reads} times in the dead leader's last second; at most \
         twice: when the lease should have ended, and once more if the store had not yet let it go"
    );
    drop(leading);
}

/// The observer's next change, within the hang guard.
async fn next_change(observe: &mut Observe) -> Option<Leader> {
    tokio::time::timeout(HANG_GUARD, observe.next_change())
        .await
        .expect("the observer hears of the change, not after the 30 s TTL")
}

/// A campaign cut off at any point, while another candidate leads or
/// while the name is free, leaves no lease behind.
pub async fn a_cancelled_campaign_leaves_nothing_behind(locks: LockManager) {
    if refused_without_fencing(&locks, "cancelled").await.is_none() {
        return;
    }
    let election = locks.election("cancelled", LONG);
    let leading = campaign(&election).await;
    let cut = tokio::time::timeout(Duration::from_millis(50), election.campaign()).await;
    assert!(cut.is_err(), "a campaign waits while another leads");
    leading.resign().await.expect("resign");
    for round in 0..20u64 {
        // Cut off a few hundred microseconds in: before, during or after
        // the store's answer.
        let after = Duration::from_micros(rand_below(2_000) + round);
        if let Ok(won) = tokio::time::timeout(after, election.campaign()).await {
            won.expect("campaign").resign().await.expect("resign");
        }
        tokio::time::timeout(HANG_GUARD, async {
            while election.leader().await.expect("leader").is_some() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the lease a cut-off campaign took is given back");
    }
}

fn rand_below(n: u64) -> u64 {
    rand::random_range(0..n)
}

/// Terms grow with every leader, across resignations and drops, and a
/// label that cannot be shown is refused before anything is taken.
pub async fn terms_grow_and_bad_labels_are_refused(locks: LockManager) {
    if refused_without_fencing(&locks, "terms").await.is_none() {
        return;
    }
    let election = locks.election("terms", LONG);
    let mut last = 0;
    for _ in 0..5 {
        let leadership = campaign(&election).await;
        assert!(
            leadership.term() > last,
            "{} after {last}",
            leadership.term()
        );
        last = leadership.term();
        leadership.resign().await.expect("resign");
    }
    for label in ["", "line\nbreak", &"x".repeat(300)] {
        let refused = election.clone().label(label).campaign().await;
        assert!(
            matches!(refused, Err(Error::InvalidOptions { .. })),
            "the label {label:?} is refused: {refused:?}"
        );
    }
    assert_eq!(
        election.leader().await.expect("leader"),
        None,
        "nothing was taken"
    );
}

/// [`Leader::since`] is when the term began, not when its candidate began
/// campaigning: a standby that waited, then took over, shows as leading
/// from the takeover. Someone handling an incident reads it as how long the
/// leader has led; a standby that waited hours must not look like a
/// long-standing leader.
pub async fn a_standby_that_takes_over_begins_its_term_at_the_takeover(locks: LockManager) {
    if refused_without_fencing(&locks, "since").await.is_none() {
        return;
    }
    // Much longer than the slack: a start taken when the standby began to
    // campaign is this far off.
    const WAITED: Duration = Duration::from_millis(1500);
    const SLACK: Duration = Duration::from_millis(200);
    let election = locks.election("since", LONG);
    let first = campaign(&election).await;
    let standby = tokio::spawn({
        let election = election.clone().label("standby");
        async move { election.campaign().await }
    });
    tokio::time::sleep(WAITED).await;
    assert!(!standby.is_finished(), "the standby waits while one leads");
    let handed_over = SystemTime::now();
    assert!(first.resign().await.expect("resign"), "it still led");
    let second = tokio::time::timeout(HANG_GUARD, standby)
        .await
        .expect("the standby leads at once")
        .expect("task")
        .expect("campaign");
    let took_over = SystemTime::now();
    let leader = election
        .leader()
        .await
        .expect("leader")
        .expect("the standby leads");
    assert_eq!(
        (leader.label(), leader.term()),
        ("standby", second.term()),
        "the standby leads"
    );
    let since = leader.since().expect("when its term began");
    let before = since
        .checked_add(SLACK)
        .is_some_and(|late| late >= handed_over);
    assert!(
        before && since <= took_over,
        "the term began at the takeover, between the resignation and the campaign's return \
         (within {SLACK:?}), not when the standby began to wait {WAITED:?} before: it began \
         {:?} before the resignation",
        handed_over.duration_since(since).unwrap_or_default()
    );
    second.resign().await.expect("resign");
}

/// One test per behaviour of the [election suite](self).
#[macro_export]
macro_rules! election_contract {
    ($make:expr $(,)?) => {
        $crate::__behaviours!(election, $make;
            one_candidate_leads_and_the_others_wait,
            a_resignation_or_a_drop_hands_over_at_once,
            leadership_renews_itself_past_many_ttls,
            lost_resolves_when_the_lease_is_taken_away,
            lead_drops_the_work_on_loss_and_leads_again,
            lead_runs_work_that_ignores_its_argument_one_candidate_at_a_time,
            observers_see_each_leader_in_order,
            an_observer_elsewhere_is_told_and_reads_only_when_told,
            an_observer_that_misread_nobody_shows_the_live_leader_again,
            an_observer_reads_a_dying_leaders_store_at_most_twice_in_its_last_second,
            a_cancelled_campaign_leaves_nothing_behind,
            terms_grow_and_bad_labels_are_refused,
            a_standby_that_takes_over_begins_its_term_at_the_takeover,
        );
    };
}
