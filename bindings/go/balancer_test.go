package weft_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// replica is an echo server the test can stop and start again on the same address.
type replica struct {
	name, addr string
	srv        *grpc.Server
}

func startReplica(t *testing.T, name, addr string) *replica {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, addr: lis.Addr().String(), srv: grpc.NewServer()}
	echopb.RegisterEchoServer(r.srv, &echoServer{name: name})
	go func() { _ = r.srv.Serve(lis) }()
	t.Cleanup(r.srv.Stop)
	return r
}

// An RPC the chain routes to a replica that cannot be reached fails at once with
// UNAVAILABLE, as grpc-go fails any RPC whose pick finds no connection, instead of waiting
// for that replica until its deadline; one that waits for ready waits, and gets through once
// the replica is back.
func TestRouteToAnUnreachableReplicaFailsFast(t *testing.T) {
	yaml := edge("echo.Echo/Say", `    client:
      - element: loadbalance
        params: {policy: round_robin}
        state:
          replicas: [echo-0, echo-1]
`)
	crt := open(t, yaml, "frontend")
	up := startReplica(t, "echo-0", "127.0.0.1:0")
	down := startReplica(t, "echo-1", "127.0.0.1:0")
	target, lb := weft.Replicas(weft.Replica{Name: up.name, Addr: up.addr}, weft.Replica{Name: down.name, Addr: down.addr})
	c := dial(t, target, append(crt.DialOptions(), lb...)...)
	say := func(opts ...grpc.CallOption) (string, time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		r, err := c.Say(ctx, &echopb.SayRequest{User: "alice", Body: "hi"}, opts...)
		return r.GetServedBy(), time.Since(start), err
	}
	// Round robin starts each client at a random place: the first RPC says where.
	first, _, err := say()
	if err != nil {
		t.Fatal(err)
	}
	start := map[string]int{"echo-0": 0, "echo-1": 1}[first]
	if got, _, err := say(); err != nil || got != turn([]string{"echo-0", "echo-1"}, start, 1) {
		t.Fatalf("served by %q (%v) after %s, want the other replica", got, err, first)
	}

	down.srv.Stop()
	// Round robin: every second RPC goes to echo-1.
	for i := range 4 {
		got, took, err := say()
		if (start+i)%2 == 0 {
			if err != nil || got != "echo-0" {
				t.Fatalf("rpc %d: served by %q (%v), want echo-0", i, got, err)
			}
			continue
		}
		if status.Code(err) != codes.Unavailable || took > 3*time.Second {
			t.Fatalf("rpc %d to the stopped replica: %v after %v, want UNAVAILABLE at once", i, err, took)
		}
	}

	// Back on its address, the replica serves again; an RPC that waits for ready waits
	// for it (grpc-go retries the connection after a backoff of about a second).
	startReplica(t, "echo-1", down.addr)
	for i := range 2 {
		want := turn([]string{"echo-0", "echo-1"}, start, i)
		if got, _, err := say(grpc.WaitForReady(true)); err != nil || got != want {
			t.Fatalf("after the restart: served by %q (%v), want %s", got, err, want)
		}
	}
}

// A route naming a replica the connection does not know fails with UNAVAILABLE, naming it.
func TestRouteToAnUnknownReplicaFails(t *testing.T) {
	yaml := edge("echo.Echo/Say", `    client:
      - element: loadbalance
        params: {policy: round_robin}
        state:
          replicas: [echo-0, echo-9]
`)
	crt := open(t, yaml, "frontend")
	up := startReplica(t, "echo-0", "127.0.0.1:0")
	target, lb := weft.Replicas(weft.Replica{Name: up.name, Addr: up.addr})
	c := dial(t, target, append(crt.DialOptions(), lb...)...)
	// Round robin from a random place: one of two RPCs goes to each replica. Even one
	// that waits for ready fails at once when routed to echo-9.
	var served, failed int
	for range 2 {
		r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice"}, grpc.WaitForReady(true))
		if err != nil {
			wantCode(t, err, codes.Unavailable, fmt.Sprintf("%q", "echo-9"))
			failed++
			continue
		}
		if r.GetServedBy() != "echo-0" {
			t.Fatalf("served by %q", r.GetServedBy())
		}
		served++
	}
	if served != 1 || failed != 1 {
		t.Fatalf("%d served and %d failed, want one each", served, failed)
	}
}

// The replica round robin picks `k` turns after the one at index `start` of `list`.
func turn(list []string, start, k int) string {
	return list[(start+k)%len(list)]
}
