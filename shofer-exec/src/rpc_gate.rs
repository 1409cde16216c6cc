//! The JSON-RPC gate in front of the MCP library: every line the client sends is checked
//! before `rmcp` sees it, so that every request with a readable id gets a response (JSON-RPC
//! 2.0, section 5.1 "Error object"), which `rmcp` does not give for lines it cannot decode.
//!
//! [`check_line`] decides per line (MCP's stdio transport is one JSON-RPC message per line):
//! - not UTF-8, or not JSON that `serde_json` can hold (a syntax error, a lone surrogate
//!   escape, a number like `1e400` out of the `f64` range, nesting over 128 levels):
//!   `-32700 Parse error`;
//! - JSON but not a request, notification or response object (an array: batches are not
//!   part of MCP; a missing or non-string `method`; an id that is not a string or integer;
//!   `jsonrpc` not `"2.0"`): `-32600 Invalid Request`;
//! - `params` that is not an object or array, or that `initialize` / `tools/call` cannot use
//!   (see [`params_error`]): `-32602 Invalid params`.
//!
//! The id of the answer is the request's id when it can be read, even from a line that is not
//! valid JSON (a lenient scan of its first [`ID_SCAN`] bytes for `"id": <number or string>`),
//! else `null` as the specification says. Lines longer than [`MAX_MESSAGE`] are not held in
//! memory: their first bytes are kept for the id, the rest is skipped up to the newline, and
//! they are answered with `-32600`. Invalid notifications get no answer unless their id-less
//! line could not be parsed at all (then `id: null`, per the specification).
//!
//! [`serve`] wires it up: stdin → gate → `rmcp`, and `rmcp`'s output plus the gate's answers
//! → stdout, one whole line at a time.

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The longest message accepted, in bytes (16 MiB).
pub const MAX_MESSAGE: usize = 16 << 20;
/// How many leading bytes of an unparsable line are scanned for its id (64 KiB).
pub const ID_SCAN: usize = 64 << 10;

/// JSON-RPC 2.0 error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// What to do with one line from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Hand it to the MCP library.
    Pass,
    /// Answer with this JSON-RPC error response (one line, no newline) instead.
    Reply(String),
    /// Ignore it (blank line, or an invalid notification).
    Drop,
}

fn reply(id: &Value, code: i64, message: &str) -> Verdict {
    Verdict::Reply(
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            .to_string(),
    )
}

/// The id of a line that could not be parsed, found leniently in its first [`ID_SCAN`]
/// bytes: the first `"id"` key followed by an integer or a string; `null` otherwise.
pub fn lenient_id(line: &[u8]) -> Value {
    let head = &line[..line.len().min(ID_SCAN)];
    let mut from = 0;
    while let Some(i) = memchr::memmem::find(&head[from..], b"\"id\"") {
        let mut p = from + i + 4;
        from = p;
        while head.get(p).is_some_and(u8::is_ascii_whitespace) {
            p += 1;
        }
        if head.get(p) != Some(&b':') {
            continue;
        }
        p += 1;
        while head.get(p).is_some_and(u8::is_ascii_whitespace) {
            p += 1;
        }
        let rest = &head[p..];
        let mut de = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
        if let Some(Ok(v)) = de.next() {
            if v.is_string() || v.is_i64() || v.is_u64() {
                return v;
            }
        }
        // A number followed by an invalid token still has readable digits.
        let digits = rest
            .iter()
            .enumerate()
            .take_while(|&(k, b)| b.is_ascii_digit() || (k == 0 && *b == b'-'))
            .count();
        if let Ok(n) = std::str::from_utf8(&rest[..digits])
            .unwrap_or("")
            .parse::<i64>()
        {
            return Value::from(n);
        }
    }
    Value::Null
}

