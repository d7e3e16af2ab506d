//! A message's wire bytes written straight out as proto3 JSON, as channel records and
//! `weft sim` show messages: field names as in the .proto, fields at their default left out,
//! 64-bit integers as numbers, bytes in base64, fields in number order.
//!
//! It writes what decoding into a prost-reflect `DynamicMessage` and serializing that gives
//! ([`crate::wire::write_bytes_json_reflect`]), without building the message, which was most
//! of a message record's cost. What it does not render itself it refuses, and the caller
//! takes prost-reflect's path, which then gives its own answer or error: well-known types
//! (their JSON forms are special), proto2 and editions files (defaults, closed enums,
//! groups, extensions), nesting near prost's recursion limit, and any input it finds
//! malformed. So it only has to be as strict as prost, never more lenient: every record prost
//! decodes, superseded ones included, is decoded and checked here too.
//!
//! What a message type needs for this is read from its descriptor once ([`Plan`]) and kept
//! per thread: asking the descriptor per field cost more than the rendering.
//!
//! The one difference: a map's entries come in the order their keys first appear, where
//! prost-reflect's come in its hash map's order. Both are the same JSON value.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ops::Range;
use std::rc::Rc;

use base64::display::Base64Display;
use base64::engine::general_purpose::STANDARD;
use prost_reflect::{Kind, MessageDescriptor, Syntax};

use crate::schema::ProtoKind;
use crate::wire::{I32, I64, LEN, Seg, VARINT, varint};

/// Not rendered here; the caller falls back to prost-reflect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

type Result<T> = std::result::Result<T, Refused>;

/// prost stops decoding at 100 nested messages; well before that, let it decide.
const MAX_DEPTH: usize = 64;

/// Plans kept per thread, most recently built last; a process renders few message types.
/// A plan keeps its descriptor, and so the whole descriptor pool of the version it came
/// from: a new plan replaces those of the same type name from other pools (a reload's), so
/// a replaced version's schema is freed with the version rather than kept here. Until
/// 2026-11-27 they stayed until 64 newer plans pushed them out, on every thread that
/// collected records: the Go soak test (`make soak`) saw the process's memory climb with
/// every reload, the schemas of up to 64 old versions kept per thread.
const PLANS_KEPT: usize = 64;

thread_local! {
    static PLANS: RefCell<Vec<(MessageDescriptor, Rc<Plan>)>> = const { RefCell::new(Vec::new()) };
}

/// Writes `bytes`, a message of type `desc`, onto `out` as JSON. On `Err` `out` may hold a
/// partial rendering: the caller truncates it.
pub fn write(desc: &MessageDescriptor, bytes: &[u8], out: &mut Vec<u8>) -> Result<()> {
    let plan = plan_for(desc);
    let mut stack = Vec::new();
    plan.message(0, &[Seg { base: 0, bytes }], 0, &mut stack, out)
}

fn plan_for(desc: &MessageDescriptor) -> Rc<Plan> {
    PLANS.with(|plans| {
        let mut plans = plans.borrow_mut();
        if let Some((_, plan)) = plans.iter().find(|(d, _)| d == desc) {
            return Rc::clone(plan);
        }
        // Two runtimes in one process with the same type (a client and a server) alternate
        // here once per batch of records: a plan is cheap to build, a pool dear to keep.
        plans.retain(|(d, _)| d.full_name() != desc.full_name());
        if plans.len() >= PLANS_KEPT {
            plans.remove(0);
        }
        let plan = Rc::new(Plan::build(desc));
        plans.push((desc.clone(), Rc::clone(&plan)));
        plan
    })
}

/// The message types reachable from one root, each with what rendering it needs.
struct Plan {
    /// `[0]` is the root.
    messages: Vec<MessagePlan>,
    enums: Vec<EnumPlan>,
}

struct MessagePlan {
    /// In number order; `None` for a type left to prost-reflect.
    fields: Option<Vec<FieldPlan>>,
    /// How many oneofs the message has (`FieldPlan::oneof` indexes them).
    oneofs: usize,
}

struct FieldPlan {
    number: u32,
    /// `"name":`, quoted once.
    key: Box<[u8]>,
    shape: Shape,
    value: ValuePlan,
    /// Written even at its default (a message, a proto3 `optional`, a oneof member).
    presence: bool,
    /// Which of the message's oneofs holds it.
    oneof: Option<usize>,
}

