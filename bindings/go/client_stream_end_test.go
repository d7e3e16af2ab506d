package weft_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// loggedStatuses runs a client chain of `logging` on SayStream and returns the runtime and a
// function that closes it (delivering its records) and lists the statuses of the error
// responses it logged, in order.
func loggedStatuses(t *testing.T) (*weft.Runtime, func() []string) {
	t.Helper()
	var sink recordSink
	crt := openWith(t, edge("echo.Echo/SayStream", "    client:\n      - logging\n"), "frontend",
		weft.WithRecords(sink.add))
	return crt, func() []string {
		t.Helper()
		if err := crt.Close(); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range sink.on("log") {
			var v struct {
				Status string `json:"status"` // only an error response has one
			}
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("record %s: %v", r.Value, err)
			}
			if v.Status != "" {
				out = append(out, v.Status)
			}
		}
		return out
	}
}

// weftModes are rvModes without plain grpc-go: the ways of installing Weft.
var weftModes = rvModes[1:]

// grpc-go documents ClientConn.Close as one way to release a stream. A caller that then
// neither reads nor cancels its context (here one that never ends) must not leave the
// requests the chain forwarded waiting: they get the stream's end, CANCELLED.
func TestClientStreamEndedByClosingTheConnEndsItsWaitingRequests(t *testing.T) {
	for kind, d := range map[string]grpc.StreamDesc{
		"bidi":             rvBidi,
		"client-streaming": {StreamName: "SayStream", ClientStreams: true},
	} {
		for _, m := range weftModes {
			t.Run(kind+"/"+m.name, func(t *testing.T) {
				crt, statuses := loggedStatuses(t)
				addr := serveSayStream(t, d, func(_ any, ss grpc.ServerStream) error {
					<-ss.Context().Done() // never answers
					return ss.Context().Err()
				})
				conn := dialConn(t, addr, m.opts(crt)...)
				c, cancel := context.WithCancel(context.Background())
				defer cancel()
				cs, err := rvNew(t, conn, c, d)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range []string{"a", "b"} {
					if err := cs.SendMsg(&echopb.SayRequest{Body: b}); err != nil {
						t.Fatal(err)
					}
				}
				if err := conn.Close(); err != nil {
					t.Fatal(err)
				}
				waitForNoWaitingRPCs(t, crt, "client")
				if got := statuses(); len(got) != 2 || got[0] != "CANCELLED" || got[1] != "CANCELLED" {
					t.Fatalf("the chain saw the stream end with %q, want CANCELLED twice", got)
				}
			})
		}
	}
}

// A stream whose failure the caller learns from Header() (grpc-go's Header ends the stream
// and returns nil, leaving the status to RecvMsg) ends for the chain there too: its request
// gets the server's status before the caller reads it, or if the caller never does.
func TestClientStreamFailureSeenByHeaderEndsItsWaitingRequests(t *testing.T) {
	for _, m := range weftModes {
		t.Run(m.name, func(t *testing.T) {
			crt, statuses := loggedStatuses(t)
			addr := serveSayStream(t, rvBidi, func(_ any, ss grpc.ServerStream) error {
				var r echopb.SayRequest
				_ = ss.RecvMsg(&r)
				return status.Error(codes.PermissionDenied, "no")
			})
			conn := dialConn(t, addr, m.opts(crt)...)
			c, cancel := context.WithCancel(context.Background())
			defer cancel()
			cs, err := rvNew(t, conn, c, rvBidi)
			if err != nil {
				t.Fatal(err)
			}
			if err := cs.SendMsg(&echopb.SayRequest{Body: "a"}); err != nil {
				t.Fatal(err)
			}
			if h, err := cs.Header(); h != nil || err != nil {
				t.Fatalf("Header() = %v, %v; want nil, nil as grpc-go's for a trailers-only end", h, err)
			}
			waitForNoWaitingRPCs(t, crt, "client")
			var r echopb.SayReply
			wantCode(t, cs.RecvMsg(&r), codes.PermissionDenied, "no")
			if got := statuses(); len(got) != 1 || got[0] != "PERMISSION_DENIED" {
				t.Fatalf("the chain saw the stream end with %q, want PERMISSION_DENIED", got)
			}
		})
	}
}

