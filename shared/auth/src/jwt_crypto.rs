//! jsonwebtoken's signatures on *ring*, the one crypto library the workspace links.
//!
//! jsonwebtoken 10 leaves its cryptography to a [`CryptoProvider`]; its own are RustCrypto's
//! (`rsa`, `p256`, `p384`, `ed25519-dalek`, `hmac`: about twenty crates, a second crypto stack
//! beside the *ring* under rustls, and a slower clean build) or aws-lc (a C build). This one
//! covers exactly the two algorithms the service accepts — HS256 (the local issuer's and the
//! relay-session tokens) and RS256 (Cognito's, checked against its JWKS) — and refuses every
//! other with [`ErrorKind::InvalidAlgorithm`], an ordinary error (never a panic) that
//! [`crate::Authenticator`] reports as an invalid token.
//!
//! [`install`] must run before any jsonwebtoken `encode`/`decode` in the process: every call site
//! in `auth` and `oauth` calls it first (it is idempotent and costs one atomic load after the
//! first call). JWK helpers (thumbprints, public parts of private keys) are not provided: nothing
//! here uses them.

use jsonwebtoken::crypto::{CryptoProvider, JwkUtils, JwtSigner, JwtVerifier};
use jsonwebtoken::errors::{ErrorKind, Result, new_error};
use jsonwebtoken::signature::{self, Signer, Verifier};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::{hmac, rand, signature as ring_sig};

static PROVIDER: CryptoProvider =
    CryptoProvider { signer_factory, verifier_factory, jwk_utils: JwkUtils::new_unimplemented() };

/// Makes this module jsonwebtoken's provider for the process (a no-op after the first call).
pub fn install() {
    // Err means a provider is installed already: this one (nothing else in the workspace
    // installs one), so there is nothing to do.
    let _ = PROVIDER.install_default();
}

