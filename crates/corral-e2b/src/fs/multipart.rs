//! `multipart/form-data` uploads (RFC 7578) as the SDK (httpx) sends them to `/files`.

use super::error::FsError;

/// The most parts one multipart upload may hold.
const MAX_PARTS: usize = 1000;

/// The most bytes one part's header block may take.
const MAX_PART_HEADER_BYTES: usize = 16 * 1024;

/// One `file` part of a `multipart/form-data` upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadPart {
    /// The part's `filename` (the SDK sends the target path there), unescaped; `None` when
    /// absent. Percent signs stay as sent (envd, like Go, does not decode them).
    pub filename: Option<String>,
    /// The part's bytes.
    pub data: Vec<u8>,
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from > haystack.len() {
        return None;
    }
    haystack[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

/// Splits `s` at `;` outside quoted strings, trimming each piece.
fn split_params(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut start, mut quoted, mut escaped) = (0, false, false);
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if quoted && c == '\\' {
            escaped = true;
        } else if c == '"' {
            quoted = !quoted;
        } else if c == ';' && !quoted {
            out.push(s[start..i].trim());
            start = i + 1;
        }
    }
    out.push(s[start..].trim());
    out
}

/// A header parameter's value: a quoted string unescaped, or the token as is.
fn param_value(raw: &str) -> Result<String, FsError> {
    let raw = raw.trim();
    let Some(inner) = raw.strip_prefix('"') else {
        return Ok(raw.to_owned());
    };
    let inner = inner
        .strip_suffix('"')
        .ok_or_else(|| FsError::invalid("multipart: unterminated quoted parameter"))?;
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

/// The parameters of a `type; a=b; c="d"` header value, names lowercased.
fn params(value: &str) -> Result<(String, Vec<(String, String)>), FsError> {
    let mut pieces = split_params(value).into_iter();
    let head = pieces.next().unwrap_or_default().to_ascii_lowercase();
    let mut out = Vec::new();
    for piece in pieces {
        if piece.is_empty() {
            continue;
        }
        let (name, raw) = piece
            .split_once('=')
            .ok_or_else(|| FsError::invalid(format!("multipart: malformed parameter {piece:?}")))?;
        out.push((name.trim().to_ascii_lowercase(), param_value(raw)?));
    }
    Ok((head, out))
}

/// RFC 5987 `UTF-8''percent%20encoded` (the form `filename*` takes).
fn ext_value(v: &str) -> Option<String> {
    let (charset, rest) = v.split_once('\'')?;
    let (_, encoded) = rest.split_once('\'')?;
    if !charset.eq_ignore_ascii_case("utf-8") {
        return None;
    }
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The `file` parts of a `multipart/form-data` body (RFC 7578), in order; other parts are
/// skipped, as envd does. A content type that is not multipart/form-data or has no boundary,
/// a body without its closing delimiter, a part without its blank line, or more than 1000
/// parts is `invalid_argument`. Lines end in CRLF; a body whose first delimiter line ends
/// in a bare LF is read with LF endings throughout (as Go's reader does).
///
/// envd writes each part to the `path` query parameter when one is given (the SDK sends it
/// with a single file), else to the part's filename, resolved as
/// [`resolve`](super::path::resolve); two parts aimed at one path are a 400.
pub fn parse_multipart(content_type: &str, body: &[u8]) -> Result<Vec<UploadPart>, FsError> {
    let (media, ps) = params(content_type)?;
    if media != "multipart/form-data" {
        return Err(FsError::invalid(format!(
            "expected a multipart/form-data body, got {media:?}"
        )));
    }
    let boundary = ps
        .into_iter()
        .find(|(n, _)| n == "boundary")
        .map(|(_, v)| v)
        .filter(|b| !b.is_empty() && b.len() <= 200)
        .ok_or_else(|| FsError::invalid("multipart: the content type names no boundary"))?;
    let dash_boundary = format!("--{boundary}").into_bytes();
    let truncated = || FsError::invalid("multipart: the body ends before its closing delimiter");

    // The first delimiter: at the very start, or after a preamble line.
    let first = if body.starts_with(&dash_boundary) {
        0
    } else {
        let mut crlf = b"\r\n".to_vec();
        crlf.extend_from_slice(&dash_boundary);
        let mut lf = b"\n".to_vec();
        lf.extend_from_slice(&dash_boundary);
        match (find(body, &crlf, 0), find(body, &lf, 0)) {
            (Some(a), Some(b)) => a.min(b) + if a <= b { 2 } else { 1 },
            (Some(a), None) => a + 2,
            (None, Some(b)) => b + 1,
            (None, None) => return Err(truncated()),
        }
    };
    let mut at = first + dash_boundary.len();
    if body[at..].starts_with(b"--") {
        return Ok(Vec::new());
    }
    // The line ending the first delimiter line decides CRLF or LF.
    let rest = &body[at..];
    let pad = rest
        .iter()
        .take_while(|b| **b == b' ' || **b == b'\t')
        .count();
    let eol: &[u8] = if rest[pad..].starts_with(b"\r\n") {
        b"\r\n"
    } else if rest[pad..].starts_with(b"\n") {
        b"\n"
    } else {
        return Err(FsError::invalid("multipart: malformed delimiter line"));
    };
    at += pad + eol.len();
    let mut delimiter = eol.to_vec();
    delimiter.extend_from_slice(&dash_boundary);
    let mut blank = eol.to_vec();
    blank.extend_from_slice(eol);

    let mut parts = Vec::new();
    for _ in 0..=MAX_PARTS {
        // Headers end at the first blank line (or at once when the part has none).
        let (headers, data_start) = if body[at..].starts_with(eol) {
            (&body[at..at], at + eol.len())
        } else {
            let end = find(body, &blank, at).ok_or_else(truncated)?;
            (&body[at..end], end + blank.len())
        };
        if headers.len() > MAX_PART_HEADER_BYTES {
            return Err(FsError::invalid("multipart: a part's headers are too long"));
        }
        let data_end = find(body, &delimiter, data_start).ok_or_else(truncated)?;
        if let Some(part) = file_part(headers, &body[data_start..data_end], eol)? {
            if parts.len() == MAX_PARTS {
                break;
            }
            parts.push(part);
        }
        at = data_end + delimiter.len();
        let rest = &body[at..];
        if rest.starts_with(b"--") {
            return Ok(parts);
        }
        let pad = rest
            .iter()
            .take_while(|b| **b == b' ' || **b == b'\t')
            .count();
        if !rest[pad..].starts_with(eol) {
            return Err(FsError::invalid("multipart: malformed delimiter line"));
        }
        at += pad + eol.len();
    }
    Err(FsError::invalid(format!(
        "multipart: more than {MAX_PARTS} parts"
    )))
}

/// The part as an upload when it is form field `file`.
fn file_part(headers: &[u8], data: &[u8], eol: &[u8]) -> Result<Option<UploadPart>, FsError> {
    let text = String::from_utf8_lossy(headers);
    let eol = if eol == b"\r\n" { "\r\n" } else { "\n" };
    // Unfold obsolete continuation lines before reading them.
    let mut lines: Vec<String> = Vec::new();
    for line in text.split(eol) {
        if line.starts_with([' ', '\t']) {
            match lines.last_mut() {
                Some(last) => last.push_str(line),
                None => return Err(FsError::invalid("multipart: malformed part header")),
            }
        } else if !line.is_empty() {
            lines.push(line.to_owned());
        }
    }
    let mut disposition = None;
    for line in &lines {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| FsError::invalid("multipart: malformed part header"))?;
        if name.trim().eq_ignore_ascii_case("content-disposition") {
            disposition = Some(value.trim().to_owned());
        }
    }
    let Some(disposition) = disposition else {
        return Ok(None);
    };
    let (kind, ps) = params(&disposition)?;
    if kind != "form-data" {
        return Ok(None);
    }
    let field = |key: &str| ps.iter().find(|(n, _)| n == key).map(|(_, v)| v.clone());
    if field("name").as_deref() != Some("file") {
        return Ok(None);
    }
    let filename = field("filename*")
        .and_then(|v| ext_value(&v))
        .or_else(|| field("filename"));
    Ok(Some(UploadPart {
        filename,
        data: data.to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect_code::ConnectCode;
    use proptest::prelude::*;

    fn code<T: std::fmt::Debug>(r: Result<T, FsError>) -> ConnectCode {
        r.expect_err("expected a failure").code
    }

    /// A body exactly as httpx 0.28 (the SDK's client) encodes
    /// `files=[("file", ("dir/a.txt", b"hello\r\n--x\r\nworld")), ("file", ('/abs/b "q".bin', b"\x00\xff\r\n"))]`.
    fn httpx_body() -> (&'static str, &'static [u8]) {
        (
            "multipart/form-data; boundary=c6e08a656a283de4a9c13bfc99df4387",
            b"--c6e08a656a283de4a9c13bfc99df4387\r\nContent-Disposition: form-data; name=\"file\"; filename=\"dir/a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--x\r\nworld\r\n--c6e08a656a283de4a9c13bfc99df4387\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/abs/b %22q%22.bin\"\r\nContent-Type: application/octet-stream\r\n\r\n\x00\xff\r\n\r\n--c6e08a656a283de4a9c13bfc99df4387--\r\n",
        )
    }

    #[test]
    fn multipart_reads_an_httpx_upload() {
        let (ct, body) = httpx_body();
        let parts = parse_multipart(ct, body).expect("valid");
        assert_eq!(
            parts,
            [
                UploadPart {
                    filename: Some("dir/a.txt".into()),
                    data: b"hello\r\n--x\r\nworld".to_vec()
                },
                UploadPart {
                    filename: Some("/abs/b %22q%22.bin".into()),
                    data: b"\x00\xff\r\n".to_vec()
                },
            ]
        );
    }

    #[test]
    fn multipart_handles_preambles_quoting_other_fields_and_lf_bodies() {
        let body = b"preamble\r\n--b\r\nContent-Disposition: form-data; name=\"other\"\r\n\r\nskip me\r\n--b  \r\ncontent-disposition: form-data; name=file; filename=\"a \\\"q\\\";b.txt\"\r\n\r\n--b-is-not-a-delimiter\r\n--b--\r\nepilogue";
        let parts = parse_multipart("Multipart/Form-Data; charset=utf-8; boundary=\"b\"", body)
            .expect("valid");
        assert_eq!(
            parts,
            [UploadPart {
                filename: Some("a \"q\";b.txt".into()),
                data: b"--b-is-not-a-delimiter".to_vec()
            }]
        );

        let lf = b"--b\nContent-Disposition: form-data; name=\"file\"; filename*=UTF-8''%C3%A9t%C3%A9.txt; filename=\"x\"\n\nline1\nline2\n--b--\n";
        let parts = parse_multipart("multipart/form-data; boundary=b", lf).expect("valid");
        assert_eq!(
            parts,
            [UploadPart {
                filename: Some("été.txt".into()),
                data: b"line1\nline2".to_vec()
            }]
        );

        let no_name = b"--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\ndata\r\n--b--";
        let parts = parse_multipart("multipart/form-data; boundary=b", no_name).expect("valid");
        assert_eq!(
            parts,
            [UploadPart {
                filename: None,
                data: b"data".to_vec()
            }]
        );

        assert_eq!(
            parse_multipart("multipart/form-data; boundary=b", b"--b--\r\n").expect("valid"),
            []
        );
    }

    #[test]
    fn malformed_multipart_is_invalid_argument() {
        let (ct, body) = httpx_body();
        let bad = |ct: &str, body: &[u8]| code(parse_multipart(ct, body));
        assert_eq!(
            bad("multipart/form-data", body),
            ConnectCode::InvalidArgument,
            "no boundary"
        );
        assert_eq!(
            bad("multipart/form-data; boundary=", body),
            ConnectCode::InvalidArgument
        );
        assert_eq!(
            bad("application/json; boundary=c6e0", body),
            ConnectCode::InvalidArgument
        );
        assert_eq!(bad(ct, b""), ConnectCode::InvalidArgument, "empty body");
        for cut in [10, 60, 120, body.len() - 45, body.len() - 5] {
            assert_eq!(
                bad(ct, &body[..cut]),
                ConnectCode::InvalidArgument,
                "truncated at {cut}"
            );
        }
        let no_blank_line =
            b"--b\r\nContent-Disposition: form-data; name=\"file\"\r\ndata\r\n--b--";
        assert_eq!(
            bad("multipart/form-data; boundary=b", no_blank_line),
            ConnectCode::InvalidArgument
        );
        let junk_after_delimiter = b"--b\r\n\r\ndata\r\n--bXX\r\n--b--";
        assert_eq!(
            bad("multipart/form-data; boundary=b", junk_after_delimiter),
            ConnectCode::InvalidArgument
        );
        let many: Vec<u8> = (0..=MAX_PARTS)
            .flat_map(|_| {
                b"--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx\r\n".to_vec()
            })
            .chain(b"--b--".to_vec())
            .collect();
        assert_eq!(
            bad("multipart/form-data; boundary=b", &many),
            ConnectCode::InvalidArgument
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn multipart_never_panics_on_random_bytes(
            body in proptest::collection::vec(any::<u8>(), 0..400),
            boundary in "[a-z0-9-]{0,8}",
        ) {
            let _ = parse_multipart(&format!("multipart/form-data; boundary={boundary}"), &body);
            let _ = parse_multipart("multipart/form-data; boundary=\"", &body);
        }

        #[test]
        fn multipart_never_panics_on_mutated_valid_bodies(
            cut in 0usize..400, flip in 0usize..400, byte in any::<u8>(),
        ) {
            let (ct, body) = httpx_body();
            let mut b = body.to_vec();
            if flip < b.len() { b[flip] = byte; }
            b.truncate(cut.min(b.len()));
            let _ = parse_multipart(ct, &b);
        }

        #[test]
        fn multipart_round_trips_parts(
            datas in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..5),
        ) {
            let boundary = "XyZ0123456789boundaryXyZ";
            let mut body = Vec::new();
            for (i, d) in datas.iter().enumerate() {
                body.extend_from_slice(format!("--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f{i}\"\r\n\r\n").as_bytes());
                body.extend_from_slice(d);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
            let parts = parse_multipart(&format!("multipart/form-data; boundary={boundary}"), &body)
                .expect("a valid body");
            prop_assert_eq!(parts.len(), datas.len());
            for (i, (p, d)) in parts.iter().zip(&datas).enumerate() {
                prop_assert_eq!(p.filename.clone(), Some(format!("f{i}")));
                prop_assert_eq!(&p.data, d);
            }
        }
    }
}