// On a server-streaming call, a reader or Header() that starts before the request waits for
// it; closing the ClientConn ends that wait at once with what grpc-go gives (CANCELLED "grpc:
// the client connection is closing" from RecvMsg, nil headers), not at the caller's deadline.
func TestServerStreamingEarlyReaderEndsWhenTheConnCloses(t *testing.T) {
	desc := grpc.StreamDesc{StreamName: "SayStream", ServerStreams: true}
	for _, what := range []string{"RecvMsg", "Header"} {
		for _, m := range rvModes {
			t.Run(what+"/"+m.name, func(t *testing.T) {
				crt := open(t, edge("echo.Echo/SayStream", "    client:\n      - metrics\n"), "frontend")
				conn := dialConn(t, serveThreeReplies(t, desc), m.opts(crt)...)
				ready(t, conn)
				cs, err := rvNew(t, conn, ctx(t), desc)
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan string, 1)
				go func() {
					if what == "RecvMsg" {
						var r echopb.SayReply
						done <- rvErr(cs.RecvMsg(&r))
					} else {
						h, err := cs.Header()
						done <- rvMD(h) + " " + rvErr(err)
					}
				}()
				time.Sleep(50 * time.Millisecond)
				if err := conn.Close(); err != nil {
					t.Fatal(err)
				}
				want := "Canceled:grpc: the client connection is closing"
				if what == "Header" {
					want = "nil nil"
				}
				select {
				case got := <-done:
					if got != want {
						t.Fatalf("%s returned %q, want %q", what, got, want)
					}
				case <-time.After(2 * time.Second):
					t.Fatalf("%s still waits 2s after ClientConn.Close", what)
				}
				waitForNoWaitingRPCs(t, crt, "client")
			})
		}
	}
}

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

// A context taken from Context() before the stream opens (right after NewStream) ends when
// the stream ends, whatever ends it, as grpc-go's stream context does.
func TestClientStreamContextTakenBeforeItOpensEndsWithTheStream(t *testing.T) {
	ends := map[string]func(t *testing.T, conn *grpc.ClientConn, cs grpc.ClientStream){
		"conn closed after the first message": func(t *testing.T, conn *grpc.ClientConn, cs grpc.ClientStream) {
			if err := cs.SendMsg(&echopb.SayRequest{Body: "a"}); err != nil {
				t.Fatal(err)
			}
			var r echopb.SayReply
			if err := cs.RecvMsg(&r); err != nil {
				t.Fatal(err)
			}
			_ = conn.Close()
		},
		"conn closed before any message": func(t *testing.T, conn *grpc.ClientConn, _ grpc.ClientStream) {
			_ = conn.Close()
		},
		"read to its end": func(t *testing.T, _ *grpc.ClientConn, cs grpc.ClientStream) {
			if err := cs.SendMsg(&echopb.SayRequest{Body: "a"}); err != nil {
				t.Fatal(err)
			}
			_ = cs.CloseSend()
			for {
				var r echopb.SayReply
				if err := cs.RecvMsg(&r); err != nil {
					break
				}
			}
		},
	}
	for name, end := range ends {
		for _, m := range rvModes {
			t.Run(name+"/"+m.name, func(t *testing.T) {
				crt := open(t, edge("echo.Echo/SayStream", "    client:\n      - metrics\n"), "frontend")
				_, addr := serve(t, "echo-0")
				conn := dialConn(t, addr, m.opts(crt)...)
				ready(t, conn)
				c, cancel := context.WithCancel(context.Background())
				defer cancel()
				cs, err := rvNew(t, conn, c, rvBidi)
				if err != nil {
					t.Fatal(err)
				}
				early := cs.Context()
				if early.Err() != nil {
					t.Fatalf("the stream's context ended before the stream: %v", early.Err())
				}
				end(t, conn, cs)
				select {
				case <-early.Done():
				case <-time.After(2 * time.Second):
					t.Fatal("the context taken before the stream opened has not ended 2s after the stream")
				}
				waitForNoWaitingRPCs(t, crt, "client")
			})
		}
	}
}

