//! Schema-specialised reads and writes of one field on protobuf wire bytes.
//!
//! Messages stay as wire bytes end to end, so these functions never decode a whole message:
//! they walk the records of the messages on a [`FieldPath`] and touch only the target field.
//! A write copies every other record byte for byte, which keeps unknown fields (from a newer
//! schema) and field order intact. This module is the reference semantics that every other
//! executor (the JIT included) is tested against; the rules are spelled out on each function.
//!
//! Every length and offset is checked against the bytes actually present; hostile input yields
//! a [`WireError`], never a panic or an allocation sized by a length prefix.

use std::borrow::Cow;
use std::collections::BTreeMap;

use prost_reflect::prost::Message as _;
use prost_reflect::{DynamicMessage, MessageDescriptor, SerializeOptions};
use weft_hostcalls::Value;

use crate::schema::{Cardinality, FieldPath, FieldStep, ProtoKind};

/// Wire type of varint-encoded scalars.
pub const VARINT: u8 = 0;
/// Wire type of 8-byte little-endian scalars.
pub const I64: u8 = 1;
/// Wire type of length-delimited values: strings, bytes, messages, packed runs.
pub const LEN: u8 = 2;
/// Wire type of the deprecated group start marker.
pub const SGROUP: u8 = 3;
/// Wire type of the deprecated group end marker.
pub const EGROUP: u8 = 4;
/// Wire type of 4-byte little-endian scalars.
pub const I32: u8 = 5;

/// Offsets in these errors count bytes from the start of the message handed to the function.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WireError {
    #[error(
        "the message is truncated: the data at byte {offset} runs past the end of its enclosing message"
    )]
    Truncated { offset: usize },
    #[error("malformed varint at byte {offset}: it is longer than 10 bytes or overflows 64 bits")]
    BadVarint { offset: usize },
    #[error("invalid wire type {wire_type} at byte {offset}; valid wire types are 0, 1, 2 and 5")]
    InvalidWireType { offset: usize, wire_type: u8 },
    #[error("invalid field key {key} at byte {offset}: field numbers run from 1 to 536870911")]
    InvalidFieldNumber { offset: usize, key: u64 },
    #[error(
        "field {number} at byte {offset} uses the deprecated proto2 group encoding, which Weft does not support"
    )]
    Group { offset: usize, number: u32 },
    #[error(
        "field `{field}` (number {number}) at byte {offset} has wire type {found} ({}), but its schema type `{kind}` needs wire type {expected} ({})",
        wire_type_name(*found),
        wire_type_name(*expected)
    )]
    WrongWireType {
        field: String,
        number: u32,
        offset: usize,
        found: u8,
        expected: u8,
        kind: &'static str,
    },
    #[error("field `{field}` at byte {offset} is a proto `string` but holds invalid UTF-8")]
    InvalidUtf8 { field: String, offset: usize },
    #[error(
        "packed field `{field}` at byte {offset} is {len} bytes long, which is not a multiple of its {width}-byte elements"
    )]
    BadPackedLength {
        field: String,
        offset: usize,
        len: usize,
        width: usize,
    },
    #[error("cannot write a {found} to field `{path}`, which holds {expected}")]
    WrongValueKind {
        path: String,
        expected: String,
        found: String,
    },
    #[error(
        "the message nests more than {limit} messages deep at byte {offset}; Weft refuses deeper nesting, as protobuf does"
    )]
    TooDeep { offset: usize, limit: usize },
    #[error("field path `{path}` is malformed: {reason}")]
    InvalidPath { path: String, reason: String },
    #[error("cannot convert JSON to `{message}`: {reason}")]
    Json { message: String, reason: String },
    #[error("cannot decode the bytes as a `{message}`: {reason}")]
    Decode { message: String, reason: String },
}

fn wire_type_name(wire: u8) -> &'static str {
    match wire {
        VARINT => "varint",
        I64 => "64-bit",
        LEN => "length-delimited",
        SGROUP => "group start",
        EGROUP => "group end",
        I32 => "32-bit",
        _ => "invalid",
    }
}

/// A run of wire bytes with its offset in the caller's message, for error messages.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg<'a> {
    pub(crate) base: usize,
    pub(crate) bytes: &'a [u8],
}

impl<'a> Seg<'a> {
    fn sub(&self, start: usize, end: usize) -> Seg<'a> {
        // Callers pass ranges the scanner has already bounds-checked.
        Seg {
            base: self.base + start,
            bytes: self.bytes.get(start..end).unwrap_or_default(),
        }
    }
}

/// One field record.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rec<'a> {
    pub(crate) number: u32,
    pub(crate) wire: u8,
    /// Offset of the record's key in the caller's message.
    pub(crate) offset: usize,
    /// The whole record, key included.
    raw: &'a [u8],
    /// The varint, the fixed-width bytes, or the payload after the length prefix.
    pub(crate) value: Seg<'a>,
}

/// Decodes the varint at `bytes[pos..]`; returns it and the position after it.
#[inline]
pub(crate) fn varint(bytes: &[u8], pos: usize, base: usize) -> Result<(u64, usize), WireError> {
    // Keys and short lengths are one byte: the common case gets no loop.
    if let Some(&b) = bytes.get(pos)
        && b < 0x80
    {
        return Ok((u64::from(b), pos + 1));
    }
    varint_long(bytes, pos, base)
}

#[cold]
fn varint_long(bytes: &[u8], pos: usize, base: usize) -> Result<(u64, usize), WireError> {
    let rest = bytes.get(pos..).unwrap_or_default();
    let mut value = 0u64;
    for (i, &b) in rest.iter().take(10).enumerate() {
        // The 10th byte may only contribute bit 63 (the rule prost and protobuf-go apply).
        if i == 9 && b > 1 {
            return Err(WireError::BadVarint { offset: base + pos });
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok((value, pos + i + 1));
        }
    }
    if rest.len() >= 10 {
        Err(WireError::BadVarint { offset: base + pos })
    } else {
        Err(WireError::Truncated { offset: base + pos })
    }
}

/// Iterates over the records of one segment; stops after the first error.
pub(crate) struct Records<'a> {
    seg: Seg<'a>,
    pos: usize,
    failed: bool,
}

