//! A minimal HTTP/1.1 client over `std::net` for the server tests (one request per
//! connection), with server-sent event parsing.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

/// How long a test waits on a socket before failing.
pub const SOCKET_TIMEOUT: Duration = Duration::from_secs(120);

/// A response: status, lower-cased header block, and the body (de-chunked).
#[derive(Debug)]
pub struct Response {
    /// The HTTP status.
    pub status: u16,
    /// The header lines, lower-cased.
    pub headers: String,
    /// The body.
    pub body: String,
}

impl Response {
    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {}", self.body))
    }

    /// The `data:` payloads of a server-sent event stream, in order.
    pub fn sse_data(&self) -> Vec<String> {
        self.body
            .split("\n\n")
            .filter_map(|event| {
                event
                    .lines()
                    .find_map(|line| line.strip_prefix("data: "))
                    .map(str::to_string)
            })
            .collect()
    }

    /// The JSON payloads of a server-sent event stream, `[DONE]` left out; panics unless the
    /// stream ends with `[DONE]`.
    pub fn sse_json(&self) -> Vec<Value> {
        let data = self.sse_data();
        assert_eq!(
            data.last().map(String::as_str),
            Some("[DONE]"),
            "stream does not end with [DONE]: {}",
            self.body
        );
        data[..data.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d).expect("chunk is JSON"))
            .collect()
    }
}

/// Opens a connection and sends one request (`Connection: close`).
pub fn send(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> TcpStream {
    let body = body.unwrap_or("");
    let mut stream = send_head(addr, method, path, body.len(), "");
    stream.write_all(body.as_bytes()).expect("send body");
    stream
}

/// Opens a connection and sends a request's head (`Connection: close`) declaring a JSON body
/// of `content_length` bytes, with `extra_headers` (each line ending in `\r\n`).
fn send_head(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_length: usize,
    extra_headers: &str,
) -> TcpStream {
    let mut stream = TcpStream::connect(addr).expect("connect to the server");
    stream.set_read_timeout(Some(SOCKET_TIMEOUT)).unwrap();
    stream.set_write_timeout(Some(SOCKET_TIMEOUT)).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {content_length}\r\n{extra_headers}Connection: close\r\n\r\n"
    );
    stream
        .write_all(head.as_bytes())
        .expect("send request head");
    stream
}

/// A `POST path` that declares a JSON body of `content_length` bytes and asks to be answered
/// before sending it (`Expect: 100-continue`): the server's answer to a body it refuses
/// unread. (A body sent in full could meet a connection the server already closed.)
pub fn post_declaring(addr: SocketAddr, path: &str, content_length: usize) -> Response {
    let head = send_head(
        addr,
        "POST",
        path,
        content_length,
        "Expect: 100-continue\r\n",
    );
    read_response(head)
}

/// Sends a request and reads the whole response.
pub fn request(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> Response {
    read_response(send(addr, method, path, body))
}

/// `POST path` with a JSON body.
pub fn post(addr: SocketAddr, path: &str, body: &Value) -> Response {
    request(addr, "POST", path, Some(&body.to_string()))
}

/// `GET path`.
pub fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, None)
}

/// Reads a response until the server closes the connection.
pub fn read_response(stream: TcpStream) -> Response {
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader);
    let mut raw = Vec::new();
    reader.read_to_end(&mut raw).expect("read body");
    let body = if headers.contains("transfer-encoding: chunked") {
        dechunk(&raw)
    } else {
        raw
    };
    Response {
        status,
        headers,
        body: String::from_utf8(body).expect("UTF-8 body"),
    }
}

/// Reads the status line and headers.
pub fn read_head(reader: &mut impl BufRead) -> (u16, String) {
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("status line");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let mut headers = String::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).expect("header line");
        if line.trim().is_empty() {
            return (status, headers.to_lowercase());
        }
        headers.push_str(&line);
    }
}

/// Decodes a chunked transfer encoding.
fn dechunk(raw: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    let mut rest = raw;
    while let Some(line_end) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_text = std::str::from_utf8(&rest[..line_end]).expect("chunk size");
        let size = usize::from_str_radix(size_text.trim(), 16).expect("hex chunk size");
        if size == 0 {
            break;
        }
        let start = line_end + 2;
        body.extend_from_slice(&rest[start..start + size]);
        rest = &rest[start + size + 2..];
    }
    body
}