// A stream that never reaches grpc-go (the chain answered or refused its messages, or the
// caller's context ended before the first one) still ends for the caller's grpc.OnFinish
// option, once, with the status the caller saw, as grpc-go's streams all do.
func TestClientStreamThatNeverOpensCallsOnFinish(t *testing.T) {
	yaml := edge("echo.Echo/SayStream", `    client:
      - firewall: {field: user, deny: [mallory]}
      - cache: {field: body}
`)
	crt := open(t, yaml, "frontend")
	_, addr := serve(t, "echo-0")
	conn := dialConn(t, addr, crt.DialOptions()...)
	// A first stream goes to the server and fills the cache.
	cs := openSayStream(t, conn, rvBidi)
	if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "hello"}); err != nil {
		t.Fatal(err)
	}
	_ = cs.CloseSend()
	for cs.RecvMsg(&echopb.SayReply{}) == nil {
	}

	cases := []struct {
		name string
		desc grpc.StreamDesc
		run  func(c context.Context, cancel func(), cs grpc.ClientStream) error // the caller's last error
		want codes.Code
	}{
		{"answered, server streaming", grpc.StreamDesc{ServerStreams: true}, readAnswer, codes.OK},
		{"answered, bidi", rvBidi, readAnswer, codes.OK},
		{"answered, client streaming", grpc.StreamDesc{ClientStreams: true}, readAnswer, codes.OK},
		{"refused", rvBidi, func(_ context.Context, _ func(), cs grpc.ClientStream) error {
			return cs.SendMsg(&echopb.SayRequest{User: "mallory", Body: "hello"})
		}, codes.PermissionDenied},
		{"cancelled before a message", rvBidi, func(c context.Context, cancel func(), _ grpc.ClientStream) error {
			cancel()
			return status.FromContextError(c.Err()).Err()
		}, codes.Canceled},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			finished := make(chan error, 2)
			c, cancel := context.WithCancel(context.Background())
			defer cancel()
			desc := tc.desc
			desc.StreamName = "SayStream"
			cs, err := conn.NewStream(c, &desc, "/echo.Echo/SayStream",
				grpc.OnFinish(func(err error) { finished <- err }))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.run(c, cancel, cs); status.Code(err) != tc.want {
				t.Fatalf("the caller got %v, want %v", err, tc.want)
			}
			select {
			case err := <-finished:
				if status.Code(err) != tc.want {
					t.Fatalf("OnFinish got %v, want %v", err, tc.want)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("OnFinish was not called")
			}
			// Later calls do not end it again.
			_ = cs.CloseSend()
			_ = cs.RecvMsg(&echopb.SayReply{})
			time.Sleep(50 * time.Millisecond)
			if len(finished) != 0 {
				t.Fatalf("OnFinish called again with %v", <-finished)
			}
		})
	}
	waitForNoWaitingRPCs(t, crt, "client")
}

