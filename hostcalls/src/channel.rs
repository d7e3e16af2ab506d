//! Channels: the values elements `emit` for observers outside the data path (metrics, traces,
//! test assertions).
//!
//! Emitting never affects the RPC, so a sink only collects; where records go is the runtime's
//! choice.

use std::collections::BTreeSet;
use std::fmt;
use std::ops::Deref;
use std::sync::{Mutex, PoisonError};

use crate::value::Value;

/// An element or channel name as records carry it: interned in a process-wide table the
/// first time it is made, and copied as a pointer after that.
///
/// `Arc<str>` names cost a locked increment and a locked decrement per name per record; with
/// three records per RPC those were a fifth of the fused benchmark chain's time
/// (docs/benchmarks.md). Interned names are never freed. They come from configs and element
/// files (one per element instance and per declared channel), so the table grows only when
/// an operator adds a name. (The `ustr` crate does the same, but reserves 12 MiB of tables
/// in every process that links the runtime.)
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(&'static str);

impl Name {
    pub fn new(name: &str) -> Name {
        static NAMES: Mutex<BTreeSet<&'static str>> = Mutex::new(BTreeSet::new());
        // The set is complete after every insert, so a panic elsewhere cannot leave it wrong.
        let mut names = NAMES.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&interned) = names.get(name) {
            return Name(interned);
        }
        let interned: &'static str = Box::leak(name.into());
        names.insert(interned);
        Name(interned)
    }

    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        self.0
    }
}

impl From<&str> for Name {
    fn from(name: &str) -> Name {
        Name::new(name)
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.0, f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// One value an element emitted on one of its channels.
#[derive(Clone, Debug)]
pub struct ChannelRecord {
    /// The element instance that emitted it.
    pub element: Name,
    pub channel: Name,
    /// The RPC being processed when the value was emitted.
    pub rpc_id: u64,
    /// The instant of the pass that emitted it (`weft_ir::interp::Host::now`): every record
    /// and every `current_time()` of one pass through a segment share it.
    pub time: f64,
    pub value: Value,
}

/// Where emitted records go.
pub trait ChannelSink {
    fn emit(&mut self, record: ChannelRecord);

    /// False when every record would be dropped: emitters then skip building them (the
    /// names, the clock read, the value).
    fn enabled(&self) -> bool {
        true
    }

    /// The sink itself when it only collects records in a vector, so an emitter behind a
    /// `dyn ChannelSink` can push where the record stays. Through [`ChannelSink::emit`] a
    /// record is built on the emitter's stack with narrow stores and copied from there with
    /// wide loads, which the CPU cannot forward: a stall per record.
    fn collected(&mut self) -> Option<&mut Vec<ChannelRecord>> {
        None
    }
}

/// Collects records in emit order, for tests and the simulator's reports.
impl ChannelSink for Vec<ChannelRecord> {
    fn emit(&mut self, record: ChannelRecord) {
        self.push(record);
    }

    fn collected(&mut self) -> Option<&mut Vec<ChannelRecord>> {
        Some(self)
    }
}

impl<S: ChannelSink + ?Sized> ChannelSink for &mut S {
    fn emit(&mut self, record: ChannelRecord) {
        (**self).emit(record);
    }

    fn enabled(&self) -> bool {
        (**self).enabled()
    }

    fn collected(&mut self) -> Option<&mut Vec<ChannelRecord>> {
        (**self).collected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(channel: &str, rpc_id: u64, value: Value) -> ChannelRecord {
        ChannelRecord {
            element: "logger-0".into(),
            channel: channel.into(),
            rpc_id,
            time: 1.5,
            value,
        }
    }

    #[test]
    fn a_name_is_interned_once() {
        let a = Name::new("interned-once");
        let b = Name::from(String::from("interned-once").as_str());
        assert_eq!(a, b);
        assert!(std::ptr::eq(a.as_str(), b.as_str()), "one copy of the text");
        assert_ne!(a, Name::new("interned-twice"));
        assert_eq!(a, "interned-once");
        assert_eq!(format!("{a} {a:?}"), "interned-once \"interned-once\"");
    }

    #[test]
    fn vec_sink_keeps_emit_order() {
        let mut sink: Vec<ChannelRecord> = Vec::new();
        let dyn_sink: &mut dyn ChannelSink = &mut sink;
        dyn_sink.emit(record("latency", 1, Value::Float(0.25)));
        dyn_sink.emit(record("errors", 2, Value::Int(1)));
        assert_eq!(sink.len(), 2);
        assert_eq!(&*sink[0].channel, "latency");
        assert_eq!(sink[0].value, Value::Float(0.25));
        assert_eq!(sink[1].rpc_id, 2);
        assert_eq!(&*sink[1].element, "logger-0");
        assert_eq!(sink[1].time, 1.5);
    }

    #[test]
    fn sinks_can_be_lent() {
        fn emit_twice(mut sink: impl ChannelSink) {
            sink.emit(record("c", 1, Value::Unit));
            sink.emit(record("c", 2, Value::Unit));
        }
        let mut sink = Vec::new();
        emit_twice(&mut sink);
        assert_eq!(sink.iter().map(|r| r.rpc_id).collect::<Vec<_>>(), [1, 2]);
    }
}
