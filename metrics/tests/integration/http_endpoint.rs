//! The `/metrics` endpoint serves the exposition over loopback, and the scraped text parses back
//! into the recorder's own snapshot.

use crate::common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use aquila_metrics::{MetricsError, MetricsServer, Recorder, RecorderConfig, Snapshot};
use common::Workload;

/// Sends one HTTP/1.0 request and returns the status code and body.
fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "{method} {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_owned(), body.to_owned())
}

fn recorder() -> Arc<Recorder> {
    let workload = Workload::default();
    let config = RecorderConfig::builder("SmolLM2-135M-Instruct")
        .engines(["0", "1"])
        .num_speculative_tokens(workload.k)
        .build()
        .unwrap();
    let recorder = Arc::new(Recorder::new(config).unwrap());
    workload.run(&recorder);
    recorder
}

#[test]
fn scrape_parses_back_into_the_same_values() {
    let recorder = recorder();
    let server = MetricsServer::start(Arc::clone(&recorder), "127.0.0.1:0").unwrap();
    assert_ne!(
        server.local_addr().port(),
        0,
        "port 0 reports the bound port"
    );
    assert_eq!(
        server.url(),
        format!("http://{}/metrics", server.local_addr())
    );

    let (status, head, body) = http(server.local_addr(), "GET", "/metrics");
    assert_eq!(status, 200);
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let scraped = Snapshot::from_exposition_text(&body).unwrap();
    let direct = recorder.snapshot();
    assert!(!direct.metrics.is_empty());
    assert_eq!(scraped.metrics, direct.metrics);
}

#[test]
fn other_paths_and_methods_are_refused() {
    let server = MetricsServer::start(recorder(), "127.0.0.1:0").unwrap();
    assert_eq!(http(server.local_addr(), "GET", "/").0, 404);
    assert_eq!(http(server.local_addr(), "POST", "/metrics").0, 405);
    assert_eq!(http(server.local_addr(), "GET", "/metrics?debug=1").0, 200);
}

#[test]
fn dropping_the_server_closes_the_port() {
    let server = MetricsServer::start(recorder(), "127.0.0.1:0").unwrap();
    let addr = server.local_addr();
    drop(server);
    // tiny_http's accept thread releases the socket just after the drop returns.
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(addr).is_ok() {
        assert!(
            Instant::now() < deadline,
            "{addr} still accepts connections after drop"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let again = MetricsServer::start(recorder(), &addr.to_string()).unwrap();
    again.shutdown();
}

#[test]
fn bad_addresses_are_errors_naming_the_address() {
    let error = MetricsServer::start(recorder(), "not an address").unwrap_err();
    assert!(
        matches!(&error, MetricsError::Bind { addr, .. } if addr == "not an address"),
        "{error}"
    );
    let taken = MetricsServer::start(recorder(), "127.0.0.1:0").unwrap();
    let busy = taken.local_addr().to_string();
    let error = MetricsServer::start(recorder(), &busy).unwrap_err();
    assert!(error.to_string().contains(&busy), "{error}");
}
