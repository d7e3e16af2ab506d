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
	for _, want := range []string{"echo-0", "echo-1"} {
		if got, _, err := say(); err != nil || got != want {
			t.Fatalf("served by %q (%v), want %s", got, err, want)
		}
	}

	down.srv.Stop()
	// Round robin: every second RPC goes to echo-1.
	for i := range 4 {
		got, took, err := say()
		if i%2 == 0 {
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
		want := []string{"echo-0", "echo-1"}[i]
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
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice"}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice"}, grpc.WaitForReady(true))
	wantCode(t, err, codes.Unavailable, fmt.Sprintf("%q", "echo-9"))
}