/// Checks one line (without its newline) from the client; see the module docs.
pub fn check_line(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Drop;
    }
    let text = match std::str::from_utf8(line) {
        Ok(t) => t,
        Err(e) => {
            return reply(
                &lenient_id(line),
                PARSE_ERROR,
                &format!(
                    "Parse error: the message is not valid UTF-8 (at byte {})",
                    e.valid_up_to()
                ),
            )
        }
    };
    let v: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return reply(&lenient_id(line), PARSE_ERROR, &format!("Parse error: {e}")),
    };
    let Value::Object(msg) = v else {
        return reply(
            &Value::Null,
            INVALID_REQUEST,
            "Invalid Request: a message must be a JSON object (batches are not supported)",
        );
    };
    let id = msg.get("id");
    let readable_id = match id {
        None => None,
        Some(i) if i.is_string() || i.is_i64() || i.is_u64() => Some(i.clone()),
        Some(_) => {
            return reply(
                &Value::Null,
                INVALID_REQUEST,
                "Invalid Request: id must be a string or an integer",
            )
        }
    };
    let answer = |code: i64, m: &str| match &readable_id {
        Some(i) => reply(i, code, m),
        None => Verdict::Drop,
    };
    if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return answer(INVALID_REQUEST, "Invalid Request: jsonrpc must be \"2.0\"");
    }
    match msg.get("method") {
        None => {
            // A response to one of our requests.
            let ok =
                readable_id.is_some() && (msg.contains_key("result") != msg.contains_key("error"));
            if ok {
                Verdict::Pass
            } else {
                answer(
                    INVALID_REQUEST,
                    "Invalid Request: a request needs a string method; a response an id and one of result or error",
                )
            }
        }
        Some(Value::String(m)) => match params_error(m, msg.get("params")) {
            None => Verdict::Pass,
            Some(e) => answer(INVALID_PARAMS, &format!("Invalid params: {e}")),
        },
        Some(_) => answer(INVALID_REQUEST, "Invalid Request: method must be a string"),
    }
}

/// Why `params` does not fit `method`, for the methods whose parameters the server needs
/// (`initialize`, `tools/call`; MCP specification); `None` when they fit or are not checked.
pub fn params_error(method: &str, params: Option<&Value>) -> Option<String> {
    let obj = match params {
        None | Some(Value::Null) => None,
        Some(Value::Object(o)) => Some(o),
        Some(Value::Array(_)) => {
            return (method == "initialize" || method == "tools/call")
                .then(|| format!("{method} takes an object"))
        }
        Some(_) => return Some("params must be an object or an array".into()),
    };
    let is_str =
        |o: &serde_json::Map<String, Value>, k: &str| o.get(k).is_some_and(Value::is_string);
    match method {
        "tools/call" => {
            let Some(o) = obj else {
                return Some("tools/call needs params with a tool name".into());
            };
            if !is_str(o, "name") {
                return Some("tools/call needs a string name".into());
            }
            match o.get("arguments") {
                None | Some(Value::Null) | Some(Value::Object(_)) => None,
                Some(_) => Some("tools/call arguments must be an object".into()),
            }
        }
        "initialize" => {
            let Some(o) = obj else {
                return Some("initialize needs params".into());
            };
            let client = o.get("clientInfo").and_then(Value::as_object);
            if !is_str(o, "protocolVersion")
                || !o.get("capabilities").is_some_and(Value::is_object)
                || !client.is_some_and(|c| is_str(c, "name") && is_str(c, "version"))
            {
                return Some(
                    "initialize needs protocolVersion (string), capabilities (object) and clientInfo {name, version}".into(),
                );
            }
            None
        }
        _ => None,
    }
}

