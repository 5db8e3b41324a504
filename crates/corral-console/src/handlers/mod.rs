//! The console's handlers, one module per area: each authenticates (the session cookie; on
//! POST also the `csrf` field and the origin, [`ctx`]), calls one control-plane use case, then
//! renders a page or redirects with a flash message. Failures of a form become a flash on the
//! page it came from; a target the user cannot see is the 404 page; an expired session goes
//! back to sign-in. This module only declares the areas; they share [`ctx`], never each other.

// Helpers answer `Err(page)` with the page to send (an HttpResponse, large): boxing it would
// buy nothing at one response per request.
#![allow(clippy::result_large_err)]

pub(crate) mod account;
pub(crate) mod ctx;
pub(crate) mod lifecycle;
pub(crate) mod project;
pub(crate) mod providers;
pub(crate) mod sandboxes;
pub(crate) mod sign_in;
pub(crate) mod work;