pub(crate) fn records(seg: Seg<'_>) -> Records<'_> {
    Records {
        seg,
        pos: 0,
        failed: false,
    }
}

impl<'a> Records<'a> {
    /// The record at `pos` and the position after it.
    #[inline]
    fn parse(&self) -> Result<(Rec<'a>, usize), WireError> {
        let Seg { base, bytes } = self.seg;
        let start = self.pos;
        let (key, p) = varint(bytes, start, base)?;
        if key > u64::from(u32::MAX) || key >> 3 == 0 {
            return Err(WireError::InvalidFieldNumber {
                offset: base + start,
                key,
            });
        }
        let number = (key >> 3) as u32;
        let wire = (key & 7) as u8;
        let truncated = || WireError::Truncated {
            offset: base + start,
        };
        let (vstart, vend) = match wire {
            VARINT => (p, varint(bytes, p, base)?.1),
            I64 | I32 => {
                let width = if wire == I64 { 8 } else { 4 };
                let end = p
                    .checked_add(width)
                    .filter(|e| *e <= bytes.len())
                    .ok_or_else(truncated)?;
                (p, end)
            }
            LEN => {
                let (len, q) = varint(bytes, p, base)?;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|l| q.checked_add(l))
                    .filter(|e| *e <= bytes.len())
                    .ok_or_else(truncated)?;
                (q, end)
            }
            SGROUP | EGROUP => {
                return Err(WireError::Group {
                    offset: base + start,
                    number,
                });
            }
            _ => {
                return Err(WireError::InvalidWireType {
                    offset: base + start,
                    wire_type: wire,
                });
            }
        };
        let rec = Rec {
            number,
            wire,
            offset: base + start,
            raw: bytes.get(start..vend).unwrap_or_default(),
            value: self.seg.sub(vstart, vend),
        };
        Ok((rec, vend))
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Rec<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.seg.bytes.len() {
            return None;
        }
        match self.parse() {
            Ok((rec, next)) => {
                self.pos = next;
                Some(Ok(rec))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// The records of a message that arrived in several pieces (a merged sub-message), in order.
/// Each piece is scanned on its own: a record never spans two occurrences.
fn all_records<'a, 's>(
    segs: &'s [Seg<'a>],
) -> impl Iterator<Item = Result<Rec<'a>, WireError>> + 's {
    segs.iter().flat_map(|s| records(*s))
}

fn wrong_wire(step: &FieldStep, rec: &Rec<'_>, expected: u8) -> WireError {
    WireError::WrongWireType {
        field: step.name.clone(),
        number: step.number,
        offset: rec.offset,
        found: rec.wire,
        expected,
        kind: if matches!(step.card, Cardinality::Map { .. }) {
            "map"
        } else {
            step.kind.proto_name()
        },
    }
}

/// Checks the wire type of an occurrence of `step`'s field.
fn check_wire(step: &FieldStep, rec: &Rec<'_>) -> Result<(), WireError> {
    let expected = match step.card {
        Cardinality::Single => step.kind.wire_type(),
        Cardinality::Repeated { .. } => {
            if rec.wire == LEN && step.kind.is_packable() {
                return Ok(());
            }
            step.kind.wire_type()
        }
        Cardinality::Map { .. } => LEN,
    };
    if rec.wire == expected {
        Ok(())
    } else {
        Err(wrong_wire(step, rec, expected))
    }
}

fn bad_path(path: &FieldPath, reason: &str) -> WireError {
    WireError::InvalidPath {
        path: path.text.clone(),
        reason: reason.to_owned(),
    }
}

/// Splits a path into its enclosing steps and its leaf, checking the enclosing steps are
/// singular message fields (paths built by hand might not be).
fn split_path(path: &FieldPath) -> Result<(&[FieldStep], &FieldStep), WireError> {
    let Some((leaf, parents)) = path.steps.split_last() else {
        return Err(bad_path(path, "it has no steps"));
    };
    if parents
        .iter()
        .any(|s| s.kind != ProtoKind::Message || s.card != Cardinality::Single)
    {
        return Err(bad_path(
            path,
            "every step before the last must be a singular message field",
        ));
    }
    Ok((parents, leaf))
}

/// The occurrences of message field `step` that make up its value: all of them (protobuf
/// merges repeated occurrences of a singular message), except that an occurrence of a oneof
/// sibling clears the ones before it.
fn occurrences<'a>(segs: &[Seg<'a>], step: &FieldStep) -> Result<Vec<Seg<'a>>, WireError> {
    let mut out = Vec::new();
    for rec in all_records(segs) {
        let rec = rec?;
        if rec.number == step.number {
            check_wire(step, &rec)?;
            out.push(rec.value);
        } else if step.oneof_siblings.contains(&rec.number) {
            out.clear();
        }
    }
    Ok(out)
}

/// The innermost message of `parents`, as the occurrences that make it up; `None` when some
/// enclosing message is absent.
///
/// A top-level field (no parents, the common case) reads the message as one borrowed
/// segment, without allocating.
fn descend<'a>(msg: &'a [u8], parents: &[FieldStep]) -> Result<Option<SmallSegs<'a>>, WireError> {
    let whole = Seg {
        base: 0,
        bytes: msg,
    };
    let Some((first, rest)) = parents.split_first() else {
        return Ok(Some(SmallSegs::One([whole])));
    };
    let mut segs = occurrences(&[whole], first)?;
    if segs.is_empty() {
        return Ok(None);
    }
    for step in rest {
        segs = occurrences(&segs, step)?;
        if segs.is_empty() {
            return Ok(None);
        }
    }
    Ok(Some(SmallSegs::Many(segs)))
}

/// The segments [`descend`] found.
enum SmallSegs<'a> {
    One([Seg<'a>; 1]),
    Many(Vec<Seg<'a>>),
}

impl<'a> std::ops::Deref for SmallSegs<'a> {
    type Target = [Seg<'a>];

    fn deref(&self) -> &[Seg<'a>] {
        match self {
            SmallSegs::One(s) => s,
            SmallSegs::Many(v) => v,
        }
    }
}

/// The effective occurrence of a singular non-message field: the last one, unless a oneof
/// sibling came after it.
fn last_occurrence<'a>(segs: &[Seg<'a>], step: &FieldStep) -> Result<Option<Rec<'a>>, WireError> {
    let mut last = None;
    for rec in all_records(segs) {
        let rec = rec?;
        if rec.number == step.number {
            check_wire(step, &rec)?;
            last = Some(rec);
        } else if step.oneof_siblings.contains(&rec.number) {
            last = None;
        }
    }
    Ok(last)
}

/// Reads the field at `path`.
///
/// - An absent field, or a path through an absent message, reads as the leaf's default.
/// - A singular scalar that occurs several times: the last occurrence wins.
/// - A singular message that occurs several times: the occurrences merge (for a message leaf,
///   read through [`resolve_payload_path`](crate::schema::resolve_payload_path), the value is
///   the concatenation of their payloads).
/// - Oneofs: an occurrence of another member clears everything of this field before it.
/// - Repeated fields: packed and unpacked runs are both accepted, elements in wire order.
/// - Maps: later entries win; a missing key or value in an entry is the zero value.
/// - `string` must be valid UTF-8 (only the occurrence that is read is checked).
/// - Enums read as `Int` (any number, as for open enums); `int32` & co. truncate the varint to
///   32 bits as protobuf does; `float` widens to `Float`.
pub fn read(msg: &[u8], path: &FieldPath) -> Result<Value, WireError> {
    let (parents, leaf) = split_path(path)?;
    let Some(segs) = descend(msg, parents)? else {
        return Ok(leaf.default.clone());
    };
    match leaf.card {
        Cardinality::Single if leaf.kind == ProtoKind::Message => {
            let occ = occurrences(&segs, leaf)?;
            if occ.is_empty() {
                return Ok(leaf.default.clone());
            }
            Ok(Value::Bytes(
                occ.iter().flat_map(|s| s.bytes.iter().copied()).collect(),
            ))
        }
        Cardinality::Single => match last_occurrence(&segs, leaf)? {
            Some(rec) => decode_scalar(leaf.kind, rec.value, &leaf.name),
            None => Ok(leaf.default.clone()),
        },
        Cardinality::Repeated { .. } => {
            let mut items = Vec::new();
            for rec in all_records(&segs) {
                let rec = rec?;
                if rec.number != leaf.number {
                    continue;
                }
                check_wire(leaf, &rec)?;
                if rec.wire == LEN && leaf.kind.is_packable() {
                    for_each_packed(leaf, rec.value, |v| {
                        items.push(decode_scalar(leaf.kind, v, &leaf.name)?);
                        Ok(())
                    })?;
                } else {
                    items.push(decode_scalar(leaf.kind, rec.value, &leaf.name)?);
                }
            }
            Ok(Value::Vec(items))
        }
        Cardinality::Map { key, value } => {
            let mut map = BTreeMap::new();
            for rec in all_records(&segs) {
                let rec = rec?;
                if rec.number != leaf.number {
                    continue;
                }
                check_wire(leaf, &rec)?;
                let (k, v) = map_entry(leaf, key, value, rec.value)?;
                map.insert(k, v);
            }
            Ok(Value::Map(map))
        }
    }
}

