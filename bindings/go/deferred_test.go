package weft_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// slowEcho answers Say after running during, as a handler that takes its time.
type slowEcho struct {
	echopb.UnimplementedEchoServer
	during   func()
	calls    atomic.Int64
	servedBy string
	// rt and addr: the server's runtime and address, as reloadDuringFirstHandler made them.
	rt   *weft.Runtime
	addr string
}

func (e *slowEcho) Say(_ context.Context, req *echopb.SayRequest) (*echopb.SayReply, error) {
	e.calls.Add(1)
	if e.during != nil {
		e.during()
	}
	return &echopb.SayReply{Body: req.GetBody(), ServedBy: e.servedBy}, nil
}

func serveSlow(t *testing.T, impl *slowEcho, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	echopb.RegisterEchoServer(srv, impl)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// metrics on the server only reads the clock on the request path, so the server runs its
// request path in the response's library call, at the time the request arrived, for a
// request stamped by a Weft client of the same config; an unstamped request takes the
// two-call path. Both measure the handler's time.
func TestADeferredRequestPathMeasuresFromArrival(t *testing.T) {
	yaml := edge("echo.Echo/Say", "    server:\n      - metrics\n")
	var sink recordSink
	srt := openWith(t, yaml, "echo", weft.WithRecords(sink.add), weft.WithRecordInterval(10*time.Millisecond))
	crt := open(t, yaml, "frontend")
	const handlerTime = 30 * time.Millisecond
	var waiting []uint64
	impl := &slowEcho{during: func() {
		// The library holds an RPC between its request and response calls; a deferred one
		// it does not hold at all.
		waiting = append(waiting, srt.WaitingRPCs())
		time.Sleep(handlerTime)
	}}
	addr := serveSlow(t, impl, srt.ServerOptions()...)
	stamped := dial(t, addr, crt.DialOptions()...)
	plain := dial(t, addr)
	for _, c := range []echopb.EchoClient{stamped, stamped, plain} {
		if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
			t.Fatal(err)
		}
	}
	if want := []uint64{0, 0, 1}; len(waiting) != 3 || waiting[0] != want[0] || waiting[1] != want[1] || waiting[2] != want[2] {
		t.Fatalf("RPCs waiting in the library during the handler: %v, want %v (stamped, stamped, unstamped)", waiting, want)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(sink.on("latency")) < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	latencies := sink.on("latency")
	if len(latencies) != 3 {
		t.Fatalf("got %d latency records, want 3", len(latencies))
	}
	for i, r := range latencies {
		seconds, err := strconv.ParseFloat(string(r.Value), 64)
		if err != nil {
			t.Fatalf("latency record %s: %v", r.Value, err)
		}
		if seconds < handlerTime.Seconds() || seconds > 5 {
			t.Fatalf("RPC %d: latency %v s, want at least the handler's %v", i, seconds, handlerTime)
		}
	}
}

// reloadDuringFirstHandler serves Say with the server running from and a client of the same
// config, and reloads the server to to (elements under baseDir) while the first call's
// handler runs. The handler's replies are served by "echo-7".
func reloadDuringFirstHandler(t *testing.T, from, to, baseDir string) (echopb.EchoClient, *slowEcho) {
	t.Helper()
	srt := open(t, from, "echo")
	crt := open(t, from, "frontend")
	impl := &slowEcho{servedBy: "echo-7", rt: srt}
	impl.during = func() {
		if impl.calls.Load() == 1 {
			if err := srt.ReloadYAML(to, baseDir); err != nil {
				t.Error(err)
			}
		}
	}
	impl.addr = serveSlow(t, impl, srt.ServerOptions()...)
	return dial(t, impl.addr, crt.DialOptions()...), impl
}

// A reload during a deferred RPC's handler to a version whose request path cannot wait: the
// RPC runs in the new version, its request path late, after the handler (docs/go.md,
// "Deferred request paths"), so the new firewall still decides what the caller gets.
func TestAReloadDuringADeferredHandlerRunsTheNewRequestPathLate(t *testing.T) {
	metricsOnly := edge("echo.Echo/Say", "    server:\n      - metrics\n")
	guarded := edge("echo.Echo/Say", "    server:\n      - metrics\n      - firewall: {field: user, deny: [mallory]}\n")
	c, impl := reloadDuringFirstHandler(t, metricsOnly, guarded, echoDir)
	_, err := c.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "hi"})
	wantCode(t, err, codes.PermissionDenied, "")
	if n := impl.calls.Load(); n != 1 {
		t.Fatalf("handler calls: %d, want 1", n)
	}
	// The new version's request path cannot wait: the next request takes the two-call path,
	// and the firewall stops it before the handler.
	_, err = c.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "hi"})
	wantCode(t, err, codes.PermissionDenied, "")
	if n := impl.calls.Load(); n != 1 {
		t.Fatalf("handler calls: %d, want 1", n)
	}
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
}

