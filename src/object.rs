//! The shared vocabulary: objects, object keys and revisions.
//!
//! An [`Object`] is a JSON document in the Kubernetes shape (`apiVersion`, `kind`, `metadata`,
//! declared fields such as `spec` or `data`, and `status`). Its identity is an [`ObjectKey`]:
//! (API group, kind, namespace, name). The version in `apiVersion` is not part of identity,
//! as in Kubernetes, where `apps/v1` and `apps/v1beta2` name the same stored object.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The API group under which driftless keeps its own records (inventories, app status) in the
/// same store as the objects it applies. Objects in this group are never declared from Git.
pub const RESERVED_GROUP: &str = "driftless.io";

/// `apiVersion` of driftless's own records.
pub const RESERVED_API_VERSION: &str = "driftless.io/v1";

/// Errors from reading an object's identity.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// The document is not a JSON/YAML mapping.
    #[error("an object must be a mapping, not {0}")]
    NotAMapping(&'static str),
    /// A required identity field is absent.
    #[error("`{0}` is missing")]
    MissingField(&'static str),
    /// An identity field is present but is not a string (an unrendered template, a number...).
    #[error("`{field}` must be a string, not {found}")]
    NotAString {
        /// Dotted path of the field, e.g. `metadata.name`.
        field: &'static str,
        /// The JSON type found instead.
        found: &'static str,
    },
}

/// The identity of an object: (API group, kind, namespace, name).
///
/// `group` is empty for the core group (`v1` kinds such as `Service`), `namespace` is empty for
/// cluster-scoped objects. Ordering is lexicographic by (group, kind, namespace, name), which
/// is the order of keys in the store.
///
/// The four parts are kept one after another in one shared string: a key is one allocation,
/// a clone costs a reference count, and a comparison reads one block of memory instead of
/// following four pointers (maps of 10,000 keys compare them millions of times per sync).
/// Serialized as `{"group", "kind", "namespace", "name"}`.
#[derive(Clone)]
pub struct ObjectKey {
    /// group, kind, namespace and name, one after another.
    text: Arc<str>,
    /// Where group, kind and namespace end in `text`.
    ends: [u32; 3],
}

impl ObjectKey {
    /// Builds a key from its four parts.
    ///
    /// # Panics
    ///
    /// When the parts are together longer than 4 GiB.
    pub fn new(
        group: impl AsRef<str>,
        kind: impl AsRef<str>,
        namespace: impl AsRef<str>,
        name: impl AsRef<str>,
    ) -> Self {
        let parts = [
            group.as_ref(),
            kind.as_ref(),
            namespace.as_ref(),
            name.as_ref(),
        ];
        let mut text = String::with_capacity(parts.iter().map(|p| p.len()).sum());
        let mut ends = [0u32; 3];
        for (i, p) in parts.iter().enumerate() {
            text.push_str(p);
            if i < 3 {
                ends[i] = u32::try_from(text.len()).expect("an object key under 4 GiB");
            }
        }
        u32::try_from(text.len()).expect("an object key under 4 GiB");
        Self {
            text: Arc::from(text),
            ends,
        }
    }

    /// API group: the part of `apiVersion` before the `/`, or empty for the core group.
    #[inline]
    pub fn group(&self) -> &str {
        &self.text[..self.ends[0] as usize]
    }

    /// Kind, e.g. `Deployment`. Case-sensitive, as in Kubernetes.
    #[inline]
    pub fn kind(&self) -> &str {
        &self.text[self.ends[0] as usize..self.ends[1] as usize]
    }

    /// Namespace, or empty for cluster-scoped objects.
    #[inline]
    pub fn namespace(&self) -> &str {
        &self.text[self.ends[1] as usize..self.ends[2] as usize]
    }

    /// `metadata.name`.
    #[inline]
    pub fn name(&self) -> &str {
        &self.text[self.ends[2] as usize..]
    }

    /// The same key in another namespace.
    pub fn with_namespace(&self, namespace: &str) -> Self {
        Self::new(self.group(), self.kind(), namespace, self.name())
    }

    /// `Kind.group` as kubectl prints it (`Deployment.apps`), or just `Kind` for the core group.
    pub fn kind_group(&self) -> String {
        if self.group().is_empty() {
            self.kind().to_string()
        } else {
            format!("{}.{}", self.kind(), self.group())
        }
    }

    /// True for driftless's own records (group [`RESERVED_GROUP`]).
    pub fn is_reserved(&self) -> bool {
        self.group() == RESERVED_GROUP
    }
}

impl PartialEq for ObjectKey {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.text, &other.text) || (self.ends == other.ends && self.text == other.text)
    }
}

impl Eq for ObjectKey {}

/// The hasher of hash maps and sets keyed by [`ObjectKey`] ([`KeyMap`], [`KeySet`]): foldhash's,
/// seeded at random per process as std's SipHash is (and, like it, not open to keys chosen to
/// collide) and several times faster on a key's 30 to 60 bytes. SipHash was 11% of the
/// instructions of the thread that runs a cold sync of 10,000 objects, hashing the same keys
/// into the maps that follow a commit (issue 18).
pub type KeyHasher = foldhash::fast::RandomState;

/// A hash map keyed by [`ObjectKey`], with [`KeyHasher`]. Made by `KeyMap::default()` or
/// `KeyMap::with_capacity_and_hasher(n, Default::default())`.
pub type KeyMap<V> = std::collections::HashMap<ObjectKey, V, KeyHasher>;

/// A hash set of [`ObjectKey`]s, with [`KeyHasher`].
pub type KeySet = std::collections::HashSet<ObjectKey, KeyHasher>;

impl std::hash::Hash for ObjectKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.ends.hash(state);
        self.text.hash(state);
    }
}

impl Ord for ObjectKey {
    /// Lexicographic by (group, kind, namespace, name), as a derived order over four strings
    /// would be; a shared key is equal without a look at it.
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.text, &other.text) {
            return std::cmp::Ordering::Equal;
        }
        // Parts of the same lengths (the same group, kind and namespace, or ones as long): the
        // first byte that differs falls in the first part that differs, so one comparison of
        // the whole text is the order of the parts.
        if self.ends == other.ends {
            return self.text.as_bytes().cmp(other.text.as_bytes());
        }
        short_cmp(self.group(), other.group())
            .then_with(|| short_cmp(self.kind(), other.kind()))
            .then_with(|| short_cmp(self.namespace(), other.namespace()))
            .then_with(|| short_cmp(self.name(), other.name()))
    }
}

impl PartialOrd for ObjectKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// `a.cmp(b)` as byte strings, with a byte loop for short strings.
#[inline]
fn short_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() > 24 || b.len() > 24 {
        return a.cmp(b);
    }
    for (x, y) in a.iter().zip(b) {
        if x != y {
            return x.cmp(y);
        }
    }
    a.len().cmp(&b.len())
}

impl fmt::Debug for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectKey")
            .field("group", &self.group())
            .field("kind", &self.kind())
            .field("namespace", &self.namespace())
            .field("name", &self.name())
            .finish()
    }
}

