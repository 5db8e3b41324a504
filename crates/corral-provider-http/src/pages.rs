//! Cursor- and token-paginated listings, followed the same way by every adapter (as
//! object_store's `stream_paginated`).

use std::future::Future;

use corral_provider::Result;

/// One page of a listing and the cursor of the next (`None` or empty: this was the last).
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The page's items.
    pub items: Vec<T>,
    /// The provider's cursor or token for the next page.
    pub next: Option<String>,
}

/// Collects the items of at most `max_pages` pages: `fetch(None)` gets the first, then
/// `fetch(Some(cursor))` each next one, until a page names no next cursor (or repeats the one
/// it was asked with, which would loop forever). The page cap keeps a provider that pages
/// forever from holding a call; callers filter by tag, so a cut listing only delays a lookup.
pub async fn collect_pages<T, F, Fut>(max_pages: usize, mut fetch: F) -> Result<Vec<T>>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: Future<Output = Result<Page<T>>>,
{
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..max_pages {
        let page = fetch(cursor.clone()).await?;
        items.extend(page.items);
        match page.next {
            Some(next) if !next.is_empty() && Some(&next) != cursor.as_ref() => {
                cursor = Some(next);
            }
            _ => break,
        }
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[tokio::test]
    async fn pages_are_followed_until_no_cursor_and_capped() {
        let asked = Mutex::new(Vec::new());
        let all = collect_pages(10, |cursor: Option<String>| {
            asked.lock().unwrap().push(cursor.clone());
            async move {
                let n: u32 = cursor.as_deref().map_or(0, |c| c.parse().unwrap());
                Ok(Page {
                    items: vec![n],
                    next: (n < 2).then(|| (n + 1).to_string()),
                })
            }
        })
        .await
        .unwrap();
        assert_eq!(all, [0, 1, 2]);
        assert_eq!(
            *asked.lock().unwrap(),
            [None, Some("1".to_owned()), Some("2".to_owned())]
        );
        let endless = collect_pages(3, |_| async {
            Ok(Page {
                items: vec![1],
                next: Some(ulid_like()),
            })
        })
        .await
        .unwrap();
        assert_eq!(endless.len(), 3);
        let stuck = collect_pages(10, |_| async {
            Ok(Page {
                items: vec![1],
                next: Some("same".to_owned()),
            })
        })
        .await
        .unwrap();
        assert_eq!(stuck.len(), 2, "a repeated cursor ends the listing");
    }

    fn ulid_like() -> String {
        corral_domain::OperationId::new().to_string()
    }
}
