//! The fault harness: its report's figures shown to catch what they claim,
//! its fault hooks on real servers, and the network namespaces that put a
//! worker's every connection through its proxies.

#[path = "faults/chaos_report.rs"]
mod chaos_report;
#[path = "faults/fault_hooks.rs"]
mod fault_hooks;
#[path = "faults/netns.rs"]
mod netns;
