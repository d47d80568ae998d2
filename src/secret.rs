//! Where a secret comes from, as the config file names it. A leaf: serde only; the secret
//! itself is read by `config::read_secret` when the agent starts.

use std::path::PathBuf;

use serde::Deserialize;

/// Where a secret comes from: `{env: NAME}` (an environment variable) or `{file: PATH}` (a
/// file, relative to the config file's folder; one trailing newline is dropped). Secrets are
/// read when the agent starts and held in `secrecy` types, never logged.
///
/// A secret written inline (`password: hunter2`) is refused with that advice: a config is
/// checked in and shown, and the secret would go with it.
#[derive(Clone, Debug)]
pub struct SecretRef {
    /// Name of an environment variable.
    pub env: Option<String>,
    /// Path of a file.
    pub file: Option<PathBuf>,
}

/// The mapping form of [`SecretRef`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SecretRefFields {
    env: Option<String>,
    file: Option<PathBuf>,
}

impl<'de> Deserialize<'de> for SecretRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        const INLINE: &str = "a secret is not written in the config: give `{env: NAME}` (an environment variable) or `{file: PATH}` (a file)";
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = SecretRef;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("`{env: NAME}` or `{file: PATH}`")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<SecretRef, A::Error> {
                let f = SecretRefFields::deserialize(
                    serde::de::value::MapAccessDeserializer::new(map),
                )?;
                Ok(SecretRef {
                    env: f.env,
                    file: f.file,
                })
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<SecretRef, E> {
                Err(E::custom(INLINE))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<SecretRef, E> {
                Err(E::custom(INLINE))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<SecretRef, E> {
                Err(E::custom(INLINE))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<SecretRef, E> {
                Err(E::custom(INLINE))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<SecretRef, E> {
                Err(E::custom(INLINE))
            }
        }
        // `any`, not `map`: a scalar must reach `visit_str` to get the advice above.
        d.deserialize_any(Visitor)
    }
}
