//! An incremental parser for server-sent events (the `text/event-stream`
//! format of the WHATWG HTML standard), as model APIs stream them.

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; empty means the default type `message`.
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
    /// The `id:` field, if one was sent.
    pub id: Option<String>,
}

/// Feeds bytes in, gets events out. Chunks may split lines, fields and
/// multi-byte characters anywhere; lines end with `\n`, `\r\n` or `\r`.
///
/// ```
/// use kinet_core::provider::kit::SseParser;
///
/// let mut parser = SseParser::new();
/// let mut events = Vec::new();
/// parser.feed(b"event: ping\ndata: {\"a\"", &mut |e| events.push(e));
/// parser.feed(b":1}\n\n", &mut |e| events.push(e));
/// assert_eq!(events.len(), 1);
/// assert_eq!(events[0].event, "ping");
/// assert_eq!(events[0].data, "{\"a\":1}");
/// ```
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of a line not yet terminated.
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a leading `\n` belongs to it.
    after_cr: bool,
    event: String,
    data: String,
    has_data: bool,
    id: Option<String>,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a chunk, calling `emit` for each complete event.
    pub fn feed(&mut self, mut chunk: &[u8], emit: &mut impl FnMut(SseEvent)) {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', chunk) {
            let terminator = chunk[end];
            if self.line.is_empty() {
                self.process_line(&chunk[..end], emit);
            } else {
                self.line.extend_from_slice(&chunk[..end]);
                let line = std::mem::take(&mut self.line);
                self.process_line(&line, emit);
                self.line = line;
                self.line.clear();
            }
            let mut next = end + 1;
            if terminator == b'\r' {
                match chunk.get(next) {
                    Some(b'\n') => next += 1,
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            chunk = &chunk[next..];
        }
        self.line.extend_from_slice(chunk);
    }

    /// Ends the stream: an event whose blank line never came is dispatched
    /// (servers that close right after the last `data:` line exist).
    pub fn finish(&mut self, emit: &mut impl FnMut(SseEvent)) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            self.process_line(&line, emit);
        }
        self.dispatch(emit);
    }

    fn process_line(&mut self, line: &[u8], emit: &mut impl FnMut(SseEvent)) {
        if line.is_empty() {
            self.dispatch(emit);
            return;
        }
        if line[0] == b':' {
            return; // comment / keep-alive
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                push_utf8(&mut self.data, value);
                self.has_data = true;
            }
            b"event" => {
                self.event.clear();
                push_utf8(&mut self.event, value);
            }
            b"id" if !value.contains(&0) => {
                self.id = Some(String::from_utf8_lossy(value).into_owned());
            }
            _ => {} // `retry` and unknown fields are ignored
        }
    }

    fn dispatch(&mut self, emit: &mut impl FnMut(SseEvent)) {
        if !self.has_data {
            self.event.clear();
            return;
        }
        self.has_data = false;
        emit(SseEvent {
            event: std::mem::take(&mut self.event),
            data: std::mem::take(&mut self.data),
            id: self.id.clone(),
        });
    }
}

fn push_utf8(out: &mut String, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => out.push_str(text),
        Err(_) => out.push_str(&String::from_utf8_lossy(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        for chunk in chunks {
            parser.feed(chunk, &mut |e| events.push(e));
        }
        parser.finish(&mut |e| events.push(e));
        events
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let stream = "event: a\r\ndata: one\r\ndata:  two\r\n\r\n: keep-alive\n\ndata: 日本🎉\rid: 7\r\rdata: last\n\n".as_bytes();
        let whole = parse_all(&[stream]);
        assert_eq!(
            whole,
            vec![
                SseEvent {
                    event: "a".into(),
                    data: "one\n two".into(),
                    id: None
                },
                SseEvent {
                    event: String::new(),
                    data: "日本🎉".into(),
                    id: Some("7".into())
                },
                SseEvent {
                    event: String::new(),
                    data: "last".into(),
                    id: Some("7".into())
                },
            ]
        );
        for split in 0..stream.len() {
            assert_eq!(
                parse_all(&[&stream[..split], &stream[split..]]),
                whole,
                "split at {split}"
            );
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse_all(&bytes), whole);
    }

    #[test]
    fn events_without_data_are_not_dispatched_and_unterminated_ones_are() {
        assert!(parse_all(&[b"event: ping\n\n"]).is_empty());
        let events = parse_all(&[b"data: tail-without-blank-line"]);
        assert_eq!(events[0].data, "tail-without-blank-line");
    }

    #[test]
    fn invalid_utf8_is_replaced_not_fatal() {
        let events = parse_all(&[b"data: \xff\xfe ok\n\n"]);
        assert_eq!(events[0].data, "\u{fffd}\u{fffd} ok");
    }
}
