//! Reading and writing HAMi's JSON annotations with Go's `encoding/json` semantics.
//!
//! Decoding goes through `serde_json::Value` rather than derived structs because Go's decoder
//! differs from serde's defaults in ways the wire depends on: `null` leaves a field at its zero
//! value, keys match case-insensitively when no exact key exists, a repeated key overwrites the
//! earlier one, and unknown keys are ignored. Going through `Value` also lets every rejection
//! name the entry and field path it rejected.
//!
//! Encoding is hand-written so key order and string escaping match Go's output byte for byte.

use std::fmt::Display;

use serde_json::{Map, Value};

use super::error::CodecError;
use super::gofmt::push_json_string;

/// Longest excerpt of an offending JSON value kept in an error (values can be huge).
const FOUND_EXCERPT_CHARS: usize = 80;

/// Parses `input` as a JSON array; `null` is an empty array as in Go (a nil slice).
pub(crate) fn parse_array(what: &'static str, input: &str) -> Result<Vec<Value>, CodecError> {
    let value: Value = serde_json::from_str(input).map_err(|e| CodecError::Json {
        what,
        reason: e.to_string(),
        input: input.to_owned(),
    })?;
    match value {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => Ok(items),
        other => Err(CodecError::Json {
            what,
            reason: format!("expected an array, found {}", kind_of(&other)),
            input: input.to_owned(),
        }),
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn excerpt(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(FOUND_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", text.get(..cut).unwrap_or_default()),
        None => text,
    }
}

/// One JSON object inside an annotation, with enough context to name it in errors.
#[derive(Debug, Clone)]
pub(crate) struct Entry<'a> {
    what: &'static str,
    entry: usize,
    /// Path of this object inside the entry (`""` for the entry itself, `"placement."` …).
    prefix: String,
    map: Option<&'a Map<String, Value>>,
}

impl<'a> Entry<'a> {
    /// The `entry`-th element of a top-level array; it must be an object.
    pub(crate) fn top(
        what: &'static str,
        entry: usize,
        value: &'a Value,
    ) -> Result<Self, CodecError> {
        Self::object_at(what, entry, String::new(), value)
    }

    fn object_at(
        what: &'static str,
        entry: usize,
        prefix: String,
        value: &'a Value,
    ) -> Result<Self, CodecError> {
        match value {
            Value::Object(map) => Ok(Entry {
                what,
                entry,
                prefix,
                map: Some(map),
            }),
            other => Err(CodecError::JsonField {
                what,
                entry,
                field: prefix.trim_end_matches('.').to_owned(),
                expected: "an object",
                found: excerpt(other),
            }),
        }
    }

    /// Looks `key` up as Go does: exact key first, else an ASCII case-insensitive match.
    /// `null` counts as absent (Go leaves the zero value).
    fn get(&self, key: &str) -> Option<&'a Value> {
        let map = self.map?;
        let value = map.get(key).or_else(|| {
            map.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v)
        })?;
        (!value.is_null()).then_some(value)
    }

    fn mismatch(&self, key: &str, expected: &'static str, found: &Value) -> CodecError {
        CodecError::JsonField {
            what: self.what,
            entry: self.entry,
            field: format!("{}{key}", self.prefix),
            expected,
            found: excerpt(found),
        }
    }

    fn integer<T: TryFrom<i64> + TryFrom<u64>>(
        &self,
        key: &str,
        expected: &'static str,
    ) -> Result<Option<T>, CodecError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let converted = match value {
            Value::Number(n) => n
                .as_i64()
                .and_then(|i| T::try_from(i).ok())
                .or_else(|| n.as_u64().and_then(|u| T::try_from(u).ok())),
            _ => None,
        };
        converted
            .map(Some)
            .ok_or_else(|| self.mismatch(key, expected, value))
    }

    pub(crate) fn u32(&self, key: &str) -> Result<u32, CodecError> {
        self.opt_u32(key).map(Option::unwrap_or_default)
    }

    pub(crate) fn opt_u32(&self, key: &str) -> Result<Option<u32>, CodecError> {
        self.integer(key, "an unsigned 32-bit integer")
    }

    pub(crate) fn i32(&self, key: &str) -> Result<i32, CodecError> {
        self.integer(key, "a 32-bit integer")
            .map(Option::unwrap_or_default)
    }

    pub(crate) fn i64(&self, key: &str) -> Result<i64, CodecError> {
        self.integer(key, "a 64-bit integer")
            .map(Option::unwrap_or_default)
    }

    pub(crate) fn string(&self, key: &str) -> Result<String, CodecError> {
        match self.get(key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(self.mismatch(key, "a string", other)),
        }
    }

    pub(crate) fn bool(&self, key: &str) -> Result<bool, CodecError> {
        match self.get(key) {
            None => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.mismatch(key, "a boolean", other)),
        }
    }

    /// The elements of an array field as objects; absent or `null` is empty.
    pub(crate) fn objects(&self, key: &str) -> Result<Vec<Entry<'a>>, CodecError> {
        match self.get(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let prefix = format!("{}{key}[{i}].", self.prefix);
                    Self::object_at(self.what, self.entry, prefix, item)
                })
                .collect(),
            Some(other) => Err(self.mismatch(key, "an array", other)),
        }
    }

    /// A nested object field; absent or `null` reads as an empty object (Go's zero struct).
    pub(crate) fn object(&self, key: &str) -> Result<Entry<'a>, CodecError> {
        let prefix = format!("{}{key}.", self.prefix);
        match self.get(key) {
            None => Ok(Entry {
                what: self.what,
                entry: self.entry,
                prefix,
                map: None,
            }),
            Some(value) => Self::object_at(self.what, self.entry, prefix, value),
        }
    }

    /// An object field kept as raw JSON values (Go's `map[string]any`); absent or `null`
    /// is empty, anything but an object is an error.
    pub(crate) fn raw_object(
        &self,
        key: &str,
    ) -> Result<std::collections::BTreeMap<String, Value>, CodecError> {
        match self.get(key) {
            None => Ok(Default::default()),
            Some(Value::Object(map)) => {
                Ok(map.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            }
            Some(other) => Err(self.mismatch(key, "an object", other)),
        }
    }

    /// A string-keyed map of 64-bit integers; absent or `null` is empty.
    pub(crate) fn int_map(&self, key: &str) -> Result<Vec<(String, i64)>, CodecError> {
        let inner = self.object(key)?;
        let Some(map) = inner.map else {
            return Ok(Vec::new());
        };
        map.iter()
            .map(|(k, v)| match v {
                Value::Null => Ok((k.clone(), 0)),
                Value::Number(n) => n
                    .as_i64()
                    .map(|i| (k.clone(), i))
                    .ok_or_else(|| inner.mismatch(k, "a 64-bit integer", v)),
                other => Err(inner.mismatch(k, "a 64-bit integer", other)),
            })
            .collect()
    }
}

