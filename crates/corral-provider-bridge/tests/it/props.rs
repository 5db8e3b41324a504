//! Property tests of the exec answer's decoding ([`ExecStream`]): whatever the chunking, a
//! valid stream decodes to the same output and exit code, output is capped and flagged, and
//! arbitrary bytes never panic nor pass for an exit without an `exit` event.

use std::time::Duration;

use base64::Engine as _;
use corral_domain::Provider;
use corral_provider::ProviderError;
use corral_provider_bridge::exec::ExecStream;
use proptest::prelude::*;

/// One item of a stream the bridge might send before its terminal event.
#[derive(Debug, Clone)]
enum Item {
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    Comment,
    Unknown,
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Item::Stdout),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Item::Stderr),
        Just(Item::Comment),
        Just(Item::Unknown),
    ]
}

fn encode(items: &[Item], exit: i32, crlf: bool) -> Vec<u8> {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut text = String::new();
    for item in items {
        match item {
            Item::Stdout(b) => text.push_str(&format!("event: stdout\ndata: {}\n\n", b64(b))),
            Item::Stderr(b) => text.push_str(&format!("event: stderr\ndata:{}\n\n", b64(b))),
            Item::Comment => text.push_str(": keep-alive\n\n"),
            Item::Unknown => text.push_str("event: progress\ndata: {\"pct\":5}\n\n"),
        }
    }
    text.push_str(&format!("event: exit\ndata: {{\"exit_code\":{exit}}}\n\n"));
    text.push_str("event: stdout\ndata: aWdub3JlZA==\n\n"); // after the end: ignored
    if crlf {
        text = text.replace('\n', "\r\n");
    }
    text.into_bytes()
}

fn feed(stream: &mut ExecStream, body: &[u8], cuts: &[usize]) -> Result<bool, ProviderError> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    let mut from = 0;
    let mut done = false;
    for cut in cuts.into_iter().chain([body.len()]) {
        done = stream.push(&body[from..cut])?;
        from = cut;
    }
    Ok(done)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_chunking_of_a_valid_stream_decodes_to_its_output_and_exit_code(
        items in proptest::collection::vec(item(), 0..8),
        exit in any::<i32>(),
        crlf in any::<bool>(),
        cap in 0usize..64,
        cuts in proptest::collection::vec(any::<usize>(), 0..10),
    ) {
        let body = encode(&items, exit, crlf);
        let mut stream = ExecStream::new(Provider::Deno, Duration::from_secs(1), cap);
        prop_assert!(feed(&mut stream, &body, &cuts).unwrap());
        let out = stream.finish().unwrap();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        for item in &items {
            match item {
                Item::Stdout(b) => stdout.extend_from_slice(b),
                Item::Stderr(b) => stderr.extend_from_slice(b),
                _ => {}
            }
        }
        prop_assert_eq!(out.exit_code, exit);
        prop_assert_eq!(out.truncated, stdout.len() > cap || stderr.len() > cap);
        stdout.truncate(cap);
        stderr.truncate(cap);
        prop_assert_eq!(out.stdout, stdout);
        prop_assert_eq!(out.stderr, stderr);
    }

    #[test]
    fn a_stream_cut_before_its_exit_event_ends_is_never_an_exit(
        items in proptest::collection::vec(item(), 0..6),
        exit in any::<i32>(),
        keep in any::<usize>(),
    ) {
        let body = encode(&items, exit, false);
        // Up to (not including) the blank line that completes the exit event.
        let end = body.windows(7).position(|w| w == b"exit_co").unwrap();
        let end = end + body[end..].windows(2).position(|w| w == b"\n\n").unwrap() + 1;
        let cut = keep % end;
        let mut stream = ExecStream::new(Provider::Modal, Duration::from_secs(1), 1024);
        let done = stream.push(&body[..cut]).unwrap();
        prop_assert!(!done);
        prop_assert!(stream.finish().is_err());
    }

    #[test]
    fn arbitrary_bytes_never_panic_and_succeed_only_after_an_exit_event(
        body in prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..200),
            proptest::collection::vec(
                prop_oneof![
                    Just(&b"event: exit\n"[..]),
                    Just(&b"event: stdout\n"[..]),
                    Just(&b"event: error\n"[..]),
                    Just(&b"data: {\"exit_code\":0}\n"[..]),
                    Just(&b"data: {\"error\":\"x\",\"code\":\"exec_timeout\"}\n"[..]),
                    Just(&b"data: aGk=\n"[..]),
                    Just(&b"data: !!\n"[..]),
                    Just(&b"\n"[..]),
                    Just(&b"\r"[..]),
                    Just(&b":"[..]),
                ],
                0..12,
            )
            .prop_map(|parts| parts.concat()),
        ],
        cuts in proptest::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut stream = ExecStream::new(Provider::Cloudflare, Duration::from_secs(1), 16);
        let pushed = feed(&mut stream, &body, &cuts);
        if let (Ok(_), Ok(out)) = (pushed, stream.finish()) {
            let text = String::from_utf8_lossy(&body);
            prop_assert!(text.contains("event: exit"), "{:?} exited {}", text, out.exit_code);
            prop_assert!(out.stdout.len() <= 16 && out.stderr.len() <= 16);
        }
    }
}
