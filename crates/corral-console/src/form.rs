//! Form bodies (`application/x-www-form-urlencoded`), read by hand so that a malformed or
//! oversized body becomes a flash message on the page, never an actix error or a 500.

use actix_web::web;

/// Largest console form body.
pub(crate) const MAX_FORM_BYTES: usize = 64 * 1024;

/// A decoded form: every (name, value) pair, in order.
#[derive(Debug, Default, Clone)]
pub(crate) struct Form {
    pairs: Vec<(String, String)>,
}

impl Form {
    /// Decodes `body` (at most [`MAX_FORM_BYTES`]; a longer one decodes as empty).
    pub(crate) fn parse(body: &web::Bytes) -> Self {
        if body.len() > MAX_FORM_BYTES {
            return Self::default();
        }
        Self {
            pairs: url::form_urlencoded::parse(body)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        }
    }

    /// The first value of `name`, trimmed; `None` when absent or blank.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// The first value of `name` exactly as sent (passwords are not trimmed).
    pub(crate) fn raw(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `name`.
    pub(crate) fn all(&self, name: &str) -> impl Iterator<Item = &str> {
        self.pairs
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_pairs_trims_and_treats_blank_as_absent() {
        let f = Form::parse(&web::Bytes::from_static(
            b"name=+My%20Org+&empty=&release=terms%3A2&release=privacy%3A1&csrf=abc",
        ));
        assert_eq!(f.get("name"), Some("My Org"));
        assert_eq!(f.get("empty"), None);
        assert_eq!(f.get("missing"), None);
        assert_eq!(
            f.all("release").collect::<Vec<_>>(),
            ["terms:2", "privacy:1"]
        );
    }

    #[test]
    fn an_oversized_body_decodes_as_empty() {
        let big = vec![b'a'; MAX_FORM_BYTES + 1];
        assert_eq!(Form::parse(&web::Bytes::from(big)).get("a"), None);
    }
}