/// The serialized shape of an [`ObjectKey`].
#[derive(Serialize, Deserialize)]
struct KeyParts<'a> {
    #[serde(borrow)]
    group: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    namespace: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    name: std::borrow::Cow<'a, str>,
}

impl Serialize for ObjectKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        KeyParts {
            group: self.group().into(),
            kind: self.kind().into(),
            namespace: self.namespace().into(),
            name: self.name().into(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for ObjectKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let p = KeyParts::deserialize(d)?;
        Ok(Self::new(p.group, p.kind, p.namespace, p.name))
    }
}

impl fmt::Display for ObjectKey {
    /// `Deployment.apps default/frontend`, or `Namespace web` when cluster-scoped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace().is_empty() {
            write!(f, "{} {}", self.kind_group(), self.name())
        } else {
            write!(
                f,
                "{} {}/{}",
                self.kind_group(),
                self.namespace(),
                self.name()
            )
        }
    }
}

/// A commit id (40 hexadecimal characters for SHA-1 repositories).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Revision(pub String);

impl Revision {
    /// The first 12 characters, for messages.
    pub fn short(&self) -> &str {
        self.0.get(..12).unwrap_or(&self.0)
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An object: a JSON mapping whose `apiVersion`, `kind` and `metadata.name` are strings.
///
/// Construct it with [`Object::from_value`], which checks those fields, so the accessors for
/// identity never fail. Key order is preserved (`serde_json`'s `preserve_order`), so an object
/// prints in the order it was declared.
///
/// The mapping is shared: cloning an object costs a reference count, not a copy of its fields
/// (a desired set, the inventory's last-applied copies and a plan's steps hold the same
/// declarations), and the first change through [`Object::as_map_mut`] or
/// [`Object::metadata_mut`] of a shared object copies it (copy on write), so no holder ever
/// sees another's change.
///
/// An object read back from stored text ([`Object::from_stored_text`]) keeps that text and is
/// decoded at its first look past its identity: a new process that takes a set up from its
/// inventory and finds nothing moved never decodes it (10,000 objects: tens of MB and most of
/// a start-up).
#[derive(Clone)]
pub struct Object(Repr);

#[derive(Clone)]
enum Repr {
    Map(Arc<Mapped>),
    Stored(Arc<StoredText>),
}

/// An object's mapping, and its key once asked for ([`Object::key`]): a key is read from four
/// fields (the group out of `apiVersion`) and made into a string, and a sync asks for the key
/// of each object several times (the desired set's order, the commit's check that no key is
/// written twice, the stored result); a third of the time of the thread that makes a commit's
/// texts went to it. A change through [`Object::as_map_mut`] forgets it.
#[derive(Clone)]
struct Mapped {
    map: Map<String, Value>,
    key: std::sync::OnceLock<ObjectKey>,
}

impl Mapped {
    fn new(map: Map<String, Value>) -> Arc<Self> {
        Arc::new(Mapped {
            map,
            key: std::sync::OnceLock::new(),
        })
    }
}

/// An object's stored JSON text, its key read from it, and the mapping once decoded.
struct StoredText {
    text: Box<str>,
    key: ObjectKey,
    map: std::sync::OnceLock<Map<String, Value>>,
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Object").field(self.map()).finish()
    }
}

impl PartialEq for Object {
    /// Equal fields; a shared mapping is equal without a look at them.
    fn eq(&self, other: &Self) -> bool {
        if self.same(other) {
            return true;
        }
        if let (Repr::Stored(a), Repr::Stored(b)) = (&self.0, &other.0)
            && a.text == b.text
        {
            return true;
        }
        self.map() == other.map()
    }
}

impl Serialize for Object {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.map().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Object::from_value(Value::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl TryFrom<Value> for Object {
    type Error = Error;
    fn try_from(value: Value) -> Result<Self, Error> {
        Object::from_value(value)
    }
}

impl From<Object> for Value {
    /// The mapping, moved out when this is its only holder, copied otherwise.
    fn from(o: Object) -> Value {
        match o.0 {
            Repr::Map(m) => Value::Object(Arc::unwrap_or_clone(m).map),
            Repr::Stored(t) => Value::Object(t.decoded().clone()),
        }
    }
}

/// Mappings of at most this many fields are searched in order ([`field_of`]).
const SCAN_FIELDS: usize = 12;

/// `map[field]`. An object's top level and its `metadata` hold a handful of fields, where
/// comparing each name is several times faster than hashing the one looked for (serde_json's
/// ordered mapping hashes with SipHash); larger mappings are looked up by hash.
pub(crate) fn field_of<'a>(map: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    if map.len() <= SCAN_FIELDS {
        map.iter()
            .find(|(k, _)| k.as_str() == field)
            .map(|(_, v)| v)
    } else {
        map.get(field)
    }
}

/// The JSON type name of a value, for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

impl StoredText {
    fn decoded(&self) -> &Map<String, Value> {
        self.map
            .get_or_init(|| match parse_json_compact(&self.text) {
                Ok(Value::Object(m)) => m,
                // Checked whole, as this decode reads it, when it was read
                // (`Object::from_stored_text`: `stored_head`).
                _ => unreachable!("stored text checked as a JSON mapping"),
            })
    }
}

impl Object {
    fn map(&self) -> &Map<String, Value> {
        match &self.0 {
            Repr::Map(m) => &m.map,
            Repr::Stored(t) => t.decoded(),
        }
    }

    /// An object from its stored JSON text, as driftless wrote it (an inventory entry): its
    /// identity is read and checked now, the rest decoded at the first look past it. The text
    /// is kept: [`Object::to_json`] gives it back as it is, so it must be compact JSON, as
    /// [`Object::to_json`] writes it.
    ///
    /// # Errors
    ///
    /// When the text is not one JSON mapping, or as [`Object::from_value`] for its identity
    /// fields (with the mapping decoded to find them).
    pub fn from_stored_text(text: &str) -> Result<Self, String> {
        // One pass checks the whole text as the decode at the first look will read it
        // (numbers in range, nesting within serde_json's 128, no lone surrogate), so that
        // decode cannot fail, and picks out the identity. Anything else (not a mapping, a
        // field twice, a type the identity does not take) is decoded whole now, which judges
        // it as `from_value` does.
        let Some(head) = stored_head(text).map_err(|e| e.to_string())? else {
            let value = parse_json_compact(text).map_err(|e| e.to_string())?;
            return Object::from_value(value).map_err(|e| e.to_string());
        };
        let StoredHead {
            api_version,
            kind,
            name,
            namespace,
        } = head;
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        let key = ObjectKey::new(group, &kind, namespace.as_deref().unwrap_or(""), &name);
        Ok(Object(Repr::Stored(Arc::new(StoredText {
            text: text.into(),
            key,
            map: std::sync::OnceLock::new(),
        }))))
    }

