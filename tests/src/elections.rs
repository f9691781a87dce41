//! The election failover run: candidates in separate processes
//! (`election-child`), their leader resigned, killed or paused over and
//! over, with every takeover timed, every observer's view and every
//! fenced write checked.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Sender, channel};
use std::time::{Duration, Instant};

/// How one leader is made to stop leading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `resign()`: the next leader should follow at once.
    Resign,
    /// SIGKILL: the next leader follows once the lease's TTL runs out.
    Kill,
    /// SIGSTOP past the TTL, then SIGCONT: the next leader follows after
    /// the TTL, and the old one must find `lost()` resolved before it
    /// writes again.
    Pause,
}

/// What a failover run measured.
#[derive(Debug, Default)]
pub struct Failovers {
    /// Takeover times by fault: from the fault to the next leader's first
    /// moment of leading.
    pub takeovers: HashMap<&'static str, Vec<Duration>>,
    /// Every term that led, in order.
    pub terms: Vec<u64>,
    /// Writes in the file.
    pub writes: usize,
    /// Writes whose term was below one written before them, decided after
    /// the newer leader's first write (an old leader that wrote after it
    /// lost): must be 0.
    pub violations: usize,
    /// Writes whose term was below one written before them but decided
    /// before the newer leader's first write: the old leader was stopped
    /// between deciding and writing (a SIGSTOP landing there), the limit of
    /// any lease without fencing at the resource.
    pub late_writes: usize,
    /// Observers whose terms went backwards, skipped a term that led
    /// while they watched, said nobody led while a term they had shown
    /// still led (before its fault), or said nobody twice running: must
    /// be 0.
    pub observer_faults: Vec<String>,
    /// The `None`s observers showed while nobody led: after a term's
    /// fault, before the next term was shown, or before the first. At most
    /// one per observer per handover it watched, and one at its start.
    pub observer_nones: usize,
    /// How long after a term began each observer reported it.
    pub observer_lags: Vec<Duration>,
}

impl Failovers {
    /// The median of `what`'s takeover times.
    pub fn median(&self, what: &str) -> Option<Duration> {
        let mut times = self.takeovers.get(what)?.clone();
        times.sort();
        times.get(times.len() / 2).copied()
    }
}

/// One candidate process.
struct Candidate {
    child: Child,
    stdin: ChildStdin,
    /// Still running (not killed).
    alive: bool,
    /// The terms its observer reported, in order (`None` left out).
    observed: Vec<u64>,
    /// What its observer showed last: a term, or nobody (`Some(None)`).
    shown: Option<Option<u64>>,
    /// How many `None`s its observer showed.
    nones: usize,
    /// How many faults were dealt while it ran: its observer may show
    /// nobody once for each, and once at its start.
    handovers: usize,
}

