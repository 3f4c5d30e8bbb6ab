//! Where `serve`'s log lines go: a bounded queue to a thread of its own
//! that writes them to standard error.
//!
//! Writing a line straight to standard error from the task that logs it
//! ties every review to the log pipe: a pipe whose reader is slow blocks
//! the write, and one whose reader is gone makes it fail, which
//! tracing-subscriber then reports with `eprintln!` — a panic that kills
//! the task (a connection, the accept loop, the signal handler). A
//! container runtime's or log shipper's restart closes that pipe. So a
//! line is handed to the queue and never waited for: a full queue drops
//! it, a failed write drops it, and both are counted
//! (`digest_gate_log_write_errors_total`, by `reason`).

use std::io::Write;
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Lines waiting to be written: a burst of reviews logs faster than a pipe
/// drains for a moment, and the queue rides it out; past it a slow sink
/// costs lines, never a review's time.
const QUEUE_LINES: usize = 4096;
/// And their bytes: a decision line takes a few hundred, but a denial of
/// thousands of images makes one of a megabyte, and 4096 of those would
/// not fit the chart's memory limit. SECURITY.md's budget counts this.
const QUEUE_BYTES: usize = 4 * 1024 * 1024;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    reason: &'static str,
}

vocabulary! {
    "snake_case";
    /// Why a line was not written: the `reason` label.
    pub enum Lost {
        /// The queue was full: the sink is slower than the server logs.
        QueueFull,
        /// The sink refused the write (a closed pipe, a full disk).
        WriteFailed,
    }
}

/// One process, one standard error: the counts are the process's, shared
/// by every metrics registry made in it.
static LOST: LazyLock<Family<ReasonLabels, Counter>> = LazyLock::new(Family::default);

fn labels(why: Lost) -> ReasonLabels {
    ReasonLabels { reason: why.into() }
}

/// Counts `lines` lost for `why`.
fn lost(why: Lost, lines: usize) {
    LOST.get_or_create(&labels(why)).inc_by(lines as u64);
}

/// Lines lost so far for `why`.
pub fn lost_count(why: Lost) -> u64 {
    LOST.get_or_create(&labels(why)).get()
}

/// Registers `digest_gate_log_write_errors_total` (both reasons, so a
/// dashboard sees zeros rather than no series).
pub fn register(registry: &mut Registry) {
    for &why in <Lost as strum::VariantArray>::VARIANTS {
        drop(LOST.get_or_create(&labels(why)));
    }
    registry.register(
        "log_write_errors",
        "Log lines not written: queue_full (the log sink is slower than the server logs) or write_failed (it refused them, e.g. a closed pipe); reviews never wait for either",
        LOST.clone(),
    );
}

/// The lines waiting, as one buffer the writer takes whole: under load it
/// writes a batch per system call and wakes once per batch (see
/// [`LINGER`]), where a line per message woke it for every review: 14 %
/// of the throughput on two cores (bench/load.py --baseline).
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    lines: usize,
    /// Answered once everything queued before them is written or lost.
    flushes: Vec<SyncSender<()>>,
    /// The writer waits for lines: a sender wakes it.
    idle: bool,
}

struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A panic elsewhere while holding it leaves plain bytes: still usable.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// What tracing's formatter writes to: each event's line is queued whole.
#[derive(Clone)]
pub struct Sink {
    shared: Arc<Shared>,
}

/// The one sink of this process, for [`flush`].
static INSTALLED: OnceLock<Sink> = OnceLock::new();

/// A sink writing to `out` on a thread of its own (named `digest-gate-log`).
pub fn spawn(out: impl Write + Send + 'static) -> std::io::Result<Sink> {
    let shared = Arc::new(Shared {
        pending: Mutex::new(Pending::default()),
        wake: Condvar::new(),
    });
    let writer = shared.clone();
    std::thread::Builder::new()
        .name("digest-gate-log".into())
        .spawn(move || write_lines(&writer, out))?;
    Ok(Sink { shared })
}

/// The process's sink on standard error, made once.
pub fn stderr() -> std::io::Result<Sink> {
    if let Some(sink) = INSTALLED.get() {
        return Ok(sink.clone());
    }
    let sink = spawn(std::io::stderr())?;
    Ok(INSTALLED.get_or_init(|| sink).clone())
}

fn write_lines(shared: &Shared, mut out: impl Write) {
    let mut batch = Vec::new();
    loop {
        let (lines, flushes) = {
            let mut pending = shared.lock();
            while pending.bytes.is_empty() && pending.flushes.is_empty() {
                pending.idle = true;
                pending = shared.wake.wait(pending).unwrap_or_else(|p| p.into_inner());
            }
            pending.idle = false;
            // The emptied buffer goes back, keeping its capacity.
            std::mem::swap(&mut batch, &mut pending.bytes);
            (
                std::mem::take(&mut pending.lines),
                std::mem::take(&mut pending.flushes),
            )
        };
        if !batch.is_empty() && out.write_all(&batch).is_err() {
            lost(Lost::WriteFailed, lines);
        }
        batch.clear();
        if !flushes.is_empty() {
            let _ = out.flush();
            for done in flushes {
                let _ = done.try_send(());
            }
        } else if lines > 0 {
            // Let the next lines gather: while the writer is not idle a
            // sender only appends, and under load a wake-up per line (a
            // futex call, a context switch on a busy core) is what cost.
            std::thread::sleep(LINGER);
        }
    }
}