    /// Checks the identity fields and wraps the mapping.
    ///
    /// # Errors
    ///
    /// [`Error::NotAMapping`] when `value` is not a mapping; [`Error::MissingField`] when
    /// `apiVersion`, `kind`, `metadata` or `metadata.name` is absent; [`Error::NotAString`] when
    /// one of them (or `metadata.namespace`) is not a string, e.g. an unrendered Helm template.
    pub fn from_value(value: Value) -> Result<Self, Error> {
        let Value::Object(map) = value else {
            return Err(Error::NotAMapping(type_name(&value)));
        };
        for field in ["apiVersion", "kind"] {
            match field_of(&map, field) {
                None | Some(Value::Null) => return Err(Error::MissingField(field)),
                Some(Value::String(_)) => {}
                Some(other) => {
                    return Err(Error::NotAString {
                        field,
                        found: type_name(other),
                    });
                }
            }
        }
        let meta = match field_of(&map, "metadata") {
            None | Some(Value::Null) => return Err(Error::MissingField("metadata")),
            Some(Value::Object(m)) => m,
            Some(other) => {
                return Err(Error::NotAString {
                    field: "metadata",
                    found: type_name(other),
                });
            }
        };
        match field_of(meta, "name") {
            None | Some(Value::Null) => return Err(Error::MissingField("metadata.name")),
            Some(Value::String(_)) => {}
            Some(other) => {
                return Err(Error::NotAString {
                    field: "metadata.name",
                    found: type_name(other),
                });
            }
        }
        match field_of(meta, "namespace") {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(other) => {
                return Err(Error::NotAString {
                    field: "metadata.namespace",
                    found: type_name(other),
                });
            }
        }
        Ok(Object(Repr::Map(Mapped::new(map))))
    }

    /// Builds one of driftless's own records: `apiVersion: driftless.io/v1`, the given kind and
    /// name, cluster-scoped, with `body` merged in at the top level.
    pub fn reserved(kind: &str, name: &str, body: Map<String, Value>) -> Self {
        let mut map = Map::new();
        map.insert("apiVersion".into(), RESERVED_API_VERSION.into());
        map.insert("kind".into(), kind.into());
        let mut meta = Map::new();
        meta.insert("name".into(), name.into());
        map.insert("metadata".into(), Value::Object(meta));
        map.extend(body);
        Object(Repr::Map(Mapped::new(map)))
    }

