//! The pages before and around signing in (`handlers::sign_in`): sign-in, the emailed link,
//! legal terms, an invitation, and the user's profile.

use maud::{Markup, html};

use super::layout::{BASE, csrf_field, flash, page_head, shell, single};
use crate::view::*;

/// Sign in: an email link (primary) or a password.
pub(crate) fn sign_in(page: &SignInPage) -> Markup {
    single(
        "Sign in",
        html! {
            div.card { div.card-body {
                h1 { "Sign in to Corral" }
                p.lede { "We'll email you a link that signs you in. No password needed." }
                (flash(page.flash.as_ref()))
                form.stack method="post" action={(BASE) "/sign-in/email"} {
                    div.field {
                        label for="email" { "Work email" }
                        input #email type="email" name="email" autocomplete="email" required value=(page.email) placeholder="you@company.com";
                    }
                    button.btn.block type="submit" { "Email me a sign-in link" }
                }
                div.divider { "or use a password" }
                form.stack method="post" action={(BASE) "/sign-in/password"} {
                    div.field {
                        label for="pw-email" { "Email" }
                        input #pw-email type="email" name="email" autocomplete="username" required value=(page.email);
                    }
                    div.field {
                        label for="password" { "Password" }
                        input #password type="password" name="password" autocomplete="current-password" required;
                    }
                    button.btn.secondary.block type="submit" { "Sign in with password" }
                }
            } }
            p.foot { "Corral is invitation-only. Ask an owner of your organization for an invitation." }
        },
    )
}

/// After requesting a link.
pub(crate) fn check_email(email: &str) -> Markup {
    single(
        "Check your email",
        html! {
            div.card { div.card-body {
                h1 { "Check your email" }
                p.lede {
                    "If " strong { (email) } " has a Corral account, a sign-in link is on its way. "
                    "It works once and expires in 15 minutes."
                }
                a.btn.secondary.block href={(BASE) "/sign-in"} { "Back to sign in" }
            } }
            p.foot { "No email after a minute? Check your spam folder, or request a new link." }
        },
    )
}

/// The emailed link's landing page: one button that POSTs the token back. Following the link
/// signs nobody in (a mail scanner's prefetch or a foreign page's redirect only renders this);
/// the same-origin POST does, so a foreign site cannot sign a visitor into its own account.
pub(crate) fn confirm_sign_in(token: &str) -> Markup {
    single(
        "Confirm sign-in",
        html! {
            div.card { div.card-body {
                h1 { "Sign in to Corral" }
                p.lede { "Confirm that you want to sign in on this device." }
                form.stack method="post" action={(BASE) "/sign-in/verify"} {
                    input type="hidden" name="token" value=(token);
                    button #confirm-sign-in.btn.block type="submit" { "Sign in" }
                }
            } }
            p.foot { "Did not ask for this link? Close this page; nothing happens without the button." }
        },
    )
}

/// The current legal releases and the accept button.
pub(crate) fn legal(page: &LegalPage) -> Markup {
    let pending = page.docs.iter().filter(|d| !d.accepted).count();
    single(
        "Review the terms",
        html! {
            div.card { div.card-body {
                h1 { "Before you continue" }
                p.lede {
                    @if pending == 0 { "You have accepted every current release." }
                    @else { "Please review and accept the current terms to use Corral." }
                }
                (flash(page.flash.as_ref()))
                form.stack method="post" action={(BASE) "/legal/accept"} {
                    (csrf_field(&page.csrf))
                    @for d in &page.docs {
                        div.legal-doc {
                            div.row-between {
                                strong { (d.title) }
                                @if d.accepted { span.badge.ok { "Accepted" } }
                                @else { span.badge.plain { "Release " (d.release) } }
                            }
                            div.small.muted { "Published " (d.published) }
                            @if !d.body.is_empty() { div.body.prose { (maud::PreEscaped(crate::markdown::to_html(&d.body))) } }
                            input type="hidden" name="release" value={(d.document) ":" (d.release)};
                        }
                    }
                    @if pending > 0 {
                        button.btn.block type="submit" id="accept-terms" { "Accept and continue" }
                    } @else {
                        a.btn.block href=(BASE) { "Continue" }
                    }
                }
                p.small.muted.center-note { "Signed in as " (page.email) }
            } }
        },
    )
}

/// An invitation waiting for the signed-in user's answer (its token stays in an `HttpOnly`
/// cookie, never in the page).
pub(crate) fn invitation(email: &str, csrf: &str, offer: Option<&InvitationOffer>) -> Markup {
    single(
        "Invitation",
        html! {
            div.card { div.card-body {
                h1 { "You're invited" }
                @match offer {
                    Some(o) => p.lede #invitation-offer {
                        @match &o.inviter { Some(who) => strong { (who) }, None => "Someone" }
                        " invited you to join " strong { (o.organization) } " on Corral as "
                        (article(&o.role)) " " strong { (o.role) } ". Accept to see its projects."
                    },
                    None => p.lede {
                        "This invitation was not found for " (email) ": it may have expired, been revoked, "
                        "been used already or been sent to another address. Accepting says which."
                    },
                }
                form.stack method="post" action={(BASE) "/invitations/accept"} {
                    (csrf_field(csrf))
                    button.btn.block type="submit" id="accept-invitation" { "Accept invitation" }
                }
                p.small.muted.center-note { "Signed in as " (email) ". " a href=(BASE) { "Not now" } }
            } }
        },
    )
}

/// "an" before a role that starts with a vowel sound ("an owner", "an admin"), else "a".
fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

/// The signed-in user's password and sessions.
pub(crate) fn profile(chrome: &Chrome, has_password: bool) -> Markup {
    let content = html! {
        (page_head(html! { span { "You" } }, "Password and sessions",
            Some("Sign in with an emailed link, or with a password you set here."), html! {}))
        div.card {
            div.card-head { div {
                h2 { @if has_password { "Change your password" } @else { "Set a password" } }
                p { "At least 12 characters. Changing it signs you out on your other devices." }
            } }
            div.card-body {
                form.stack.narrow method="post" action={(BASE) "/profile/password"} {
                    (csrf_field(&chrome.csrf))
                    input type="email" name="username" autocomplete="username" value=(chrome.email) hidden;
                    @if has_password {
                        div.field {
                            label for="current-password" { "Current password" }
                            input #current-password type="password" name="current_password" autocomplete="current-password";
                            span.hint { "Forgotten? Sign in with an emailed link, then set a new one within 10 minutes." }
                        }
                    }
                    div.field {
                        label for="new-password" { "New password" }
                        input #new-password type="password" name="password" autocomplete="new-password" required minlength="12";
                    }
                    div { button.btn type="submit" { "Save password" } }
                }
            }
        }
        div.card {
            div.card-head { div { h2 { "Sessions" } p { "Lost a device? Sign out everywhere, this browser included." } } }
            div.card-body {
                form method="post" action={(BASE) "/sign-out-everywhere"} {
                    (csrf_field(&chrome.csrf))
                    button.btn.secondary type="submit" { "Sign out everywhere" }
                }
            }
        }
    };
    shell("Password and sessions", chrome, content)
}
