//! Markdown for the legal pages, rendered safely: the operator writes the terms in Markdown
//! (CommonMark with tables and strikethrough); raw HTML in the source is shown as text, never
//! passed through, and a link or image whose address is not `http`, `https`, `mailto` or
//! relative loses its address (no `javascript:`). The page's CSP stops off-site images.

use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, html};

/// `source` as HTML safe to put in a page.
pub(crate) fn to_html(source: &str) -> String {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    let events = Parser::new_ext(source, options).map(|event| match event {
        // Shown, escaped, as what it is: text.
        Event::Html(raw) | Event::InlineHtml(raw) => Event::Text(raw),
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Link {
            link_type,
            dest_url: safe(dest_url),
            title,
            id,
        }),
        Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Image {
            link_type,
            dest_url: safe(dest_url),
            title,
            id,
        }),
        other => other,
    });
    let mut out = String::with_capacity(source.len() * 3 / 2);
    html::push_html(&mut out, events);
    out
}

/// The address if it is `http`, `https`, `mailto` or relative; `#` otherwise.
fn safe(url: CowStr<'_>) -> CowStr<'_> {
    let lower = url.trim().to_ascii_lowercase();
    // A scheme is what precedes the first `:` when no `/`, `?` or `#` comes before it.
    let scheme = lower
        .find([':', '/', '?', '#'])
        .filter(|i| lower[*i..].starts_with(':'))
        .map(|i| &lower[..i]);
    match scheme {
        None | Some("http" | "https" | "mailto") => url,
        Some(_) => CowStr::Borrowed("#"),
    }
}

#[cfg(test)]
mod tests {
    use super::to_html;

    #[test]
    fn markdown_becomes_html() {
        let html =
            to_html("# Terms\n\nBe **kind**.\n\n- one\n- two\n\n[Docs](https://example.com/docs)");
        assert!(html.contains("<h1>Terms</h1>"), "{html}");
        assert!(html.contains("<strong>kind</strong>"), "{html}");
        assert!(html.contains("<li>one</li>"), "{html}");
        assert!(
            html.contains("<a href=\"https://example.com/docs\">Docs</a>"),
            "{html}"
        );
    }

    #[test]
    fn raw_html_and_script_links_never_pass_through() {
        let html = to_html(
            "<script>alert(1)</script>\n\nHi <img src=x onerror=alert(1)>\n\n[x](javascript:alert(1)) [y](JavaScript:alert(1)) [z](data:text/html,hi) ![i](vbscript:x)",
        );
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img src=x"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "shown as text: {html}");
        assert!(!html.to_ascii_lowercase().contains("javascript:"), "{html}");
        assert!(!html.contains("data:text"), "{html}");
        assert!(!html.contains("vbscript:"), "{html}");
    }

    #[test]
    fn relative_and_mail_links_are_kept() {
        let html =
            to_html("[a](/console/legal) [b](mailto:legal@example.com) [c](#top) [d](page?x=1:2)");
        for href in [
            "/console/legal",
            "mailto:legal@example.com",
            "#top",
            "page?x=1:2",
        ] {
            assert!(html.contains(&format!("href=\"{href}\"")), "{href}: {html}");
        }
    }
}