fn signer_factory(alg: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>> {
    match alg {
        Algorithm::HS256 => Ok(Box::new(Hs256(hmac::Key::new(hmac::HMAC_SHA256, key.try_get_hmac_secret()?)))),
        Algorithm::RS256 => {
            if key.family() != AlgorithmFamily::Rsa {
                return Err(new_error(ErrorKind::InvalidKeyFormat));
            }
            // jsonwebtoken hands RSA private keys over as PKCS#1 DER (from_rsa_pem/der).
            let pair = ring_sig::RsaKeyPair::from_der(key.inner())
                .map_err(|_| new_error(ErrorKind::InvalidRsaKey(String::from("not a PKCS#1 RSA private key"))))?;
            Ok(Box::new(Rs256Signer(pair)))
        }
        _ => Err(new_error(ErrorKind::InvalidAlgorithm)),
    }
}

fn verifier_factory(alg: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>> {
    match alg {
        Algorithm::HS256 => Ok(Box::new(Hs256(hmac::Key::new(hmac::HMAC_SHA256, key.try_get_hmac_secret()?)))),
        Algorithm::RS256 => {
            // The family check is what stops the algorithm confusion attack (an RSA public
            // key used as an HMAC secret): an HS256 header never reaches an RSA key here, nor
            // an RS256 header a secret.
            if key.family() != AlgorithmFamily::Rsa {
                return Err(new_error(ErrorKind::InvalidKeyFormat));
            }
            Ok(Box::new(Rs256Verifier(key.clone())))
        }
        _ => Err(new_error(ErrorKind::InvalidAlgorithm)),
    }
}

/// HS256 both ways; verification is ring's constant-time comparison.
struct Hs256(hmac::Key);

impl Signer<Vec<u8>> for Hs256 {
    fn try_sign(&self, msg: &[u8]) -> std::result::Result<Vec<u8>, signature::Error> {
        Ok(hmac::sign(&self.0, msg).as_ref().to_vec())
    }
}

impl Verifier<Vec<u8>> for Hs256 {
    fn verify(&self, msg: &[u8], sig: &Vec<u8>) -> std::result::Result<(), signature::Error> {
        hmac::verify(&self.0, msg, sig).map_err(|_| signature::Error::new())
    }
}

impl JwtSigner for Hs256 {
    fn algorithm(&self) -> Algorithm {
        Algorithm::HS256
    }
}

impl JwtVerifier for Hs256 {
    fn algorithm(&self) -> Algorithm {
        Algorithm::HS256
    }
}

struct Rs256Signer(ring_sig::RsaKeyPair);

impl Signer<Vec<u8>> for Rs256Signer {
    fn try_sign(&self, msg: &[u8]) -> std::result::Result<Vec<u8>, signature::Error> {
        let mut out = vec![0; self.0.public().modulus_len()];
        self.0
            .sign(&ring_sig::RSA_PKCS1_SHA256, &rand::SystemRandom::new(), msg, &mut out)
            .map_err(|_| signature::Error::new())?;
        Ok(out)
    }
}

impl JwtSigner for Rs256Signer {
    fn algorithm(&self) -> Algorithm {
        Algorithm::RS256
    }
}

/// RS256 (PKCS#1 v1.5, SHA-256) with a 2048–8192-bit key, as ring allows (Cognito's are 2048).
struct Rs256Verifier(DecodingKey);

impl Verifier<Vec<u8>> for Rs256Verifier {
    fn verify(&self, msg: &[u8], sig: &Vec<u8>) -> std::result::Result<(), signature::Error> {
        let params = &ring_sig::RSA_PKCS1_2048_8192_SHA256;
        let checked = match self.0.kind() {
            DecodingKeyKind::SecretOrDer(der) => ring_sig::UnparsedPublicKey::new(params, der).verify(msg, sig),
            DecodingKeyKind::RsaModulusExponent { n, e } => {
                ring_sig::RsaPublicKeyComponents { n, e }.verify(params, msg, sig)
            }
        };
        checked.map_err(|_| signature::Error::new())
    }
}

impl JwtVerifier for Rs256Verifier {
    fn algorithm(&self) -> Algorithm {
        Algorithm::RS256
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::{Header, Validation, decode, encode};

    #[derive(Debug, serde::Serialize, serde::Deserialize)]
    struct Claims {
        sub: String,
        exp: u64,
    }

    fn claims() -> Claims {
        Claims { sub: "u".into(), exp: jsonwebtoken::get_current_timestamp() + 600 }
    }

    #[test]
    fn hs256_round_trips_and_a_wrong_secret_fails() {
        install();
        let token = encode(&Header::new(Algorithm::HS256), &claims(), &EncodingKey::from_secret(b"s1")).unwrap();
        let v = Validation::new(Algorithm::HS256);
        assert_eq!(decode::<Claims>(&token, &DecodingKey::from_secret(b"s1"), &v).unwrap().claims.sub, "u");
        let wrong = decode::<Claims>(&token, &DecodingKey::from_secret(b"s2"), &v).unwrap_err();
        assert_eq!(wrong.kind(), &ErrorKind::InvalidSignature);
    }

    /// Every algorithm but the two is refused with an error, both ways, not a panic.
    #[test]
    fn other_algorithms_are_refused_not_panicked_on() {
        install();
        for alg in
            [Algorithm::HS384, Algorithm::HS512, Algorithm::RS512, Algorithm::PS256, Algorithm::ES256, Algorithm::EdDSA]
        {
            let err = encode(&Header::new(alg), &claims(), &EncodingKey::from_secret(b"s")).unwrap_err();
            assert_eq!(err.kind(), &ErrorKind::InvalidAlgorithm, "{alg:?}");
        }
        let hs384 = {
            // A well-formed HS384 token (header alg HS384) signed with an HS256 MAC.
            let token = encode(&Header::new(Algorithm::HS256), &claims(), &EncodingKey::from_secret(b"s")).unwrap();
            let (_, rest) = token.split_once('.').unwrap();
            let header = base64_url(br#"{"alg":"HS384","typ":"JWT"}"#);
            format!("{header}.{rest}")
        };
        let mut v = Validation::new(Algorithm::HS384);
        v.algorithms = vec![Algorithm::HS384];
        let err = decode::<Claims>(&hs384, &DecodingKey::from_secret(b"s"), &v).unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::InvalidAlgorithm);
    }

    /// An RSA key under an HS256 header is refused (the algorithm confusion attack).
    #[test]
    fn an_rsa_key_is_never_an_hmac_secret() {
        install();
        let key = DecodingKey::from_rsa_raw_components(&[0xC5; 256], &[1, 0, 1]);
        let token = encode(&Header::new(Algorithm::HS256), &claims(), &EncodingKey::from_secret(&[0xC5; 256])).unwrap();
        let err = decode::<Claims>(&token, &key, &Validation::new(Algorithm::HS256)).unwrap_err();
        assert_eq!(err.kind(), &ErrorKind::InvalidKeyFormat);
    }

    fn base64_url(bytes: &[u8]) -> String {
        const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
            for i in 0..=chunk.len() {
                out.push(char::from(A[(n >> (18 - 6 * i) & 63) as usize]));
            }
        }
        out
    }
}
