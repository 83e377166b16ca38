//! A fetched certificate's chain, checked with webpki (the verifier rustls uses) against the trust roots, at the
//! time the request arrived; then its key verifies RSA PKCS#1 v1.5 signatures with SHA-256 or, for SNS's signature
//! version 1, SHA-1.
//!
//! The chain is built from the intermediates in the fetched file and those the key host presented over TLS (SNS
//! serves the bare leaf). Any extended key usage is accepted: these certificates sign messages, and which purposes
//! their issuers list says nothing about that. What vouches for the key is the pinned host that served it over
//! verified TLS, a chain to a trusted root still valid when the request arrived, and the leaf's name: each scheme
//! requires its provider's signing name ([`CheckedLeaf::is_issued_to_any`]), so a certificate a public CA issued
//! to anyone else (for a domain of theirs) signs nothing here, even served from a pinned host.

use rustls_pki_types::{
    AlgorithmIdentifier, CertificateDer, InvalidSignature, SignatureVerificationAlgorithm, TrustAnchor, UnixTime,
    alg_id, pem::PemObject,
};
use webpki::{EndEntityCert, ExtendedKeyUsageValidator, KeyPurposeIdIter};

use crate::TrustRootsError;

/// The roots a fetched certificate must chain to: the Mozilla roots compiled in (webpki-roots), or, in tests, a
/// CA of their own.
#[derive(Debug, Clone)]
pub struct TrustRoots {
    anchors: Vec<TrustAnchor<'static>>,
}

impl TrustRoots {
    /// The Mozilla roots compiled into the binary, as for every other outbound https hop.
    pub fn mozilla() -> Self {
        Self { anchors: webpki_roots::TLS_SERVER_ROOTS.to_vec() }
    }

    /// The CA certificates of a PEM file and nothing else (tests' own CA).
    pub fn from_pem(pem: &[u8]) -> Result<Self, TrustRootsError> {
        let mut anchors = Vec::new();
        for der in CertificateDer::pem_slice_iter(pem) {
            let der = der.map_err(TrustRootsError::Pem)?;
            let anchor = webpki::anchor_from_trusted_cert(&der).map_err(TrustRootsError::NotARoot)?;
            anchors.push(anchor.to_owned());
        }
        if anchors.is_empty() {
            return Err(TrustRootsError::Empty);
        }
        Ok(Self { anchors })
    }

    pub fn anchors(&self) -> &[TrustAnchor<'static>] {
        &self.anchors
    }
}

/// A certificate file as fetched: its certificates (the leaf first), plus the intermediates the key host
/// presented over TLS. Nothing is trusted yet; [`FetchedCertificate::check`] decides.
#[derive(Debug, Clone)]
pub struct FetchedCertificate {
    leaf: CertificateDer<'static>,
    intermediates: Vec<CertificateDer<'static>>,
}

/// Why a fetched certificate cannot vouch for a signature.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CertificateError {
    #[error("the fetched file holds no PEM certificate")]
    NoCertificate,
    #[error("the certificate is not trusted: {0}")]
    Untrusted(String),
}

impl FetchedCertificate {
    /// The PEM file `pem` (the leaf first), with `presented` (the TLS peer's chain, leaf first) as extra
    /// intermediates. What the host presented for itself is only ever a candidate issuer.
    pub fn from_pem(pem: &[u8], presented: &[CertificateDer<'static>]) -> Result<Self, CertificateError> {
        let mut certificates = CertificateDer::pem_slice_iter(pem).map_while(Result::ok);
        let leaf = certificates.next().ok_or(CertificateError::NoCertificate)?;
        let mut intermediates: Vec<_> = certificates.collect();
        intermediates.extend(presented.iter().skip(1).cloned());
        Ok(Self { leaf, intermediates })
    }

    /// Bytes held in memory, for the cache's bound.
    pub fn size_bytes(&self) -> usize {
        self.leaf.len() + self.intermediates.iter().map(|der| der.len()).sum::<usize>()
    }

    /// The leaf, if it chains to `roots` through the intermediates and every certificate is valid at `at_ms`.
    pub fn check(&self, roots: &TrustRoots, at_ms: i64) -> Result<CheckedLeaf<'_>, CertificateError> {
        let untrusted = |error: webpki::Error| CertificateError::Untrusted(error.to_string());
        let leaf = EndEntityCert::try_from(&self.leaf).map_err(untrusted)?;
        let time = UnixTime::since_unix_epoch(std::time::Duration::from_millis(u64::try_from(at_ms).unwrap_or(0)));
        leaf.verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            roots.anchors(),
            &self.intermediates,
            time,
            AnyPurpose,
            None,
            None,
        )
        .map_err(untrusted)?;
        Ok(CheckedLeaf { leaf })
    }
}

