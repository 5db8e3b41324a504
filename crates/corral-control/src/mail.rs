//! Outgoing mail: sign-in links (and, through [`Control::send_mail`], invitations).
//!
//! [`Mailer`] is the port; [`SmtpMailer`] sends through an SMTP server (plain, STARTTLS or
//! implicit TLS, through the workspace's rustls), and [`LogMailer`] — the default when no SMTP
//! server is configured — writes each mail, body included, to the log at INFO. That puts
//! sign-in links in the log, on purpose: without SMTP the operator runs Corral on their own
//! machine and reads the link there. Configure SMTP for any server other people sign in to.
//!
//! Addresses that bounced or complained (see [`Control::receive_email_event`]) are suppressed:
//! [`Control::send_mail`] sends them nothing. Every mail has a [`MailPurpose`], and each
//! purpose its limits per recipient and per sender (organization, inviter, or the client
//! address that asked for a sign-in link), so Corral cannot be used to flood an address or
//! relay someone's text to many. Subjects are fixed per purpose: no text a user chose
//! appears in one.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use lettre::message::header::ContentType;
use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport as _, Message, Tokio1Executor};
use secrecy::{ExposeSecret as _, SecretString};

use corral_control_store::{AccountId, UserId};

use crate::Control;
use crate::error::{ControlError, Result};
use crate::limits::Policy;
use crate::throttle::ClientAddress;

/// One plain-text mail.
#[derive(Clone, PartialEq, Eq)]
pub struct Mail {
    /// The recipient's address.
    pub to: String,
    /// The subject line.
    pub subject: String,
    /// The plain-text body (may hold a sign-in link: never log it outside [`LogMailer`]).
    pub text: String,
}

impl fmt::Debug for Mail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The body may hold a sign-in link.
        f.debug_struct("Mail")
            .field("to", &self.to)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

/// A mail could not be handed to the mail server. The message never holds the body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailError {
    /// What failed.
    pub message: String,
}

impl fmt::Display for MailError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mail not sent: {}", self.message)
    }
}

impl std::error::Error for MailError {}

/// Sends mail. Implementations must not log the body (except [`LogMailer`], by design).
#[async_trait]
pub trait Mailer: Send + Sync + fmt::Debug {
    /// Sends `mail`; returns once the server accepted it.
    async fn send(&self, mail: &Mail) -> Result<(), MailError>;
}

/// Writes every mail, body included, to the log at INFO (the default without SMTP; see the
/// module docs for why that is acceptable).
#[derive(Debug, Clone, Copy, Default)]
pub struct LogMailer;

#[async_trait]
impl Mailer for LogMailer {
    async fn send(&self, mail: &Mail) -> Result<(), MailError> {
        tracing::info!(
            to = %mail.to,
            subject = %mail.subject,
            body = %mail.text,
            "mail (no SMTP server is configured, so it is logged instead of sent)"
        );
        Ok(())
    }
}

/// How the SMTP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmtpSecurity {
    /// None: plain SMTP (a relay on the same host or a test server only).
    Plain,
    /// STARTTLS, required (usually port 587).
    StartTls,
    /// Implicit TLS from the first byte (usually port 465).
    Tls,
}

/// Where and how to send mail.
#[derive(Debug, Clone)]
pub struct SmtpConfig {
    /// The server's host name (also the name its TLS certificate must carry).
    pub host: String,
    /// The server's port.
    pub port: u16,
    /// Plain, STARTTLS or TLS.
    pub security: SmtpSecurity,
    /// The user name, if the server needs authentication.
    pub username: Option<String>,
    /// The password (with `username`).
    pub password: Option<SecretString>,
    /// The sender address, e.g. `Corral <corral@example.com>`.
    pub from: String,
    /// Connection and command timeout.
    pub timeout: Duration,
}

/// Sends mail through an SMTP server.
#[derive(Clone)]
pub struct SmtpMailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: lettre::message::Mailbox,
    host: String,
}

impl fmt::Debug for SmtpMailer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SmtpMailer")
            .field("host", &self.host)
            .field("from", &self.from.to_string())
            .finish_non_exhaustive()
    }
}

