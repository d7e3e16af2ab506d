package weft

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/stats"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// serverDecode runs the server codec as grpc-go does for one received request.
func serverDecode(t *testing.T, c *Codec, wire []byte) (*wrapperspb.StringValue, error) {
	t.Helper()
	m := &wrapperspb.StringValue{}
	return m, c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, m)
}

var (
	decodes   = []byte{0x0a, 0x02, 'h', 'i'}
	truncated = []byte{0x0a, 0x05, 'h'} // a 5-byte string with 1 byte present
)

// Requests whose interceptor never ran fill the stash; the stash then drops bytes it can
// marshal again, but never the entry that marks a request that did not decode, or that
// request would reach the handler half decoded.
func TestStashKeepsRequestsThatDidNotDecodeWhileItEvicts(t *testing.T) {
	c := &Codec{server: true}
	bad, err := serverDecode(t, c, truncated)
	if err != nil {
		t.Fatalf("the codec answered %v itself; the interceptor should answer", err)
	}
	// Enough leaked entries to take every shard past its bound several times.
	leaked := make([]*wrapperspb.StringValue, 0, 3*len(requestBytes.shards)*stashBound)
	for range cap(leaked) {
		m, err := serverDecode(t, c, decodes)
		if err != nil {
			t.Fatal(err)
		}
		leaked = append(leaked, m)
	}
	got, ok := requestBytes.take(bad)
	if !ok || got.err == nil {
		t.Fatalf("the stash lost the decode error (found %v, err %v)", ok, got.err)
	}
	got.free()
	for _, m := range leaked {
		if b, ok := requestBytes.take(m); ok {
			b.free()
		}
	}
	if n := requestBytes.held.Load(); n != 0 {
		t.Fatalf("%d entries held after taking them all", n)
	}
}

// When requests that did not decode alone fill a shard, the next one is refused by the codec
// (grpc-go answers INTERNAL) rather than kept by dropping another.
func TestStashFullOfDecodeErrorsRefusesTheNextOne(t *testing.T) {
	c := &Codec{server: true}
	var kept []*wrapperspb.StringValue
	defer func() {
		for _, m := range kept {
			if b, ok := requestBytes.take(m); ok {
				b.free()
			}
		}
	}()
	limit := len(requestBytes.shards)*stashBound + 1
	for i := range limit {
		m, err := serverDecode(t, c, truncated)
		if err != nil {
			if i < stashBound {
				t.Fatalf("refused after %d requests; a shard holds %d", i, stashBound)
			}
			// Every request kept before the refusal is still marked.
			for _, k := range kept {
				b, ok := requestBytes.take(k)
				if !ok || b.err == nil {
					t.Fatalf("a kept decode error was dropped")
				}
				b.free()
			}
			kept = nil
			return
		}
		kept = append(kept, m)
	}
	t.Fatalf("%d requests that did not decode were all kept; the stash has no bound", limit)
}

// Requests that did not decode and whose interceptor never ran (an interceptor outside
// Weft's refused them) keep their mark but not their bytes past a shard's byte bound:
// before, each kept its buffer for the life of the process (a review sent 300 of 1 MiB
// and the heap grew by 302 MiB).
func TestStashLetsGoOfTheBytesOfRequestsThatDidNotDecode(t *testing.T) {
	c := &Codec{server: true}
	// A string field that claims 2 MiB, with 1 MiB present.
	big := append([]byte{0x0a, 0x80, 0x80, 0x80, 0x01}, make([]byte, 1<<20)...)
	var kept []*wrapperspb.StringValue
	for range 100 {
		m, err := serverDecode(t, c, big)
		if err != nil {
			t.Fatalf("the codec answered %v itself; the interceptor should answer", err)
		}
		kept = append(kept, m)
	}
	held := 0
	for i := range requestBytes.shards {
		sh := &requestBytes.shards[i]
		sh.mu.Lock()
		held += sh.bytes
		sh.mu.Unlock()
	}
	if most := len(requestBytes.shards) * (stashShardBytes + len(big)); held > most {
		t.Errorf("the stash holds %d MiB, more than its bound of %d MiB", held>>20, most>>20)
	}
	withBytes := 0
	for _, m := range kept {
		b, ok := requestBytes.take(m)
		if !ok || b.err == nil {
			t.Fatalf("a request that did not decode lost its mark (found %v, err %v)", ok, b.err)
		}
		if b.buf != nil {
			withBytes++
		}
		b.free()
	}
	if withBytes == len(kept) {
		t.Errorf("all %d requests kept their bytes", withBytes)
	}
}

// serverEvents tells a test when the server has decoded a request and when an RPC has
// ended.
type serverEvents struct {
	decoded, ended chan struct{}
}

func (e serverEvents) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (e serverEvents) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (e serverEvents) HandleConn(context.Context, stats.ConnStats) {}
func (e serverEvents) HandleRPC(_ context.Context, s stats.RPCStats) {
	switch s.(type) {
	case *stats.InPayload:
		e.decoded <- struct{}{}
	case *stats.End:
		e.ended <- struct{}{}
	}
}

type sayServer struct{ echopb.UnimplementedEchoServer }

func (sayServer) Say(_ context.Context, req *echopb.SayRequest) (*echopb.SayReply, error) {
	return &echopb.SayReply{Body: req.GetBody()}, nil
}

// A unary request whose call ends after the codec decoded it but before grpc-go has seen the
// end of the client's side (a cancellation, a deadline, a reset) never reaches the
// interceptor: grpc-go's RecvMsg reads once more for the end of the stream, fails, and the
// handler returns that error. Its bytes stayed in the stash, and the decoded message with
// them (it is the key), until the shard held 4 096 entries: the Go soak test's live heap
// grew all through a 25-minute run (docs/benchmarks.md, "Soak", run 4). Entries that have
// waited through a sweep of their shard are now let go.
func TestStashLetsGoOfRequestsWhoseCallEndedBeforeTheInterceptor(t *testing.T) {
	ev := serverEvents{decoded: make(chan struct{}, 1), ended: make(chan struct{}, 1)}
	_, conn := firewalledEcho(t, "echo.Echo/Say", func(srv *grpc.Server) {
		echopb.RegisterEchoServer(srv, sayServer{})
	}, grpc.StatsHandler(ev))
	wait := func(c chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(10 * time.Second):
			t.Fatalf("the server never reported %s", what)
		}
	}

	// One whole call first: the codec keeps requests' bytes once a chain has read one.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := echopb.NewEchoClient(conn).Say(ctx, &echopb.SayRequest{User: "alice"}); err != nil {
		t.Fatal(err)
	}
	wait(ev.decoded, "the first request decoded")
	wait(ev.ended, "the first call's end")
	before := requestBytes.held.Load()

	// The request goes out without the end of the client's side (a stream on the unary
	// method), and the call is cancelled once the server has decoded it.
	const calls = 4096
	for range calls {
		sctx, scancel := context.WithCancel(ctx)
		cs, err := conn.NewStream(sctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/echo.Echo/Say")
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "cut"}); err != nil {
			t.Fatal(err)
		}
		wait(ev.decoded, "a request decoded")
		scancel()
		wait(ev.ended, "a cancelled call's end")
	}
	most := int64(len(requestBytes.shards) * 2 * stashSweepFloor)
	if n := requestBytes.held.Load() - before; n > most {
		t.Fatalf("the stash holds %d requests of %d calls that ended before the interceptor, more than %d", n, calls, most)
	}
}
