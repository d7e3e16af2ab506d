//! Whole-message validation: does a message's wire bytes decode as its type, all the way
//! down?
//!
//! Elements decode fields lazily, when they read them, so a malformed message used to be
//! rejected by whichever element first read the broken part. The planner's equivalence
//! checker does not count a field read as a way to stop an RPC, so moving a stateful element
//! ahead of a field reader could change what a malformed RPC did to the state. The runtime
//! instead checks the whole message once, before the first element of the edge in the
//! message's direction of travel, and rejects it there (docs/engine.md, "Malformed
//! messages"); from then on no field access of any element can fail, wherever it runs.
//!
//! The check is as strict as every read, write and size of [`crate::wire`] together, and as
//! prost: framing at every level, the wire type of every known field, packed runs, UTF-8 of
//! every `string`, map entries, and nested messages to a depth of [`MAX_DEPTH`]. Unknown
//! fields are checked for framing only. Groups are refused, as everywhere in Weft.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use crate::schema::ProtoKind;
use crate::wire::{I32, I64, LEN, Seg, VARINT, WireError, records, varint};

/// Nested messages deeper than this are refused (prost's and protobuf-go's limit), so a
/// hostile message cannot exhaust the stack.
pub const MAX_DEPTH: usize = 100;

/// The check for one message type, built once from its descriptor: looking fields up in
/// the descriptor per record would cost more than the check.
#[derive(Clone, Debug)]
pub struct WireCheck {
    /// Index 0 is the checked type; nested message types (and map entries) follow, each
    /// once, so recursive types are finite.
    shapes: Vec<Shape>,
}

#[derive(Clone, Debug, Default)]
struct Shape {
    /// Sorted by number.
    fields: Vec<FieldCheck>,
    /// What a record of each small field number must be, by number (numbers up to
    /// [`DENSE_MAX`]); larger numbers are looked up in `fields`.
    dense: Vec<Expect>,
}

/// Field numbers up to this are looked up by index (most messages number their fields
/// from 1 without large gaps).
const DENSE_MAX: u32 = 64;

/// What the fast pass needs of a field, in a byte or two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Not a field of the type: framing only.
    Unknown,
    /// Exactly this wire type, nothing more to check (numbers, bytes).
    Wire(u8),
    /// Wire type `wire`, or a packed run of it (repeated numeric fields).
    PackedOr(u8),
    /// A `string`: length-delimited UTF-8.
    Utf8,
    /// A message: length-delimited, checked as the shape with this index.
    Message(usize),
}

#[derive(Clone, Debug)]
struct FieldCheck {
    number: u32,
    /// The field's full proto name, for error messages.
    name: String,
    kind: ProtoKind,
    /// Repeated (or a map): a numeric kind may come packed.
    repeated: bool,
    /// The shape of a message field's (or a map entry's) payload.
    nested: Option<usize>,
}

impl WireCheck {
    pub fn new(desc: &MessageDescriptor) -> WireCheck {
        let mut built = Builder {
            names: Vec::new(),
            shapes: Vec::new(),
        };
        built.shape(desc);
        WireCheck {
            shapes: built.shapes,
        }
    }

    /// `Ok` when `msg` decodes as the type, every nested message included; otherwise the
    /// first problem, with its offset.
    pub fn check(&self, msg: &[u8]) -> Result<(), WireError> {
        if self.valid(0, msg, 0) {
            return Ok(());
        }
        let explained = self.explain(
            0,
            Seg {
                base: 0,
                bytes: msg,
            },
            0,
        );
        // The tests compare the check with prost on damaged messages; this catches the two
        // passes disagreeing there.
        debug_assert!(
            explained.is_err(),
            "the fast pass refused a message the slow pass accepts"
        );
        explained
    }

    /// The pass every message takes: a yes or no, with no error to build. Reusing the
    /// codec's record iterator here cost about 200 instructions per record (the echo
    /// request took 820), most of it moving `Result`s that carry a `WireError`.
    fn valid(&self, shape: usize, bytes: &[u8], depth: usize) -> bool {
        if depth > MAX_DEPTH {
            return false;
        }
        let shape = &self.shapes[shape];
        let mut pos = 0;
        while pos < bytes.len() {
            let Some((key, p)) = skip_varint(bytes, pos) else {
                return false;
            };
            let number = key >> 3;
            if key > u64::from(u32::MAX) || number == 0 {
                return false;
            }
            let wire = (key & 7) as u8;
            let (start, end) = match wire {
                VARINT => match skip_varint(bytes, p) {
                    Some((_, end)) => (p, end),
                    None => return false,
                },
                I64 | I32 => {
                    let end = p + if wire == I64 { 8 } else { 4 };
                    if end > bytes.len() {
                        return false;
                    }
                    (p, end)
                }
                LEN => {
                    let Some((len, q)) = skip_varint(bytes, p) else {
                        return false;
                    };
                    match usize::try_from(len).ok().and_then(|l| q.checked_add(l)) {
                        Some(end) if end <= bytes.len() => (q, end),
                        _ => return false,
                    }
                }
                // Groups (3, 4) and the invalid wire types 6 and 7.
                _ => return false,
            };
            pos = end;
            let ok = match shape.expect(number as u32) {
                Expect::Unknown => true,
                Expect::Wire(w) => wire == w,
                Expect::PackedOr(w) => {
                    wire == w || (wire == LEN && packed_run_valid(w, &bytes[start..end]))
                }
                Expect::Utf8 => {
                    wire == LEN && weft_hostcalls::text::utf8(&bytes[start..end]).is_ok()
                }
                Expect::Message(m) => wire == LEN && self.valid(m, &bytes[start..end], depth + 1),
            };
            if !ok {
                return false;
            }
        }
        true
    }