enum Shape {
    Singular,
    List,
    Map(ValuePlan),
}

#[derive(Clone, Copy)]
enum ValuePlan {
    /// Not `Enum` nor `Message`: those carry their plans.
    Scalar(ProtoKind),
    Enum(usize),
    Message(usize),
    /// `google.protobuf.NullValue`, which JSON writes as null: left to prost-reflect.
    Refused,
}

/// An enum's value names, quoted, by number.
struct EnumPlan {
    names: Vec<(i32, Box<[u8]>)>,
}

impl ValuePlan {
    fn wire_type(self) -> u8 {
        match self {
            ValuePlan::Scalar(kind) => kind.wire_type(),
            ValuePlan::Enum(_) | ValuePlan::Refused => VARINT,
            ValuePlan::Message(_) => LEN,
        }
    }

    fn packable(self) -> bool {
        match self {
            ValuePlan::Scalar(kind) => kind.is_packable(),
            ValuePlan::Enum(_) => true,
            ValuePlan::Message(_) | ValuePlan::Refused => false,
        }
    }
}

struct Builder {
    plan: Plan,
    messages: HashMap<String, usize>,
    enums: HashMap<String, usize>,
}

impl Plan {
    fn build(root: &MessageDescriptor) -> Plan {
        let mut b = Builder {
            plan: Plan {
                messages: Vec::new(),
                enums: Vec::new(),
            },
            messages: HashMap::new(),
            enums: HashMap::new(),
        };
        b.message(root);
        b.plan
    }
}

impl Builder {
    fn message(&mut self, desc: &MessageDescriptor) -> usize {
        if let Some(&i) = self.messages.get(desc.full_name()) {
            return i;
        }
        let i = self.plan.messages.len();
        self.plan.messages.push(MessagePlan {
            fields: None,
            oneofs: 0,
        });
        self.messages.insert(desc.full_name().to_owned(), i);
        if desc.parent_file().syntax() != Syntax::Proto3
            || desc.full_name().starts_with("google.protobuf.")
        {
            return i;
        }
        let oneofs: Vec<String> = desc.oneofs().map(|o| o.name().to_owned()).collect();
        let mut fields = Vec::new();
        for f in desc.fields() {
            let (shape, value) = match f.kind() {
                Kind::Message(entry) if f.is_map() => (
                    Shape::Map(self.value(&entry.map_entry_key_field().kind())),
                    self.value(&entry.map_entry_value_field().kind()),
                ),
                kind if f.is_list() => (Shape::List, self.value(&kind)),
                kind => (Shape::Singular, self.value(&kind)),
            };
            let mut key = Vec::new();
            write_str(&mut key, f.name());
            key.push(b':');
            fields.push(FieldPlan {
                number: f.number(),
                key: key.into(),
                shape,
                value,
                presence: f.supports_presence(),
                oneof: f
                    .containing_oneof()
                    .and_then(|o| oneofs.iter().position(|n| n == o.name())),
            });
        }
        self.plan.messages[i] = MessagePlan {
            fields: Some(fields),
            oneofs: oneofs.len(),
        };
        i
    }

    fn value(&mut self, kind: &Kind) -> ValuePlan {
        match kind {
            Kind::Message(m) => ValuePlan::Message(self.message(m)),
            Kind::Enum(e) if e.full_name() == "google.protobuf.NullValue" => ValuePlan::Refused,
            Kind::Enum(e) => {
                if let Some(&i) = self.enums.get(e.full_name()) {
                    return ValuePlan::Enum(i);
                }
                let mut names: Vec<(i32, Box<[u8]>)> = e
                    .values()
                    .map(|v| {
                        let mut name = Vec::new();
                        write_str(&mut name, v.name());
                        (v.number(), name.into())
                    })
                    .collect();
                // An alias (allow_alias) shares a number: prost-reflect names the first.
                names.sort_by_key(|(n, _)| *n);
                names.dedup_by_key(|(n, _)| *n);
                let i = self.plan.enums.len();
                self.plan.enums.push(EnumPlan { names });
                self.enums.insert(e.full_name().to_owned(), i);
                ValuePlan::Enum(i)
            }
            scalar => ValuePlan::Scalar(ProtoKind::of(scalar)),
        }
    }
}

