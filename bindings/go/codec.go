package weft

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// Codec is a grpc-go codec that lets the interceptors hand Weft the exact bytes that go on
// the wire, so each message is marshalled and unmarshalled once:
//
//   - A *rawMessage going out is already encoded (by the interceptor, possibly rewritten by
//     the chain) and is sent as is.
//   - A *rawMessage coming in keeps a reference to the received bytes for the interceptor.
//   - On a server, every decoded request also leaves its bytes for the unary server
//     interceptor, keyed by the message it was decoded into (grpc-go decodes a unary request
//     before the interceptor runs, and the interceptor needs the bytes, not the struct).
//
// Everything else is plain protobuf, exactly as grpc-go's own codec does it. Install it with
// Runtime.DialOptions / Runtime.ServerOptions (or ForceCodecV2 / ForceServerCodecV2).
type Codec struct {
	// server: keep request bytes for the unary server interceptor. Off on clients, where
	// nothing would take them.
	server bool
	// rt: the runtime whose interceptor takes the bytes (ServerOptions); they are kept
	// only once one of its chains has needed them. nil: always keep them.
	rt *Runtime
}

var _ encoding.CodecV2 = (*Codec)(nil)

// rawMessage carries encoded protobuf bytes through grpc-go's message APIs.
type rawMessage struct {
	buf mem.BufferSlice
	// transfer: grpc-go gets the interceptor's reference instead of a new one, for a server
	// response that outlives the interceptor.
	transfer bool
}

var (
	clientCodec = &Codec{}
	serverCodec = &Codec{server: true}
)

// ClientCodec is the codec DialOptions installs, for connections built by hand
// (grpc.WithDefaultCallOptions(grpc.ForceCodecV2(weft.ClientCodec()))).
func ClientCodec() encoding.CodecV2 { return clientCodec }

// ServerCodec is a server codec for options built by hand (grpc.ForceServerCodecV2): it keeps
// every request's bytes for the unary server interceptor. Runtime.ServerCodec keeps them only
// once the runtime's chains need them.
func ServerCodec() encoding.CodecV2 { return serverCodec }

// ServerCodec is the codec ServerOptions installs: it keeps a request's bytes for the unary
// server interceptor once one of this runtime's server-side chains has read a request or a
// response message, and not before (a server running only metrics never pays for it).
func (r *Runtime) ServerCodec() encoding.CodecV2 { return &Codec{server: true, rt: r} }

// Name is "proto": the wire format is unchanged, peers without Weft interoperate.
func (*Codec) Name() string { return "proto" }

// Marshal hands grpc-go its own reference to the bytes: grpc-go frees what Marshal returns,
// and the interceptor frees the reference it keeps.
func (*Codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawMessage); ok {
		if !r.transfer {
			r.buf.Ref()
		}
		return r.buf, nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("weft codec: cannot marshal %T: not a protobuf message", v)
	}
	return marshalPooled(m)
}

func (c *Codec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawMessage); ok {
		data.Ref()
		r.buf = data
		return nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("weft codec: cannot unmarshal into %T: not a protobuf message", v)
	}
	var err error
	if len(data) == 1 {
		err = proto.Unmarshal(data[0].ReadOnlyData(), m)
	} else {
		b := data.MaterializeToBuffer(mem.DefaultBufferPool())
		err = proto.Unmarshal(b.ReadOnlyData(), m)
		b.Free()
	}
	if !c.server || (err == nil && c.rt != nil && !c.rt.stashRequests.Load()) {
		return err
	}
	// A request that does not decode still goes to the interceptor: grpc-go would answer
	// INTERNAL for a codec error, but bad input from a caller is INVALID_ARGUMENT, and the
	// chain (which reads the wire bytes) may have its own answer first.
	data.Ref()
	if !requestBytes.put(m, stashed{buf: data, err: err}) {
		data.Free()
		// No room to keep it: a message that decoded is marshalled again by the
		// interceptor; one that did not must never reach the handler, so grpc-go refuses
		// it (INTERNAL) here.
		return err
	}
	return nil
}

// marshalPooled encodes m the way grpc-go's proto codec does: small messages in a fresh slice,
// large ones in a buffer from grpc-go's pool that returns there when freed.
func marshalPooled(m proto.Message) (mem.BufferSlice, error) {
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	pool := mem.DefaultBufferPool()
	bp := pool.Get(size)
	b, err := opts.MarshalAppend((*bp)[:0], m)
	if err != nil {
		pool.Put(bp)
		return nil, err
	}
	*bp = b
	return mem.BufferSlice{mem.NewBuffer(bp, pool)}, nil
}

// contiguous returns the bytes of a BufferSlice without copying in the common single-buffer
// case. The second result must be freed after use when non-nil.
func contiguous(s mem.BufferSlice) ([]byte, mem.Buffer) {
	switch len(s) {
	case 0:
		return nil, nil
	case 1:
		return s[0].ReadOnlyData(), nil
	}
	b := s.MaterializeToBuffer(mem.DefaultBufferPool())
	return b.ReadOnlyData(), b
}

