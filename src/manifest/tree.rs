//! The YAML tree the manifest rules read: every node with the place it was written.
//!
//! Two parsers build it. [`super::fast`] reads the common shape of Kubernetes manifests (block
//! mappings and sequences, one-line flow collections, plain and quoted one-line scalars,
//! literal block scalars) several times faster, and gives up on anything else; `serde-saphyr`
//! reads the rest, and every file the fast parser gives up on. Both give the same tree for
//! what the fast one reads (a differential test over the corpus and generated documents holds
//! them to it), so which one ran never shows.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

use super::Mode;

/// A YAML node: its value, where it was used (1-based line and character column) and, for a
/// scalar, the bytes of the source it was written as.
#[derive(Debug, PartialEq)]
pub(super) struct Node {
    pub value: NodeKind,
    /// 1-based line where the node is used.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    /// Byte offset in the source where the node was defined (through an alias, the anchored
    /// node), or [`UNKNOWN`].
    pub start: u32,
    /// Its length in bytes, or [`UNKNOWN`].
    pub len: u32,
}

/// An offset or length the parser did not give.
pub(super) const UNKNOWN: u32 = u32::MAX;

impl Node {
    /// The source text of the node where it was defined: a scalar as written (quotes
    /// included), `None` when unknown.
    pub fn raw<'s>(&self, src: &'s str) -> Option<&'s str> {
        if self.start == UNKNOWN || self.len == UNKNOWN {
            return None;
        }
        let start = self.start as usize;
        src.get(start..start + self.len as usize)
    }
}

/// The value of a YAML node, as the parser resolved it under the YAML 1.2 core schema.
#[derive(Debug, PartialEq)]
pub(super) enum NodeKind {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

/// Parses every non-empty document of a YAML stream: with the fast parser when it reads the
/// whole stream, else with `serde-saphyr`. On failure: (line, column, message).
pub(super) fn parse_documents(text: &str, mode: Mode) -> Result<Vec<Node>, (u64, u64, String)> {
    if let Some(docs) = super::fast::parse(text) {
        return Ok(docs);
    }
    parse_documents_saphyr(text, mode)
}

/// [`parse_documents`] with `serde-saphyr` alone.
pub(super) fn parse_documents_saphyr(
    text: &str,
    mode: Mode,
) -> Result<Vec<Node>, (u64, u64, String)> {
    serde_saphyr::from_multiple_with_options::<SNode>(text, yaml_options(mode))
        .map(|docs| docs.into_iter().map(convert).collect())
        .map_err(|e| crate::yaml::error_parts(&e))
}

/// `serde-saphyr`'s tree.
type SNode = Spanned<SKind>;

#[derive(Debug)]
enum SKind {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    Str(String),
    Seq(Vec<SNode>),
    Map(Vec<(SNode, SNode)>),
}

fn convert(n: SNode) -> Node {
    let span = n.defined.span();
    let clamp = |v: Option<usize>| v.and_then(|v| u32::try_from(v).ok()).unwrap_or(UNKNOWN);
    Node {
        line: u32::try_from(n.referenced.line()).unwrap_or(u32::MAX),
        column: u32::try_from(n.referenced.column()).unwrap_or(u32::MAX),
        start: clamp(span.byte_offset().map(|v| v as usize)),
        len: clamp(span.byte_len().map(|v| v as usize)),
        value: match n.value {
            SKind::Null => NodeKind::Null,
            SKind::Bool(b) => NodeKind::Bool(b),
            SKind::Int(i) => NodeKind::Int(i),
            SKind::UInt(u) => NodeKind::UInt(u),
            SKind::Float(f) => NodeKind::Float(f),
            SKind::Str(s) => NodeKind::Str(s),
            SKind::Seq(items) => NodeKind::Seq(items.into_iter().map(convert).collect()),
            SKind::Map(entries) => NodeKind::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| (convert(k), convert(v)))
                    .collect(),
            ),
        },
    }
}

impl<'de> Deserialize<'de> for SKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SKind;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any YAML value")
            }
            fn visit_unit<E>(self) -> Result<SKind, E> {
                Ok(SKind::Null)
            }
            fn visit_none<E>(self) -> Result<SKind, E> {
                Ok(SKind::Null)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<SKind, D::Error> {
                SKind::deserialize(d)
            }
            fn visit_bool<E>(self, v: bool) -> Result<SKind, E> {
                Ok(SKind::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<SKind, E> {
                Ok(SKind::Int(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<SKind, E> {
                Ok(SKind::UInt(v))
            }
            fn visit_i128<E: de::Error>(self, v: i128) -> Result<SKind, E> {
                i64::try_from(v)
                    .map(SKind::Int)
                    .map_err(|_| E::custom("integer out of range"))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<SKind, E> {
                u64::try_from(v)
                    .map(SKind::UInt)
                    .map_err(|_| E::custom("integer out of range"))
            }
            fn visit_f64<E>(self, v: f64) -> Result<SKind, E> {
                Ok(SKind::Float(v))
            }
            fn visit_str<E>(self, v: &str) -> Result<SKind, E> {
                Ok(SKind::Str(v.to_string()))
            }
            fn visit_string<E>(self, v: String) -> Result<SKind, E> {
                Ok(SKind::Str(v))
            }
            fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<SKind, E> {
                String::from_utf8(v.to_vec())
                    .map(SKind::Str)
                    .map_err(|_| E::custom("binary value is not UTF-8"))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<SKind, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = a.next_element::<SNode>()? {
                    items.push(item);
                }
                Ok(SKind::Seq(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<SKind, A::Error> {
                let mut entries = Vec::new();
                while let Some(k) = a.next_key::<SNode>()? {
                    let v = a.next_value::<SNode>()?;
                    entries.push((k, v));
                }
                Ok(SKind::Map(entries))
            }
        }
        d.deserialize_any(V)
    }
}

/// Parser options: YAML 1.2 core schema with only `true`/`false` as booleans, duplicate keys
/// rejected (the default), merge keys applied (the default), and budgets large enough for
/// generated files of many thousands of objects but still bounded.
fn yaml_options(mode: Mode) -> serde_saphyr::Options {
    let duplicate_keys = match mode {
        Mode::Git | Mode::Rendered => serde_saphyr::DuplicateKeyPolicy::Error,
        // Every entry reaches the tree, where the duplicate is reported as a warning.
        Mode::Live => serde_saphyr::DuplicateKeyPolicy::PassThrough,
    };
    serde_saphyr::options! {
        strict_booleans: true,
        duplicate_keys: duplicate_keys,
        with_snippet: false,
        reject_unsupported_tags: true,
        budget: serde_saphyr::budget! {
            max_documents: 200_000,
            max_nodes: 20_000_000,
            max_events: 40_000_000,
            // One below serde_json's recursion limit (128 counts the level that fails), so
            // an object parsed here can be written as JSON and read back.
            max_depth: 127,
            // A renderer's output is one stream, bounded by `source.limits.maxBytes` (256 MiB
            // by default) before it is parsed; the parser's own default (64 MiB) is lower.
            max_total_scalar_bytes: 1 << 30,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 200_000,
        },
    }
}