/// One record of a known field: the field's index in its message's plan, the record's place
/// among the message's records (a later oneof member clears an earlier one), its wire type
/// and value bytes.
#[derive(Clone, Copy)]
struct Entry<'a> {
    field: usize,
    seq: usize,
    wire: u8,
    value: Seg<'a>,
}

impl Plan {
    /// A message that arrived as `segs` (several occurrences of one field merge: protobuf's
    /// merge is concatenation). Its records go on `stack` above what enclosing messages
    /// keep there, and are taken off when it is written.
    fn message<'a>(
        &self,
        m: usize,
        segs: &[Seg<'a>],
        depth: usize,
        stack: &mut Vec<Entry<'a>>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        let fields = self.messages[m].fields.as_deref().ok_or(Refused)?;
        if depth > MAX_DEPTH {
            return Err(Refused);
        }
        let base = stack.len();
        let mut seq = 0;
        for seg in segs {
            let bytes = seg.bytes;
            let mut pos = 0;
            while pos < bytes.len() {
                // Unknown fields are checked well-formed (groups are refused, which prost
                // would skip: a fallback) and left out, as prost-reflect's JSON does.
                let (number, wire, start, end) = record(bytes, pos)?;
                if let Ok(field) = fields.binary_search_by_key(&number, |f| f.number) {
                    stack.push(Entry {
                        field,
                        seq,
                        wire,
                        value: Seg {
                            base: 0,
                            bytes: &bytes[start..end],
                        },
                    });
                }
                seq += 1;
                pos = end;
            }
        }
        // Stable: a field's records keep their wire order. Writers emit fields in number
        // order, so this is usually one pass over sorted input.
        stack[base..].sort_by_key(|e| e.field);
        let top = stack.len();
        let latest = latest_members(fields, self.messages[m].oneofs, &stack[base..top]);
        out.push(b'{');
        let mut first = true;
        let mut i = base;
        while i < top {
            let field = stack[i].field;
            let end = i + stack[i..top]
                .iter()
                .take_while(|e| e.field == field)
                .count();
            let plan = &fields[field];
            // A oneof member's records count only after the last record of another member.
            let cutoff = match plan.oneof.map(|o| latest[o]) {
                Some([Some((seq, other)), _]) if other != field => seq + 1,
                Some([_, Some((seq, _))]) => seq + 1,
                _ => 0,
            };
            let live = i + stack[i..end].partition_point(|e| e.seq < cutoff);
            // prost decodes cleared records too: what it would refuse there, refuse here.
            for k in i..live {
                self.field_value(plan, k..k + 1, depth, stack, &mut Vec::new())?;
            }
            if live < end {
                let mark = out.len();
                if !first {
                    out.push(b',');
                }
                out.extend_from_slice(&plan.key);
                if self.field_value(plan, live..end, depth, stack, out)? {
                    first = false;
                } else {
                    out.truncate(mark);
                }
            }
            i = end;
        }
        stack.truncate(base);
        out.push(b'}');
        Ok(())
    }

