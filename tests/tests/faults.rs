//! The fault harness: its report's figures shown to catch what they claim,
//! and its fault hooks on real servers.

#[path = "faults/chaos_report.rs"]
mod chaos_report;
#[path = "faults/fault_hooks.rs"]
mod fault_hooks;