impl SmtpMailer {
    /// A mailer for `config`; fails on a malformed sender address or TLS set-up.
    pub fn new(config: &SmtpConfig) -> Result<Self, MailError> {
        let from = config.from.parse().map_err(|e| MailError {
            message: format!("the sender address `{}` is malformed: {e}", config.from),
        })?;
        let tls = match config.security {
            SmtpSecurity::Plain => Tls::None,
            SmtpSecurity::StartTls | SmtpSecurity::Tls => {
                let params = TlsParameters::new(config.host.clone()).map_err(|e| MailError {
                    message: format!("TLS set-up for {} failed: {e}", config.host),
                })?;
                if config.security == SmtpSecurity::Tls {
                    Tls::Wrapper(params)
                } else {
                    Tls::Required(params)
                }
            }
        };
        let mut builder = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(&config.host)
            .port(config.port)
            .tls(tls)
            .timeout(Some(config.timeout));
        if let (Some(user), Some(password)) = (&config.username, &config.password) {
            builder = builder.credentials(Credentials::new(
                user.clone(),
                password.expose_secret().to_owned(),
            ));
        }
        Ok(Self {
            transport: builder.build(),
            from,
            host: config.host.clone(),
        })
    }
}

#[async_trait]
impl Mailer for SmtpMailer {
    async fn send(&self, mail: &Mail) -> Result<(), MailError> {
        let to = mail.to.parse().map_err(|e| MailError {
            message: format!("the recipient address is malformed: {e}"),
        })?;
        let message = Message::builder()
            .from(self.from.clone())
            .to(to)
            .subject(mail.subject.clone())
            .header(ContentType::TEXT_PLAIN)
            .body(mail.text.clone())
            .map_err(|e| MailError {
                message: format!("the mail could not be built: {e}"),
            })?;
        // lettre's error names the failing step and the server's reply, never the body.
        self.transport.send(message).await.map_err(|e| MailError {
            message: format!("the SMTP server {} refused or failed: {e}", self.host),
        })?;
        Ok(())
    }
}

/// Why a mail is sent: each purpose has its own limits (see [`crate::ControlLimits`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MailPurpose {
    /// A sign-in link asked for from `client` (limited per recipient and client, and per
    /// recipient; requests are also limited per client address).
    SignInLink {
        /// Where the request came from.
        client: ClientAddress,
    },
    /// An invitation to join `account`, sent by `inviter` (limited per organization, per
    /// inviter and per recipient).
    Invitation {
        /// The organization.
        account: AccountId,
        /// Who invites.
        inviter: UserId,
    },
}

impl Control {
    /// Takes the mail limits of `purpose` for one mail to `to`, all or none; refused:
    /// `rate_limited` with `Retry-After`.
    pub(crate) fn admit_mail(&self, purpose: MailPurpose, to: &str) -> Result<()> {
        let limits = &self.config().limits;
        let now = self.store().now();
        match purpose {
            MailPurpose::SignInLink { client } => self.buckets().take_all(
                &[
                    (
                        Policy::LinksPair,
                        &format!("{to}|{client}"),
                        limits.sign_in_links_per_recipient_and_address,
                    ),
                    (
                        Policy::LinksRecipient,
                        to,
                        limits.sign_in_links_per_recipient,
                    ),
                ],
                now,
            ),
            MailPurpose::Invitation { account, inviter } => self.buckets().take_all(
                &[
                    (
                        Policy::InvitationsAccount,
                        &account.to_string(),
                        limits.invitations_per_account,
                    ),
                    (
                        Policy::InvitationsInviter,
                        &inviter.to_string(),
                        limits.invitations_per_inviter,
                    ),
                    (
                        Policy::InvitationsRecipient,
                        to,
                        limits.invitations_per_recipient,
                    ),
                ],
                now,
            ),
        }
    }

    /// Sends a plain-text mail for `purpose` to `to`: refused (`rate_limited`) past the
    /// purpose's limits; not sent, and `Ok`, when the address is suppressed (bounced or
    /// complained). A mail server failure is `internal_error`.
    pub async fn send_mail(
        &self,
        purpose: MailPurpose,
        to: &str,
        subject: &str,
        text: &str,
    ) -> Result<()> {
        let to = to.trim().to_ascii_lowercase();
        self.admit_mail(purpose, &to)?;
        self.deliver(&to, subject, text).await
    }

    /// Hands a mail whose limits were taken to the mailer, unless the address is suppressed.
    pub(crate) async fn deliver(&self, to: &str, subject: &str, text: &str) -> Result<()> {
        let to = to.trim().to_ascii_lowercase();
        if self.store().is_email_suppressed(&to).await? {
            tracing::info!(to = %to, subject, "mail not sent: the address is suppressed");
            return Ok(());
        }
        let mail = Mail {
            to,
            subject: subject.to_owned(),
            text: text.to_owned(),
        };
        self.mailer().send(&mail).await.map_err(|e| {
            tracing::warn!(error = %e, "mail not sent");
            ControlError::internal("the mail could not be sent; try again later")
        })
    }
}
