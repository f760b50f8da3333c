//! Progress bars for long work that stay visible when stderr is not a terminal.
//!
//! On a terminal a bar redraws in place as usual. A job started with `nohup` or with its
//! output sent to a file would see nothing from an ordinary bar (indicatif hides bars that
//! draw to no terminal), so there the bar's line is written as plain text instead: at most
//! once per [`LOG_INTERVAL`], plus every line printed above the bar and the bar's last state
//! when it ends.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle, TermLike};
use std::io::{self, IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Shortest time between two plain-text lines of the same bar.
pub const LOG_INTERVAL: Duration = Duration::from_secs(30);

/// Width a plain-text bar is laid out for.
const LOG_WIDTH: u16 = 160;

/// A bar of `len` steps drawn with `template` (indicatif's template syntax), on stderr: in
/// place on a terminal, as plain lines otherwise.
pub fn bar(len: u64, template: &str) -> ProgressBar {
    let style = ProgressStyle::with_template(template)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    let target = if io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        plain_lines(LogLines::new(io::stderr(), LOG_INTERVAL))
    };
    ProgressBar::with_draw_target(Some(len), target).with_style(style)
}

/// A draw target that writes a bar's frames through `lines`.
fn plain_lines<W: Write + Send + 'static>(lines: LogLines<W>) -> ProgressDrawTarget {
    ProgressDrawTarget::term_like_with_hz(Box::new(lines), 1)
}

/// A [`TermLike`] that turns a bar's frames into plain lines: text printed above the bar is
/// written at once, the bar's own line at most once per interval, and its last frame when it
/// is dropped (after the bar's final draw) if that frame was not written yet.
struct LogLines<W: Write> {
    state: Mutex<LogState<W>>,
}

/// What [`LogLines`] keeps between calls.
struct LogState<W> {
    out: W,
    interval: Duration,
    /// The frame being drawn since the last flush.
    frame: String,
    /// The bar's latest line and whether it has been written.
    bar_line: Option<(String, bool)>,
    /// When the bar's line was last written.
    last_written: Option<Instant>,
}

impl<W: Write> LogLines<W> {
    fn new(out: W, interval: Duration) -> Self {
        Self {
            state: Mutex::new(LogState {
                out,
                interval,
                frame: String::new(),
                bar_line: None,
                last_written: None,
            }),
        }
    }

    fn with_state<R>(&self, f: impl FnOnce(&mut LogState<W>) -> io::Result<R>) -> io::Result<R> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut state)
    }
}

impl<W: Write> LogState<W> {
    /// Ends a frame: every line but the last is text printed above the bar; the last is the
    /// bar, written if the interval has passed.
    fn end_frame(&mut self, now: Instant) -> io::Result<()> {
        let frame = std::mem::take(&mut self.frame);
        let mut lines: Vec<&str> = frame.split('\n').map(str::trim_end).collect();
        let bar = lines.pop().unwrap_or_default();
        for line in lines {
            writeln!(self.out, "{line}")?;
        }
        if !bar.is_empty() {
            self.bar_line = Some((bar.to_string(), false));
            let due = self
                .last_written
                .is_none_or(|last| now.duration_since(last) >= self.interval);
            if due {
                self.write_bar_line()?;
                self.last_written = Some(now);
            }
        }
        self.out.flush()
    }

    /// Writes the bar's latest line unless it was written already.
    fn write_bar_line(&mut self) -> io::Result<()> {
        if let Some((line, written)) = &mut self.bar_line {
            if !*written {
                writeln!(self.out, "{line}")?;
                *written = true;
            }
        }
        Ok(())
    }
}

impl<W: Write> std::fmt::Debug for LogLines<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogLines").finish_non_exhaustive()
    }
}

impl<W: Write + Send> TermLike for LogLines<W> {
    fn width(&self) -> u16 {
        LOG_WIDTH
    }

    fn move_cursor_up(&self, _: usize) -> io::Result<()> {
        Ok(())
    }

    fn move_cursor_down(&self, _: usize) -> io::Result<()> {
        Ok(())
    }

    fn move_cursor_right(&self, _: usize) -> io::Result<()> {
        Ok(())
    }

    fn move_cursor_left(&self, _: usize) -> io::Result<()> {
        Ok(())
    }

    fn write_line(&self, s: &str) -> io::Result<()> {
        self.with_state(|state| {
            state.frame.push_str(s);
            state.frame.push('\n');
            Ok(())
        })
    }

    fn write_str(&self, s: &str) -> io::Result<()> {
        // A frame starts by returning to the start of the bar's line.
        let s = s.trim_start_matches('\r');
        self.with_state(|state| {
            state.frame.push_str(s);
            Ok(())
        })
    }

    fn clear_line(&self) -> io::Result<()> {
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.with_state(|state| state.end_frame(Instant::now()))
    }
}

impl<W: Write> Drop for LogLines<W> {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|e| e.into_inner());
        // Nothing can report a failed write from a drop; the bar's line is only progress.
        let _ = state.write_bar_line().and_then(|()| state.out.flush());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A writer whose bytes the test reads back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn lines(&self) -> Vec<String> {
            let bytes = self.0.lock().unwrap().clone();
            String::from_utf8(bytes)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect()
        }
    }

    fn logged_bar(out: &Shared, interval: Duration) -> ProgressBar {
        let target = plain_lines(LogLines::new(out.clone(), interval));
        ProgressBar::with_draw_target(Some(10), target)
            .with_style(ProgressStyle::with_template("work {pos}/{len} {msg}").unwrap())
    }

    #[test]
    fn a_bar_off_a_terminal_writes_its_first_and_last_state_as_lines() {
        let out = Shared::default();
        let bar = logged_bar(&out, Duration::from_secs(3600));
        bar.set_position(1);
        bar.tick();
        for _ in 1..10 {
            bar.inc(1);
        }
        bar.finish_with_message("done");
        drop(bar);
        let lines = out.lines();
        assert_eq!(lines.first().map(String::as_str), Some("work 1/10"));
        assert_eq!(lines.last().map(String::as_str), Some("work 10/10 done"));
        assert!(lines.len() <= 3, "throttled to the interval: {lines:?}");
    }

    #[test]
    fn text_printed_above_the_bar_is_written_at_once() {
        let out = Shared::default();
        let bar = logged_bar(&out, Duration::from_secs(3600));
        bar.set_position(2);
        bar.tick();
        bar.println("step 2: val loss 1.5");
        assert!(
            out.lines().iter().any(|l| l == "step 2: val loss 1.5"),
            "{:?}",
            out.lines()
        );
        drop(bar);
    }

    #[test]
    fn the_bar_line_is_written_again_once_the_interval_has_passed() {
        let out = Shared::default();
        let lines = LogLines::new(out.clone(), Duration::from_secs(30));
        let start = Instant::now();
        let frame = |text: &str, at: Duration| {
            let mut state = lines.state.lock().unwrap();
            state.frame = text.to_string();
            state.end_frame(start + at).unwrap();
        };
        frame("work 1/10", Duration::ZERO);
        frame("work 2/10", Duration::from_secs(10));
        frame("work 3/10", Duration::from_secs(31));
        frame("work 4/10", Duration::from_secs(40));
        assert_eq!(out.lines(), ["work 1/10", "work 3/10"]);
        drop(lines);
        assert_eq!(out.lines(), ["work 1/10", "work 3/10", "work 4/10"]);
    }
}