/// Whether [`extract`] handles reads of `path`: a singular, non-message field at the top
/// level of the message. Other paths are read with [`read`].
pub fn extractable(path: &FieldPath) -> bool {
    matches!(path.steps.as_slice(), [leaf]
        if leaf.card == Cardinality::Single && leaf.kind != ProtoKind::Message)
}

/// Where the effective occurrence of an extracted field's value is, as offsets into the
/// message (so it can be kept apart from the borrow of the bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    pub start: usize,
    pub end: usize,
}

/// The outcome of one field of an [`extract`] pass: the occurrence to decode (`None`: absent,
/// read as the default), or the error [`read`] would report for that field.
pub type Extracted = Result<Option<Found>, WireError>;

/// One pass over `msg` for several fields at once, each [`extractable`]: for every leaf, the
/// effective occurrence or the error [`read`] reports for it, in `out` (cleared first).
///
/// It applies `read`'s rules field by field in the same record order, so each field's outcome
/// is exactly `read`'s: the first record that fails to parse fails every field that has not
/// failed before it; an occurrence with the wrong wire type fails only its own field, and
/// only if it comes before any parse error; a oneof sibling clears an earlier occurrence.
/// Other fields are skipped by wire type without decoding.
///
/// Inlined: one leaf outside any oneof (a segment that reads one top-level field, as a
/// firewall does) is scanned in the caller, every other case out of line.
#[inline]
pub fn extract(msg: &[u8], leaves: &[FieldStep], out: &mut Vec<Extracted>) {
    if let [leaf] = leaves
        && leaf.oneof_siblings.is_empty()
        && let Some(found) = extract_one(msg, leaf.number, leaf.kind.wire_type())
    {
        out.clear();
        out.push(Ok(found));
        return;
    }
    extract_many(msg, leaves, out);
}

/// [`extract`] of any leaves: the lean scan, then the exact one if it gave up. For one leaf
/// outside any oneof the lean scan is [`extract_one`]'s, so it gives up again there.
#[inline(never)]
fn extract_many(msg: &[u8], leaves: &[FieldStep], out: &mut Vec<Extracted>) {
    out.clear();
    out.extend(leaves.iter().map(|_| Ok(None)));
    if extract_well_formed(msg, leaves, out) {
        return;
    }
    for o in out.iter_mut() {
        *o = Ok(None);
    }
    extract_exactly(msg, leaves, out);
}

/// [`extract`] for the common case, a well-formed message: a lean loop over keys and lengths
/// that builds no record. It gives up (returns false, `out` half-filled) at anything
/// [`extract_exactly`] would report as an error — a bad key, varint or length, a group, an
/// extracted field with the wrong wire type — so every error comes from the exact path,
/// and on a well-formed message both find the same occurrences.
fn extract_well_formed(msg: &[u8], leaves: &[FieldStep], out: &mut [Extracted]) -> bool {
    let mut pos = 0;
    while pos < msg.len() {
        let Ok((key, p)) = varint(msg, pos, 0) else {
            return false;
        };
        let (number, wire) = (key >> 3, (key & 7) as u8);
        if key > u64::from(u32::MAX) || number == 0 {
            return false;
        }
        let (start, end) = match wire {
            VARINT => match varint(msg, p, 0) {
                Ok((_, e)) => (p, e),
                Err(_) => return false,
            },
            I64 | I32 => (p, p + if wire == I64 { 8 } else { 4 }),
            LEN => match varint(msg, p, 0) {
                Ok((len, q)) => match usize::try_from(len).ok().and_then(|l| q.checked_add(l)) {
                    Some(e) => (q, e),
                    None => return false,
                },
                Err(_) => return false,
            },
            _ => return false,
        };
        if end > msg.len() {
            return false;
        }
        for (leaf, o) in leaves.iter().zip(out.iter_mut()) {
            if u64::from(leaf.number) == number {
                if leaf.kind.wire_type() != wire {
                    return false;
                }
                *o = Ok(Some(Found { start, end }));
            } else if leaf.oneof_siblings.iter().any(|s| u64::from(*s) == number) {
                *o = Ok(None);
            }
        }
        pos = end;
    }
    true
}

/// [`extract_well_formed`] for one leaf outside any oneof (a segment that reads one
/// top-level field, as a firewall does): the same scan and the same reasons to give up
/// (`None`), with the leaf's number and wire type in registers and the occurrence kept in
/// one rather than stored per record through the result slice.
#[inline]
fn extract_one(msg: &[u8], number: u32, expected: u8) -> Option<Option<Found>> {
    let mut found = None;
    let mut pos = 0;
    while pos < msg.len() {
        let (key, p) = varint(msg, pos, 0).ok()?;
        let wire = (key & 7) as u8;
        if key > u64::from(u32::MAX) || key >> 3 == 0 {
            return None;
        }
        let (start, end) = match wire {
            VARINT => (p, varint(msg, p, 0).ok()?.1),
            I64 => (p, p + 8),
            I32 => (p, p + 4),
            LEN => {
                let (len, q) = varint(msg, p, 0).ok()?;
                (q, q.checked_add(usize::try_from(len).ok()?)?)
            }
            _ => return None,
        };
        if end > msg.len() {
            return None;
        }
        if key >> 3 == u64::from(number) {
            if wire != expected {
                return None;
            }
            found = Some(Found { start, end });
        }
        pos = end;
    }
    Some(found)
}

/// [`extract`] record by record with `read`'s parser, errors and all.
fn extract_exactly(msg: &[u8], leaves: &[FieldStep], out: &mut [Extracted]) {
    // The record parser of `read`, driven directly: one loop, no iterator state.
    let mut scan = records(Seg {
        base: 0,
        bytes: msg,
    });
    while scan.pos < msg.len() {
        let rec = match scan.parse() {
            Ok((r, next)) => {
                scan.pos = next;
                r
            }
            Err(e) => {
                for o in out.iter_mut().filter(|o| o.is_ok()) {
                    *o = Err(e.clone());
                }
                return;
            }
        };
        for (leaf, o) in leaves.iter().zip(out.iter_mut()) {
            let Ok(last) = o else { continue };
            if rec.number == leaf.number {
                match check_wire(leaf, &rec) {
                    Ok(()) => {
                        *last = Some(Found {
                            start: rec.value.base,
                            end: rec.value.base + rec.value.bytes.len(),
                        })
                    }
                    Err(e) => *o = Err(e),
                }
            } else if leaf.oneof_siblings.contains(&rec.number) {
                *last = None;
            }
        }
    }
}

