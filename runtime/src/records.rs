//! Channel records (`send(rpc, log)`, `metrics`' latencies) kept for a caller that collects
//! them now and then, as the C ABI does: an RPC only queues the record it emits, and the
//! collector encodes it ([`encode`]) off the data path.
//!
//! Encoding on the RPC's thread instead (and so not keeping the message alive until the
//! collection) saved CPU in a hot loop but cost the echo benchmark about 2 µs per RPC: each
//! RPC rendered from cold caches, where the collector renders a batch with warm ones
//! (docs/benchmarks.md, "Records encoded where they are sent: tried and reverted").
//!
//! The queue is bounded, in records and in the bytes they hold. A record that finds it full
//! is dropped and counted, never waited for: an observer that falls behind must not slow RPCs
//! down, and must be able to tell that it missed something. The bytes matter because a
//! record keeps its message alive until it is collected, and a collector renders a hostile
//! 4 MiB message in up to a quarter of a second: counting records alone, 16 384 of them
//! (the Go binding's default) could hold 64 GiB of messages.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use weft_hostcalls::Value;
use weft_hostcalls::channel::ChannelRecord;
use weft_ir::schema::MethodSchema;

/// A record with the method of the RPC that emitted it (to render the messages it holds).
struct Queued {
    record: ChannelRecord,
    method: Option<Arc<MethodSchema>>,
}

pub struct RecordQueue {
    queued: Mutex<Held>,
    capacity: usize,
    max_bytes: usize,
    dropped: AtomicU64,
}

/// The queued records and the bytes they hold ([`held_bytes`]).
#[derive(Default)]
struct Held {
    records: VecDeque<Queued>,
    bytes: usize,
}

/// The bytes a queue holds at most by default: 64 MiB, the messages of 65 536 records of
/// 1 KiB (more than the Go binding's 16 384 records), or of sixteen 4 MiB messages.
pub const DEFAULT_MAX_BYTES: usize = 64 << 20;

impl RecordQueue {
    /// A queue that holds at most `capacity` records (at least one) and
    /// [`DEFAULT_MAX_BYTES`].
    pub fn new(capacity: usize) -> RecordQueue {
        RecordQueue::with_max_bytes(capacity, DEFAULT_MAX_BYTES)
    }

