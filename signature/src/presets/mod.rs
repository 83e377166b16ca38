//! Named providers that are a family with fixed settings (`scheme = "calendly"`): the provider's header, prefix,
//! encoding, signed string, timestamp and window, where its event id and type come from, which handshakes it needs
//! and the reply it expects. Each is one [`Preset`] in a family's table ([`body_hmac`], [`timed`], [`presented`],
//! [`jwt`]);
//! docs/providers.md's table is generated from the same entries (its test says when they drift).
//!
//! A preset is only settings: the verification is the family's, written and tested once. What is a provider's own
//! (DocuSign's numbered headers, X's JSON-only bodies) is a small scheme in the family's table module.

mod body_hmac;
mod jwt;
mod presented;
mod timed;

use std::borrow::Cow;

use super::{
    AcceptedReply, Handshake, IdentityRule, Scheme, Secret, SignatureMatch, UnverifiedRequest, VerifyError,
    handshake::Challenge, support::Tolerance,
};
use crate::{BuildError, SecretError};

/// Builds a preset's scheme with the source's tolerance (`None`: the preset's default).
pub(crate) type Build = fn(Option<Tolerance>) -> Result<Box<dyn Scheme>, BuildError>;

/// One named provider.
#[derive(Debug)]
pub struct Preset {
    /// The config name (`scheme = "..."`).
    pub name: &'static str,
    /// The provider, as people call it.
    pub provider: &'static str,
    /// Where the signature (or token) is.
    pub header: &'static str,
    /// What is signed.
    pub signed: &'static str,
    /// The signed timestamp and its default window, or `-`.
    pub timestamp: &'static str,
    /// Where the event id and type come from.
    pub identity_doc: &'static str,
    /// The handshakes the provider needs before it delivers.
    pub handshakes: &'static [Challenge],
    /// The provider's own acknowledgement, when the default `202` JSON will not do.
    pub reply: Option<Reply>,
    /// Whether the scheme signs a timestamp (so `tolerance_s` applies).
    pub timed: bool,
    pub(crate) build: Build,
    pub(crate) identity: fn() -> IdentityRule,
}

/// A fixed acknowledgement: status, content type, body.
#[derive(Debug, Clone, Copy)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: &'static str,
}

/// Every preset, in table order (the families' tables one after the other).
pub fn all() -> impl Iterator<Item = &'static Preset> {
    body_hmac::PRESETS.iter().chain(timed::PRESETS).chain(presented::PRESETS).chain(jwt::PRESETS)
}

/// Whether `name` is the JWT family or one of its presets (Netlify, Vonage, monday.com).
pub fn is_jwt(name: &str) -> bool {
    name == "jwt" || jwt::PRESETS.iter().any(|preset| preset.name == name)
}

/// The preset named `name`.
pub fn find(name: &str) -> Option<&'static Preset> {
    all().find(|preset| preset.name == name)
}

impl Preset {
    /// A preset without handshake, special reply or timestamp; the `with_*` methods add them.
    pub(crate) const fn new(
        name: &'static str,
        provider: &'static str,
        header: &'static str,
        signed: &'static str,
        identity_doc: &'static str,
        build: Build,
        identity: fn() -> IdentityRule,
    ) -> Self {
        Self {
            name,
            provider,
            header,
            signed,
            timestamp: "-",
            identity_doc,
            handshakes: &[],
            reply: None,
            timed: false,
            build,
            identity,
        }
    }

    /// The preset signs a timestamp, described as `timestamp`.
    pub(crate) const fn timed(self, timestamp: &'static str) -> Self {
        Self { timestamp, timed: true, ..self }
    }

    pub(crate) const fn with_handshakes(self, handshakes: &'static [Challenge]) -> Self {
        Self { handshakes, ..self }
    }

    pub(crate) const fn replying(self, reply: Reply) -> Self {
        Self { reply: Some(reply), ..self }
    }

    /// The preset's scheme, with `tolerance` instead of its default window when given.
    pub fn build(&'static self, tolerance: Option<Tolerance>) -> Result<Box<dyn Scheme>, BuildError> {
        if tolerance.is_some() && !self.timed {
            return Err(format!(
                "scheme `{}` signs no timestamp, so tolerance_s cannot apply: remove it (docs/providers.md)",
                self.name
            )
            .into());
        }
        Ok(Box::new(PresetScheme { preset: self, inner: (self.build)(tolerance)? }))
    }
}

/// A preset's scheme: the family's verification under the provider's name, identity, handshakes and reply.
#[derive(Debug)]
struct PresetScheme {
    preset: &'static Preset,
    inner: Box<dyn Scheme>,
}

impl Scheme for PresetScheme {
    fn name(&self) -> &'static str {
        self.preset.name
    }

    fn decode_secret(&self, raw: &[u8]) -> Result<Vec<u8>, SecretError> {
        self.inner.decode_secret(raw)
    }

    fn verify(&self, request: &UnverifiedRequest<'_>, secrets: &[&Secret]) -> Result<SignatureMatch, VerifyError> {
        self.inner.verify(request, secrets)
    }

    fn identity(&self) -> IdentityRule {
        (self.preset.identity)()
    }

    fn handshake(&self, request: &UnverifiedRequest<'_>, secret: &Secret) -> Option<Handshake> {
        self.inner.handshake(request, secret)
    }

    fn accepted_reply(&self, request: &UnverifiedRequest<'_>) -> Option<AcceptedReply> {
        match self.preset.reply {
            Some(reply) => Some(AcceptedReply {
                status: reply.status,
                content_type: reply.content_type,
                body: reply.body.as_bytes().to_vec(),
            }),
            None => self.inner.accepted_reply(request),
        }
    }

    fn signable_headers(&self) -> Vec<Cow<'static, str>> {
        self.inner.signable_headers()
    }

    fn signs_url(&self) -> bool {
        self.inner.signs_url()
    }

    fn is_costly(&self) -> bool {
        self.inner.is_costly()
    }

    fn is_token(&self) -> bool {
        self.inner.is_token()
    }

    fn covers_whole_body(&self) -> bool {
        self.inner.covers_whole_body()
    }

    fn handshakes(&self) -> &'static [Challenge] {
        self.preset.handshakes
    }

    /// The preset's `timed` (its tests check that the family's scheme agrees).
    fn signs_timestamp(&self) -> bool {
        self.preset.timed
    }

    fn refuses_non_object_bodies(&self) -> bool {
        self.inner.refuses_non_object_bodies()
    }
}

/// docs/providers.md's table of presets, one row per preset.
pub fn markdown_table() -> String {
    let mut table = String::from(
        "| Scheme | Provider | Signature / credential | Signed | Timestamp (default window) | Event id / type | Handshake, reply |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for preset in all() {
        let mut extra: Vec<String> =
            preset.handshakes.iter().map(|challenge| format!("`{}`", challenge.name())).collect();
        if let Some(reply) = preset.reply {
            extra.push(format!("reply {} `{}`", reply.status, reply.body));
        }
        let extra = if extra.is_empty() { "-".to_owned() } else { extra.join(", ") };
        table.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} |\n",
            preset.name, preset.provider, preset.header, preset.signed, preset.timestamp, preset.identity_doc, extra
        ));
    }
    table
}

#[cfg(test)]
mod tests;