    fn str_field(&self, field: &str) -> &str {
        field_of(self.map(), field)
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `apiVersion`, e.g. `apps/v1`.
    pub fn api_version(&self) -> &str {
        self.str_field("apiVersion")
    }

    /// API group: `apps` for `apps/v1`, empty for `v1`.
    pub fn group(&self) -> &str {
        match self.api_version().rsplit_once('/') {
            Some((group, _)) => group,
            None => "",
        }
    }

    /// API version within the group: `v1` for `apps/v1`.
    pub fn version(&self) -> &str {
        match self.api_version().rsplit_once('/') {
            Some((_, version)) => version,
            None => self.api_version(),
        }
    }

    /// `kind`.
    pub fn kind(&self) -> &str {
        self.str_field("kind")
    }

    /// `metadata` as a mapping.
    pub fn metadata(&self) -> &Map<String, Value> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        field_of(self.map(), "metadata")
            .and_then(Value::as_object)
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    /// `metadata` as a mutable mapping, created when absent.
    pub fn metadata_mut(&mut self) -> &mut Map<String, Value> {
        let entry = self
            .as_map_mut()
            .entry("metadata")
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        match entry {
            Value::Object(m) => m,
            _ => unreachable!("metadata was just made a mapping"),
        }
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        field_of(self.metadata(), "name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `metadata.namespace`, or empty.
    pub fn namespace(&self) -> &str {
        field_of(self.metadata(), "namespace")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// Sets `metadata.namespace`.
    pub fn set_namespace(&mut self, namespace: &str) {
        self.metadata_mut()
            .insert("namespace".into(), Value::String(namespace.into()));
    }

    /// The object's identity: read from its fields at the first call, then kept with the
    /// mapping (shared by its clones) until a change through [`Object::as_map_mut`].
    pub fn key(&self) -> ObjectKey {
        match &self.0 {
            Repr::Stored(t) => t.key.clone(),
            Repr::Map(m) => m
                .key
                .get_or_init(|| {
                    ObjectKey::new(self.group(), self.kind(), self.namespace(), self.name())
                })
                .clone(),
        }
    }

    /// `metadata.resourceVersion` as a number: the store revision of the object's last write.
    /// `None` when absent or not a decimal number.
    pub fn resource_version(&self) -> Option<u64> {
        match field_of(self.metadata(), "resourceVersion")? {
            Value::String(s) => s.parse().ok(),
            Value::Number(n) => n.as_u64(),
            _ => None,
        }
    }

    /// `metadata.generation`, or 0 when absent.
    pub fn generation(&self) -> u64 {
        field_of(self.metadata(), "generation")
            .and_then(Value::as_u64)
            .unwrap_or(0)
    }

    /// The object as a JSON mapping.
    pub fn as_map(&self) -> &Map<String, Value> {
        self.map()
    }

    /// The object as a mutable JSON mapping (copied first when shared). Callers must keep
    /// `apiVersion`, `kind` and `metadata.name` strings.
    pub fn as_map_mut(&mut self) -> &mut Map<String, Value> {
        if let Repr::Stored(t) = &self.0 {
            self.0 = Repr::Map(Mapped::new(t.decoded().clone()));
        }
        match &mut self.0 {
            Repr::Map(m) => {
                let m = Arc::make_mut(m);
                // The caller may change the identity fields.
                m.key.take();
                &mut m.map
            }
            Repr::Stored(_) => unreachable!("made a mapping above"),
        }
    }

    /// True when `self` and `other` share one mapping (one is a clone of the other, neither
    /// changed since): equal without comparing their fields.
    pub fn same(&self, other: &Object) -> bool {
        match (&self.0, &other.0) {
            (Repr::Map(a), Repr::Map(b)) => Arc::ptr_eq(a, b),
            (Repr::Stored(a), Repr::Stored(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Equal fields in the same order, compared in one walk of both without hashing a key:
    /// true implies `==`; false may still be `==` (the same fields in another order). For
    /// telling copies of the same text apart quickly (an inventory entry and the declaration
    /// it was written from).
    pub fn equal_in_order(&self, other: &Object) -> bool {
        fn value(a: &Value, b: &Value) -> bool {
            match (a, b) {
                (Value::Object(a), Value::Object(b)) => map(a, b),
                (Value::Array(a), Value::Array(b)) => {
                    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| value(x, y))
                }
                _ => a == b,
            }
        }
        fn map(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
            a.len() == b.len()
                && a.iter()
                    .zip(b)
                    .all(|((ka, va), (kb, vb))| ka == kb && value(va, vb))
        }
        self.same(other) || map(self.map(), other.map())
    }

    /// A field at the top level (`spec`, `data`, `status`, ...).
    pub fn get(&self, field: &str) -> Option<&Value> {
        field_of(self.map(), field)
    }

    /// True for core `Secret` objects, whose `data` and `stringData` values are masked
    /// wherever driftless shows them.
    pub fn is_secret(&self) -> bool {
        self.group().is_empty() && self.kind() == "Secret"
    }

    /// Serializes the object as compact JSON.
    pub fn to_json(&self) -> String {
        if let Repr::Stored(t) = &self.0 {
            return t.text.to_string();
        }
        // A map of JSON values always serializes.
        serde_json::to_string(self.map()).unwrap_or_default()
    }

    /// Appends [`Self::to_json`] to `out` without making a string of its own.
    ///
    /// # Errors
    ///
    /// A `serde_json` error when writing fails (a map of JSON values into a vector does not).
    pub fn write_json(&self, out: &mut Vec<u8>) -> Result<(), serde_json::Error> {
        if let Repr::Stored(t) = &self.0 {
            out.extend_from_slice(t.text.as_bytes());
            return Ok(());
        }
        serde_json::to_writer(out, self.map())
    }

    /// [`Self::write_json`] (the same bytes), also giving where in `out` it wrote the closing
    /// brace of the `metadata` mapping: where a store puts the fields it sets when it writes
    /// the object from this text ([`crate::store::ObjectJson`]). `None` when `metadata` is not
    /// a mapping, or when the object is kept as the text it was read from.
    ///
    /// # Errors
    ///
    /// As [`Self::write_json`] (a map of JSON values always serializes).
    pub fn write_json_marked(&self, out: &mut Vec<u8>) -> Result<Option<usize>, serde_json::Error> {
        let Repr::Map(m) = &self.0 else {
            self.write_json(out)?;
            return Ok(None);
        };
        // serde_json's compact form of a map, an entry at a time.
        let mut close = None;
        out.push(b'{');
        for (i, (k, v)) in m.map.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, k)?;
            out.push(b':');
            serde_json::to_writer(&mut *out, v)?;
            if k == "metadata" && v.is_object() {
                close = Some(out.len() - 1);
            }
        }
        out.push(b'}');
        Ok(close)
    }

    /// Bytes of [`Self::to_json`], counted without building the text.
    pub fn json_len(&self) -> usize {
        struct Count(usize);
        impl std::io::Write for Count {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0 += buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        if let Repr::Stored(t) = &self.0 {
            return t.text.len();
        }
        let mut count = Count(0);
        // A map of JSON values always serializes; the counter never fails.
        let _ = serde_json::to_writer(&mut count, self.map());
        count.0
    }
}

/// True when objects of this kind have no namespace.
///
/// Without an API server to ask, driftless knows scope from this list of the cluster-scoped kinds
/// of Kubernetes itself (from `kubectl api-resources --namespaced=false` on Kubernetes 1.31) and
/// of widely used projects (cert-manager, Gateway API, Flux). Every other kind is namespaced: an
/// object that declares no namespace gets the app's `target.namespace`. An object that declares
/// a namespace keeps it whatever its kind.
pub fn is_cluster_scoped(group: &str, kind: &str) -> bool {
    const CLUSTER_SCOPED: &[(&str, &str)] = &[
        ("", "Namespace"),
        ("", "Node"),
        ("", "PersistentVolume"),
        ("", "ComponentStatus"),
        ("rbac.authorization.k8s.io", "ClusterRole"),
        ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
        ("apiextensions.k8s.io", "CustomResourceDefinition"),
        ("apiregistration.k8s.io", "APIService"),
        ("storage.k8s.io", "StorageClass"),
        ("storage.k8s.io", "CSIDriver"),
        ("storage.k8s.io", "CSINode"),
        ("storage.k8s.io", "VolumeAttachment"),
        ("scheduling.k8s.io", "PriorityClass"),
        ("node.k8s.io", "RuntimeClass"),
        ("networking.k8s.io", "IngressClass"),
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration",
        ),
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
        ),
        ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
        (
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicyBinding",
        ),
        ("admissionregistration.k8s.io", "InitializerConfiguration"),
        ("certificates.k8s.io", "CertificateSigningRequest"),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
        ("policy", "PodSecurityPolicy"),
        ("extensions", "PodSecurityPolicy"),
        ("cert-manager.io", "ClusterIssuer"),
        ("gateway.networking.k8s.io", "GatewayClass"),
    ];
    CLUSTER_SCOPED
        .iter()
        .any(|(g, k)| *g == group && *k == kind)
}

// ---------------------------------------------------------------------------------------------
// Kubernetes naming rules (k8s.io/apimachinery/pkg/util/validation). Each returns why a value
// breaks the rule, or `None`. Names are never changed to fit: the message says what to write.

/// When `s` breaks the rule only by its uppercase letters (its lowercase form is `valid`), says
/// what to write. Otherwise `None`: suggesting a lowercase form that is still invalid (`x_bad`,
/// `{{ .values.name }}`) would only send the reader round again.
fn uppercase_hint(s: &str, valid: impl Fn(&str) -> bool) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    (lower != s && valid(&lower)).then(|| {
        format!(
            "must be lowercase (Kubernetes rejects uppercase; driftless does not change it: write `{lower}`)"
        )
    })
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, non-empty.
fn is_label_shaped(p: &str) -> bool {
    !p.is_empty()
        && p.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && p.starts_with(|c: char| c.is_ascii_alphanumeric())
        && p.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// `text` with its control characters escaped as Rust writes them (`\n`, `\u{1b}`): what
/// any output that quotes a name, path or value read from outside prints, so that a newline
/// cannot forge a line and an escape sequence cannot reach the terminal.
pub fn printable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// RFC 1123 label (namespaces, Services, app names): at most 63 characters of lowercase
/// letters, digits and `-`, starting and ending with a letter or digit.
pub fn dns1123_label_error(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("must not be empty".into());
    }
    if s.len() > 63 {
        return Some(format!(
            "must be at most 63 characters (it has {})",
            s.len()
        ));
    }
    if let Some(hint) = uppercase_hint(s, is_label_shaped) {
        return Some(hint);
    }
    (!is_label_shaped(s)).then(|| {
        "must consist of lowercase letters, digits and '-', and start and end with a letter or digit (RFC 1123 label)".into()
    })
}

/// RFC 1123 subdomain (most object names): at most 253 characters, RFC 1123 labels joined by
/// dots.
pub fn dns1123_subdomain_error(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("must not be empty".into());
    }
    if s.len() > 253 {
        return Some(format!(
            "must be at most 253 characters (it has {})",
            s.len()
        ));
    }
    if let Some(hint) = uppercase_hint(s, |l| l.split('.').all(is_label_shaped)) {
        return Some(hint);
    }
    (!s.split('.').all(is_label_shaped)).then(|| {
        "must consist of lowercase letters, digits, '-' and '.', and start and end with a letter or digit (RFC 1123 subdomain)".into()
    })
}

/// Path segment name (RBAC kinds): anything but `/` and `%`, and not `.` or `..`.
pub fn path_segment_error(s: &str) -> Option<String> {
    if s.is_empty() {
        return Some("must not be empty".into());
    }
    if s == "." || s == ".." {
        return Some(format!("must not be `{s}`"));
    }
    (s.contains('/') || s.contains('%')).then(|| "must not contain '/' or '%'".into())
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, non-empty: the shape of label values and of the
/// name part of qualified names.
fn is_qualified_shaped(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// Label values: empty, or at most 63 characters of letters, digits, `-`, `_` and `.`,
/// starting and ending with a letter or digit.
pub fn label_value_error(s: &str) -> Option<String> {
    if s.len() > 63 {
        return Some(format!(
            "must be at most 63 characters (it has {})",
            s.len()
        ));
    }
    (!s.is_empty() && !is_qualified_shaped(s)).then(|| {
        "must be empty or consist of letters, digits, '-', '_' and '.', starting and ending with a letter or digit".into()
    })
}

/// Label and annotation keys: `[prefix/]name`, the prefix an RFC 1123 subdomain, the name at
/// most 63 characters shaped like a label value.
pub fn qualified_name_error(s: &str) -> Option<String> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix
        && let Some(e) = dns1123_subdomain_error(p)
    {
        return Some(format!("prefix `{p}` {e}"));
    }
    if name.is_empty() || name.len() > 63 {
        return Some("name part must be 1 to 63 characters".into());
    }
    (!is_qualified_shaped(name)).then(|| {
        "name part must consist of letters, digits, '-', '_' and '.', starting and ending with a letter or digit".into()
    })
}

/// Parses JSON text into a [`Value`] whose mappings and lists are allocated at their exact
/// size. `serde_json::from_str::<Value>` grows each one as it reads it (a mapping of 5 keys
/// ends with room for 8, and its index table with it): for what driftless reads back in bulk
/// (an inventory's 10,000 entries, a listing), that slack is more than half the memory the
/// objects take. Same result otherwise: duplicate keys keep the last value, as serde_json does;
/// serde_json's recursion limit (128) holds. One difference: with serde_json's `raw_value`
/// feature on, its parse reads a mapping whose only key is its private raw-value token as that
/// raw value; this one keeps the mapping, as the text says.
///
/// # Errors
///
/// A `serde_json` error (with line and column) when the text is not one JSON value.
pub fn parse_json_compact(text: &str) -> serde_json::Result<Value> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Compact.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// The identity of a stored object, read in the pass that checks its text.
struct StoredHead<'a> {
    api_version: Cow<'a, str>,
    kind: Cow<'a, str>,
    name: Cow<'a, str>,
    namespace: Option<Cow<'a, str>>,
}

/// Checks `text` as [`parse_json_compact`] reads it (one JSON value, numbers in range, nesting
/// within serde_json's recursion limit, valid escapes), building nothing but the identity of
/// the object it holds: `Ok(None)` when it is not a mapping whose `apiVersion`, `kind`,
/// `metadata.name` (and `metadata.namespace`, when there) are strings each given once.
///
/// # Errors
///
/// The error [`parse_json_compact`] would give.
fn stored_head(text: &str) -> serde_json::Result<Option<StoredHead<'_>>> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_str(text);
    let head = HeadSeed.deserialize(&mut de)?;
    de.end()?;
    Ok(head)
}

/// The seed and visitor of [`stored_head`]: the top-level mapping.
struct HeadSeed;

impl<'de> serde::de::DeserializeSeed<'de> for HeadSeed {
    type Value = Option<StoredHead<'de>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(Picked(self))
    }
}

impl<'de> Pick<'de> for HeadSeed {
    type Value = Option<StoredHead<'de>>;

