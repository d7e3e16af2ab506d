package weft

import (
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/types/known/wrapperspb"
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
