//! TEMPORARY stand-ins for two methods the identity work (branch `cp-identity`) provides:
//! `Control::require_legal` and `Control::send_mail`. Delete this file (and its `mod` line)
//! when merging `cp-identity`; the call sites stay as they are.

use crate::error::Result;
use crate::{Actor, Control};

impl Control {
    /// Stand-in: the identity work refuses a mutation with `legal_acceptance_required` until
    /// the actor accepted every current legal release. Until it lands, nothing is refused.
    pub(crate) async fn require_legal(&self, _actor: &Actor) -> Result<()> {
        Ok(())
    }

    /// Stand-in: the identity work sends through SMTP or logs. Until it lands, the mail is
    /// dropped and only its recipient and subject are logged (the body carries a token).
    pub(crate) async fn send_mail(&self, to: &str, subject: &str, _body: &str) -> Result<()> {
        tracing::info!(to, subject, "mail not sent: no mailer yet");
        Ok(())
    }
}
