//! The stats logger writes vLLM-style lines through `tracing`.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aquila_metrics::{
    EventSink, IterationStats, KvCacheUsage, Recorder, RecorderConfig, SchedulerStats,
    SpecDecodeEvent, StatsLogger,
};

/// A `tracing` writer that keeps everything in memory.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn engine_and_spec_decode_lines_are_logged_at_info() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();

    let config = RecorderConfig::builder("m")
        .num_speculative_tokens(3)
        .build()
        .unwrap();
    let recorder = Recorder::new(config).unwrap();
    for accepted in [3, 1, 2, 2, 1] {
        recorder.record_spec_decode(&SpecDecodeEvent {
            request_id: 1,
            num_draft_tokens: 3,
            draft_depth: 3,
            num_accepted_tokens: accepted,
        });
    }
    recorder.record_iteration(&IterationStats {
        num_prompt_tokens: 100,
        num_generation_tokens: 14,
        ..Default::default()
    });
    recorder.record_scheduler(&SchedulerStats {
        num_running_reqs: 2,
        num_waiting_reqs: 1,
        kv_cache_usage: KvCacheUsage::new(0.5).unwrap(),
        num_preemptions: 0,
    });
    let mut logger = StatsLogger::for_recorder(&recorder, Duration::from_millis(1)).unwrap();
    std::thread::sleep(Duration::from_millis(2));
    let report =
        tracing::subscriber::with_default(subscriber, || logger.log_if_due(&recorder).unwrap());
    // Once per interval at most is the logger's unit test, on the snapshots' own clock: here a
    // second call could find the 1 ms interval over again on a busy machine.
    assert!(report.is_some());

    let output = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = output.lines().collect();
    assert_eq!(lines.len(), 2, "{output}");
    assert!(lines[0].contains(" INFO "), "{output}");
    assert!(lines[0].contains("Avg prompt throughput: "), "{output}");
    assert!(
        lines[0].contains("Running: 2 reqs, Waiting: 1 reqs, KV cache usage: 50.0%"),
        "{output}"
    );
    assert!(
        lines[1]
            .contains("SpecDecoding metrics: Mean acceptance length: 2.80, Accepted throughput: "),
        "{output}"
    );
    assert!(
        lines[1].contains(
            "Accepted: 9 tokens, Drafted: 15 tokens, Per-position acceptance rate: 1.000, 0.600, 0.200, \
             Avg Draft acceptance rate: 60.0%"
        ),
        "{output}"
    );
}