/// Reads lines from `input` (at most [`MAX_MESSAGE`] bytes held), passes the good ones to
/// `to_mcp` and sends the answers for the others to `replies`. Returns at end of input or
/// when the MCP side is gone.
async fn gate<R, W>(input: R, mut to_mcp: W, replies: mpsc::UnboundedSender<String>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::with_capacity(1 << 16, input);
    let mut line: Vec<u8> = Vec::new();
    loop {
        line.clear();
        let mut over = false;
        let mut ended = false;
        // Read one line, keeping at most MAX_MESSAGE bytes (only ID_SCAN once over).
        loop {
            let buf = match input.fill_buf().await {
                Ok(b) => b,
                Err(_) => {
                    ended = true;
                    break;
                }
            };
            if buf.is_empty() {
                ended = true;
                break;
            }
            let (chunk, done) = match memchr::memchr(b'\n', buf) {
                Some(i) => (&buf[..i], Some(i + 1)),
                None => (buf, None),
            };
            if !over && line.len() + chunk.len() > MAX_MESSAGE {
                over = true;
                line.truncate(ID_SCAN);
            }
            if !over {
                line.extend_from_slice(chunk);
            } else if line.len() < ID_SCAN {
                let room = ID_SCAN - line.len();
                line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            let used = done.unwrap_or(buf.len());
            input.consume(used);
            if done.is_some() {
                break;
            }
        }
        if ended && line.is_empty() && !over {
            return;
        }
        let verdict = if over {
            reply(
                &lenient_id(&line),
                INVALID_REQUEST,
                &format!("Invalid Request: the message is over {MAX_MESSAGE} bytes"),
            )
        } else {
            check_line(&line)
        };
        match verdict {
            Verdict::Pass => {
                line.push(b'\n');
                if to_mcp.write_all(&line).await.is_err() || to_mcp.flush().await.is_err() {
                    return;
                }
            }
            Verdict::Reply(r) => {
                if replies.send(r).is_err() {
                    return;
                }
            }
            Verdict::Drop => {}
        }
        if ended {
            return;
        }
    }
}

/// Copies whole lines from `from_mcp` and the gate's `replies` to `output`, never mixing two
/// messages within a line.
async fn writer<R, W>(from_mcp: R, mut output: W, mut replies: mpsc::UnboundedReceiver<String>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut from_mcp = BufReader::with_capacity(1 << 16, from_mcp);
    let mut line = Vec::new();
    let mut mcp_open = true;
    let mut replies_open = true;
    while mcp_open || replies_open {
        tokio::select! {
            n = from_mcp.read_until(b'\n', &mut line), if mcp_open => {
                match n {
                    Ok(0) | Err(_) => mcp_open = false,
                    Ok(_) => {
                        if output.write_all(&line).await.is_err() {
                            return;
                        }
                        line.clear();
                    }
                }
            }
            r = replies.recv(), if replies_open => {
                match r {
                    None => replies_open = false,
                    Some(mut r) => {
                        r.push('\n');
                        if output.write_all(r.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
        if output.flush().await.is_err() {
            return;
        }
    }
}

/// The gated stdio transport: returns the `(reader, writer)` pair to give `rmcp` in place of
/// `rmcp::transport::stdio()`, and spawns the gate and writer tasks on the current runtime.
/// The returned handle ends when everything `rmcp` wrote has reached stdout.
pub fn stdio() -> (
    (tokio::io::DuplexStream, tokio::io::DuplexStream),
    tokio::task::JoinHandle<()>,
) {
    let (mcp_in, gate_out) = tokio::io::duplex(1 << 16);
    let (mcp_out, writer_in) = tokio::io::duplex(1 << 16);
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(gate(tokio::io::stdin(), gate_out, tx));
    let w = tokio::spawn(writer(writer_in, tokio::io::stdout(), rx));
    ((mcp_in, mcp_out), w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code_and_id(v: Verdict) -> (i64, Value) {
        let Verdict::Reply(r) = v else {
            panic!("no reply: {v:?}")
        };
        let v: Value = serde_json::from_str(&r).unwrap();
        assert_eq!(v["jsonrpc"], "2.0");
        (v["error"]["code"].as_i64().unwrap(), v["id"].clone())
    }

    #[test]
    fn malformed_lines_are_answered_with_their_id() {
        let call = |args: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"execute_command","arguments":{{"command":{args}}}}}}}"#
            )
        };
        let mut bad = call("\"echo \u{1}\"").into_bytes();
        let at = bad.iter().position(|&b| b == 1).unwrap();
        bad[at] = 0xff;
        assert_eq!(code_and_id(check_line(&bad)), (-32700, json!(7)));
        assert_eq!(
            code_and_id(check_line(call(r#""\ud800""#).as_bytes())),
            (-32700, json!(7))
        );
        assert_eq!(
            code_and_id(check_line(call("1e400").as_bytes())),
            (-32700, json!(7))
        );
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(
            code_and_id(check_line(call(&deep).as_bytes())),
            (-32700, json!(7))
        );
        assert_eq!(
            code_and_id(check_line(
                br#"{"jsonrpc":"2.0","id":"a b","method":"tools/list""#
            )),
            (-32700, json!("a b"))
        );
        assert_eq!(code_and_id(check_line(b"garbage")), (-32700, Value::Null));
        assert_eq!(code_and_id(check_line(b"[1,2]")), (-32600, Value::Null));
        assert_eq!(
            code_and_id(check_line(br#"{"jsonrpc":"2.0","id":3}"#)),
            (-32600, json!(3))
        );
        assert_eq!(
            code_and_id(check_line(br#"{"jsonrpc":"2.0","id":4,"method":5}"#)),
            (-32600, json!(4))
        );
        assert_eq!(
            code_and_id(check_line(br#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#)),
            (-32600, Value::Null)
        );
        assert_eq!(
            code_and_id(check_line(
                br#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":7}"#
            )),
            (-32602, json!(6))
        );
        assert_eq!(
            code_and_id(check_line(
                br#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":1}}"#
            )),
            (-32602, json!(6))
        );
        assert_eq!(
            code_and_id(check_line(
                br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#
            )),
            (-32602, json!(0))
        );
    }

    #[test]
    fn good_lines_and_notifications_pass_or_drop() {
        assert_eq!(
            check_line(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
            Verdict::Pass
        );
        assert_eq!(
            check_line(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Verdict::Pass
        );
        assert_eq!(
            check_line(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Verdict::Pass
        );
        assert_eq!(check_line(b"  \r"), Verdict::Drop);
        assert_eq!(
            check_line(br#"{"jsonrpc":"2.0","method":"tools/call","params":3}"#),
            Verdict::Drop
        );
    }
}