    fn map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        let (mut api_version, mut kind, mut meta) = (None, None, None);
        each_entry(map, |key, map| {
            match key {
                "apiVersion" => api_version = map.next_value_seed(StrSeed)?,
                "kind" => kind = map.next_value_seed(StrSeed)?,
                "metadata" => meta = map.next_value_seed(MetaSeed)?,
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(match (api_version, kind, meta) {
            (Some(api_version), Some(kind), Some((name, namespace))) => Some(StoredHead {
                api_version,
                kind,
                name,
                namespace,
            }),
            _ => None,
        })
    }
}

/// `metadata`: its `name`, and its `namespace` when there is one; `None` when either is not a
/// string.
struct MetaSeed;

/// A name, and a namespace when there is one.
type NameAndNamespace<'a> = (Cow<'a, str>, Option<Cow<'a, str>>);

impl<'de> serde::de::DeserializeSeed<'de> for MetaSeed {
    type Value = Option<NameAndNamespace<'de>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(Picked(self))
    }
}

impl<'de> Pick<'de> for MetaSeed {
    type Value = Option<NameAndNamespace<'de>>;

    fn map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        // Each slot: absent, or the last value given (`None` when it is not a string).
        let (mut name, mut namespace) = (None, None);
        each_entry(map, |key, map| {
            match key {
                "name" => name = Some(map.next_value_seed(StrSeed)?),
                "namespace" => namespace = Some(map.next_value_seed(StrSeed)?),
                _ => return Ok(false),
            }
            Ok(true)
        })?;
        Ok(match (name, namespace) {
            (Some(Some(name)), None) => Some((name, None)),
            (Some(Some(name)), Some(Some(ns))) => Some((name, Some(ns))),
            _ => None,
        })
    }
}

/// Reads a mapping's entries: `take` reads the value of a key it wants and says so (a key
/// given twice is read twice: the last value wins, as in a decoded mapping); every other
/// value is checked as [`Check`] does.
fn each_entry<'de, A: serde::de::MapAccess<'de>>(
    mut map: A,
    mut take: impl FnMut(&str, &mut A) -> Result<bool, A::Error>,
) -> Result<(), A::Error> {
    while let Some(key) = map.next_key_seed(KeySeed)? {
        if !take(&key, &mut map)? {
            map.next_value_seed(Check)?;
        }
    }
    Ok(())
}

/// A value that is kept when it is a string (`None` otherwise, checked all the same).
struct StrSeed;

impl<'de> serde::de::DeserializeSeed<'de> for StrSeed {
    type Value = Option<Cow<'de, str>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(Picked(self))
    }
}

impl<'de> Pick<'de> for StrSeed {
    type Value = Option<Cow<'de, str>>;

    fn borrowed(self, s: &'de str) -> Self::Value {
        Some(Cow::Borrowed(s))
    }

    fn owned(self, s: &str) -> Self::Value {
        Some(Cow::Owned(s.to_owned()))
    }
}

/// A mapping key, borrowed from the text when it has no escapes.
struct KeySeed;

impl<'de> serde::de::DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(Picked(StrSeed))?
            .ok_or_else(|| serde::de::Error::custom("a mapping key that is not a string"))
    }
}

/// A value checked as [`Compact`] reads it (numbers in range, nesting, escapes), kept nowhere.
struct Check;

impl<'de> serde::de::DeserializeSeed<'de> for Check {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(Picked(self))
    }
}

impl Pick<'_> for Check {
    type Value = ();
}

/// What [`Picked`] keeps of a value: a string, or what a mapping holds; anything else is
/// checked (as [`Check`] does) and gives `Value::default()`.
trait Pick<'de>: Sized {
    type Value: Default;

    /// A string without escapes, borrowed from the text.
    fn borrowed(self, s: &'de str) -> Self::Value {
        self.owned(s)
    }

    /// A string the parser unescaped into its scratch buffer.
    fn owned(self, _: &str) -> Self::Value {
        Self::Value::default()
    }

    /// A mapping; by default each entry is checked.
    fn map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        each_entry(map, |_, _| Ok(false)).map(|()| Self::Value::default())
    }
}

/// The visitor of a [`Pick`].
struct Picked<P>(P);