// byteStash holds the received bytes of unary server requests from the codec to the
// interceptor. A request whose interceptor never runs would stay here: another interceptor
// failed the call first, the codec is installed without Weft's interceptor, or the call
// ended between the decode and the interceptor (grpc-go's RecvMsg of a unary request reads
// once more for the end of the client's side, and a cancellation, a deadline or a reset
// there fails it: the handler then returns that error without calling the interceptor).
//
// So a shard sweeps after every stashSweepFloor requests put into it (or after as many as
// the entries that did not decode it keeps, when more) and drops the entries made before
// its previous sweep: those have waited through at least that many later requests, where
// a request that reaches its interceptor waits only until grpc-go has read the end of the
// stream. A shard that keeps no entries that did not decode holds at most twice
// stashSweepFloor entries of calls that ended that way.
// Until 2026-11-27 they stayed until a shard held stashBound entries, 65 536 in all: the
// Go soak test's live heap grew all through a 25-minute run (docs/benchmarks.md, "Soak",
// run 4). A shard that reaches its bound of entries or of bytes sweeps every entry.
//
// A sweep drops the requests that decoded (their interceptors, if they run after all,
// marshal the message themselves) and the bytes of those that did not. Such a request
// keeps its entry, since without it the interceptor could not tell it from a good one,
// but not its bytes: its interceptor, if it runs, refuses it before the chain
// (INVALID_ARGUMENT, as always for a request that did not decode). Before, each kept its
// buffer for the life of the process: 300 malformed 1 MiB requests refused by an auth
// interceptor outside Weft's held 300 MiB. When entries that did not decode alone fill a
// shard, put refuses the new one.
type stashed struct {
	buf mem.BufferSlice
	err error // the request did not decode
	gen uint32
}

// free releases the kept bytes (once; a zero stashed holds none).
func (b *stashed) free() {
	if b.buf != nil {
		b.buf.Free()
		b.buf = nil
	}
}

type byteStash struct {
	shards [16]stashShard
	// held counts the entries in all shards, so a take finds an empty stash without a lock
	// (a server whose codec keeps no bytes).
	held atomic.Int64
}

type stashShard struct {
	mu    sync.Mutex
	m     map[unsafe.Pointer]stashed
	bytes int // what the entries' buffers hold
	// gen counts the shard's sweeps: an entry whose gen is not the shard's was made before
	// the last sweep. puts counts the entries made since; stuck, the older entries the last
	// sweep kept (they did not decode).
	gen   uint32
	puts  int
	stuck int
	_     [8]byte // keep shards on separate cache lines
}

// stashBound and stashShardBytes bound one shard (16 of them): entries, and bytes, which
// is one request of grpc-go's default maximum size. stashSweepFloor is how many requests
// a shard takes between two sweeps at least.
const (
	stashBound      = 4096
	stashShardBytes = 4 << 20
	stashSweepFloor = 64
)

var requestBytes byteStash

func msgKey(m proto.Message) unsafe.Pointer {
	// The data word of the interface: the message's address, unique while it is in flight.
	return (*[2]unsafe.Pointer)(unsafe.Pointer(&m))[1]
}

func (s *byteStash) shard(k unsafe.Pointer) *stashShard {
	return &s.shards[(uintptr(k)>>6)%uintptr(len(s.shards))]
}

// put keeps b for m's interceptor; false when the shard has no room (see byteStash), and
// then b is not kept.
func (s *byteStash) put(m proto.Message, b stashed) bool {
	k := msgKey(m)
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[unsafe.Pointer]stashed, 64)
	}
	if old, ok := sh.m[k]; ok {
		// m's address is reused: its earlier request is over.
		sh.bytes -= old.buf.Len()
		old.buf.Free()
		delete(sh.m, k)
		s.held.Add(-1)
	}
	if len(sh.m) >= stashBound || sh.bytes+b.buf.Len() > stashShardBytes {
		s.sweep(sh, true)
		if len(sh.m) >= stashBound {
			return false
		}
	} else if sh.puts >= max(stashSweepFloor, sh.stuck) {
		// Entries that did not decode stay, and a pass over them on every put would cost
		// each request the whole shard: a sweep waits for as many puts as they number.
		s.sweep(sh, false)
	}
	sh.puts++
	s.held.Add(1)
	sh.bytes += b.buf.Len()
	b.gen = sh.gen
	sh.m[k] = b
	return true
}

// sweep drops the entries of sh made before its last sweep (all of them when all is set),
// or only their bytes when they did not decode (see byteStash). The caller holds sh.mu.
func (s *byteStash) sweep(sh *stashShard, all bool) {
	sh.stuck = 0
	for key, old := range sh.m {
		if !all && old.gen == sh.gen {
			continue // made since the last sweep: its interceptor may be about to run
		}
		sh.bytes -= old.buf.Len()
		old.buf.Free()
		if old.err == nil {
			delete(sh.m, key)
			s.held.Add(-1)
		} else {
			sh.m[key] = stashed{err: old.err, gen: old.gen}
			sh.stuck++
		}
	}
	sh.gen++
	sh.puts = 0
}

func (s *byteStash) take(m proto.Message) (stashed, bool) {
	// A put for m happened before on this goroutine (the codec decodes the request right
	// before grpc-go calls the interceptor), so an empty count means m has no entry.
	if s.held.Load() == 0 {
		return stashed{}, false
	}
	k := msgKey(m)
	sh := s.shard(k)
	sh.mu.Lock()
	b, ok := sh.m[k]
	if ok {
		delete(sh.m, k)
		sh.bytes -= b.buf.Len()
		s.held.Add(-1)
	}
	sh.mu.Unlock()
	return b, ok
}