/// A leaf certificate whose chain was checked: only [`FetchedCertificate::check`] makes one.
pub struct CheckedLeaf<'a> {
    leaf: EndEntityCert<'a>,
}

impl std::fmt::Debug for CheckedLeaf<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CheckedLeaf")
    }
}

/// The digest of an RSA PKCS#1 v1.5 signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RsaDigest {
    /// SNS signature version 1 only.
    Sha1,
    Sha256,
}

impl CheckedLeaf<'_> {
    /// Whether the leaf is issued to one of `names`: a DNS name of its subjectAltName, which every publicly trusted
    /// certificate carries (and which holds its subject's common name), matched as TLS matches a server's name.
    pub fn is_issued_to_any(&self, names: &[String]) -> bool {
        names.iter().any(|name| {
            rustls_pki_types::ServerName::try_from(name.as_str())
                .is_ok_and(|name| self.leaf.verify_is_valid_for_subject_name(&name).is_ok())
        })
    }

    /// Whether `signature` is the leaf key's RSA PKCS#1 v1.5 signature of `message` (keys of 2048 to 8192 bits).
    pub fn verifies_rsa(&self, digest: RsaDigest, message: &[u8], signature: &[u8]) -> bool {
        let algorithm: &dyn SignatureVerificationAlgorithm = match digest {
            RsaDigest::Sha1 => &RSA_PKCS1_SHA1,
            RsaDigest::Sha256 => webpki::ring::RSA_PKCS1_2048_8192_SHA256,
        };
        self.leaf.verify_signature(algorithm, message, signature).is_ok()
    }
}

/// Accepts any extended key usage (see the module's doc).
struct AnyPurpose;

impl ExtendedKeyUsageValidator for AnyPurpose {
    fn validate(&self, _purposes: KeyPurposeIdIter<'_, '_>) -> Result<(), webpki::Error> {
        Ok(())
    }
}

/// SHA1withRSA, which webpki no longer offers for certificates: here it only checks a message signed by an
/// already trusted key (SNS's `SignatureVersion` 1), never a certificate.
#[derive(Debug)]
struct RsaPkcs1Sha1;

static RSA_PKCS1_SHA1: RsaPkcs1Sha1 = RsaPkcs1Sha1;

/// DER of the `sha1WithRSAEncryption` algorithm identifier's contents (OID 1.2.840.113549.1.1.5, NULL).
const SHA1_WITH_RSA: &[u8] = &[0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05, 0x05, 0x00];

impl SignatureVerificationAlgorithm for RsaPkcs1Sha1 {
    fn verify_signature(&self, public_key: &[u8], message: &[u8], signature: &[u8]) -> Result<(), InvalidSignature> {
        ring::signature::UnparsedPublicKey::new(
            &ring::signature::RSA_PKCS1_2048_8192_SHA1_FOR_LEGACY_USE_ONLY,
            public_key,
        )
        .verify(message, signature)
        .map_err(|_| InvalidSignature)
    }

    fn public_key_alg_id(&self) -> AlgorithmIdentifier {
        alg_id::RSA_ENCRYPTION
    }

    fn signature_alg_id(&self) -> AlgorithmIdentifier {
        AlgorithmIdentifier::from_slice(SHA1_WITH_RSA)
    }
}