impl Drop for Candidate {
    fn drop(&mut self) {
        // No candidate outlives the run, however it ends (a SIGSTOPped one
        // is killed all the same).
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One line from candidate `n`, when it came.
type Said = (usize, String, Instant);

/// The run: `candidates` processes of `program` campaign for one election
/// on `url` (a lease of `ttl`), and each fault of `faults` is dealt to the
/// leader of the moment in turn.
pub fn failovers(
    program: &str,
    url: &str,
    env: &[(&str, &str)],
    ttl: Duration,
    faults: &[Fault],
) -> Failovers {
    let id: u64 = rand::random();
    let prefix = format!("test-election-{id:016x}:");
    let writes = std::env::temp_dir().join(format!("lock-election-{id:016x}.writes"));
    let writes_path = writes.to_string_lossy().into_owned();
    let ttl_ms = ttl.as_millis().to_string();
    let guard = ttl * 3 + Duration::from_secs(15);
    let (said, hear) = channel();
    let spawn = |n: usize| -> Candidate {
        let label = format!("c{n}");
        let mut child = Command::new(program)
            .args([url, &prefix, "failover", &label, &ttl_ms, &writes_path])
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn election-child");
        let stdin = child.stdin.take().expect("piped stdin");
        listen(n, &mut child, said.clone());
        Candidate {
            child,
            stdin,
            alive: true,
            observed: Vec::new(),
            shown: None,
            nones: 0,
            handovers: 0,
        }
    };
    let mut candidates: Vec<Candidate> = (0..3).map(spawn).collect();
    let mut run = Failovers::default();
    let mut began: HashMap<u64, Instant> = HashMap::new();
    // When each term's leader was dealt its fault: until then it leads,
    // and an observer that has shown its term must not say nobody does.
    let dealt: RefCell<HashMap<u64, Instant>> = RefCell::default();
    let mut wait = |candidates: &mut Vec<Candidate>,
                    run: &mut Failovers,
                    until: &mut dyn FnMut(usize, &[&str]) -> bool| {
        let deadline = Instant::now() + guard;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let (n, line, at) = hear.recv_timeout(left).unwrap_or_else(|_| {
                panic!(
                    "no candidate said what was awaited within {guard:?}; terms so far {:?}",
                    run.terms
                )
            });
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["error", ..] => panic!("candidate {n}: {line}"),
                ["leading", term, ..] => {
                    let term: u64 = term.parse().expect("a term");
                    began.insert(term, at);
                    run.terms.push(term);
                }
                ["observed", "none"] => {
                    let observer = &mut candidates[n];
                    // The observer's lines arrive in the order it printed
                    // them, each after it was printed: a `None` that
                    // arrived before the fault of the term it showed last
                    // was read while that term's leader still led.
                    match observer.shown {
                        Some(None) => run
                            .observer_faults
                            .push(format!("c{n} said nobody leads twice running")),
                        Some(Some(term))
                            if dealt.borrow().get(&term).is_none_or(|fault| at < *fault) =>
                        {
                            run.observer_faults.push(format!(
                                "c{n} said nobody leads while term {term}, which it had shown, \
                                 still led"
                            ));
                        }
                        _ => run.observer_nones += 1,
                    }
                    observer.shown = Some(None);
                    observer.nones += 1;
                }
                ["observed", term] => {
                    if let Ok(term) = term.parse::<u64>() {
                        candidates[n].observed.push(term);
                        candidates[n].shown = Some(Some(term));
                        if let Some(began) = began.get(&term) {
                            run.observer_lags.push(at.saturating_duration_since(*began));
                        }
                    }
                }
                _ => {}
            }
            if until(n, &words) {
                return (n, at);
            }
        }
    };
    let (mut leader, _) = wait(&mut candidates, &mut run, &mut |_, words| {
        words.first() == Some(&"leading")
    });
    for &fault in faults {
        // The leader writes for a while (every 10 ms) before its fault.
        std::thread::sleep(Duration::from_millis(100));
        let old_term = *run.terms.last().expect("a term led");
        let faulted = Instant::now();
        dealt.borrow_mut().insert(old_term, faulted);
        for candidate in candidates.iter_mut().filter(|c| c.alive) {
            candidate.handovers += 1;
        }
        let pid = candidates[leader].child.id().to_string();
        let mut resigned_at = None;
        match fault {
            Fault::Resign => {
                writeln!(candidates[leader].stdin, "resign").expect("tell the leader to resign");
                let (_, at) = wait(&mut candidates, &mut run, &mut |n, words| {
                    n == leader && words.first() == Some(&"resigned")
                });
                resigned_at = Some(at);
            }
            Fault::Kill => {
                let _ = candidates[leader].child.kill();
                let _ = candidates[leader].child.wait();
                candidates[leader].alive = false;
            }
            Fault::Pause => signal("-STOP", &pid),
        }
        let old = leader;
        let (next, at) = wait(&mut candidates, &mut run, &mut |n, words| {
            n != old && words.first() == Some(&"leading")
        });
        let new_term = *run.terms.last().expect("a term led");
        assert!(
            new_term > old_term,
            "terms grow: {old_term} then {new_term}"
        );
        let from = resigned_at.unwrap_or(faulted);
        let name = match fault {
            Fault::Resign => "resign",
            Fault::Kill => "kill",
            Fault::Pause => "pause",
        };
        run.takeovers
            .entry(name)
            .or_default()
            .push(at.saturating_duration_since(from));
        leader = next;
        match fault {
            Fault::Pause => {
                signal("-CONT", &pid);
                wait(&mut candidates, &mut run, &mut |n, words| {
                    n == old && words.first() == Some(&"lost")
                });
            }
            Fault::Kill => {
                let n = candidates.len();
                candidates.push(spawn(n));
            }
            Fault::Resign => {}
        }
        // Every live observer reports the new term before the next fault,
        // so a term that leads only briefly is still one each must see.
        let pending = |candidates: &Vec<Candidate>| {
            candidates
                .iter()
                .filter(|c| c.alive && !c.observed.contains(&new_term))
                .count()
        };
        if pending(&candidates) > 0 {
            let mut seen: Vec<bool> = candidates
                .iter()
                .map(|c| !c.alive || c.observed.contains(&new_term))
                .collect();
            wait(&mut candidates, &mut run, &mut |n, words| {
                if words == ["observed", &new_term.to_string()] {
                    if let Some(seen) = seen.get_mut(n) {
                        *seen = true;
                    }
                }
                seen.iter().all(|s| *s)
            });
        }
    }
    for candidate in &mut candidates {
        let _ = candidate.child.kill();
        let _ = candidate.child.wait();
    }
    drop(said);
    check_observers(&mut run, &candidates);
    let written = std::fs::read_to_string(&writes).unwrap_or_default();
    let _ = std::fs::remove_file(&writes);
    // The highest term written so far, and when its first write was
    // decided.
    let mut highest = (0, 0);
    for (n, line) in written.lines().enumerate() {
        let mut words = line.split_whitespace();
        let Some(term) = words.next().and_then(|t| t.parse::<u64>().ok()) else {
            continue;
        };
        let decided = words
            .nth(1)
            .and_then(|t| t.parse::<u128>().ok())
            .unwrap_or(u128::MAX);
        run.writes += 1;
        if term < highest.0 {
            let around: Vec<&str> = written.lines().skip(n.saturating_sub(3)).take(6).collect();
            if decided > highest.1 {
                run.violations += 1;
                eprintln!(
                    "a write of term {term} decided after term {}'s first, line {n}: {around:?}",
                    highest.0
                );
            } else {
                run.late_writes += 1;
                eprintln!(
                    "a write of term {term} decided before term {}'s first but landing after it (stopped in between), line {n}: {around:?}",
                    highest.0
                );
            }
        }
        if term > highest.0 {
            highest = (term, decided);
        }
    }
    run
}