    /// Writes a field's value given its live records, `stack[recs]` (nested messages push
    /// theirs above them); false when it is at its default and has no presence
    /// (prost-reflect then leaves it out).
    fn field_value<'a>(
        &self,
        plan: &FieldPlan,
        recs: Range<usize>,
        depth: usize,
        stack: &mut Vec<Entry<'a>>,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let value = plan.value;
        match plan.shape {
            Shape::Map(key) => self.map(key, value, recs, depth, stack, out),
            Shape::List => {
                out.push(b'[');
                let mut n = 0;
                for k in recs {
                    let e = stack[k];
                    if e.wire == LEN && value.packable() {
                        for_each_packed(value, e.value, |v| {
                            if n > 0 {
                                out.push(b',');
                            }
                            n += 1;
                            self.scalar(value, v, out).map(|_| ())
                        })?;
                    } else {
                        if n > 0 {
                            out.push(b',');
                        }
                        n += 1;
                        self.single(value, &e, depth, stack, out)?;
                    }
                }
                out.push(b']');
                Ok(n > 0)
            }
            Shape::Singular => match value {
                ValuePlan::Message(m) => {
                    for e in &stack[recs.clone()] {
                        expect_wire(e.wire, LEN)?;
                    }
                    // One occurrence is the common case: no list of pieces to build.
                    if recs.len() == 1 {
                        let seg = stack[recs.start].value;
                        self.message(m, &[seg], depth + 1, stack, out)?;
                    } else {
                        let segs: Vec<Seg<'a>> = stack[recs].iter().map(|e| e.value).collect();
                        self.message(m, &segs, depth + 1, stack, out)?;
                    }
                    Ok(true)
                }
                _ => {
                    // The last record wins; the earlier ones are still decoded.
                    let Some(last) = recs.end.checked_sub(1).filter(|l| *l >= recs.start) else {
                        return Ok(false);
                    };
                    for k in recs.start..last {
                        let e = stack[k];
                        self.single(value, &e, depth, stack, &mut Vec::new())?;
                    }
                    let e = stack[last];
                    let default = self.single(value, &e, depth, stack, out)?;
                    Ok(plan.presence || !default)
                }
            },
        }
    }

    /// One value that is a whole record (not a packed element); returns whether it is the
    /// kind's default.
    fn single<'a>(
        &self,
        value: ValuePlan,
        e: &Entry<'a>,
        depth: usize,
        stack: &mut Vec<Entry<'a>>,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        expect_wire(e.wire, value.wire_type())?;
        match value {
            ValuePlan::Message(m) => {
                self.message(m, &[e.value], depth + 1, stack, out)?;
                Ok(false)
            }
            _ => self.scalar(value, e.value, out),
        }
    }

    /// A scalar's value bytes (a varint's bytes, 4 or 8 bytes, or a string's or bytes'
    /// payload), written as prost-reflect writes it (the same serde_json calls, so the same
    /// number formatting); returns whether it is the kind's default.
    fn scalar(&self, value: ValuePlan, v: Seg<'_>, out: &mut Vec<u8>) -> Result<bool> {
        let var = || {
            varint(v.bytes, 0, v.base)
                .map(|(n, _)| n)
                .map_err(|_| Refused)
        };
        let fixed4 = || <[u8; 4]>::try_from(v.bytes).map_err(|_| Refused);
        let fixed8 = || <[u8; 8]>::try_from(v.bytes).map_err(|_| Refused);
        // Narrowing `as` casts are protobuf's own rules for varints (prost's, protobuf-go's).
        let default = match value {
            ValuePlan::Scalar(kind) => match kind {
                ProtoKind::Int32 => number(out, var()? as i32),
                ProtoKind::Int64 => number(out, var()? as i64),
                ProtoKind::Uint32 => number(out, var()? as u32),
                ProtoKind::Uint64 => number(out, var()?),
                ProtoKind::Sint32 => {
                    let n = var()? as u32;
                    number(out, ((n >> 1) as i32) ^ -((n & 1) as i32))
                }
                ProtoKind::Sint64 => {
                    let n = var()?;
                    number(out, ((n >> 1) as i64) ^ -((n & 1) as i64))
                }
                ProtoKind::Fixed32 => number(out, u32::from_le_bytes(fixed4()?)),
                ProtoKind::Sfixed32 => number(out, i32::from_le_bytes(fixed4()?)),
                ProtoKind::Fixed64 => number(out, u64::from_le_bytes(fixed8()?)),
                ProtoKind::Sfixed64 => number(out, i64::from_le_bytes(fixed8()?)),
                ProtoKind::Bool => {
                    let b = var()? != 0;
                    out.extend_from_slice(if b { b"true" } else { b"false" });
                    !b
                }
                ProtoKind::Float => {
                    let f = f32::from_le_bytes(fixed4()?);
                    float(out, f, f.is_finite());
                    f == 0.0
                }
                ProtoKind::Double => {
                    let f = f64::from_le_bytes(fixed8()?);
                    float(out, f, f.is_finite());
                    f == 0.0
                }
                ProtoKind::String => {
                    let s = std::str::from_utf8(v.bytes).map_err(|_| Refused)?;
                    write_str(out, s);
                    s.is_empty()
                }
                ProtoKind::Bytes => {
                    write_display(out, &Base64Display::new(v.bytes, &STANDARD));
                    v.bytes.is_empty()
                }
                ProtoKind::Enum | ProtoKind::Message => return Err(Refused),
            },
            ValuePlan::Enum(e) => {
                let n = var()? as i32;
                let names = &self.enums[e].names;
                match names.binary_search_by_key(&n, |(k, _)| *k) {
                    Ok(at) => out.extend_from_slice(&names[at].1),
                    Err(_) => serialize(out, &n),
                }
                n == 0
            }
            ValuePlan::Message(_) | ValuePlan::Refused => return Err(Refused),
        };
        Ok(default)
    }

    /// A map field: each record one entry (key 1, value 2; either may be missing and is then
    /// its default); a later entry with the same key replaces the earlier.
    fn map<'a>(
        &self,
        key_plan: ValuePlan,
        value_plan: ValuePlan,
        recs: Range<usize>,
        depth: usize,
        stack: &mut Vec<Entry<'a>>,
        out: &mut Vec<u8>,
    ) -> Result<bool> {
        let mut entries: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(recs.len());
        let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
        for k in recs {
            let e = stack[k];
            expect_wire(e.wire, LEN)?;
            let (mut key, mut scalar_value, mut message_value) = (None, None, Vec::new());
            let bytes = e.value.bytes;
            let mut pos = 0;
            while pos < bytes.len() {
                let (number, wire, start, end) = record(bytes, pos)?;
                let v = Seg {
                    base: 0,
                    bytes: &bytes[start..end],
                };
                match number {
                    1 => {
                        expect_wire(wire, key_plan.wire_type())?;
                        self.key_text(key_plan, v)?;
                        key = Some(v);
                    }
                    2 => {
                        expect_wire(wire, value_plan.wire_type())?;
                        if let ValuePlan::Message(_) = value_plan {
                            message_value.push(v);
                        } else {
                            self.scalar(value_plan, v, &mut Vec::new())?;
                            scalar_value = Some(v);
                        }
                    }
                    _ => {}
                }
                pos = end;
            }
            let zero = Seg {
                base: 0,
                bytes: zero_bytes(key_plan),
            };
            let key = self.key_text(key_plan, key.unwrap_or(zero))?;
            let mut value = Vec::new();
            match value_plan {
                ValuePlan::Message(m) => {
                    self.message(m, &message_value, depth + 1, stack, &mut value)?
                }
                _ => {
                    let zero = Seg {
                        base: 0,
                        bytes: zero_bytes(value_plan),
                    };
                    self.scalar(value_plan, scalar_value.unwrap_or(zero), &mut value)?;
                }
            }
            match index.get(&key) {
                Some(&at) => entries[at].1 = value,
                None => {
                    index.insert(key.clone(), entries.len());
                    entries.push((key, value));
                }
            }
        }
        out.push(b'{');
        for (k, (key, value)) in entries.iter().enumerate() {
            if k > 0 {
                out.push(b',');
            }
            out.extend_from_slice(key);
            out.push(b':');
            out.extend_from_slice(value);
        }
        out.push(b'}');
        Ok(!entries.is_empty())
    }

    /// A map key as its JSON object key, as prost-reflect writes it: numbers and booleans
    /// become strings; a string key is one already.
    fn key_text(&self, plan: ValuePlan, v: Seg<'_>) -> Result<Vec<u8>> {
        let mut text = Vec::new();
        let quoted = match plan {
            ValuePlan::Scalar(ProtoKind::String) => false,
            ValuePlan::Scalar(
                ProtoKind::Float | ProtoKind::Double | ProtoKind::Bytes | ProtoKind::Enum,
            )
            | ValuePlan::Enum(_)
            | ValuePlan::Message(_)
            | ValuePlan::Refused => return Err(Refused),
            ValuePlan::Scalar(_) => true,
        };
        if quoted {
            text.push(b'"');
        }
        self.scalar(plan, v, &mut text)?;
        if quoted {
            text.push(b'"');
        }
        Ok(text)
    }
}