/// How long the writer lets lines gather after a batch: a line is late by
/// at most this, and the writer wakes at most 500 times a second.
const LINGER: Duration = Duration::from_millis(2);

/// Waits, at most `within`, until the lines queued so far are written: the
/// last lines of a process that is exiting (a drain's "stopped").
pub fn flush(within: Duration) {
    if let Some(sink) = INSTALLED.get() {
        sink.flush(within);
    }
}

impl Sink {
    /// Hands a line over; never waits for the sink (only, for as long as
    /// an append takes, for another line being handed over).
    fn send(&self, line: &[u8]) {
        let wake = {
            let mut pending = self.shared.lock();
            if pending.lines >= QUEUE_LINES || pending.bytes.len() + line.len() > QUEUE_BYTES {
                drop(pending);
                lost(Lost::QueueFull, 1);
                return;
            }
            pending.bytes.extend_from_slice(line);
            pending.lines += 1;
            std::mem::take(&mut pending.idle)
        };
        if wake {
            self.shared.wake.notify_one();
        }
    }

    /// See [`flush`].
    pub fn flush(&self, within: Duration) {
        let (done, written) = mpsc::sync_channel(1);
        self.shared.lock().flushes.push(done);
        self.shared.wake.notify_one();
        let _ = written.recv_timeout(within);
    }

    /// Bytes queued and not yet taken by the writer.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.shared.lock().bytes.len()
    }
}

/// One event's line, queued when tracing drops it.
pub struct Line<'s> {
    sink: &'s Sink,
    text: Vec<u8>,
}

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.text.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line<'_> {
    fn drop(&mut self) {
        if !self.text.is_empty() {
            self.sink.send(&self.text);
        }
    }
}

impl<'s> tracing_subscriber::fmt::MakeWriter<'s> for Sink {
    type Writer = Line<'s>;

    fn make_writer(&'s self) -> Self::Writer {
        Line {
            sink: self,
            text: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A sink whose writes wait until the test opens the gate, then fail
    /// or succeed as told.
    struct Stuck {
        open: Arc<Mutex<()>>,
        fail: bool,
        written: Arc<Mutex<Vec<u8>>>,
    }

    impl Write for Stuck {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let _open = self.open.lock().unwrap();
            if self.fail {
                return Err(std::io::ErrorKind::BrokenPipe.into());
            }
            self.written.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn line(sink: &Sink, text: &str) {
        use tracing_subscriber::fmt::MakeWriter;
        let mut w = sink.make_writer();
        w.write_all(text.as_bytes()).unwrap();
    }

    /// Hands the writer a first line ("line 0") and waits until it has
    /// taken it: from then on it is blocked in the stuck sink, and what the
    /// test sends only queues (without this the writer could take its
    /// first batch at any point of the test's flood).
    fn blocked(sink: &Sink) {
        line(sink, "line 0\n");
        while sink.shared.lock().lines > 0 {
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_sink_that_stops_costs_lines_not_time() {
        let open = Arc::new(Mutex::new(()));
        let written = Arc::new(Mutex::new(Vec::new()));
        let closed = open.lock().unwrap();
        let sink = spawn(Stuck {
            open: open.clone(),
            fail: false,
            written: written.clone(),
        })
        .unwrap();
        let before = lost_count(Lost::QueueFull);
        blocked(&sink);
        // QUEUE_LINES wait, the rest are dropped at once: the loop returns
        // although the sink never accepts a byte.
        for i in 1..2 * QUEUE_LINES + 100 {
            line(&sink, &format!("line {i}\n"));
        }
        assert_eq!(sink.shared.lock().lines, QUEUE_LINES, "the queue is full");
        assert!(lost_count(Lost::QueueFull) > before, "and the rest was dropped");
        drop(closed);
        sink.flush(Duration::from_secs(10));
        let written = String::from_utf8(written.lock().unwrap().clone()).unwrap();
        assert!(written.starts_with("line 0\nline 1\n"), "{written:.40}");
    }

    #[test]
    fn the_queue_holds_a_bounded_number_of_bytes() {
        let open = Arc::new(Mutex::new(()));
        let closed = open.lock().unwrap();
        let sink = spawn(Stuck {
            open: open.clone(),
            fail: false,
            written: Arc::default(),
        })
        .unwrap();
        let before = lost_count(Lost::QueueFull);
        blocked(&sink);
        // Megabyte lines (a denial of thousands of images): a handful fit.
        let big = "x".repeat(1024 * 1024);
        for _ in 0..16 {
            line(&sink, &big);
        }
        assert!(sink.queued() <= QUEUE_BYTES);
        assert!(lost_count(Lost::QueueFull) - before >= 10);
        drop(closed);
        sink.flush(Duration::from_secs(10));
        assert_eq!(sink.queued(), 0);
    }

    #[test]
    fn a_failing_sink_is_counted() {
        let sink = spawn(Stuck {
            open: Arc::new(Mutex::new(())),
            fail: true,
            written: Arc::default(),
        })
        .unwrap();
        let before = lost_count(Lost::WriteFailed);
        line(&sink, "one\n");
        line(&sink, "two\n");
        sink.flush(Duration::from_secs(10));
        assert!(lost_count(Lost::WriteFailed) - before >= 2);
    }
}