impl<'de, P: Pick<'de>> serde::de::Visitor<'de> for Picked<P> {
    type Value = P::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<P::Value, E> {
        Ok(P::Value::default())
    }

    fn visit_i64<E>(self, _: i64) -> Result<P::Value, E> {
        Ok(P::Value::default())
    }

    fn visit_u64<E>(self, _: u64) -> Result<P::Value, E> {
        Ok(P::Value::default())
    }

    fn visit_f64<E>(self, _: f64) -> Result<P::Value, E> {
        Ok(P::Value::default())
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<P::Value, E> {
        Ok(self.0.borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<P::Value, E> {
        Ok(self.0.owned(v))
    }

    fn visit_unit<E>(self) -> Result<P::Value, E> {
        Ok(P::Value::default())
    }

    fn visit_none<E>(self) -> Result<P::Value, E> {
        Ok(P::Value::default())
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<P::Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<P::Value, A::Error> {
        while seq.next_element_seed(Check)?.is_some() {}
        Ok(P::Value::default())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<P::Value, A::Error> {
        self.0.map(map)
    }
}

/// The seed and visitor of [`parse_json_compact`].
struct Compact;

impl<'de> serde::de::DeserializeSeed<'de> for Compact {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Compact {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Compact)? {
            items.push(item);
        }
        items.shrink_to_fit();
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut entries: Vec<(String, Value)> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(Compact)?;
            entries.push((key, value));
        }
        let mut out = Map::with_capacity(entries.len());
        for (key, value) in entries {
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// Lookups in a map of keys asked in ascending order: one walk of the map beside them (a
/// comparison or two per key) instead of a search from the root each (about 20 comparisons at
/// 10,000 keys: 8 ms of a cold sync's health pass). A key asked out of order, or not in the
/// map, is searched for: the answer is the map's in every case.
pub struct InOrder<'a, K, V> {
    map: &'a std::collections::BTreeMap<K, V>,
    at: std::iter::Peekable<std::collections::btree_map::Iter<'a, K, V>>,
}

impl<'a, K: std::borrow::Borrow<ObjectKey> + Ord, V> InOrder<'a, K, V> {
    /// Lookups in `map` (keyed by keys or by references to them), from its first key.
    pub fn new(map: &'a std::collections::BTreeMap<K, V>) -> Self {
        InOrder {
            map,
            at: map.iter().peekable(),
        }
    }

    /// `map.get(key)`.
    pub fn get(&mut self, key: &ObjectKey) -> Option<&'a V> {
        while self.at.next_if(|(k, _)| (*k).borrow() < key).is_some() {}
        match self.at.peek() {
            Some((k, v)) if (*k).borrow() == key => Some(*v),
            _ => self.map.get(key),
        }
    }
}

/// The keys of two sorted sequences (the keys of two maps), in order, each once (a key in
/// both taken once): a union made in one walk of both, where collecting them into a set cloned
/// and sorted both.
pub fn sorted_union<'a>(
    a: impl Iterator<Item = &'a ObjectKey>,
    b: impl Iterator<Item = &'a ObjectKey>,
) -> Vec<ObjectKey> {
    let (mut a, mut b) = (a.peekable(), b.peekable());
    let mut keys = Vec::with_capacity(a.size_hint().0);
    loop {
        let next = match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some(_), None) => a.next(),
            (None, Some(_)) => b.next(),
            (Some(x), Some(y)) => match x.cmp(y) {
                std::cmp::Ordering::Less => a.next(),
                std::cmp::Ordering::Greater => b.next(),
                std::cmp::Ordering::Equal => {
                    b.next();
                    a.next()
                }
            },
        };
        keys.extend(next.cloned());
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written with the place of its metadata's closing brace: the same bytes as
    /// `write_json`, the brace where said; none without a metadata mapping or for an object
    /// kept as the text it was read from.
    #[test]
    fn json_written_marked_is_the_same_and_marks_where_metadata_closes() {
        let declared = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a\"}"}, "data": {"metadata": "}"}});
        let with = |metadata: Option<serde_json::Value>| {
            let mut o = Object::from_value(declared.clone()).unwrap();
            match metadata {
                Some(m) => o.as_map_mut().insert("metadata".into(), m),
                None => o.as_map_mut().remove("metadata"),
            };
            o
        };
        for (o, marked) in [
            (Object::from_value(declared.clone()).unwrap(), true),
            (with(Some(serde_json::json!({}))), true),
            (with(Some(serde_json::json!("m"))), false),
            (with(None), false),
        ] {
            let v = serde_json::Value::from(o.clone());
            let mut out = b"xx".to_vec();
            let close = o.write_json_marked(&mut out).unwrap();
            assert_eq!(&out[2..], o.to_json().as_bytes(), "{v}");
            match close {
                Some(at) => {
                    assert!(marked, "{v}");
                    let meta = serde_json::to_string(&v["metadata"]).unwrap();
                    let begins = at + 1 - meta.len();
                    assert_eq!(&out[begins..=at], meta.as_bytes(), "{v}");
                }
                None => assert!(!marked, "{v}"),
            }
        }
        let stored = Object::from_stored_text(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}}"#,
        )
        .unwrap();
        let mut out = Vec::new();
        assert_eq!(stored.write_json_marked(&mut out).unwrap(), None);
        assert_eq!(out, stored.to_json().as_bytes());
    }

    proptest::proptest! {
        /// Lookups in key order, out of order, of keys absent: each the map's own answer.
        #[test]
        fn lookups_in_order_are_the_maps(
            present in proptest::collection::btree_set(0u16..300, 0..100),
            asked in proptest::collection::vec(0u16..300, 0..200),
            sorted in proptest::bool::ANY,
        ) {
            let key = |n: u16| ObjectKey::new("", "ConfigMap", "ns", format!("c{n:03}"));
            let map: std::collections::BTreeMap<ObjectKey, u16> =
                present.iter().map(|n| (key(*n), *n)).collect();
            let mut asked = asked;
            if sorted {
                asked.sort();
            }
            let mut lookups = InOrder::new(&map);
            for n in asked {
                proptest::prop_assert_eq!(lookups.get(&key(n)), map.get(&key(n)));
            }
        }
    }

    /// The key kept with a mapping follows every change of it, and a clone changed apart keeps
    /// its own.
    #[test]
    fn a_kept_key_follows_changes_to_the_object() {
        let mut o = Object::from_value(serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a"}
        }))
        .unwrap();
        assert_eq!(o.key(), ObjectKey::new("apps", "Deployment", "", "a"));
        let shared = o.clone();
        o.set_namespace("n");
        assert_eq!(o.key(), ObjectKey::new("apps", "Deployment", "n", "a"));
        assert_eq!(shared.key(), ObjectKey::new("apps", "Deployment", "", "a"));
        o.as_map_mut().insert(
            "apiVersion".into(),
            Value::String("extensions/v1beta1".into()),
        );
        o.metadata_mut()
            .insert("name".into(), Value::String("b".into()));
        assert_eq!(
            o.key(),
            ObjectKey::new("extensions", "Deployment", "n", "b")
        );
        assert_eq!(Value::from(o)["metadata"]["name"], "b");
    }

    #[test]
    fn a_sorted_union_has_each_key_once_in_order() {
        let k = |n: &str| ObjectKey::new("", "ConfigMap", "ns", n);
        let a = [k("a"), k("c"), k("d")];
        let b = [k("b"), k("c"), k("e")];
        assert_eq!(
            sorted_union(a.iter(), b.iter()),
            [k("a"), k("b"), k("c"), k("d"), k("e")]
        );
        assert_eq!(sorted_union(a.iter(), [].iter()), a);
        assert_eq!(sorted_union([].iter(), b.iter()), b);
        assert!(sorted_union([].iter(), [].iter()).is_empty());
    }

    proptest::proptest! {
        /// The key kept as one string orders, compares and hashes as the four parts would, and
        /// serializes as them.
        #[test]
        fn keys_order_as_their_four_parts(
            a in proptest::collection::vec("[a-c.\\x00-]{0,3}", 4),
            b in proptest::collection::vec("[a-c.\\x00-]{0,3}", 4),
        ) {
            use std::hash::{BuildHasher, RandomState};
            let ka = ObjectKey::new(&a[0], &a[1], &a[2], &a[3]);
            let kb = ObjectKey::new(&b[0], &b[1], &b[2], &b[3]);
            proptest::prop_assert_eq!((ka.group(), ka.kind(), ka.namespace(), ka.name()), (a[0].as_str(), a[1].as_str(), a[2].as_str(), a[3].as_str()));
            proptest::prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
            proptest::prop_assert_eq!(ka == kb, a == b);
            let h = RandomState::new();
            if a == b {
                proptest::prop_assert_eq!(h.hash_one(&ka), h.hash_one(&kb));
            }
            proptest::prop_assert_eq!(ka.cmp(&ka.clone()), std::cmp::Ordering::Equal);
            let json = serde_json::to_value(&ka).unwrap();
            proptest::prop_assert_eq!(&json, &serde_json::json!({"group": a[0], "kind": a[1], "namespace": a[2], "name": a[3]}));
            proptest::prop_assert_eq!(serde_json::from_value::<ObjectKey>(json).unwrap(), ka);
        }
    }

    /// A JSON value's text: strings (escapes too), numbers, null, lists and mappings.
    fn json_text() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just("null".to_string()),
            Just("\"v1\"".to_string()),
            Just("\"a\\u0062\\n\"".to_string()),
            Just("\"\"".to_string()),
            Just("7".to_string()),
            Just("-0.5e3".to_string()),
            Just("true".to_string()),
        ];
        leaf.prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                proptest::collection::vec(("[a-c]", inner), 0..3).prop_map(|v| {
                    let fields: Vec<String> =
                        v.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                    format!("{{{}}}", fields.join(","))
                }),
            ]
        })
    }

    proptest::proptest! {
        /// Whatever the identity fields hold (absent, twice, of any type, escaped), a stored
        /// text reads as its decoded mapping does: the same key and fields, or the same error.
        #[test]
        fn stored_texts_read_as_their_decoded_mappings(
            fields in proptest::collection::vec(
                (proptest::sample::select(vec!["apiVersion", "kind", "metadata", "spec", "x"]), json_text()),
                0..6,
            ),
            meta in proptest::collection::vec(
                (proptest::sample::select(vec!["name", "namespace", "labels"]), json_text()),
                0..4,
            ),
            name in "[a-z\\\\\"]{0,3}",
        ) {
            let meta_text = {
                let mut m: Vec<String> = vec![format!("\"name\":{}", serde_json::to_string(&name).unwrap())];
                m.extend(meta.iter().map(|(k, v)| format!("\"{k}\":{v}")));
                format!("{{{}}}", m.join(","))
            };
            let mut f: Vec<String> = vec![
                "\"apiVersion\":\"g/v1\"".into(),
                "\"kind\":\"K\"".into(),
                format!("\"metadata\":{meta_text}"),
            ];
            f.extend(fields.iter().map(|(k, v)| format!("\"{k}\":{v}")));
            let text = format!("{{{}}}", f.join(","));
            let decoded = parse_json_compact(&text)
                .map_err(|e| e.to_string())
                .and_then(|v| Object::from_value(v).map_err(|e| e.to_string()))
                .map(|o| (o.key(), Value::from(o)));
            let stored = Object::from_stored_text(&text).map(|o| (o.key(), Value::from(o)));
            proptest::prop_assert_eq!(stored, decoded, "{}", text);
        }
    }

    #[test]
    fn objects_from_stored_text_read_as_decoded_ones() {
        let text = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"we\u0062","namespace":"ns","labels":{"a":"1"}},"spec":{"replicas":2,"ratio":0.5}}"#;
        let stored = Object::from_stored_text(text).unwrap();
        let decoded = Object::from_value(parse_json_compact(text).unwrap()).unwrap();
        assert_eq!(
            stored.key(),
            ObjectKey::new("apps", "Deployment", "ns", "web")
        );
        assert_eq!(stored.key(), decoded.key());
        assert_eq!(stored.to_json(), text, "the stored text as it is");
        assert_eq!(stored.json_len(), text.len());
        assert_eq!(stored, decoded);
        assert_eq!(decoded, stored);
        assert_eq!(stored.as_map(), decoded.as_map());
        assert_eq!(stored.name(), "web");
        assert_eq!(Value::from(stored.clone()), Value::from(decoded.clone()));
        assert_eq!(
            serde_json::to_string(&stored).unwrap(),
            decoded.to_json(),
            "serialized from the decoded mapping"
        );
        // A change copies it out of the shared text; its clones keep the text.
        let mut changed = stored.clone();
        changed.set_namespace("other");
        assert_eq!(
            changed.key(),
            ObjectKey::new("apps", "Deployment", "other", "web")
        );
        assert_eq!(stored.key().namespace(), "ns");
        assert_eq!(stored.to_json(), text);
        assert!(!changed.same(&stored));
        // What the head does not take is judged whole, as `from_value` judges it.
        for (bad, why) in [
            (
                r#"["v1","ConfigMap",{"name":"a"}]"#,
                "an object must be a mapping",
            ),
            (
                r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":["a"]}"#,
                "`metadata` must be a string",
            ),
            (
                r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":1}}"#,
                "`metadata.name` must be a string",
            ),
            (
                r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":7}}"#,
                "`metadata.namespace` must be a string",
            ),
            (
                r#"{"apiVersion":"v1","kind":"ConfigMap"}"#,
                "`metadata` is missing",
            ),
            (
                r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}"#,
                "EOF",
            ),
        ] {
            let e = Object::from_stored_text(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        // Whatever the shape, the stored text reads as the decoded one would.
        for text in [
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","name":"b"}}"#,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":null}}"#,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"metadata":{"name":"c"}}"#,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"n","labels":{"x":[1,2,{"y":null}]}}}"#,
            r#"{"kind":"ConfigMap","metadata":{"namespace":"n","name":"a"},"apiVersion":"g/v1"}"#,
            r#"{"apiVersion":"v1","kind":"Config\"Map","metadata":{"name":"a\u00e9"}}"#,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":null}}"#,
            r#"{"apiVersion":1,"kind":"ConfigMap","metadata":{"name":"a"}}"#,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":"a"}"#,
            r#""v1""#,
        ] {
            let decoded = parse_json_compact(text)
                .unwrap()
                .try_into()
                .map(|o: Object| o.key())
                .map_err(|e: Error| e.to_string());
            let stored = Object::from_stored_text(text).map(|o| o.key());
            assert_eq!(stored, decoded, "{text}");
        }
        // A field twice: decoded whole, the last one wins, as in `from_value`.
        let twice =
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"kind":"Secret"}"#;
        let o = Object::from_stored_text(twice).unwrap();
        assert_eq!(o.key(), ObjectKey::new("", "Secret", "", "a"));
        assert_eq!(o.kind(), "Secret");
    }

    /// Texts whose head is good but whose rest a full decode refuses are refused when read,
    /// with the decode's error: no later look at them can panic.
    #[test]
    fn stored_text_a_full_decode_refuses_is_refused_not_a_panic() {
        let head = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":"#;
        let deep = |n: usize| format!("{head}{}1{}}}", "[".repeat(n), "]".repeat(n));
        for (rest, why) in [
            ("1e400}".to_owned(), "number out of range"),
            (r#""\ud800"}"#.to_owned(), "escape"),
            (r#"{"\ud800":1}}"#.to_owned(), "escape"),
            (r#""\q"}"#.to_owned(), "escape"),
        ] {
            let text = format!("{head}{rest}");
            let decoded = parse_json_compact(&text).unwrap_err().to_string();
            let e = Object::from_stored_text(&text).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
            assert_eq!(e, decoded, "the decode's own error");
        }
        // Nesting: whatever the decode takes is taken, and decodes; past it, refused.
        for n in 120..135 {
            let text = deep(n);
            match (parse_json_compact(&text), Object::from_stored_text(&text)) {
                (Ok(v), Ok(o)) => assert_eq!(Value::from(o), v),
                (Err(d), Err(e)) => {
                    assert!(e.contains("recursion limit"), "{n}: {e}");
                    assert_eq!(e, d.to_string());
                }
                (d, o) => panic!("{n} levels: decode {:?}, stored {:?}", d.is_ok(), o.is_ok()),
            }
        }
        assert!(Object::from_stored_text(&deep(125)).is_ok());
        assert!(Object::from_stored_text(&deep(130)).is_err());
    }

    #[test]
    fn equal_in_order_is_equality_where_the_order_is_the_same() {
        let o = |v: Value| Object::from_value(v).unwrap();
        let a = o(
            serde_json::json!({"apiVersion": "v1", "kind": "A", "metadata": {"name": "x"}, "spec": {"l": [1, {"b": 2}]}}),
        );
        assert!(a.equal_in_order(&a.clone()));
        assert!(a.equal_in_order(&o(Value::from(a.clone()))));
        let reordered = o(
            serde_json::json!({"metadata": {"name": "x"}, "apiVersion": "v1", "kind": "A", "spec": {"l": [1, {"b": 2}]}}),
        );
        assert_eq!(a, reordered);
        assert!(!a.equal_in_order(&reordered));
        for other in [
            serde_json::json!({"apiVersion": "v1", "kind": "A", "metadata": {"name": "x"}, "spec": {"l": [1, {"b": 3}]}}),
            serde_json::json!({"apiVersion": "v1", "kind": "A", "metadata": {"name": "x"}, "spec": {"l": [1]}}),
            serde_json::json!({"apiVersion": "v1", "kind": "A", "metadata": {"name": "x"}}),
        ] {
            assert!(!a.equal_in_order(&o(other.clone())), "{other}");
        }
    }

    #[test]
    fn compact_json_is_serde_jsons_value_at_its_exact_size() {
        for text in [
            r#"{"a":1,"b":[1,2.5,-3,"x",null,true,{"c":{}}],"a":2,"d":18446744073709551615}"#,
            "[]",
            r#""s\u00e9""#,
            "1e400",
        ] {
            let compact = parse_json_compact(text);
            let plain = serde_json::from_str::<Value>(text);
            assert_eq!(compact.ok(), plain.ok(), "{text}");
        }
        let v = parse_json_compact(r#"{"a":[1,2,3],"b":{"c":1,"d":2,"e":3}}"#).unwrap();
        assert_eq!(v["a"].as_array().unwrap().capacity(), 3);
        // Not one value: an error with its place.
        let e = parse_json_compact("{\"a\": 1} x").unwrap_err();
        assert_eq!((e.line(), e.column()), (1, 10));
        assert!(parse_json_compact("{\"a\": }").is_err());
    }

    #[test]
    fn a_lowercase_suggestion_is_made_only_when_it_would_be_valid() {
        let hint = dns1123_label_error("Web").unwrap();
        assert!(hint.contains("write `web`"), "{hint}");
        let hint = dns1123_subdomain_error("My.Config").unwrap();
        assert!(hint.contains("write `my.config`"), "{hint}");
        // Lowercasing would not make these valid: no suggestion, the rule instead.
        for bad in ["X_bad", "{{ .Values.name }}"] {
            for e in [dns1123_label_error(bad), dns1123_subdomain_error(bad)] {
                let e = e.unwrap();
                assert!(!e.contains("write `"), "{bad}: {e}");
                assert!(
                    e.contains("must consist of lowercase letters"),
                    "{bad}: {e}"
                );
            }
        }
    }
    use serde_json::json;

    #[test]
    fn key_ignores_version_and_splits_group() {
        let a = Object::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"}}))
        .unwrap();
        let b = Object::from_value(json!({"apiVersion": "apps/v1beta2", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"}}))
        .unwrap();
        assert_eq!(a.key(), b.key());
        assert_eq!(a.key().to_string(), "Deployment.apps default/web");
        let svc = Object::from_value(
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "web"}}),
        )
        .unwrap();
        assert_eq!(svc.group(), "");
        assert_eq!(svc.version(), "v1");
        assert_eq!(svc.key().to_string(), "Namespace web");
    }

    #[test]
    fn from_value_rejects_non_string_identity() {
        let err = Object::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": {"x": null}}}))
        .unwrap_err();
        assert_eq!(
            err,
            Error::NotAString {
                field: "metadata.name",
                found: "a mapping"
            }
        );
        assert_eq!(
            Object::from_value(json!({"kind": "Pod"})).unwrap_err(),
            Error::MissingField("apiVersion")
        );
        assert_eq!(
            Object::from_value(json!([1])).unwrap_err(),
            Error::NotAMapping("a list")
        );
    }

    #[test]
    fn resource_version_reads_strings_and_numbers() {
        let mut o = Object::from_value(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
        )
        .unwrap();
        assert_eq!(o.resource_version(), None);
        o.metadata_mut()
            .insert("resourceVersion".into(), json!("42"));
        assert_eq!(o.resource_version(), Some(42));
    }

    #[test]
    fn scope_table_knows_core_and_rbac_kinds() {
        assert!(is_cluster_scoped("", "Namespace"));
        assert!(is_cluster_scoped(
            "rbac.authorization.k8s.io",
            "ClusterRole"
        ));
        assert!(!is_cluster_scoped("rbac.authorization.k8s.io", "Role"));
        assert!(!is_cluster_scoped("apps", "Deployment"));
    }
}