    /// A queue that holds at most `capacity` records (at least one) and `max_bytes` of
    /// messages and strings in them; a record larger than that alone is always dropped.
    pub fn with_max_bytes(capacity: usize, max_bytes: usize) -> RecordQueue {
        let capacity = capacity.max(1);
        RecordQueue {
            queued: Mutex::new(Held {
                records: VecDeque::with_capacity(capacity.min(4096)),
                bytes: 0,
            }),
            capacity,
            max_bytes,
            dropped: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // A panic under the lock was caught at the call boundary; the queue is whole.
        self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `record`, or counts it as dropped when the queue is full (in records or in
    /// bytes).
    pub fn push(&self, record: ChannelRecord, method: Option<&Arc<MethodSchema>>) {
        let bytes = held_bytes(&record.value);
        let mut q = self.lock();
        if q.records.len() >= self.capacity || bytes > self.max_bytes - q.bytes {
            drop(q);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        q.bytes += bytes;
        q.records.push_back(Queued {
            record,
            method: method.cloned(),
        });
    }

    /// Records waiting to be collected.
    pub fn queued(&self) -> usize {
        self.lock().records.len()
    }

    /// The bytes the queued records hold, as the byte limit counts them.
    pub fn queued_bytes(&self) -> usize {
        self.lock().bytes
    }

    /// Records dropped because the queue was full, since the queue was made (and any a bug
    /// kept from being rendered).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Moves every queued record to the back of `into`, under one lock (RPCs pushing
    /// meanwhile wait for a swap, not for each record).
    ///
    /// The bytes taken are no longer counted: the collector takes only when it has rendered
    /// everything it took before, so at most twice the limit is held in all.
    fn take_all(&self, into: &mut VecDeque<Queued>) {
        let mut q = self.lock();
        q.bytes = 0;
        if into.is_empty() {
            // The queue keeps `into`'s allocation.
            std::mem::swap(&mut q.records, into);
        } else {
            into.extend(q.records.drain(..));
        }
    }
}

/// The heap bytes a record's value keeps alive while it waits: what the byte limit counts.
/// A message is counted whole even when the RPC still holds it too, since the record may
/// outlive the RPC.
fn held_bytes(v: &Value) -> usize {
    match v {
        Value::Str(s) => s.len(),
        Value::Bytes(b) => b.len(),
        Value::Msg(m) => {
            m.bytes.len()
                + m.status_message.len()
                + m.headers
                    .iter()
                    .map(|(k, v)| k.len() + v.len())
                    .sum::<usize>()
        }
        Value::Pair(p) => held_bytes(&p.0) + held_bytes(&p.1),
        Value::Vec(items) => items.iter().map(held_bytes).sum(),
        Value::Map(m) => m.iter().map(|(k, v)| held_bytes(k) + held_bytes(v)).sum(),
        Value::Opt(Some(v)) => held_bytes(v),
        Value::Unit
        | Value::Bool(_)
        | Value::Int(_)
        | Value::Uint(_)
        | Value::Float(_)
        | Value::Instant(_)
        | Value::Opt(None) => 0,
    }
}

/// The collecting side of a [`RecordQueue`]: takes the queued records in one go and encodes
/// them one at a time into the collector's buffer, reusing one scratch buffer.
#[derive(Default)]
pub struct Collector {
    taken: VecDeque<Queued>,
    /// The next record, encoded, when it is waiting for room; otherwise empty.
    next: Vec<u8>,
}

impl Collector {
    /// Hands whole encoded records, oldest first, to `write` while they fit in `room`
    /// bytes: `Ok(bytes written)`, or `Err(size)` when the oldest record alone does not
    /// fit (it is kept for the next call).
    pub fn fill(
        &mut self,
        queue: &RecordQueue,
        room: usize,
        mut write: impl FnMut(&[u8]),
    ) -> Result<usize, usize> {
        let mut written = 0;
        loop {
            if self.next.is_empty() {
                if self.taken.is_empty() {
                    queue.take_all(&mut self.taken);
                }
                let Some(Queued { record, method }) = self.taken.pop_front() else {
                    return Ok(written);
                };
                // A panic while rendering is a bug; it must not leave half a record in
                // `next`, to be handed over whole later. The record is counted as dropped.
                let next = &mut self.next;
                let encoded = catch_unwind(AssertUnwindSafe(|| {
                    encode_into(&record, method.as_deref(), next);
                }));
                if encoded.is_err() {
                    self.next.clear();
                    queue.dropped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
            }
            if written + self.next.len() > room {
                return if written == 0 {
                    Err(self.next.len())
                } else {
                    Ok(written)
                };
            }
            write(&self.next);
            written += self.next.len();
            self.next.clear();
        }
    }
}

/// A record as the C ABI hands it over (docs/c-abi.md): the element's name, the channel's,
/// each as a u32 LE length and UTF-8 bytes; the RPC id as u64 LE; the time as f64 LE
/// (seconds on the engine's clock); the value as a u32 LE length and JSON, with messages
/// rendered by their method's schema as `weft sim --channels` renders them. Binary framing
/// around the JSON value keeps a collector from parsing JSON for the fixed fields.
pub fn encode(record: &ChannelRecord, method: Option<&MethodSchema>) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    encode_into(record, method, &mut out);
    out
}

/// [`encode`] appended to `out`.
pub fn encode_into(record: &ChannelRecord, method: Option<&MethodSchema>, out: &mut Vec<u8>) {
    for text in [&*record.element, &*record.channel] {
        // Names come from element files: short, far below 4 GiB.
        out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
    }
    out.extend_from_slice(&record.rpc_id.to_le_bytes());
    out.extend_from_slice(&record.time.to_le_bytes());
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    match &record.value {
        // `logging`'s records: the message is written straight out, not built as a JSON
        // value first (which took half the time of such a record).
        Value::Msg(m) => weft_ir::sim::write_method_message_json(method, m, out),
        v => {
            let render = |m: &weft_hostcalls::Message| weft_ir::sim::method_message_json(method, m);
            let json = weft_ir::json::to_json(v, &render).to_string();
            out.extend_from_slice(json.as_bytes());
        }
    }
    let len = u32::try_from(out.len() - at - 4).unwrap_or_else(|_| {
        // A value of 4 GiB or more cannot be framed: it is replaced, never cut.
        out.truncate(at + 4);
        out.extend_from_slice(b"\"value too large to record\"");
        (out.len() - at - 4) as u32
    });
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// One record decoded from [`encode`]'s bytes: (element, channel, rpc id, time, value), and
/// the bytes after it. `None` when the bytes are cut short or not UTF-8.
pub fn decode(bytes: &[u8]) -> Option<(Decoded, &[u8])> {
    fn take<'b>(b: &mut &'b [u8], n: usize) -> Option<&'b [u8]> {
        let (head, rest) = (b.get(..n)?, b.get(n..)?);
        *b = rest;
        Some(head)
    }
    fn text<'b>(b: &mut &'b [u8]) -> Option<&'b str> {
        let n = u32::from_le_bytes(take(b, 4)?.try_into().ok()?) as usize;
        std::str::from_utf8(take(b, n)?).ok()
    }
    let mut b = bytes;
    let element = text(&mut b)?.to_owned();
    let channel = text(&mut b)?.to_owned();
    let rpc_id = u64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?);
    let time = f64::from_le_bytes(take(&mut b, 8)?.try_into().ok()?);
    let value = serde_json::from_str(text(&mut b)?).ok()?;
    Some((
        Decoded {
            element,
            channel,
            rpc_id,
            time,
            value,
        },
        b,
    ))
}

