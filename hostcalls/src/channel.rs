//! Channels: the values elements `emit` for observers outside the data path (metrics, traces,
//! test assertions).
//!
//! Emitting never affects the RPC, so a sink only collects; where records go is the runtime's
//! choice.

use std::sync::Arc;

use crate::value::Value;

/// One value an element emitted on one of its channels.
///
/// The names are shared (`Arc<str>`): an emitter keeps them interned, so a record costs two
/// reference-count increments rather than two string allocations.
#[derive(Clone, Debug)]
pub struct ChannelRecord {
    /// The element instance that emitted it.
    pub element: Arc<str>,
    pub channel: Arc<str>,
    /// The RPC being processed when the value was emitted.
    pub rpc_id: u64,
    /// The executor's clock ([`crate::clock::Clock::now`]) at the emit.
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
}

/// Collects records in emit order, for tests and the simulator's reports.
impl ChannelSink for Vec<ChannelRecord> {
    fn emit(&mut self, record: ChannelRecord) {
        self.push(record);
    }
}

impl<S: ChannelSink + ?Sized> ChannelSink for &mut S {
    fn emit(&mut self, record: ChannelRecord) {
        (**self).emit(record);
    }

    fn enabled(&self) -> bool {
        (**self).enabled()
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
