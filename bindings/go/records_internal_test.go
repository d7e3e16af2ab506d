package weft

import (
	"encoding/binary"
	"math"
	"testing"
)

// A record as weft_records frames it (docs/c-abi.md), decoded whole and refused when cut.
func TestRecordDecodingFollowsTheCABIFraming(t *testing.T) {
	var b []byte
	field := func(s string) {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	field("metrics")
	field("latency")
	b = binary.LittleEndian.AppendUint64(b, 42)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(2.5))
	field("0.125")
	whole := len(b)
	b = append(b, 0xff) // the next record's first byte

	p := &recordPump{names: map[string]string{}}
	r, rest, ok := p.decode(b)
	if !ok || r.Element != "metrics" || r.Channel != "latency" || r.RPC != 42 || r.Time != 2.5 || string(r.Value) != "0.125" {
		t.Fatalf("decoded %+v, %v", r, ok)
	}
	if len(rest) != 1 {
		t.Fatalf("%d bytes left after the record, want 1", len(rest))
	}
	for n := range whole {
		if _, _, ok := p.decode(b[:n]); ok {
			t.Fatalf("a record cut to %d of %d bytes decoded", n, whole)
		}
	}
}
