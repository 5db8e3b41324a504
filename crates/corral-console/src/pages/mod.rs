//! The page templates: one function per page, from a view model to HTML. `maud` escapes every
//! interpolated value, so user data (names, emails, provider reasons) cannot become markup.
//! Every state-changing form posts to a console route with the hidden `csrf` field.
//!
//! One module per area, mirroring `handlers/`; `layout` holds what they share.

mod account;
mod layout;
mod lifecycle;
mod project;
mod providers;
mod sandboxes;
mod sign_in;
#[cfg(test)]
mod tests;
mod work;

pub(crate) use self::account::{audit, members, new_organization, overview};
pub(crate) use self::layout::{BASE, error_page, paths};
pub(crate) use self::lifecycle::snapshots;
pub(crate) use self::project::{keys, project_settings};
pub(crate) use self::providers::providers;
pub(crate) use self::sandboxes::{sandbox, sandboxes};
pub(crate) use self::sign_in::{check_email, confirm_sign_in, invitation, legal, profile, sign_in};
pub(crate) use self::work::{command_page, file_page};
