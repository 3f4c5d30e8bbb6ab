//! Background tasks of `serve` (the CSV watch, the background audit): each
//! on a thread and runtime of its own, so a relist of large CSVs or the
//! judging of a big cluster never holds a worker that reviews need, and
//! each stopped by the server's one stop token.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::audit::{AuditError, ClusterSettings, Connection};

/// Runs the future `task` makes on a thread named `name` with a
/// single-threaded runtime of its own. If the runtime cannot be built,
/// `failed` is told why and the thread ends.
pub fn spawn<F, Fut>(
    name: &str,
    task: F,
    failed: impl FnOnce(&std::io::Error) + Send + 'static,
) -> std::io::Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    std::thread::Builder::new().name(name.into()).spawn(move || {
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(runtime) => runtime.block_on(task()),
            Err(e) => failed(&e),
        }
    })
}

/// Opens a cluster connection, tried again every `every` until it works,
/// each failure told to `failed`; `None` once `stop` is cancelled.
pub async fn connect(
    settings: &ClusterSettings,
    every: Duration,
    stop: &CancellationToken,
    mut failed: impl FnMut(&AuditError),
) -> Option<Connection> {
    loop {
        match Connection::open(settings).await {
            Ok(c) => return Some(c),
            Err(e) => {
                failed(&e);
                tokio::select! {
                    () = stop.cancelled() => return None,
                    () = tokio::time::sleep(every) => {}
                }
            }
        }
    }
}