// readAnswer sends a message the chain answers (a cache hit) and reads the stream to its end.
func readAnswer(_ context.Context, _ func(), cs grpc.ClientStream) error {
	if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "hello"}); err != nil {
		return err
	}
	_ = cs.CloseSend()
	for {
		var r echopb.SayReply
		if err := cs.RecvMsg(&r); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// As grpc-go's, RecvMsg into a value that is not a protobuf message fails the stream: the
// requests waiting get the error, later calls return it, and the server sees a cancellation.
// (grpc-go fails once a message has arrived, Weft at once.)
func TestClientStreamRecvIntoANonMessageEndsTheStream(t *testing.T) {
	for _, m := range rvModes {
		t.Run(m.name, func(t *testing.T) {
			crt, statuses := loggedStatuses(t)
			serverEnd := make(chan error, 1)
			addr := serveSayStream(t, rvBidi, func(_ any, ss grpc.ServerStream) error {
				var r echopb.SayRequest
				for {
					if err := ss.RecvMsg(&r); err != nil {
						serverEnd <- err
						return err
					}
					_ = ss.SendMsg(&echopb.SayReply{Body: r.Body})
				}
			})
			conn := dialConn(t, addr, m.opts(crt)...)
			c, cancel := context.WithCancel(context.Background())
			defer cancel()
			cs, err := rvNew(t, conn, c, rvBidi)
			if err != nil {
				t.Fatal(err)
			}
			if err := cs.SendMsg(&echopb.SayRequest{Body: "a"}); err != nil {
				t.Fatal(err)
			}
			var notAMessage string
			wantCode(t, cs.RecvMsg(&notAMessage), codes.Internal, "")
			wantCode(t, cs.RecvMsg(&echopb.SayReply{}), codes.Internal, "")
			select {
			case err := <-serverEnd:
				if status.Code(err) != codes.Canceled {
					t.Fatalf("the server's stream ended with %v, want CANCELLED", err)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("the server's stream did not end")
			}
			if m.name == "plain" {
				return
			}
			waitForNoWaitingRPCs(t, crt, "client")
			if got := statuses(); len(got) != 1 || got[0] != "INTERNAL" {
				t.Fatalf("the chain saw the stream end with %q, want INTERNAL", got)
			}
		})
	}
}

// A stream that did reach grpc-go ends for the caller's grpc.OnFinish options with the
// status the caller got too, once: when the chain fails the stream, grpc-go's own end is a
// cancellation, which is not what the caller saw.
func TestOpenedClientStreamCallsOnFinishWithTheCallersStatus(t *testing.T) {
	yaml := edge("echo.Echo/SayStream", `    client:
      - firewall: {field: user, deny: [mallory]}
`)
	crt := open(t, yaml, "frontend")
	_, addr := serve(t, "echo-0")
	conn := dialConn(t, addr, crt.DialOptions()...)

	cases := []struct {
		name string
		run  func(cs grpc.ClientStream) error // the caller's last error
		want codes.Code
	}{
		{"read to its end", func(cs grpc.ClientStream) error {
			if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
				return err
			}
			_ = cs.CloseSend()
			for {
				if err := cs.RecvMsg(&echopb.SayReply{}); err == io.EOF {
					return nil
				} else if err != nil {
					return err
				}
			}
		}, codes.OK},
		{"failed by the chain after it opened", func(cs grpc.ClientStream) error {
			if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
				return err
			}
			if err := cs.RecvMsg(&echopb.SayReply{}); err != nil {
				return err
			}
			return cs.SendMsg(&echopb.SayRequest{User: "mallory", Body: "let me in"})
		}, codes.PermissionDenied},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			finished := make(chan error, 2)
			c, cancel := context.WithCancel(context.Background())
			defer cancel()
			desc := rvBidi
			desc.StreamName = "SayStream"
			cs, err := conn.NewStream(c, &desc, "/echo.Echo/SayStream",
				grpc.OnFinish(func(err error) { finished <- err }))
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.run(cs); status.Code(err) != tc.want {
				t.Fatalf("the caller got %v, want %v", err, tc.want)
			}
			select {
			case err := <-finished:
				if status.Code(err) != tc.want || (err == nil) != (tc.want == codes.OK) {
					t.Fatalf("OnFinish got %v, the caller %v", err, tc.want)
				}
			case <-time.After(2 * time.Second):
				t.Fatal("OnFinish was not called")
			}
			_ = cs.RecvMsg(&echopb.SayReply{})
			time.Sleep(50 * time.Millisecond)
			if len(finished) != 0 {
				t.Fatalf("OnFinish called again with %v", <-finished)
			}
		})
	}
	waitForNoWaitingRPCs(t, crt, "client")
}