    /// The slow pass, for a message the fast one refused: walks it with the codec's own
    /// record scanner to name the first problem as a read would.
    #[cold]
    fn explain(&self, shape: usize, seg: Seg<'_>, depth: usize) -> Result<(), WireError> {
        if depth > MAX_DEPTH {
            return Err(WireError::TooDeep {
                offset: seg.base,
                limit: MAX_DEPTH,
            });
        }
        let fields = &self.shapes[shape].fields;
        for rec in records(seg) {
            let rec = rec?;
            let Ok(i) = fields.binary_search_by_key(&rec.number, |f| f.number) else {
                continue;
            };
            let field = &fields[i];
            let expected = field.kind.wire_type();
            if rec.wire == LEN && field.repeated && expected != LEN {
                packed(field, rec.value)?;
                continue;
            }
            if rec.wire != expected {
                return Err(WireError::WrongWireType {
                    field: field.name.clone(),
                    number: field.number,
                    offset: rec.offset,
                    found: rec.wire,
                    expected,
                    kind: field.kind.proto_name(),
                });
            }
            match (field.kind, field.nested) {
                (ProtoKind::String, _) => {
                    weft_hostcalls::text::utf8(rec.value.bytes).map_err(|_| {
                        WireError::InvalidUtf8 {
                            field: field.name.clone(),
                            offset: rec.value.base,
                        }
                    })?;
                }
                (ProtoKind::Message, Some(nested)) => self.explain(nested, rec.value, depth + 1)?,
                // The record scanner has checked the varint or the fixed width already.
                _ => {}
            }
        }
        Ok(())
    }
}

impl Shape {
    #[inline(always)]
    fn expect(&self, number: u32) -> Expect {
        if let Some(e) = self.dense.get(number as usize) {
            return *e;
        }
        match self.fields.binary_search_by_key(&number, |f| f.number) {
            Ok(i) => self.fields[i].expect(),
            Err(_) => Expect::Unknown,
        }
    }
}

impl FieldCheck {
    fn expect(&self) -> Expect {
        let wire = self.kind.wire_type();
        match (self.kind, self.nested) {
            (ProtoKind::String, _) => Expect::Utf8,
            (ProtoKind::Message, Some(m)) => Expect::Message(m),
            _ if self.repeated && wire != LEN => Expect::PackedOr(wire),
            _ => Expect::Wire(wire),
        }
    }
}

/// The position after the varint at `pos`, and its value; `None` when it is cut short,
/// longer than 10 bytes or over 64 bits (the codec's rule).
#[inline(always)]
fn skip_varint(bytes: &[u8], pos: usize) -> Option<(u64, usize)> {
    match bytes.get(pos) {
        Some(&b) if b < 0x80 => Some((u64::from(b), pos + 1)),
        Some(_) => varint(bytes, pos, 0).ok(),
        None => None,
    }
}

/// Whether a packed run of values of wire type `wire` is whole.
fn packed_run_valid(wire: u8, run: &[u8]) -> bool {
    match wire {
        VARINT => {
            let mut pos = 0;
            while pos < run.len() {
                match skip_varint(run, pos) {
                    Some((_, next)) => pos = next,
                    None => return false,
                }
            }
            true
        }
        I64 => run.len().is_multiple_of(8),
        _ => run.len().is_multiple_of(4),
    }
}

/// A packed run of a numeric field: whole varints, or a multiple of the fixed width.
fn packed(field: &FieldCheck, run: Seg<'_>) -> Result<(), WireError> {
    match field.kind.wire_type() {
        VARINT => {
            let mut pos = 0;
            while pos < run.bytes.len() {
                pos = varint(run.bytes, pos, run.base)?.1;
            }
            Ok(())
        }
        wire => {
            let width = if wire == I64 { 8 } else { 4 };
            debug_assert!(wire == I64 || wire == I32);
            if run.bytes.len().is_multiple_of(width) {
                Ok(())
            } else {
                Err(WireError::BadPackedLength {
                    field: field.name.clone(),
                    offset: run.base,
                    len: run.bytes.len(),
                    width,
                })
            }
        }
    }
}

struct Builder {
    /// The full name of each shape's message type, by index.
    names: Vec<String>,
    shapes: Vec<Shape>,
}

impl Builder {
    /// The index of `desc`'s shape, building it (and the shapes it reaches) the first time.
    fn shape(&mut self, desc: &MessageDescriptor) -> usize {
        if let Some(i) = self.names.iter().position(|n| n == desc.full_name()) {
            return i;
        }
        let index = self.shapes.len();
        self.names.push(desc.full_name().to_owned());
        self.shapes.push(Shape::default());
        let mut fields: Vec<FieldCheck> = desc.fields().map(|f| self.field(&f)).collect();
        fields.sort_by_key(|f| f.number);
        let top = fields
            .iter()
            .map(|f| f.number)
            .filter(|n| *n <= DENSE_MAX)
            .max()
            .unwrap_or(0);
        let mut dense = vec![Expect::Unknown; top as usize + 1];
        for f in fields.iter().filter(|f| f.number <= top) {
            dense[f.number as usize] = f.expect();
        }
        self.shapes[index] = Shape { fields, dense };
        index
    }

    fn field(&mut self, f: &FieldDescriptor) -> FieldCheck {
        let kind = f.kind();
        let nested = match &kind {
            Kind::Message(m) => Some(self.shape(m)),
            _ => None,
        };
        FieldCheck {
            number: f.number(),
            name: f.full_name().to_owned(),
            kind: ProtoKind::of(&kind),
            repeated: f.is_list() || f.is_map(),
            nested,
        }
    }
}
