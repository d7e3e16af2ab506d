package weft

/*
#include "weft.h"
*/
import "C"

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// Record is one value an element sent to one of its channels: a request or response that
// logging writes (send(rpc, log)), a latency metrics measured.
type Record struct {
	// Element is the element's name in the chain, Channel the channel it sent on.
	Element string
	Channel string
	// RPC numbers the RPC that was running, the same for its request and its response.
	RPC uint64
	// Time is the runtime's clock when the value was sent, in seconds.
	Time float64
	// Value is the value as JSON; a message is {"message": {fields...}, "headers": {...}},
	// or {"status": "...", "message": "..."} for an error response.
	Value json.RawMessage
}

// Option configures Open and OpenYAML.
type Option func(*options)

type options struct {
	records  func(Record)
	queue    int
	interval time.Duration
}

// WithRecords hands each channel record the runtime's elements emit to handle. The records
// are queued by the RPCs, which never wait for handle, and collected every interval (see
// WithRecordInterval) by one goroutine, which calls handle for each in the order they were
// sent; Close collects the last ones. Without this option the elements build no records.
// handle must not call the runtime's Close (Close waits for the goroutine that calls it).
func WithRecords(handle func(Record)) Option {
	return func(o *options) { o.records = handle }
}

// WithRecordQueue sets how many records may wait between two collections (default 16384:
// at the default interval, 160 000 records a second; each waiting record keeps its message).
// Records sent while the queue is full are dropped and counted (Runtime.DroppedRecords).
func WithRecordQueue(n int) Option {
	return func(o *options) { o.queue = n }
}

// WithRecordInterval sets how often queued records are collected (default 100 ms).
func WithRecordInterval(d time.Duration) Option {
	return func(o *options) { o.interval = d }
}

func buildOptions(opts []Option) (options, error) {
	o := options{queue: 16384, interval: 100 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	if o.records == nil {
		o.queue = 0
		return o, nil
	}
	if o.queue < 1 || o.queue > 1<<24 {
		return o, fmt.Errorf("weft: open: record queue of %d: give between 1 and %d", o.queue, 1<<24)
	}
	if o.interval <= 0 {
		return o, fmt.Errorf("weft: open: record interval %v: give a positive duration", o.interval)
	}
	return o, nil
}

// recordPump collects the records of one runtime and hands them over.
type recordPump struct {
	handle  func(Record)
	buf     *recordBuf
	stop    chan struct{}
	stopped sync.Once // Close closes stop once, however many goroutines call it
	done    chan struct{}
	dropped atomic.Uint64
	// limit: the queue's size, the most one collection takes (pumpRecords).
	limit int
	// batch: the records of one library buffer, reused from batch to batch.
	batch []Record
	// names interns element and channel names: a chain has a handful.
	names map[string]string
	// errs counts collections that failed and lines that did not parse (a bug in Weft);
	// lastErr says what the last one was.
	errs    atomic.Uint64
	errMu   sync.Mutex
	lastErr string
}

func (r *Runtime) startRecords(o options) {
	if o.records == nil {
		return
	}
	p := &recordPump{
		handle: o.records,
		buf:    newRecordBuf(),
		limit:  o.queue,
		names:  map[string]string{},
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	r.records = p
	go func() {
		defer close(p.done)
		t := time.NewTicker(o.interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				r.pumpRecords()
			}
		}
	}()
}

// pumpRecords hands the queued records to the handler, one library buffer at a time (a few
// hundred records), and at most as many as the queue holds, so that RPCs sending records
// as fast as they are collected cannot keep it going.
func (r *Runtime) pumpRecords() {
	p := r.records
	for taken := 0; taken < p.limit; {
		batch, ok := r.collectBatch(p.batch[:0])
		p.batch = batch
		p.deliver(batch)
		taken += len(batch)
		if !ok || len(batch) == 0 {
			return
		}
	}
}

// collectBatch appends one library buffer's worth of records to into, under the read lock
// so that Close cannot free the runtime meanwhile; false when the runtime is closed or the
// collection failed.
func (r *Runtime) collectBatch(into []Record) ([]Record, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.h == nil {
		return into, false
	}
	return r.records.collectBatch(r.h, into)
}

// collectAll takes every queued record; the caller holds r.mu for writing, so no RPC adds
// any meanwhile (Close).
func (p *recordPump) collectAll(h *C.WeftRuntime) []Record {
	var out []Record
	for {
		n := len(out)
		var ok bool
		if out, ok = p.collectBatch(h, out); !ok || len(out) == n {
			return out
		}
	}
}

// collectBatch appends the records of one library buffer to into. The caller holds r.mu.
func (p *recordPump) collectBatch(h *C.WeftRuntime, into []Record) ([]Record, bool) {
	lines, dropped, msg := collectRecords(h, p.buf)
	p.dropped.Store(dropped)
	if msg != "" {
		p.fail("collecting channel records: " + msg)
		return into, false
	}
	for len(lines) > 0 {
		rec, rest, ok := p.decode(lines)
		if !ok {
			p.fail(fmt.Sprintf("a channel record is cut short: %d bytes left", len(lines)))
			return into, false
		}
		into = append(into, rec)
		lines = rest
	}
	return into, true
}

// decode reads one record as weft_records encodes it (docs/c-abi.md): element and channel
// names and the JSON value, each a u32 LE length and its bytes, around the RPC id (u64 LE)
// and the time (f64 LE). The value is copied: b is reused.
func (p *recordPump) decode(b []byte) (Record, []byte, bool) {
	name := func() (string, bool) {
		f, rest, ok := lenPrefixed(b)
		if !ok {
			return "", false
		}
		b = rest
		s, seen := p.names[string(f)]
		if !seen {
			s = string(f)
			p.names[s] = s
		}
		return s, true
	}
	var r Record
	var ok bool
	if r.Element, ok = name(); !ok {
		return r, nil, false
	}
	if r.Channel, ok = name(); !ok || len(b) < 16 {
		return r, nil, false
	}
	r.RPC = binary.LittleEndian.Uint64(b)
	r.Time = math.Float64frombits(binary.LittleEndian.Uint64(b[8:]))
	b = b[16:]
	value, rest, ok := lenPrefixed(b)
	if !ok {
		return r, nil, false
	}
	r.Value = bytes.Clone(value)
	return r, rest, true
}

func (p *recordPump) fail(msg string) {
	p.errs.Add(1)
	p.errMu.Lock()
	p.lastErr = msg
	p.errMu.Unlock()
}

func (p *recordPump) deliver(recs []Record) {
	for _, rec := range recs {
		p.handle(rec)
	}
}

// DroppedRecords is how many channel records were dropped because the queue was full (see
// WithRecordQueue), as of the last collection; 0 without WithRecords.
func (r *Runtime) DroppedRecords() uint64 {
	if r.records == nil {
		return 0
	}
	return r.records.dropped.Load()
}

// RecordErrors is how many times collecting channel records failed, with the last failure;
// both are zero unless something is wrong in Weft itself.
func (r *Runtime) RecordErrors() (uint64, string) {
	if r.records == nil {
		return 0, ""
	}
	r.records.errMu.Lock()
	defer r.records.errMu.Unlock()
	return r.records.errs.Load(), r.records.lastErr
}
