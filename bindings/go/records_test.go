package weft_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// recordSink keeps what a runtime hands to WithRecords.
type recordSink struct {
	mu   sync.Mutex
	recs []weft.Record
}

func (s *recordSink) add(r weft.Record) {
	s.mu.Lock()
	s.recs = append(s.recs, r)
	s.mu.Unlock()
}

func (s *recordSink) on(channel string) []weft.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []weft.Record
	for _, r := range s.recs {
		if r.Channel == channel {
			out = append(out, r)
		}
	}
	return out
}

// The server logs every request and response and measures each RPC's latency; the records
// reach the handler with the messages decoded by the method's schema.
func TestChannelRecordsReachTheHandler(t *testing.T) {
	yaml := edge("echo.Echo/Say", `    server:
      - logging
      - metrics
      - firewall: {field: user, deny: [mallory]}
`)
	var sink recordSink
	srt, err := weft.OpenYAML(yaml, echoDir, "echo", weft.WithRecords(sink.add), weft.WithRecordInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srt.Close() })
	_, addr := serve(t, "echo-0", srt.ServerOptions()...)
	c := dial(t, addr)
	for _, user := range []string{"alice", "bob"} {
		if _, err := c.Say(ctx(t), &echopb.SayRequest{User: user, Body: "hi " + user}); err != nil {
			t.Fatal(err)
		}
	}
	_, err = c.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "let me in"})
	wantCode(t, err, codes.PermissionDenied, "acl")

	// The pump delivers while the runtime runs, not only at Close.
	deadline := time.Now().Add(5 * time.Second)
	for len(sink.on("latency")) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	logs, latencies := sink.on("log"), sink.on("latency")
	if len(logs) != 6 || len(latencies) != 3 {
		t.Fatalf("got %d log and %d latency records, want 6 and 3: %+v", len(logs), len(latencies), sink.recs)
	}
	// A message is {"message": {fields}, "headers": {...}}; an error response is
	// {"status": "...", "message": "the status message"}.
	type message struct {
		Message json.RawMessage `json:"message"`
		Status  string          `json:"status"`
	}
	decode := func(r weft.Record) message {
		var m message
		if err := json.Unmarshal(r.Value, &m); err != nil {
			t.Fatalf("record value %s: %v", r.Value, err)
		}
		return m
	}
	field := func(r weft.Record, name string) any {
		var fields map[string]any
		if err := json.Unmarshal(decode(r).Message, &fields); err != nil {
			t.Fatalf("record value %s: %v", r.Value, err)
		}
		return fields[name]
	}
	// Per RPC, in order: the request on the way in, the response (or the firewall's
	// rejection) on the way out, with the same RPC number.
	for i, user := range []string{"alice", "bob", "mallory"} {
		req, resp := logs[2*i], logs[2*i+1]
		if req.Element != "logging" || req.RPC != resp.RPC || req.RPC != latencies[i].RPC {
			t.Fatalf("RPC %d: records %+v %+v %+v do not belong together", i, req, resp, latencies[i])
		}
		if got := field(req, "user"); got != user {
			t.Fatalf("RPC %d: logged request user %v, want %s", i, got, user)
		}
		if user == "mallory" {
			if got := decode(resp).Status; got != "PERMISSION_DENIED" {
				t.Fatalf("mallory's logged response status %q", got)
			}
		} else if got := field(resp, "body"); got != "hi "+user {
			t.Fatalf("RPC %d: logged response body %v", i, got)
		}
		var seconds float64
		if err := json.Unmarshal(latencies[i].Value, &seconds); err != nil || seconds < 0 || seconds > 5 {
			t.Fatalf("latency %s (%v)", latencies[i].Value, err)
		}
	}
	if logs[0].RPC == logs[2].RPC {
		t.Fatal("two RPCs share a number")
	}
	if n, msg := srt.RecordErrors(); n != 0 {
		t.Fatalf("%d collection errors: %s", n, msg)
	}
}

// Records that find the queue full are counted, not waited for; Close hands over the rest.
func TestRecordsBeyondTheQueueAreCounted(t *testing.T) {
	yaml := edge("echo.Echo/Say", `    server:
      - logging
`)
	var sink recordSink
	// No collection before Close: the queue fills.
	srt, err := weft.OpenYAML(yaml, echoDir, "echo", weft.WithRecords(sink.add),
		weft.WithRecordQueue(4), weft.WithRecordInterval(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	_, addr := serve(t, "echo-0", srt.ServerOptions()...)
	c := dial(t, addr)
	for i := 0; i < 5; i++ {
		if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srt.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(sink.on("log")); got != 4 {
		t.Fatalf("Close handed over %d records, want the 4 the queue held", got)
	}
	if got := srt.DroppedRecords(); got != 10-4 {
		t.Fatalf("dropped %d records, want %d (2 per RPC, 5 RPCs, 4 kept)", got, 10-4)
	}
}

func TestRecordOptionsAreChecked(t *testing.T) {
	yaml := edge("echo.Echo/Say", "    server:\n      - logging\n")
	for _, tc := range []struct {
		opts []weft.Option
		want string
	}{
		{[]weft.Option{weft.WithRecords(func(weft.Record) {}), weft.WithRecordQueue(0)}, "record queue of 0"},
		{[]weft.Option{weft.WithRecords(func(weft.Record) {}), weft.WithRecordInterval(0)}, "record interval"},
	} {
		if _, err := weft.OpenYAML(yaml, echoDir, "echo", tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("got %v, want an error naming %q", err, tc.want)
		}
	}
}