/// The value of an extracted field: decodes the occurrence `found` of `msg` (the message
/// [`extract`] ran on) as [`read`] does, or the leaf's default when absent.
pub fn decode_found(
    msg: &[u8],
    leaf: &FieldStep,
    found: Option<Found>,
) -> Result<Value, WireError> {
    let Some(Found { start, end }) = found else {
        return Ok(leaf.default.clone());
    };
    let bytes = msg
        .get(start..end)
        .ok_or(WireError::Truncated { offset: start })?;
    decode_scalar(leaf.kind, Seg { base: start, bytes }, &leaf.name)
}

/// The string an extracted `string` field holds, borrowed from `msg` (or from the leaf's
/// default when absent): [`decode_found`] without the copy, errors and all. `None` when the
/// leaf is not a string. Inlined: its result, an error's width, went through memory.
#[inline]
pub fn found_str<'m>(
    msg: &'m [u8],
    leaf: &'m FieldStep,
    found: Option<Found>,
) -> Option<Result<&'m str, WireError>> {
    if leaf.kind != ProtoKind::String {
        return None;
    }
    let Some(Found { start, end }) = found else {
        return match &leaf.default {
            Value::Str(s) => Some(Ok(s)),
            _ => None,
        };
    };
    Some(match msg.get(start..end) {
        Some(bytes) => utf8(Seg { base: start, bytes }, &leaf.name),
        None => Err(WireError::Truncated { offset: start }),
    })
}

#[inline]
fn utf8<'m>(v: Seg<'m>, field: &str) -> Result<&'m str, WireError> {
    weft_hostcalls::text::utf8(v.bytes).map_err(|_| WireError::InvalidUtf8 {
        field: field.to_owned(),
        offset: v.base,
    })
}

/// Decodes one map entry (field 1 = key, field 2 = value).
fn map_entry(
    leaf: &FieldStep,
    key_kind: ProtoKind,
    value_kind: ProtoKind,
    entry: Seg<'_>,
) -> Result<(Value, Value), WireError> {
    let key_step = entry_step(leaf, "key", 1, key_kind);
    let value_step = entry_step(leaf, "value", 2, value_kind);
    let segs = [entry];
    let key = match last_occurrence(&segs, &key_step)? {
        Some(rec) => decode_scalar(key_kind, rec.value, &key_step.name)?,
        None => key_kind.zero_value(),
    };
    let value = if value_kind == ProtoKind::Message {
        let occ = occurrences(&segs, &value_step)?;
        Value::Bytes(occ.iter().flat_map(|s| s.bytes.iter().copied()).collect())
    } else {
        match last_occurrence(&segs, &value_step)? {
            Some(rec) => decode_scalar(value_kind, rec.value, &value_step.name)?,
            None => value_kind.zero_value(),
        }
    };
    Ok((key, value))
}

/// The key or value field of a map entry, as a step (for wire checks and error messages).
fn entry_step(map: &FieldStep, part: &str, number: u32, kind: ProtoKind) -> FieldStep {
    FieldStep {
        name: format!("{}.{part}", map.name),
        number,
        kind,
        card: Cardinality::Single,
        oneof_siblings: Vec::new(),
        oneof_sibling_names: Vec::new(),
        implicit_presence: false,
        default: kind.zero_value(),
    }
}

/// Calls `f` on each element of a packed run.
fn for_each_packed<'a>(
    step: &FieldStep,
    run: Seg<'a>,
    mut f: impl FnMut(Seg<'a>) -> Result<(), WireError>,
) -> Result<(), WireError> {
    match step.kind.wire_type() {
        VARINT => {
            let mut pos = 0;
            while pos < run.bytes.len() {
                let (_, next) = varint(run.bytes, pos, run.base)?;
                f(run.sub(pos, next))?;
                pos = next;
            }
            Ok(())
        }
        wire => {
            let width = if wire == I64 { 8 } else { 4 };
            if !run.bytes.len().is_multiple_of(width) {
                return Err(WireError::BadPackedLength {
                    field: step.name.clone(),
                    offset: run.base,
                    len: run.bytes.len(),
                    width,
                });
            }
            for i in (0..run.bytes.len()).step_by(width) {
                f(run.sub(i, i + width))?;
            }
            Ok(())
        }
    }
}

fn fixed<const N: usize>(v: Seg<'_>) -> Result<[u8; N], WireError> {
    v.bytes
        .try_into()
        .map_err(|_| WireError::Truncated { offset: v.base })
}

/// Decodes the value bytes of one record (or packed element) of `kind`.
fn decode_scalar(kind: ProtoKind, v: Seg<'_>, field: &str) -> Result<Value, WireError> {
    let raw = || varint(v.bytes, 0, v.base).map(|(x, _)| x);
    Ok(match kind {
        // Truncating casts are protobuf's own rule for 32-bit varints.
        ProtoKind::Int32 | ProtoKind::Enum => Value::Int(i64::from(raw()? as i32)),
        ProtoKind::Int64 => Value::Int(raw()? as i64),
        ProtoKind::Uint32 => Value::Uint(u64::from(raw()? as u32)),
        ProtoKind::Uint64 => Value::Uint(raw()?),
        ProtoKind::Sint32 => {
            let n = raw()? as u32;
            Value::Int(i64::from((n >> 1) as i32 ^ -((n & 1) as i32)))
        }
        ProtoKind::Sint64 => {
            let n = raw()?;
            Value::Int((n >> 1) as i64 ^ -((n & 1) as i64))
        }
        ProtoKind::Bool => Value::Bool(raw()? != 0),
        ProtoKind::Fixed32 => Value::Uint(u64::from(u32::from_le_bytes(fixed(v)?))),
        ProtoKind::Sfixed32 => Value::Int(i64::from(i32::from_le_bytes(fixed(v)?))),
        ProtoKind::Float => Value::Float(f64::from(f32::from_le_bytes(fixed(v)?))),
        ProtoKind::Fixed64 => Value::Uint(u64::from_le_bytes(fixed(v)?)),
        ProtoKind::Sfixed64 => Value::Int(i64::from_le_bytes(fixed(v)?)),
        ProtoKind::Double => Value::Float(f64::from_le_bytes(fixed(v)?)),
        ProtoKind::String => Value::Str(utf8(v, field)?.to_owned()),
        ProtoKind::Bytes | ProtoKind::Message => Value::Bytes(v.bytes.to_vec()),
    })
}

/// Replaces the field at `path` with `value` and returns the new message.
///
/// - `value` must match `path.ty`. Numbers narrow like C casts: `Int` to `int32` wraps
///   (`as i32`), `Uint` to `uint32` wraps, `Float` to `float` rounds (`as f32`).
/// - In the innermost message every occurrence of the field and of its oneof siblings is
///   removed, and the new encoding goes where the first removed record was (at the end if
///   there was none).
/// - Each enclosing message becomes one occurrence at the place of its first occurrence (or of
///   a oneof sibling's), holding the merge of its occurrences (at the end if absent). An
///   enclosing message is created even when the leaf's new encoding is empty.
/// - A proto3 implicit-presence field set to its zero value is not emitted (for floats only
///   +0.0 counts as zero, as in protobuf C++ and Go, so -0.0 survives).
/// - Lists are packed when `packed`, one record per element otherwise; an empty list emits
///   nothing. Maps emit one entry per key in key order, each with both key and value.
/// - Every other byte — other fields, unknown fields and their order — is copied unchanged.
pub fn write(msg: &[u8], path: &FieldPath, value: &Value) -> Result<Vec<u8>, WireError> {
    let (_, leaf) = split_path(path)?;
    if !path.ty.admits(value) {
        return Err(wrong_value(path, value));
    }
    let encoding = encode_leaf(path, leaf, value)?;
    rewrite(
        &[Seg {
            base: 0,
            bytes: msg,
        }],
        &path.steps,
        &encoding,
    )
}

