//! A fleet where one instance runs a periodic job and the others stand by:
//! leader election. Runs on the embedded memory store, three instances as
//! tasks of one process: no server needed.
//!
//! ```sh
//! cargo run -p lock-core --example leader
//! ```
//!
//! Every 300 ms the leader runs the job. Twice, the leading instance
//! crashes (its task is aborted, which drops its leadership and hands
//! over at once); a standby takes over with a greater term, and the
//! observer prints each change.
//!
//! With `LOCK_URL` set to a shared store it runs one instance per process
//! instead, until stopped: start it in several terminals, stop the leader
//! with Ctrl-C (it resigns: a standby takes over at once) or `kill -9`
//! (a standby takes over when the 5 s lease runs out).
//!
//! ```sh
//! LOCK_URL=redis://127.0.0.1:6379 cargo run -p lock-core --features redis --example leader
//! ```

use std::time::Duration;

use lock_core::{Election, Error, LockManager, Term};

/// How long a leader that died unannounced keeps the others waiting.
const TTL: Duration = Duration::from_secs(5);

/// One instance: leads when it can, and while it leads, runs the job every
/// 300 ms. `lead` drops the job the moment leadership is lost.
async fn instance(election: Election, name: String) -> Result<(), Error> {
    election
        .lead(|term: Term| {
            let name = name.clone();
            async move {
                println!("{name}: leading, term {}", term.number());
                let mut tick = tokio::time::interval(Duration::from_millis(300));
                loop {
                    tick.tick().await;
                    // Writes made for the job carry the term: a store that
                    // keeps the highest term it has seen refuses a stale
                    // leader's.
                    println!("{name}: runs the job (term {})", term.number());
                }
            }
        })
        .await
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    if let Ok(url) = std::env::var("LOCK_URL") {
        let locks = lock_core::connect(&url).await?;
        let name = format!("pid {}", std::process::id());
        let election = locks.election("periodic-job", TTL).label(&name);
        observe(election.clone());
        return until_interrupted(election, name).await;
    }

    let locks = LockManager::memory();
    let election = |n: usize| {
        locks
            .election("periodic-job", TTL)
            .label(format!("instance-{n}"))
    };
    observe(election(0));
    let fleet: Vec<_> = (0..3)
        .map(|n| tokio::spawn(instance(election(n), format!("instance-{n}"))))
        .collect();
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        let leader = election(0).leader().await?.expect("somebody leads");
        let n: usize = leader.label()["instance-".len()..]
            .parse()
            .expect("our label");
        println!("instance-{n} crashes");
        fleet[n].abort();
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    for instance in &fleet {
        instance.abort();
    }
    Ok(())
}

/// One instance per process, until Ctrl-C: campaigns, runs the job while
/// it leads, and on Ctrl-C resigns before the process exits, so a standby
/// takes over at once rather than after the TTL. (Dropping a leadership
/// hands over too, but in a background task that a runtime shutting down
/// may never run.)
async fn until_interrupted(election: Election, name: String) -> Result<(), Error> {
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let leadership = tokio::select! {
            leadership = election.campaign() => leadership?,
            _ = &mut interrupted => return Ok(()),
        };
        println!("{name}: leading, term {}", leadership.term());
        let mut tick = tokio::time::interval(Duration::from_millis(300));
        loop {
            tokio::select! {
                biased;
                () = leadership.lost() => break,
                _ = &mut interrupted => {
                    println!("{name}: stopping; handing over");
                    leadership.resign().await?;
                    return Ok(());
                }
                _ = tick.tick() => println!("{name}: runs the job (term {})", leadership.term()),
            }
        }
        println!("{name}: lost leadership; campaigning again");
    }
}

/// Prints every change of leader, as any instance (or a dashboard) can.
fn observe(election: Election) {
    tokio::spawn(async move {
        let mut changes = election.observe();
        loop {
            match changes.next_change().await {
                Some(leader) => println!(
                    "observer: {} leads (term {}, lease {:?} left)",
                    leader.label(),
                    leader.term(),
                    leader.remaining_ttl()
                ),
                None => println!("observer: nobody leads"),
            }
        }
    });
}
