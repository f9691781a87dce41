//! The `#[locked]` attribute at run time, one module per area: behaviour,
//! future sizes, the lease lifecycle options, managers, names, return
//! types and re-entry. (The declared-lock catalogue and the registry, which
//! read the whole binary's globals, have binaries of their own.)

#[path = "macros/behaviour.rs"]
mod behaviour;
#[path = "macros/future_size.rs"]
mod future_size;
#[path = "macros/lifecycle.rs"]
mod lifecycle;
#[path = "macros/managers.rs"]
mod managers;
#[path = "macros/names.rs"]
mod names;
#[path = "macros/reentry.rs"]
mod reentry;
#[path = "macros/returns.rs"]
mod returns;
