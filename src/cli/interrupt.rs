//! Ctrl-C (SIGINT) and SIGTERM for the commands that talk to clusters and
//! registries: the first one cancels what is in flight and the command
//! ends its report properly (a JSON or SARIF document stays whole, the
//! interruption one of its errors) and exits 130; a second one exits at
//! once. Without this the default disposition killed the process midway
//! through a document, and a process started with SIGINT ignored (a
//! script's background job) waited out every timeout.

use std::future::Future;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// The exit code of an interrupted command (128 + SIGINT, as a shell
/// reports a process the signal killed).
pub const EXIT: u8 = 130;

/// What the report says of an interrupted run.
pub const SAID: &str =
    "interrupted (SIGINT or SIGTERM): only what was read before is reported, and it was not judged whole";

/// Cancelled by the first signal; listens from [`Interrupt::listen`] on.
#[derive(Clone)]
pub struct Interrupt {
    token: CancellationToken,
}

/// Why a cluster's read ended without its result.
#[derive(Debug)]
pub enum Cut {
    /// Past `--cluster-deadline`: the message says so.
    Deadline(String),
    Interrupted,
}

impl Interrupt {
    /// Listens for SIGINT and SIGTERM on `runtime`. The handlers are
    /// installed before this returns, so no signal falls between.
    pub fn listen(runtime: &tokio::runtime::Runtime) -> Self {
        let token = CancellationToken::new();
        let _entered = runtime.enter();
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            if let (Ok(mut int), Ok(mut term)) =
                (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
            {
                let cancel = token.clone();
                runtime.spawn(async move {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                    cancel.cancel();
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                    std::process::exit(i32::from(EXIT));
                });
            }
        }
        Self { token }
    }

    /// Whether a signal came.
    pub fn happened(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Runs `read` until it ends, `deadline` passes, or a signal comes.
    pub async fn within<T>(&self, deadline: Duration, read: impl Future<Output = T>) -> Result<T, Cut> {
        tokio::select! {
            done = tokio::time::timeout(deadline, read) => done.map_err(|_| {
                Cut::Deadline(format!(
                    "not read within --cluster-deadline {}",
                    humantime::format_duration(deadline)
                ))
            }),
            () = self.token.cancelled() => Err(Cut::Interrupted),
        }
    }

    /// Runs `work` until it ends or a signal comes (`None`).
    pub async fn or_stop<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            done = work => Some(done),
            () = self.token.cancelled() => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancelled_read_ends_at_once_and_says_why() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let interrupt = Interrupt {
            token: CancellationToken::new(),
        };
        let forever = std::future::pending::<()>();
        let late = runtime.block_on(interrupt.within(Duration::from_millis(10), forever));
        assert!(matches!(late, Err(Cut::Deadline(ref m)) if m == "not read within --cluster-deadline 10ms"));
        interrupt.token.cancel();
        let cut = runtime.block_on(interrupt.within(Duration::from_secs(3600), std::future::pending::<()>()));
        assert!(matches!(cut, Err(Cut::Interrupted)));
        assert!(interrupt.happened());
        assert_eq!(
            runtime.block_on(interrupt.or_stop(std::future::pending::<u8>())),
            None
        );
    }
}
