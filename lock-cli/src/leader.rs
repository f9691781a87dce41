//! `locks leader NAME`: who leads an election, once or as it changes.

use std::time::{Duration, UNIX_EPOCH};

use lock_core::{Leader, LockManager};
use serde_json::{Value, json};

use crate::show::{self, printable};
use crate::{Outcome, chain};

/// Shows who leads the election `name`; with `watch`, every change until
/// interrupted.
pub(crate) async fn leader(
    locks: &LockManager,
    name: &str,
    json: bool,
    watch: bool,
) -> Result<Outcome, String> {
    // The TTL is never used: nothing is campaigned for.
    let election = locks.election(name, Duration::from_secs(1));
    if !watch {
        let leader = election.leader().await.map_err(|e| chain(&e))?;
        println!("{}", shown(name, leader.as_ref(), json));
        return Ok(match leader {
            Some(_) => Outcome::Done,
            None => Outcome::NotHeld,
        });
    }
    let mut changes = election.observe();
    loop {
        tokio::select! {
            change = changes.next_change() => println!("{}", shown(name, change.as_ref(), json)),
            interrupted = tokio::signal::ctrl_c() => {
                interrupted.map_err(|e| format!("could not wait for Ctrl-C: {e}"))?;
                return Ok(Outcome::Done);
            }
        }
    }
}

/// One line: `jobs: led by 10.0.0.5:8080, term 7, for 12.5s, lease 9.8s more`,
/// or `jobs: nobody leads`; or the same as JSON. The name and the label
/// are escaped in text ([`printable`]), exact in JSON.
fn shown(name: &str, leader: Option<&Leader>, json: bool) -> String {
    if json {
        return json_of(name, leader).to_string();
    }
    let name = printable(name);
    let Some(leader) = leader else {
        return format!("{name}: nobody leads");
    };
    let since = leader
        .since()
        .and_then(|since| since.duration_since(UNIX_EPOCH).ok())
        .map_or_else(String::new, |since| {
            let ago = std::time::SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .saturating_sub(since);
            format!(", for {}", show::remaining(ago))
        });
    format!(
        "{name}: led by {}, term {}{since}, lease {} more",
        printable(leader.label()),
        leader.term(),
        show::remaining(leader.remaining_ttl())
    )
}

/// `{name, leader: {label, term, since_ms, remaining_ms} | null}`.
fn json_of(name: &str, leader: Option<&Leader>) -> Value {
    let leader = leader.map(|leader| {
        json!({
            "label": leader.label(),
            "term": leader.term(),
            "since_ms": leader
                .since()
                .and_then(|since| since.duration_since(UNIX_EPOCH).ok())
                .map(|since| since.as_millis() as u64),
            "remaining_ms": leader.remaining_ttl().as_millis() as u64,
        })
    });
    json!({ "name": name, "leader": leader })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nobody_leading_reads_plainly_in_text_and_json() {
        assert_eq!(shown("jobs", None, false), "jobs: nobody leads");
        assert_eq!(
            shown("jobs", None, true),
            r#"{"leader":null,"name":"jobs"}"#
        );
    }
}
