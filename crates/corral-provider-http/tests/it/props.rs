//! Property tests of the `text/event-stream` parser: any split of a stream into chunks yields
//! the events a whole-input reading of the WHATWG grammar yields; valid streams round-trip;
//! the memory accounting covers everything held for the event in progress.

use corral_provider_http::sse::{SseEvent, SseParser};
use proptest::prelude::*;

/// The grammar read over the whole input at once, written for clarity rather than
/// incrementally: the model the incremental parser must agree with.
fn whole_input(input: &[u8]) -> Vec<SseEvent> {
    let input = input.strip_prefix(b"\xef\xbb\xbf").unwrap_or(input);
    let mut lines: Vec<&[u8]> = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < input.len() {
        match input[i] {
            b'\n' => {
                lines.push(&input[start..i]);
                start = i + 1;
            }
            b'\r' => {
                lines.push(&input[start..i]);
                if input.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    // Bytes after the last line end are an unfinished line: not read yet.
    let mut events = Vec::new();
    let (mut event, mut data, mut id): (String, Option<String>, Option<String>) =
        (String::new(), None, None);
    for line in lines {
        if line.is_empty() {
            if let Some(data) = data.take() {
                events.push(SseEvent {
                    event: if event.is_empty() {
                        "message".to_owned()
                    } else {
                        event.clone()
                    },
                    data,
                    id: id.clone(),
                });
            }
            event.clear();
            id = None;
            continue;
        }
        if line[0] == b':' {
            continue;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (&*text, ""),
        };
        match field {
            "event" => event = value.to_owned(),
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            "id" => id = Some(value.to_owned()),
            _ => {}
        }
    }
    events
}

/// Feeds `input` cut at `cuts` (positions, any order, out-of-range ones clamped).
fn chunked(input: &[u8], cuts: &[usize]) -> (Vec<SseEvent>, SseParser) {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    cuts.sort_unstable();
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    let mut from = 0;
    for cut in cuts.into_iter().chain([input.len()]) {
        events.extend(parser.push(&input[from..cut]));
        from = cut;
    }
    (events, parser)
}

/// Bytes drawn mostly from the grammar's own vocabulary, so that arbitrary inputs still hit
/// field names, separators and every kind of line end.
fn stream_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(&b"\n"[..]),
        Just(&b"\r"[..]),
        Just(&b"\r\n"[..]),
        Just(&b":"[..]),
        Just(&b" "[..]),
        Just(&b"data"[..]),
        Just(&b"event"[..]),
        Just(&b"id"[..]),
        Just(&b"\xef\xbb\xbf"[..]),
        Just(&b"\xff"[..]),
        Just(&b"\xc3\xa9"[..]),
        Just(&b"x"[..]),
    ];
    prop_oneof![
        proptest::collection::vec(token, 0..64).prop_map(|ts| ts.concat()),
        proptest::collection::vec(any::<u8>(), 0..128),
    ]
}

fn valid_event() -> impl Strategy<Value = SseEvent> {
    (
        proptest::option::of("[a-z]{1,8}"),
        proptest::collection::vec("[^\r\n]{0,12}", 1..4),
        proptest::option::of("[^\r\n]{0,8}"),
    )
        .prop_map(|(event, lines, id)| SseEvent {
            event: event.unwrap_or_else(|| "message".to_owned()),
            data: lines.join("\n"),
            id,
        })
}

fn line_end() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("\n"), Just("\r\n"), Just("\r")]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_chunking_of_any_bytes_yields_the_whole_input_reading(
        input in stream_bytes(),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let (events, parser) = chunked(&input, &cuts);
        prop_assert_eq!(&events, &whole_input(&input));
        // Memory: what is held never exceeds what was sent plus the fields' decoding (a
        // lossy replacement character is 3 bytes for 1).
        prop_assert!(parser.pending() <= input.len());
        prop_assert!(parser.buffered() <= 3 * input.len());
    }

    #[test]
    fn valid_streams_round_trip_whatever_the_line_ends_and_chunking(
        events in proptest::collection::vec(valid_event(), 0..6),
        ends in proptest::collection::vec(line_end(), 32),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
        bom in any::<bool>(),
    ) {
        let mut text = String::from(if bom { "\u{feff}" } else { "" });
        let mut n = 0;
        let mut prev = "";
        let mut end = || {
            n += 1;
            let mut e = ends[n % ends.len()];
            // A lone CR then an LF would be one CRLF line end: write the LF as a CRLF.
            if prev == "\r" && e == "\n" {
                e = "\r\n";
            }
            prev = e;
            e
        };
        for ev in &events {
            text.push_str(": a comment");
            text.push_str(end());
            text.push_str("event: ");
            text.push_str(&ev.event);
            text.push_str(end());
            if let Some(id) = &ev.id {
                text.push_str("id: ");
                text.push_str(id);
                text.push_str(end());
            }
            for line in ev.data.split('\n') {
                text.push_str("data: ");
                text.push_str(line);
                text.push_str(end());
            }
            text.push_str(end());
        }
        let (got, parser) = chunked(text.as_bytes(), &cuts);
        let unread = if events.is_empty() && bom { 3 } else { 0 }; // a BOM waits for a line
        prop_assert_eq!(got, events);
        prop_assert_eq!(parser.buffered(), unread);
    }

    #[test]
    fn everything_held_for_an_unfinished_event_is_counted(
        value in "[a-z]{0,64}",
        field in prop_oneof![Just("data"), Just("event"), Just("id")],
        lines in 1usize..8,
    ) {
        let mut parser = SseParser::new();
        let mut sent = 0;
        for _ in 0..lines {
            let line = format!("{field}: {value}\n");
            prop_assert!(parser.push(line.as_bytes()).is_empty());
            sent += value.len();
        }
        // Data lines accumulate; an event type or id is replaced by the next one.
        let held = if field == "data" { sent + lines - 1 } else { value.len() };
        prop_assert_eq!(parser.buffered(), held);
        // An unfinished line is counted as it arrives, before any line end.
        parser.push(value.as_bytes());
        prop_assert_eq!(parser.buffered(), held + value.len());
    }
}

/// One large chunk of many short lines is read in one pass: the old parser moved the rest
/// of the buffer after every line (quadratic), which took minutes here. The deadline only
/// detects that hang; it is far above the linear parser's time.
#[test]
fn a_large_chunk_of_many_lines_is_read_without_quadratic_work() {
    let body = "data: x\n\n".repeat(1_000_000);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut parser = SseParser::new();
        let _ = tx.send(parser.push(body.as_bytes()).len());
    });
    let n = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the parser finished within a minute");
    assert_eq!(n, 1_000_000);
}

#[test]
fn a_lone_cr_ends_a_line_and_a_crlf_split_across_chunks_is_one_line_end() {
    let mut p = SseParser::new();
    assert_eq!(
        p.push(b"data: a\r\r"),
        [SseEvent {
            event: "message".into(),
            data: "a".into(),
            id: None
        }]
    );
    let mut p = SseParser::new();
    assert!(p.push(b"data: b\r").is_empty());
    // The LF completes the CR's line end; it is not a second (empty) line.
    assert!(p.push(b"\n").is_empty());
    assert_eq!(p.push(b"\n").len(), 1);
}
