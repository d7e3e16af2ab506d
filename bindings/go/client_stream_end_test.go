package weft_test

import (
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// slowToServe listens at once but serves gRPC (answers the HTTP/2 handshake) only after
// delay, so a stream takes that long to open. The server echoes each message.
func slowToServe(t *testing.T, delay time.Duration) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	d := rvBidi
	d.Handler = func(_ any, ss grpc.ServerStream) error {
		var r echopb.SayRequest
		for ss.RecvMsg(&r) == nil {
			_ = ss.SendMsg(&echopb.SayReply{Body: r.Body})
		}
		return nil
	}
	srv.RegisterService(&grpc.ServiceDesc{ServiceName: "echo.Echo", HandlerType: (*any)(nil), Streams: []grpc.StreamDesc{d}}, nil)
	timer := time.AfterFunc(delay, func() { _ = srv.Serve(lis) })
	t.Cleanup(func() {
		if timer.Stop() {
			_ = lis.Close()
		}
		srv.Stop()
	})
	return lis.Addr().String()
}

// grpc-go's Context() and Trailer() never wait. Weft's stream opens at its first message;
// while that open waits for the connection, the two return at once too.
func TestClientStreamContextAndTrailerDoNotWaitForTheStreamToOpen(t *testing.T) {
	for _, m := range rvModes {
		t.Run(m.name, func(t *testing.T) {
			crt := open(t, edge("echo.Echo/SayStream", "    client:\n      - metrics\n"), "frontend")
			conn := dialConn(t, slowToServe(t, 1500*time.Millisecond), m.opts(crt)...)
			cs, err := rvNew(t, conn, ctx(t), rvBidi)
			if err != nil {
				t.Fatal(err)
			}
			sent := make(chan error, 1)
			go func() { sent <- cs.SendMsg(&echopb.SayRequest{Body: "x"}) }() // opens the stream
			time.Sleep(100 * time.Millisecond)
			start := time.Now()
			c := cs.Context()
			tr := cs.Trailer()
			if took := time.Since(start); took > 500*time.Millisecond {
				t.Fatalf("Context() and Trailer() took %v while the stream opened", took)
			}
			if c == nil || len(tr) != 0 {
				t.Fatalf("Context() = %v, Trailer() = %v before the stream ended", c, tr)
			}
			if err := <-sent; err != nil {
				t.Fatal(err)
			}
			_ = cs.CloseSend()
			var r echopb.SayReply
			if err := cs.RecvMsg(&r); err != nil || r.Body != "x" {
				t.Fatalf("RecvMsg: %v %q", err, r.Body)
			}
			waitForNoWaitingRPCs(t, crt, "client")
		})
	}
}
