//! Turns for the tests that load the machine: all tests share one process,
//! and two of these at once on a 2-core machine turn faults into timing noise.

use tokio::sync::{Mutex, MutexGuard};

static HEAVY: Mutex<()> = Mutex::const_new(());

/// Waits for the turn of a heavy test (a fleet, several replicas); held until dropped.
pub async fn heavy() -> MutexGuard<'static, ()> {
    HEAVY.lock().await
}