/// A record read back from its encoding (tests, tools).
#[derive(Debug, PartialEq)]
pub struct Decoded {
    pub element: String,
    pub channel: String,
    pub rpc_id: u64,
    pub time: f64,
    pub value: serde_json::Value,
}

#[cfg(test)]
mod tests {
    // A failed unwrap is a failed test.
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn record(rpc_id: u64) -> ChannelRecord {
        ChannelRecord {
            element: "metrics".into(),
            channel: "latency".into(),
            rpc_id,
            time: 2.5,
            value: Value::Float(0.125),
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_new_records_and_keeps_the_old() {
        let q = RecordQueue::new(2);
        for id in 1..=5 {
            q.push(record(id), None);
        }
        assert_eq!(q.dropped(), 3);
        let kept = collect(&mut Collector::default(), &q);
        let ids: Vec<u64> = kept.iter().map(|d| d.rpc_id).collect();
        assert_eq!(ids, [1, 2]);
        assert_eq!(
            kept[0],
            Decoded {
                element: "metrics".into(),
                channel: "latency".into(),
                rpc_id: 1,
                time: 2.5,
                value: serde_json::json!(0.125),
            }
        );
        // Room again after draining.
        q.push(record(6), None);
        let again = collect(&mut Collector::default(), &q);
        assert_eq!(again.iter().map(|d| d.rpc_id).collect::<Vec<_>>(), [6]);
        assert_eq!(q.dropped(), 3);
    }

    fn message_record(rpc_id: u64, len: usize) -> ChannelRecord {
        ChannelRecord {
            value: Value::Msg(Arc::new(weft_hostcalls::Message::request(vec![0; len]))),
            ..record(rpc_id)
        }
    }

    /// Records hold their messages until collected; counting records alone let a queue of
    /// 16 384 hold 64 GiB of 4 MiB messages.
    #[test]
    fn a_queue_drops_and_counts_records_past_its_bytes() {
        let q = RecordQueue::with_max_bytes(100, 10_000);
        for id in 1..=5 {
            q.push(message_record(id, 4_000), None);
        }
        // Small values still fit beside the two messages.
        q.push(record(6), None);
        // A record larger than the whole limit never fits.
        q.push(message_record(7, 10_001), None);
        assert_eq!(q.dropped(), 4);
        let mut c = Collector::default();
        let ids: Vec<u64> = collect(&mut c, &q).iter().map(|d| d.rpc_id).collect();
        assert_eq!(ids, [1, 2, 6]);
        // Collected records free their bytes.
        for id in 8..=10 {
            q.push(message_record(id, 4_000), None);
        }
        let ids: Vec<u64> = collect(&mut c, &q).iter().map(|d| d.rpc_id).collect();
        assert_eq!(ids, [8, 9]);
        assert_eq!(q.dropped(), 5);
    }

    /// Everything `collector` takes from `q`, decoded.
    fn collect(collector: &mut Collector, q: &RecordQueue) -> Vec<Decoded> {
        let mut bytes = Vec::new();
        collector
            .fill(q, usize::MAX, |r| bytes.extend_from_slice(r))
            .unwrap();
        let mut out = Vec::new();
        let mut rest = bytes.as_slice();
        while !rest.is_empty() {
            let (d, after) = decode(rest).unwrap();
            out.push(d);
            rest = after;
        }
        out
    }

    #[test]
    fn a_record_that_does_not_fit_waits_for_the_next_call() {
        let q = RecordQueue::new(8);
        for id in 1..=3 {
            q.push(record(id), None);
        }
        let mut c = Collector::default();
        let one = encode(&record(1), None).len();
        // Too small for one: its size, and nothing lost.
        assert_eq!(c.fill(&q, one - 1, |_| panic!("nothing fits")), Err(one));
        // Room for one and a half: one.
        let mut got = Vec::new();
        assert_eq!(
            c.fill(&q, one + one / 2, |r| got.extend_from_slice(r)),
            Ok(one)
        );
        assert_eq!(decode(&got).unwrap().0.rpc_id, 1);
        // Records pushed meanwhile come after the ones already taken.
        q.push(record(4), None);
        let ids: Vec<u64> = collect(&mut c, &q).iter().map(|d| d.rpc_id).collect();
        assert_eq!(ids, [2, 3, 4]);
    }

    /// The echo example's `Say` method.
    fn say() -> Arc<MethodSchema> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/echo");
        let yaml = "protos: [echo.proto]\nedges:\n  a->b:\n    from: a\n    to: b\n    method: echo.Echo/Say\n    client:\n      - logging\n";
        let config = weft_ir::config::Config::parse("t.yaml", &dir, yaml).unwrap();
        let edge = weft_ir::load::load_edge(&config, "a->b").unwrap();
        Arc::new(edge.methods[0].clone())
    }

    #[test]
    fn a_message_is_written_as_the_simulator_renders_it() {
        use weft_hostcalls::{Code, Message};
        let method = say();
        let json = serde_json::json!({"user": "alice", "body": "hi \"you\"", "tags": ["a", "b"]});
        let mut request =
            Message::request(weft_ir::wire::json_to_bytes(&method.request, &json).unwrap());
        request.headers.insert("weft-version".into(), "abc".into());
        request
            .headers
            .insert("x-note".into(), "line\nbreak".into());
        let mut undecodable = Message::response(vec![0x0a, 0x50, b'x']);
        undecodable.headers.insert("a".into(), "b".into());
        let messages = [
            request,
            Message::response(vec![]),
            undecodable,
            Message::error(Code::PermissionDenied, "acl \"quoted\""),
        ];
        for m in messages {
            for schema in [Some(method.as_ref()), None] {
                let want = weft_ir::sim::method_message_json(schema, &m);
                let r = ChannelRecord {
                    value: Value::Msg(Arc::new(m.clone())),
                    ..record(1)
                };
                let bytes = encode(&r, schema);
                let (got, rest) = decode(&bytes).unwrap();
                assert!(rest.is_empty());
                assert_eq!(got.value, want, "{m:?}");
            }
        }
    }

    /// An edge whose elements read no field forwards bytes nobody checked; its `logging`
    /// record showed such a message as `null`, losing what was sent.
    #[test]
    fn a_message_that_does_not_decode_is_recorded_with_its_bytes() {
        use base64::Engine as _;
        let method = say();
        let bytes = vec![0x0a, 0x50, b'x'];
        let m = weft_hostcalls::Message::request(bytes.clone());
        for schema in [Some(method.as_ref()), None] {
            let r = ChannelRecord {
                value: Value::Msg(Arc::new(m.clone())),
                ..record(1)
            };
            let (got, _) = decode(&encode(&r, schema)).unwrap();
            assert_eq!(got.value["message"], serde_json::Value::Null);
            let sent = got.value["undecoded"].as_str().unwrap();
            let sent = base64::engine::general_purpose::STANDARD
                .decode(sent)
                .unwrap();
            assert_eq!(sent, bytes);
        }
        // A message that decodes carries no copy of its bytes.
        let ok = weft_hostcalls::Message::request(Vec::new());
        let r = ChannelRecord {
            value: Value::Msg(Arc::new(ok)),
            ..record(1)
        };
        let (got, _) = decode(&encode(&r, Some(method.as_ref()))).unwrap();
        assert!(got.value.get("undecoded").is_none(), "{}", got.value);
    }

    #[test]
    fn a_record_cut_short_does_not_decode() {
        let bytes = encode(&record(7), None);
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_none(), "{n} bytes decoded");
        }
        assert!(decode(&bytes).is_some());
    }
}