/// The value bytes of a kind's default: zero, as wide as its wire type needs.
fn zero_bytes(plan: ValuePlan) -> &'static [u8] {
    const ZERO: [u8; 8] = [0; 8];
    match plan.wire_type() {
        I64 => &ZERO,
        I32 => &ZERO[..4],
        LEN => &[],
        _ => &ZERO[..1],
    }
}

/// The record of `bytes` at `pos`: its field number, wire type, value bytes' range and end.
/// The rules are prost's (and [`crate::wire`]'s): a key fits in 32 bits and names a field
/// above 0, lengths stay within the bytes; groups and unknown wire types are refused.
#[inline(always)]
fn record(bytes: &[u8], pos: usize) -> Result<(u32, u8, usize, usize)> {
    let (key, p) = varint(bytes, pos, 0).map_err(|_| Refused)?;
    if key > u64::from(u32::MAX) || key >> 3 == 0 {
        return Err(Refused);
    }
    let wire = (key & 7) as u8;
    let within = |len: usize, from: usize| {
        from.checked_add(len)
            .filter(|end| *end <= bytes.len())
            .ok_or(Refused)
    };
    let (start, end) = match wire {
        VARINT => (p, varint(bytes, p, 0).map_err(|_| Refused)?.1),
        I64 => (p, within(8, p)?),
        I32 => (p, within(4, p)?),
        LEN => {
            let (len, q) = varint(bytes, p, 0).map_err(|_| Refused)?;
            (q, within(usize::try_from(len).map_err(|_| Refused)?, q)?)
        }
        _ => return Err(Refused),
    };
    Ok(((key >> 3) as u32, wire, start, end))
}