/// Writes one JSON object with keys in the order the caller emits them.
#[derive(Debug)]
pub(crate) struct ObjectWriter<'a> {
    out: &'a mut String,
    empty: bool,
}

impl<'a> ObjectWriter<'a> {
    pub(crate) fn begin(out: &'a mut String) -> Self {
        out.push('{');
        ObjectWriter { out, empty: true }
    }

    fn key(&mut self, key: &str) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        push_json_string(self.out, key);
        self.out.push(':');
    }

    pub(crate) fn str(&mut self, key: &str, value: &str) {
        self.key(key);
        push_json_string(self.out, value);
    }

    pub(crate) fn num(&mut self, key: &str, value: impl Display) {
        self.key(key);
        self.out.push_str(&value.to_string());
    }

    pub(crate) fn bool(&mut self, key: &str, value: bool) {
        self.key(key);
        self.out.push_str(if value { "true" } else { "false" });
    }

    /// Writes `key:` and hands back the buffer for a nested value the caller writes.
    pub(crate) fn nested(&mut self, key: &str) -> &mut String {
        self.key(key);
        self.out
    }

    pub(crate) fn end(self) {
        self.out.push('}');
    }
}

/// Writes a map of raw JSON values as an object, keys in sorted order (as Go writes a map).
pub(crate) fn write_raw_object(out: &mut String, map: &std::collections::BTreeMap<String, Value>) {
    let mut obj = ObjectWriter::begin(out);
    for (k, v) in map {
        obj.key(k);
        obj.out.push_str(&v.to_string());
    }
    obj.end();
}

/// Writes `items` as a JSON array, each element by `write_item`.
pub(crate) fn write_array<T>(
    out: &mut String,
    items: &[T],
    mut write_item: impl FnMut(&mut String, &T),
) {
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_item(out, item);
    }
    out.push(']');
}