/// Each observer's terms grow, and skip none of the terms that led
/// between the first and the last it saw; it said nobody leads at most
/// once per handover it watched, and once at its start.
fn check_observers(run: &mut Failovers, candidates: &[Candidate]) {
    for (n, candidate) in candidates.iter().enumerate() {
        if candidate.nones > candidate.handovers + 1 {
            run.observer_faults.push(format!(
                "c{n} said nobody leads {} times in {} handovers",
                candidate.nones, candidate.handovers
            ));
        }
        let seen = &candidate.observed;
        if seen.windows(2).any(|pair| pair[0] >= pair[1]) {
            run.observer_faults
                .push(format!("c{n} saw terms go backwards: {seen:?}"));
        }
        let (Some(first), Some(last)) = (seen.first(), seen.last()) else {
            continue;
        };
        let led: Vec<u64> = run
            .terms
            .iter()
            .copied()
            .filter(|term| term >= first && term <= last)
            .collect();
        if &led != seen {
            run.observer_faults
                .push(format!("c{n} saw {seen:?} while {led:?} led"));
        }
    }
}

/// Sends `signal` (`-STOP`, `-CONT`) to the process `pid`.
fn signal(signal: &str, pid: &str) {
    let status = Command::new("kill")
        .args([signal, pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {signal} {pid}: {status}");
}

/// Reads candidate `n`'s lines on a thread, each with when it came.
fn listen(n: usize, child: &mut Child, said: Sender<Said>) {
    let stdout = child.stdout.take().expect("piped stdout");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if said.send((n, line, Instant::now())).is_err() {
                return;
            }
        }
    });
}

/// The faults of a run of `rounds` failovers: two resignations, two
/// kills and a pause in every five.
pub fn mixed(rounds: usize) -> Vec<Fault> {
    (0..rounds)
        .map(|round| match round % 5 {
            0 | 1 => Fault::Resign,
            2 | 3 => Fault::Kill,
            _ => Fault::Pause,
        })
        .collect()
}