/// For each oneof of a message whose known records are `entries` (sorted by field, each
/// field's in wire order): its member whose last record came last, and the latest last
/// record of another member, as (record number, field). Found in one pass: scanning every
/// record for each member cost members × records, 0.34 s for 4 MiB of a 64-member oneof.
fn latest_members(
    fields: &[FieldPlan],
    oneofs: usize,
    entries: &[Entry<'_>],
) -> Vec<[Option<(usize, usize)>; 2]> {
    let mut latest = vec![[None, None]; oneofs];
    if oneofs == 0 {
        return latest;
    }
    for (k, e) in entries.iter().enumerate() {
        let last_of_field = entries.get(k + 1).is_none_or(|n| n.field != e.field);
        let Some(oneof) = fields[e.field].oneof.filter(|_| last_of_field) else {
            continue;
        };
        let [first, second]: &mut [Option<(usize, usize)>; 2] = &mut latest[oneof];
        if first.is_none_or(|(seq, _)| e.seq > seq) {
            *second = *first;
            *first = Some((e.seq, e.field));
        } else if second.is_none_or(|(seq, _)| e.seq > seq) {
            *second = Some((e.seq, e.field));
        }
    }
    latest
}

fn expect_wire(got: u8, want: u8) -> Result<()> {
    if got == want { Ok(()) } else { Err(Refused) }
}

fn for_each_packed<'a>(
    value: ValuePlan,
    run: Seg<'a>,
    mut f: impl FnMut(Seg<'a>) -> Result<()>,
) -> Result<()> {
    let bytes = run.bytes;
    let width = match value.wire_type() {
        I64 => 8,
        I32 => 4,
        _ => {
            let mut pos = 0;
            while pos < bytes.len() {
                let (_, next) = varint(bytes, pos, run.base).map_err(|_| Refused)?;
                f(Seg {
                    base: run.base + pos,
                    bytes: &bytes[pos..next],
                })?;
                pos = next;
            }
            return Ok(());
        }
    };
    if !bytes.len().is_multiple_of(width) {
        return Err(Refused);
    }
    for chunk in bytes.chunks_exact(width) {
        f(Seg {
            base: run.base,
            bytes: chunk,
        })?;
    }
    Ok(())
}

fn number<T: serde::Serialize + Default + PartialEq>(out: &mut Vec<u8>, n: T) -> bool {
    serialize(out, &n);
    n == T::default()
}

/// A float as prost-reflect writes it: finite ones as numbers, the others as strings.
fn float<F: serde::Serialize + PartialOrd + Default + Copy>(out: &mut Vec<u8>, f: F, finite: bool) {
    if finite {
        serialize(out, &f);
    } else if f > F::default() {
        write_str(out, "Infinity");
    } else if f < F::default() {
        write_str(out, "-Infinity");
    } else {
        write_str(out, "NaN");
    }
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    serialize(out, s);
}

fn write_display(out: &mut Vec<u8>, d: &dyn std::fmt::Display) {
    // serde_json escapes collect_str's text as it escapes a str.
    let mut ser = serde_json::Serializer::new(&mut *out);
    // Writing into a Vec cannot fail.
    let _ = serde::Serializer::collect_str(&mut ser, d);
}

fn serialize<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    // Writing into a Vec cannot fail, and these values (numbers, strings) always serialize.
    let _ = serde_json::to_writer(&mut *out, v);
}