// A reload during a deferred RPC's handler to a config whose server side has no chain for
// the method: the RPC passes, as it would have had it arrived after the reload, and so do
// later RPCs stamped with the old version by a client that has not reloaded.
func TestAReloadDuringADeferredHandlerThatRemovesTheChainLetsTheRPCPass(t *testing.T) {
	metricsOnly := edge("echo.Echo/Say", "    server:\n      - metrics\n")
	elsewhere := edge("echo.Echo/SayStream", "    server:\n      - metrics\n")
	c, impl := reloadDuringFirstHandler(t, metricsOnly, elsewhere, echoDir)
	for i := 0; i < 3; i++ {
		r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"})
		if err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
		if r.GetBody() != "hi" {
			t.Fatalf("RPC %d: reply %q", i, r.GetBody())
		}
	}
	if n := impl.calls.Load(); n != 3 {
		t.Fatalf("handler calls: %d, want 3", n)
	}
}

// A reload during a deferred RPC's handler to a version that can wait too but observes more
// (its response path rewrites the body): the exchange must not run that version on the
// inputs the old keys shaped (no response message at all), so the RPC takes the two-call
// path and the caller gets the handler's reply, rewritten, with all its fields.
func TestAReloadDuringADeferredHandlerToAVersionThatObservesMoreGetsTheWholeResponse(t *testing.T) {
	exclaim := responseOnly("    set(rpc, 'body', get(rpc, 'body') + '!')\n    send(rpc, Up)\n")
	cfg, dir := withElements(t, map[string]string{"exclaim": exclaim}, "echo.Echo/Say", "server")
	c, _ := reloadDuringFirstHandler(t, cfg("      - metrics\n"), cfg("      - metrics\n      - exclaim\n"), dir)
	for i := 0; i < 2; i++ {
		r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"})
		if err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
		if r.GetBody() != "hi!" || r.GetServedBy() != "echo-7" {
			t.Fatalf("RPC %d: reply body %q served by %q, want \"hi!\" by \"echo-7\"", i, r.GetBody(), r.GetServedBy())
		}
	}
}

// A reload between RPCs to a version whose request path cannot wait: the next request,
// stamped with the old version by a client that has not reloaded, is not deferred, so the
// new firewall stops it before the handler. The binding reads the library's version word on
// each RPC; before, it learnt of a reload only from a call's answer, and this request's
// handler ran first.
func TestAReloadBetweenRPCsAppliesTheNewRequestPolicyAtOnce(t *testing.T) {
	metricsOnly := edge("echo.Echo/Say", "    server:\n      - metrics\n")
	guarded := edge("echo.Echo/Say", "    server:\n      - metrics\n      - firewall: {field: user, deny: [mallory]}\n")
	srt := open(t, metricsOnly, "echo")
	crt := open(t, metricsOnly, "frontend")
	impl := &slowEcho{servedBy: "echo-7"}
	c := dial(t, serveSlow(t, impl, srt.ServerOptions()...), crt.DialOptions()...)
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
	if err := srt.ReloadYAML(guarded, echoDir); err != nil {
		t.Fatal(err)
	}
	_, err := c.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "hi"})
	wantCode(t, err, codes.PermissionDenied, "acl")
	if n := impl.calls.Load(); n != 1 {
		t.Fatalf("handler calls: %d, want 1: mallory's request reached the handler", n)
	}
}

// The same when the chain's keys have version 0 (its response handler sees the whole
// response, so every key is passed) and its request path can wait.
func TestAReloadBetweenRPCsAppliesTheNewRequestPolicyToEveryKeySet(t *testing.T) {
	keep := "state:\n    last: Map<string, Response>\n\ninit():\n    pass\n\nreq(rpc):\n    send(rpc, Down)\n\nresp(rpc):\n    set(last, 'x', rpc)\n    send(rpc, Up)\n"
	fw := "state:\n    denied: Map<string, bool>\n\ninit():\n    set(denied, 'mallory', true)\n\nreq(rpc):\n    match get(denied, str(get(rpc, 'user'))):\n        Some(_) =>\n            send(err('acl', PERMISSION_DENIED), Up)\n        None =>\n            send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n"
	cfg, dir := withElements(t, map[string]string{"keep": keep, "fw": fw}, "echo.Echo/Say", "server")
	from, to := cfg("      - keep\n"), cfg("      - keep\n      - fw\n")
	srt := open(t, from, "echo")
	crt := open(t, from, "frontend")
	impl := &slowEcho{servedBy: "echo-7"}
	c := dial(t, serveSlow(t, impl, srt.ServerOptions()...), crt.DialOptions()...)
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
	if err := srt.ReloadYAML(to, dir); err != nil {
		t.Fatal(err)
	}
	_, err := c.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "hi"})
	wantCode(t, err, codes.PermissionDenied, "acl")
	if n := impl.calls.Load(); n != 1 {
		t.Fatalf("handler calls: %d, want 1: mallory's request reached the handler", n)
	}
}