fn wrong_value(path: &FieldPath, value: &Value) -> WireError {
    let found = match value {
        Value::Vec(items) => match items.iter().find(|i| !elem_type_admits(path, i)) {
            Some(bad) => format!("Vec holding a {}", bad.kind_name()),
            None => "Vec".to_owned(),
        },
        v => v.kind_name().to_owned(),
    };
    WireError::WrongValueKind {
        path: path.text.clone(),
        expected: path.ty.to_string(),
        found,
    }
}

fn elem_type_admits(path: &FieldPath, v: &Value) -> bool {
    match &path.ty {
        crate::Type::Vec(t) => t.admits(v),
        _ => true,
    }
}

/// Rebuilds the message made of `segs` with the field of `steps[0]` replaced; `leaf` is the
/// complete encoding (keys included) of the innermost field.
fn rewrite(segs: &[Seg<'_>], steps: &[FieldStep], leaf: &[u8]) -> Result<Vec<u8>, WireError> {
    let Some((step, rest)) = steps.split_first() else {
        return Ok(leaf.to_vec());
    };
    let total: usize = segs.iter().map(|s| s.bytes.len()).sum();
    let mut out = Vec::with_capacity(total + leaf.len());
    let mut insert_at = None;
    let mut inner = Vec::new();
    for seg in segs {
        for rec in records(*seg) {
            let rec = rec?;
            let is_field = rec.number == step.number;
            if is_field || step.oneof_siblings.contains(&rec.number) {
                if is_field {
                    check_wire(step, &rec)?;
                    inner.push(rec.value);
                } else {
                    inner.clear();
                }
                insert_at.get_or_insert(out.len());
            } else {
                out.extend_from_slice(rec.raw);
            }
        }
    }
    let encoding: Cow<'_, [u8]> = if rest.is_empty() {
        Cow::Borrowed(leaf)
    } else {
        let payload = rewrite(&inner, rest, leaf)?;
        let mut e = Vec::with_capacity(payload.len() + 15);
        put_key(&mut e, step.number, LEN);
        put_varint(&mut e, payload.len() as u64);
        e.extend_from_slice(&payload);
        Cow::Owned(e)
    };
    let at = insert_at.unwrap_or(out.len());
    out.splice(at..at, encoding.iter().copied());
    Ok(out)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_key(out: &mut Vec<u8>, number: u32, wire: u8) {
    put_varint(out, (u64::from(number) << 3) | u64::from(wire));
}

fn varint_len(v: u64) -> usize {
    // 7 payload bits per byte; 0 still takes one byte.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// The full encoding (keys included) of the leaf field holding `value`.
fn encode_leaf(path: &FieldPath, leaf: &FieldStep, value: &Value) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::new();
    let mismatch = || wrong_value(path, value);
    match (leaf.card, value) {
        (Cardinality::Single, v) => {
            let mut payload = Vec::new();
            put_value(&mut payload, leaf.kind, v).ok_or_else(mismatch)?;
            // Every zero value (0, false, "", +0.0) encodes as all-zero bytes and nothing else
            // does, which is exactly the set proto3 leaves out.
            if leaf.implicit_presence && payload.iter().all(|b| *b == 0) {
                return Ok(out);
            }
            put_key(&mut out, leaf.number, leaf.kind.wire_type());
            out.extend_from_slice(&payload);
        }
        (Cardinality::Repeated { packed }, Value::Vec(items)) => {
            if packed && leaf.kind.is_packable() {
                if items.is_empty() {
                    return Ok(out);
                }
                let mut run = Vec::new();
                for item in items {
                    put_value(&mut run, leaf.kind, item).ok_or_else(mismatch)?;
                }
                put_key(&mut out, leaf.number, LEN);
                put_varint(&mut out, run.len() as u64);
                out.extend_from_slice(&run);
            } else {
                for item in items {
                    put_key(&mut out, leaf.number, leaf.kind.wire_type());
                    put_value(&mut out, leaf.kind, item).ok_or_else(mismatch)?;
                }
            }
        }
        (Cardinality::Map { key, value: vk }, Value::Map(entries)) => {
            let mut entry = Vec::new();
            for (k, v) in entries {
                entry.clear();
                put_key(&mut entry, 1, key.wire_type());
                put_value(&mut entry, key, k).ok_or_else(mismatch)?;
                put_key(&mut entry, 2, vk.wire_type());
                put_value(&mut entry, vk, v).ok_or_else(mismatch)?;
                put_key(&mut out, leaf.number, LEN);
                put_varint(&mut out, entry.len() as u64);
                out.extend_from_slice(&entry);
            }
        }
        _ => return Err(mismatch()),
    }
    Ok(out)
}

/// Appends the value bytes (no key) of `v` as `kind`; `None` if `v` has the wrong kind.
fn put_value(out: &mut Vec<u8>, kind: ProtoKind, v: &Value) -> Option<()> {
    match (kind, v) {
        // Negative int32 values are sign-extended to 10 bytes, as protobuf requires.
        (ProtoKind::Int32 | ProtoKind::Enum, Value::Int(i)) => {
            put_varint(out, i64::from(*i as i32) as u64)
        }
        (ProtoKind::Int64, Value::Int(i)) => put_varint(out, *i as u64),
        (ProtoKind::Sint32, Value::Int(i)) => {
            let n = *i as i32;
            put_varint(out, u64::from(((n << 1) ^ (n >> 31)) as u32))
        }
        (ProtoKind::Sint64, Value::Int(i)) => put_varint(out, ((i << 1) ^ (i >> 63)) as u64),
        (ProtoKind::Sfixed32, Value::Int(i)) => out.extend_from_slice(&(*i as i32).to_le_bytes()),
        (ProtoKind::Sfixed64, Value::Int(i)) => out.extend_from_slice(&i.to_le_bytes()),
        (ProtoKind::Uint32, Value::Uint(u)) => put_varint(out, u64::from(*u as u32)),
        (ProtoKind::Uint64, Value::Uint(u)) => put_varint(out, *u),
        (ProtoKind::Fixed32, Value::Uint(u)) => out.extend_from_slice(&(*u as u32).to_le_bytes()),
        (ProtoKind::Fixed64, Value::Uint(u)) => out.extend_from_slice(&u.to_le_bytes()),
        (ProtoKind::Float, Value::Float(f)) => out.extend_from_slice(&(*f as f32).to_le_bytes()),
        (ProtoKind::Double, Value::Float(f)) => out.extend_from_slice(&f.to_le_bytes()),
        (ProtoKind::Bool, Value::Bool(b)) => out.push(u8::from(*b)),
        (ProtoKind::String, Value::Str(s)) => {
            put_varint(out, s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        }
        (ProtoKind::Bytes | ProtoKind::Message, Value::Bytes(b)) => {
            put_varint(out, b.len() as u64);
            out.extend_from_slice(b);
        }
        _ => return None,
    }
    Some(())
}

/// The size in bytes of the field at `path`, without keys:
///
/// - `string`, `bytes` and messages: the payload length (for a merged message, the total of
///   its occurrences' payloads); UTF-8 is not checked.
/// - Numbers: the length of the value's canonical encoding (varint length, 4 or 8), i.e. of
///   what [`write()`] would emit for the value [`read`] returns.
/// - Lists: the sum over the elements (a packed run's length prefix is not counted).
/// - Maps: the sum of the entries' payload lengths.
/// - An absent field (or one cleared by a later oneof sibling): 0.
pub fn byte_size(msg: &[u8], path: &FieldPath) -> Result<usize, WireError> {
    let (parents, leaf) = split_path(path)?;
    let Some(segs) = descend(msg, parents)? else {
        return Ok(0);
    };
    match leaf.card {
        Cardinality::Single if leaf.kind == ProtoKind::Message => Ok(occurrences(&segs, leaf)?
            .iter()
            .map(|s| s.bytes.len())
            .sum()),
        Cardinality::Single => match last_occurrence(&segs, leaf)? {
            Some(rec) => scalar_size(leaf.kind, rec.value),
            None => Ok(0),
        },
        Cardinality::Repeated { .. } => {
            let mut total = 0usize;
            for rec in all_records(&segs) {
                let rec = rec?;
                if rec.number != leaf.number {
                    continue;
                }
                check_wire(leaf, &rec)?;
                if rec.wire == LEN && leaf.kind.is_packable() {
                    for_each_packed(leaf, rec.value, |v| {
                        total += scalar_size(leaf.kind, v)?;
                        Ok(())
                    })?;
                } else {
                    total += scalar_size(leaf.kind, rec.value)?;
                }
            }
            Ok(total)
        }
        Cardinality::Map { .. } => {
            let mut total = 0usize;
            for rec in all_records(&segs) {
                let rec = rec?;
                if rec.number == leaf.number {
                    check_wire(leaf, &rec)?;
                    total += rec.value.bytes.len();
                }
            }
            Ok(total)
        }
    }
}

/// Canonical encoded size of one scalar, from its value bytes on the wire.
fn scalar_size(kind: ProtoKind, v: Seg<'_>) -> Result<usize, WireError> {
    let raw = || varint(v.bytes, 0, v.base).map(|(x, _)| x);
    Ok(match kind {
        ProtoKind::Int32 | ProtoKind::Enum => varint_len(i64::from(raw()? as i32) as u64),
        ProtoKind::Uint32 | ProtoKind::Sint32 => varint_len(u64::from(raw()? as u32)),
        ProtoKind::Int64 | ProtoKind::Uint64 | ProtoKind::Sint64 => varint_len(raw()?),
        ProtoKind::Bool => {
            raw()?;
            1
        }
        ProtoKind::Fixed32 | ProtoKind::Sfixed32 | ProtoKind::Float => 4,
        ProtoKind::Fixed64 | ProtoKind::Sfixed64 | ProtoKind::Double => 8,
        ProtoKind::String | ProtoKind::Bytes | ProtoKind::Message => v.bytes.len(),
    })
}

/// Encodes a JSON object as a `desc` message. Field names may be proto names (`user_id`) or
/// JSON names (`userId`); unknown names are an error, so typos do not pass silently.
pub fn json_to_bytes(
    desc: &MessageDescriptor,
    json: &serde_json::Value,
) -> Result<Vec<u8>, WireError> {
    let msg = DynamicMessage::deserialize(desc.clone(), json).map_err(|e| WireError::Json {
        message: desc.full_name().to_owned(),
        reason: match (json_culprit(desc, json), unknown_field_guess(desc, json)) {
            (Some(path), Some(guess)) => format!("field `{path}`: {e}; {guess}"),
            (Some(path), None) => format!("field `{path}`: {e}"),
            (None, _) => e.to_string(),
        },
    })?;
    Ok(msg.encode_to_vec())
}

/// "did you mean `user`?" for the first key of `json` that names no field of `desc` and is
/// close to one that does (top level only).
fn unknown_field_guess(desc: &MessageDescriptor, json: &serde_json::Value) -> Option<String> {
    let serde_json::Value::Object(fields) = json else {
        return None;
    };
    let names: Vec<String> = desc.fields().map(|f| f.name().to_owned()).collect();
    fields
        .keys()
        .filter(|k| desc.get_field_by_name(k).is_none() && desc.get_field_by_json_name(k).is_none())
        .find_map(|k| crate::diag::did_you_mean(k, names.iter().map(String::as_str)))
}

/// The path of the field whose value a failed JSON conversion refused: prost-reflect's
/// reason ("invalid digit found in string") does not say which of the message's fields it
/// was. Each field is converted alone, and a refused message field is searched in turn. Only
/// runs on the error path.
fn json_culprit(desc: &MessageDescriptor, json: &serde_json::Value) -> Option<String> {
    let serde_json::Value::Object(fields) = json else {
        return None;
    };
    for (name, value) in fields {
        let alone =
            serde_json::Value::Object([(name.clone(), value.clone())].into_iter().collect());
        if DynamicMessage::deserialize(desc.clone(), &alone).is_ok() {
            continue;
        }
        let field = desc
            .get_field_by_name(name)
            .or_else(|| desc.get_field_by_json_name(name));
        // A repeated message or a map of messages: the first item refused, then the field
        // inside it (`items[2].qty`, `by_sku["a"].qty`).
        let inner = field.as_ref().and_then(|f| match (f.kind(), value) {
            (prost_reflect::Kind::Message(m), _) if !f.is_list() && !f.is_map() => {
                json_culprit(&m, value).map(|rest| format!(".{rest}"))
            }
            (prost_reflect::Kind::Message(m), serde_json::Value::Array(items)) if f.is_list() => {
                items.iter().enumerate().find_map(|(i, item)| {
                    DynamicMessage::deserialize(m.clone(), item).is_err().then(
                        || match json_culprit(&m, item) {
                            Some(rest) => format!("[{i}].{rest}"),
                            None => format!("[{i}]"),
                        },
                    )
                })
            }
            (prost_reflect::Kind::Message(entry), serde_json::Value::Object(entries))
                if f.is_map() =>
            {
                let prost_reflect::Kind::Message(m) = entry.map_entry_value_field().kind() else {
                    return None;
                };
                entries.iter().find_map(|(k, item)| {
                    DynamicMessage::deserialize(m.clone(), item).is_err().then(
                        || match json_culprit(&m, item) {
                            Some(rest) => format!("[{k:?}].{rest}"),
                            None => format!("[{k:?}]"),
                        },
                    )
                })
            }
            _ => None,
        });
        return Some(match inner {
            Some(rest) => format!("{name}{rest}"),
            None => name.clone(),
        });
    }
    None
}

/// Decodes wire bytes as a `desc` message into JSON: proto field names, 64-bit integers as JSON
/// numbers (not strings), fields at their default value left out, unknown fields dropped.
pub fn bytes_to_json(
    desc: &MessageDescriptor,
    bytes: &[u8],
) -> Result<serde_json::Value, WireError> {
    let decode_error = |reason: String| WireError::Decode {
        message: desc.full_name().to_owned(),
        reason,
    };
    // Through text, not `serde_json::value::Serializer`: that one widens a `float` field to
    // f64 (-6.0727105e33 becomes -6.072710529924295e33), where the text keeps the float's
    // shortest form, as protobuf's JSON mapping and the channel records do.
    let mut text = Vec::new();
    write_bytes_json(desc, bytes, &mut text)?;
    serde_json::from_slice(&text).map_err(|e| decode_error(e.to_string()))
}

/// [`bytes_to_json`] written as JSON text onto `out`, without building the value first (a
/// channel record's message, rendered for a collector). On error `out` is left as it was.
///
/// Written straight from the wire bytes ([`crate::wire_json`]) when it can be, else through
/// prost-reflect ([`write_bytes_json_reflect`]); the two give the same JSON.
pub fn write_bytes_json(
    desc: &MessageDescriptor,
    bytes: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    let start = out.len();
    if crate::wire_json::write(desc, bytes, out).is_ok() {
        return Ok(());
    }
    out.truncate(start);
    // prost-reflect 0.16 reads a map record of any wire type as length-delimited, so it
    // renders bytes every read refuses (`40 02 08 01` for `weft.test.Maps`: a varint where
    // the map `seen` is) as a made-up entry. Only a message the whole-message check accepts
    // goes to it.
    crate::wire_check::WireCheck::new(desc)
        .check(bytes)
        .map_err(|e| WireError::Decode {
            message: desc.full_name().to_owned(),
            reason: e.to_string(),
        })?;
    write_bytes_json_reflect(desc, bytes, out)
}

/// [`write_bytes_json`] by decoding into a prost-reflect `DynamicMessage` and serializing it:
/// the reference the direct writer is tested against, and its fallback.
pub fn write_bytes_json_reflect(
    desc: &MessageDescriptor,
    bytes: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    let decode_error = |reason: String| WireError::Decode {
        message: desc.full_name().to_owned(),
        reason,
    };
    let msg =
        DynamicMessage::decode(desc.clone(), bytes).map_err(|e| decode_error(e.to_string()))?;
    let start = out.len();
    let mut ser = serde_json::Serializer::new(&mut *out);
    msg.serialize_with_options(&mut ser, &json_options())
        .map_err(|e| {
            out.truncate(start);
            decode_error(e.to_string())
        })
}

fn json_options() -> SerializeOptions {
    SerializeOptions::new()
        .stringify_64_bit_integers(false)
        .use_proto_field_name(true)
        .skip_default_fields(true)
}

#[cfg(test)]
mod tests {
    //! Hand-assembled wire bytes for the rules the random tests cannot pin down exactly
    //! (positions, non-canonical encodings, malformed input). Expected bytes follow the
    //! protobuf encoding spec: key = number << 3 | wire type.

    use super::*;
    use crate::schema::{Schema, resolve_path};

    const PROTO: &str = r#"
        syntax = "proto3";
        package t;
        message M {
          int32 a = 1;
          string s = 2;
          N n = 3;
          repeated int32 r = 4;
          map<string, int32> m = 5;
          oneof o { int32 x = 6; string y = 7; N z = 8; }
          repeated string rs = 9;
          sint32 si = 10;
          fixed32 f = 11;
          optional int32 oa = 12;
        }
        message N { int32 b = 1; int32 c = 2; }
    "#;

    fn path(text: &str) -> FieldPath {
        let schema = Schema::from_source("t.proto", PROTO).unwrap();
        resolve_path(&schema.message("t.M").unwrap(), text).unwrap()
    }

    fn read_ok(bytes: &[u8], p: &str) -> Value {
        read(bytes, &path(p)).unwrap()
    }

    fn write_ok(bytes: &[u8], p: &str, v: Value) -> Vec<u8> {
        write(bytes, &path(p), &v).unwrap()
    }

    #[test]
    fn last_scalar_wins_and_sub_messages_merge() {
        assert_eq!(read_ok(&[0x08, 0x01, 0x08, 0x02], "a"), Value::Int(2));
        let two_ns = [0x1a, 0x02, 0x08, 0x05, 0x1a, 0x04, 0x10, 0x07, 0x08, 0x06];
        assert_eq!(read_ok(&two_ns, "n.b"), Value::Int(6));
        assert_eq!(read_ok(&two_ns, "n.c"), Value::Int(7));
        assert_eq!(read_ok(&[], "n.b"), Value::Int(0));
    }

    #[test]
    fn lists_accept_packed_and_unpacked_runs_in_order() {
        let bytes = [0x20, 0x07, 0x22, 0x03, 0x01, 0xac, 0x02, 0x20, 0x03];
        let want = [7, 1, 300, 3].map(Value::Int).to_vec();
        assert_eq!(read_ok(&bytes, "r"), Value::Vec(want));
        assert_eq!(byte_size(&bytes, &path("r")).unwrap(), 1 + 1 + 2 + 1);
    }

    #[test]
    fn map_entries_later_duplicates_win_and_missing_parts_are_zero() {
        // {"a": 1}, {"a": 2}, {value 9 without key}, {key "k" without value}
        let bytes = [
            0x2a, 0x05, 0x0a, 0x01, b'a', 0x10, 0x01, //
            0x2a, 0x05, 0x0a, 0x01, b'a', 0x10, 0x02, //
            0x2a, 0x02, 0x10, 0x09, //
            0x2a, 0x03, 0x0a, 0x01, b'k',
        ];
        let want = BTreeMap::from([
            (Value::str("a"), Value::Int(2)),
            (Value::str(""), Value::Int(9)),
            (Value::str("k"), Value::Int(0)),
        ]);
        assert_eq!(read_ok(&bytes, "m"), Value::Map(want));
    }

    #[test]
    fn a_later_oneof_sibling_clears_the_field() {
        let x_then_y = [0x30, 0x05, 0x3a, 0x01, b'q'];
        assert_eq!(read_ok(&x_then_y, "x"), Value::Int(0));
        assert_eq!(read_ok(&x_then_y, "y"), Value::str("q"));
        assert_eq!(byte_size(&x_then_y, &path("x")).unwrap(), 0);
        let y_then_x = [0x3a, 0x01, b'q', 0x30, 0x05];
        assert_eq!(read_ok(&y_then_x, "x"), Value::Int(5));
        assert_eq!(read_ok(&y_then_x, "y"), Value::str(""));
        // z, then y, then z again: only the last z counts.
        let z_y_z = [0x42, 0x02, 0x08, 0x01, 0x3a, 0x00, 0x42, 0x02, 0x10, 0x02];
        assert_eq!(read_ok(&z_y_z, "z.b"), Value::Int(0));
        assert_eq!(read_ok(&z_y_z, "z.c"), Value::Int(2));
    }

    #[test]
    fn writes_replace_at_the_first_occurrence() {
        let bytes = [0x08, 0x01, 0x12, 0x01, b'x', 0x08, 0x02];
        assert_eq!(
            write_ok(&bytes, "a", Value::Int(5)),
            [0x08, 0x05, 0x12, 0x01, b'x']
        );
        // Absent: appended.
        assert_eq!(
            write_ok(&[0x12, 0x01, b'x'], "a", Value::Int(5)),
            [0x12, 0x01, b'x', 0x08, 0x05]
        );
        // Implicit presence at zero: removed.
        assert_eq!(write_ok(&bytes, "a", Value::Int(0)), [0x12, 0x01, b'x']);
        // Explicit presence at zero: kept.
        assert_eq!(write_ok(&[], "oa", Value::Int(0)), [0x60, 0x00]);
    }

    #[test]
    fn nested_writes_merge_the_enclosing_message_in_place() {
        let bytes = [0x1a, 0x02, 0x08, 0x05, 0x08, 0x01, 0x1a, 0x02, 0x10, 0x07];
        assert_eq!(
            write_ok(&bytes, "n.b", Value::Int(9)),
            [0x1a, 0x04, 0x08, 0x09, 0x10, 0x07, 0x08, 0x01]
        );
        // Absent enclosing message: created at the end, even when the leaf is left out.
        assert_eq!(
            write_ok(&[0x08, 0x01], "n.b", Value::Int(0)),
            [0x08, 0x01, 0x1a, 0x00]
        );
    }

    #[test]
    fn writes_remove_oneof_siblings() {
        let bytes = [0x3a, 0x01, b'q', 0x08, 0x01];
        assert_eq!(
            write_ok(&bytes, "x", Value::Int(3)),
            [0x30, 0x03, 0x08, 0x01]
        );
        // z's first occurrence was cleared by y, so the new z holds only c.
        let z_y = [0x42, 0x02, 0x08, 0x01, 0x3a, 0x01, b'q'];
        assert_eq!(
            write_ok(&z_y, "z.c", Value::Int(2)),
            [0x42, 0x02, 0x10, 0x02]
        );
    }

    #[test]
    fn unknown_fields_and_non_canonical_varints_survive_byte_for_byte() {
        // Field 99 (key 0x98 0x06) holding 1 spelled in three bytes, then a, then field 100
        // (key 0xa2 0x06) as bytes.
        let bytes = [
            0x98, 0x06, 0x81, 0x80, 0x00, 0x08, 0x01, 0xa2, 0x06, 0x01, 0xff,
        ];
        let out = write_ok(&bytes, "a", Value::Int(300));
        assert_eq!(
            out,
            [
                0x98, 0x06, 0x81, 0x80, 0x00, 0x08, 0xac, 0x02, 0xa2, 0x06, 0x01, 0xff
            ]
        );
    }

    #[test]
    fn writes_narrow_like_c_casts() {
        assert_eq!(write_ok(&[], "a", Value::Int(0x1_0000_0005)), [0x08, 0x05]);
        let mut minus_one = vec![0x08];
        minus_one.extend([0xff; 9]);
        minus_one.push(0x01);
        assert_eq!(write_ok(&[], "a", Value::Int(-1)), minus_one);
        assert_eq!(write_ok(&[], "si", Value::Int(-1)), [0x50, 0x01]);
        assert_eq!(
            write_ok(&[], "si", Value::Int(0x1_0000_0000)),
            Vec::<u8>::new()
        );
        assert_eq!(
            write_ok(&[], "f", Value::Uint(0x1_0000_0002)),
            [0x5d, 0x02, 0x00, 0x00, 0x00]
        );
    }

    #[test]
    fn lists_and_maps_encode_by_the_rules() {
        assert_eq!(
            write_ok(&[], "r", Value::Vec(vec![Value::Int(1), Value::Int(300)])),
            [0x22, 0x03, 0x01, 0xac, 0x02]
        );
        assert_eq!(
            write_ok(&[], "rs", Value::Vec(vec![Value::str("a"), Value::str("")])),
            [0x4a, 0x01, b'a', 0x4a, 0x00]
        );
        assert_eq!(
            write_ok(&[0x20, 0x01], "r", Value::Vec(vec![])),
            Vec::<u8>::new()
        );
        let map = BTreeMap::from([
            (Value::str("b"), Value::Int(2)),
            (Value::str("a"), Value::Int(0)),
        ]);
        assert_eq!(
            write_ok(&[], "m", Value::Map(map)),
            [
                0x2a, 0x05, 0x0a, 0x01, b'a', 0x10, 0x00, 0x2a, 0x05, 0x0a, 0x01, b'b', 0x10, 0x02
            ]
        );
    }

    #[test]
    fn sizes_count_canonical_encodings_and_payloads() {
        // int32 -1 spelled in 5 bytes (as some encoders do) is -1, canonically 10 bytes.
        let short_minus_one = [0x08, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(read_ok(&short_minus_one, "a"), Value::Int(-1));
        assert_eq!(byte_size(&short_minus_one, &path("a")).unwrap(), 10);
        assert_eq!(
            byte_size(&[0x12, 0x03, 0xc3, 0xa9, b'x'], &path("s")).unwrap(),
            3
        );
        assert_eq!(byte_size(&[0x5d, 1, 2, 3, 4], &path("f")).unwrap(), 4);
        assert_eq!(byte_size(&[], &path("s")).unwrap(), 0);
        assert_eq!(byte_size(&[], &path("n.b")).unwrap(), 0);
    }

    #[test]
    fn malformed_input_is_an_error_an_operator_can_place() {
        let s = path("s");
        assert_eq!(
            read(&[0x12, 0x05, b'a'], &s),
            Err(WireError::Truncated { offset: 0 })
        );
        // A length prefix of 4 GiB is rejected against the bytes present, not allocated.
        let huge = [0x08, 0x01, 0x12, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(read(&huge, &s), Err(WireError::Truncated { offset: 2 }));
        assert_eq!(
            read(&[0x08; 1], &s),
            Err(WireError::Truncated { offset: 1 })
        );
        let mut eleven = vec![0x08];
        eleven.extend([0xff; 11]);
        assert_eq!(read(&eleven, &s), Err(WireError::BadVarint { offset: 1 }));
        let mut tenth_too_big = vec![0x08];
        tenth_too_big.extend([0xff; 9]);
        tenth_too_big.push(0x02);
        assert_eq!(
            read(&tenth_too_big, &s),
            Err(WireError::BadVarint { offset: 1 })
        );
        assert_eq!(
            read(&[0x0b, 0x0c], &s),
            Err(WireError::Group {
                offset: 0,
                number: 1
            })
        );
        assert_eq!(
            read(&[0x07, 0x00], &s),
            Err(WireError::InvalidFieldNumber { offset: 0, key: 7 })
        );
        assert_eq!(
            read(&[0x0f, 0x00], &s),
            Err(WireError::InvalidWireType {
                offset: 0,
                wire_type: 7
            })
        );
        let e = read(&[0x0a, 0x00], &path("a")).unwrap_err();
        assert!(matches!(
            e,
            WireError::WrongWireType {
                number: 1,
                found: 2,
                expected: 0,
                ..
            }
        ));
        assert!(e.to_string().contains("`a`"), "{e}");
        let e = read(&[0x12, 0x01, 0xff], &s).unwrap_err();
        assert_eq!(
            e,
            WireError::InvalidUtf8 {
                field: "s".into(),
                offset: 2
            }
        );
        // Offsets count from the start of the outer message, also inside sub-messages.
        let e = read(&[0x08, 0x01, 0x1a, 0x02, 0x08, 0x80], &path("n.b")).unwrap_err();
        assert_eq!(e, WireError::Truncated { offset: 5 });
        // Writes scan the same way.
        assert!(write(&huge, &path("a"), &Value::Int(1)).is_err());
    }
}
