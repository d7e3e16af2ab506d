package weft_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// waitForNoWaitingRPCs fails the test unless rt's count of requests waiting for their
// response drops to zero within a few seconds (a server's stream ends after its handler
// returns, which the client may see first).
func waitForNoWaitingRPCs(t *testing.T, rt *weft.Runtime, who string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for rt.WaitingRPCs() != 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	if n := rt.WaitingRPCs(); n != 0 {
		t.Fatalf("%s: %d requests still wait for a response after their stream ended", who, n)
	}
}

// serveSayStream serves echo.Echo/SayStream with handler, registered as desc says (client,
// server or both streaming), and returns the server's address.
func serveSayStream(t *testing.T, desc grpc.StreamDesc, handler grpc.StreamHandler, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	desc.StreamName = "SayStream"
	desc.Handler = handler
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "echo.Echo",
		HandlerType: (*any)(nil),
		Streams:     []grpc.StreamDesc{desc},
		Metadata:    "echo.proto",
	}, nil)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// serveCollector serves echo.Echo/SayStream as a client-streaming method: it reads every
// message, then answers once with their count, and sets trailer (when not nil).
func serveCollector(t *testing.T, trailer metadata.MD, opts ...grpc.ServerOption) string {
	t.Helper()
	return serveSayStream(t, grpc.StreamDesc{ClientStreams: true}, func(_ any, stream grpc.ServerStream) error {
		n := 0
		for {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err == io.EOF {
				if trailer != nil {
					stream.SetTrailer(trailer)
				}
				return stream.SendMsg(&echopb.SayReply{Body: fmt.Sprint(n)})
			}
			if err != nil {
				return err
			}
			n++
		}
	}, opts...)
}

// A client-streaming call sends three requests and gets one response, paired with the first.
// The other two get the stream's clean end (OK, no message) as their response on both sides,
// so breakers that count requests in flight count them down and the next stream passes.
func TestClientStreamingEndAnswersEveryRequest(t *testing.T) {
	yaml := edge("echo.Echo/SayStream", `    client:
      - circuitbreaker: {max_pending: 3}
    server:
      - element: circuitbreaker
        name: server_breaker
        params: {max_pending: 3}
      - logging
`)
	var sink recordSink
	srt := openWith(t, yaml, "echo", weft.WithRecords(sink.add))
	crt := open(t, yaml, "frontend")
	addr := serveCollector(t, nil, srt.ServerOptions()...)
	conn := dialConn(t, addr, crt.DialOptions()...)
	const streams = 3
	for i := range streams {
		cs, err := conn.NewStream(ctx(t), &grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true}, "/echo.Echo/SayStream")
		if err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: fmt.Sprint(j)}); err != nil {
				t.Fatalf("stream %d, message %d: %v", i, j, err)
			}
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var reply echopb.SayReply
		if err := cs.RecvMsg(&reply); err != nil {
			t.Fatalf("stream %d: %v (a breaker still counting an earlier stream's requests?)", i, err)
		}
		if reply.GetBody() != "3" {
			t.Fatalf("stream %d: the server counted %q messages, want 3", i, reply.GetBody())
		}
		// The client's stream ended with its one response.
		if n := crt.WaitingRPCs(); n != 0 {
			t.Fatalf("stream %d: %d client requests still wait after the response", i, n)
		}
		waitForNoWaitingRPCs(t, srt, fmt.Sprintf("server, stream %d", i))
	}
	if err := srt.Close(); err != nil {
		t.Fatal(err)
	}
	// Every request the server's chain logged has exactly one logged response.
	requests, responses := map[uint64]int{}, map[uint64]int{}
	for k, r := range sink.on("log") {
		// Per RPC the request comes first; a second record of the same RPC is its response.
		if _, seen := requests[r.RPC]; !seen {
			requests[r.RPC] = k
		} else {
			responses[r.RPC]++
		}
	}
	if len(requests) != 3*streams {
		t.Fatalf("the server logged %d requests, want %d", len(requests), 3*streams)
	}
	for rpc := range requests {
		if responses[rpc] != 1 {
			t.Fatalf("RPC %d has %d logged responses, want 1", rpc, responses[rpc])
		}
	}
}

// The one response of a client-streaming call comes with the stream's trailers, as a unary
// call's does: the client chain reads them (loadcheck rejects a response without x-load).
func TestClientStreamingResponseSeesTrailers(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "loadcheck.weft"), []byte(loadCheck), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "protos: [" + filepath.Join(echoDir, "echo.proto") + "]\nelement_paths: [" + dir +
		"]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/SayStream\n" +
		"    client:\n      - loadcheck\n"
	crt := open(t, cfg, "frontend")
	addr := serveCollector(t, metadata.Pairs("x-load", "7"))
	conn := dialConn(t, addr, crt.DialOptions()...)
	cs, err := conn.NewStream(ctx(t), &grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true}, "/echo.Echo/SayStream")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var reply echopb.SayReply
	if err := cs.RecvMsg(&reply); err != nil {
		t.Fatalf("the client chain must see the stream's trailer: %v", err)
	}
	if reply.GetBody() != "1" {
		t.Fatalf("reply %q, want 1", reply.GetBody())
	}
}

// A caller that stops reading a stream and cancels its context (grpc-go's way to release a
// stream early) leaves a request without its response: that request's response path runs with
// CANCELLED, so the breaker admits the next stream's messages.
func TestCancelledStreamAnswersItsWaitingRequests(t *testing.T) {
	yaml := edge("echo.Echo/SayStream", `    client:
      - logging
      - circuitbreaker: {max_pending: 2}
`)
	var sink recordSink
	crt := openWith(t, yaml, "frontend", weft.WithRecords(sink.add))
	_, addr := serve(t, "echo-0")
	c := dial(t, addr, crt.DialOptions()...)

	sctx, cancel := context.WithCancel(ctx(t))
	stream, err := c.SayStream(sctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := stream.Send(&echopb.SayRequest{User: "alice", Body: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	waitForNoWaitingRPCs(t, crt, "client")

	// Had the cancelled stream's second request stayed counted, the breaker would reject
	// this stream's second message.
	stream, err = c.SayStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := stream.Send(&echopb.SayRequest{User: "alice", Body: fmt.Sprint(i)}); err != nil {
			t.Fatalf("message %d of the second stream: %v", i, err)
		}
	}
	for i := range 2 {
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("reply %d of the second stream: %v", i, err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("the second stream ended with %v, want io.EOF", err)
	}
	if err := crt.Close(); err != nil {
		t.Fatal(err)
	}
	// Logged: the first stream's two requests, its one response, the cancellation as the
	// second request's response; then the second stream's two pairs.
	logs := sink.on("log")
	if len(logs) != 8 {
		t.Fatalf("got %d log records, want 8: %+v", len(logs), logs)
	}
	cancelled := logs[3]
	if cancelled.RPC != logs[1].RPC {
		t.Fatalf("the fourth record (RPC %d) is not the second request's (RPC %d) response", cancelled.RPC, logs[1].RPC)
	}
	if got := decodeStatus(t, cancelled); got != "CANCELLED" {
		t.Fatalf("the cancelled request's logged response has status %q, want CANCELLED (%s)", got, cancelled.Value)
	}
}

// decodeStatus reads the status of a logged error response ({"status": …, "message": …}).
func decodeStatus(t *testing.T, r weft.Record) string {
	t.Helper()
	var m struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(r.Value, &m); err != nil {
		t.Fatalf("record value %s: %v", r.Value, err)
	}
	return m.Status
}

// Many streams at once, each ending one of three ways (read to the end, cancelled with
// replies unread, failed by the server), leave no request waiting on either side.
func TestConcurrentStreamEndsLeaveNothingWaiting(t *testing.T) {
	yaml := edge("echo.Echo/SayStream", `    client:
      - circuitbreaker: {max_pending: 1000000}
    server:
      - metrics
`)
	srt := open(t, yaml, "echo")
	crt := open(t, yaml, "frontend")
	_, addr := serve(t, "echo-0", srt.ServerOptions()...)
	c := dial(t, addr, crt.DialOptions()...)
	const workers, streams = 8, 25
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			errs <- func() error {
				for i := range streams {
					sctx, cancel := context.WithCancel(context.Background())
					stream, err := c.SayStream(sctx)
					if err != nil {
						cancel()
						return err
					}
					body := fmt.Sprint(w, "-", i)
					if i%3 == 2 {
						body = "fail" // the server's handler returns ABORTED
					}
					for range 3 {
						if err := stream.Send(&echopb.SayRequest{User: "alice", Body: body}); err != nil {
							break // the server failed the stream; Recv reports why
						}
					}
					switch i % 3 {
					case 0: // read to the end
						_ = stream.CloseSend()
						for {
							if _, err := stream.Recv(); err != nil {
								if err != io.EOF {
									cancel()
									return fmt.Errorf("stream %s: %v", body, err)
								}
								break
							}
						}
					case 1: // one reply read, the rest left, the stream cancelled
						if _, err := stream.Recv(); err != nil {
							cancel()
							return fmt.Errorf("stream %s: %v", body, err)
						}
					case 2: // failed by the server
						for {
							if _, err := stream.Recv(); err != nil {
								break
							}
						}
					}
					cancel()
				}
				return nil
			}()
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	waitForNoWaitingRPCs(t, crt, "client")
	waitForNoWaitingRPCs(t, srt, "server")
}

// A stream the chain answers wholly by itself never reaches the server: ending its sending
// side opens no stream, the caller reads the local replies and then io.EOF, and the call
// releases its context. And a message sent after the chain failed the stream does not run
// the chain again.
func TestStreamAnsweredLocallyNeverReachesTheServer(t *testing.T) {
	crt := open(t, edge("echo.Echo/SayStream", `    client:
      - cache: {field: body}
`), "frontend")
	var opened atomic.Int64
	countOpens := grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		opened.Add(1)
		return handler(srv, ss)
	})
	_, addr := serve(t, "echo-0", countOpens)
	conn := dialConn(t, addr, crt.DialOptions()...)
	hello := &echopb.SayRequest{User: "alice", Body: "hello"}

	// A first stream goes to the server and fills the cache.
	cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true, ServerStreams: true})
	var reply echopb.SayReply
	if err := cs.SendMsg(hello); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(&reply); err != nil || reply.GetServedBy() != "echo-0" {
		t.Fatalf("first reply %v, %v", &reply, err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(&reply); err != io.EOF {
		t.Fatalf("the first stream ends with %v, want io.EOF", err)
	}
	if n := opened.Load(); n != 1 {
		t.Fatalf("the server saw %d streams, want 1", n)
	}

	for _, desc := range []grpc.StreamDesc{
		{ServerStreams: true},
		{ClientStreams: true, ServerStreams: true},
		{ClientStreams: true},
	} {
		kind := fmt.Sprintf("client streams %v, server streams %v", desc.ClientStreams, desc.ServerStreams)
		cs := openSayStream(t, conn, desc)
		if err := cs.SendMsg(hello); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatalf("%s: CloseSend: %v", kind, err)
		}
		reply.Reset()
		if err := cs.RecvMsg(&reply); err != nil || reply.GetBody() != "hello" {
			t.Fatalf("%s: the cached reply is %v, %v", kind, &reply, err)
		}
		if desc.ServerStreams {
			if err := cs.RecvMsg(&reply); err != io.EOF {
				t.Fatalf("%s: after the local reply the stream ends with %v, want io.EOF", kind, err)
			}
		}
		if cs.Context().Err() == nil {
			t.Fatalf("%s: the call is over but its context is still live", kind)
		}
		if n := opened.Load(); n != 1 {
			t.Fatalf("%s: the server saw %d streams, want 1: the chain answered this one", kind, n)
		}
	}
	if n := crt.WaitingRPCs(); n != 0 {
		t.Fatalf("%d requests still wait", n)
	}
}

// After the chain fails a stream, later messages get the chain's status without running
// the chain again (a rate limiter would spend its tokens on messages that go nowhere).
func TestStreamMessagesAfterAFailureDoNotRunTheChain(t *testing.T) {
	var sink recordSink
	crt := openWith(t, edge("echo.Echo/SayStream", `    client:
      - logging
      - firewall: {field: user, deny: [mallory]}
`), "frontend", weft.WithRecords(sink.add))
	_, addr := serve(t, "echo-0")
	conn := dialConn(t, addr, crt.DialOptions()...)
	cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true, ServerStreams: true})
	first := cs.SendMsg(&echopb.SayRequest{User: "mallory", Body: "one"})
	wantCode(t, first, codes.PermissionDenied, "acl")
	for range 3 {
		wantCode(t, cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "two"}), codes.PermissionDenied, "acl")
	}
	if err := crt.Close(); err != nil {
		t.Fatal(err)
	}
	// logging runs before the firewall: one request record, and its response (the
	// rejection travelling back up), for the one message that ran the chain.
	if n := len(sink.on("log")); n != 2 {
		t.Fatalf("logging recorded %d records, want 2: later messages ran the chain", n)
	}
}

// A handler may receive on one goroutine and send on another, as grpc-go allows, while the
// chain answers some received messages itself from the receiving goroutine. Every message
// gets exactly one reply, and the two goroutines' sends and headers never overlap (`make
// test` runs the stream tests under -race too).
func TestServerStreamLocalRepliesAndAHandlerSendingOnAnotherGoroutine(t *testing.T) {
	srt := open(t, edge("echo.Echo/SayStream", `    server:
      - cache: {field: body}
`), "echo")
	var handled atomic.Int64
	addr := serveSayStream(t, grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, func(_ any, stream grpc.ServerStream) error {
		replies := make(chan *echopb.SayReply, 16)
		sent := make(chan error, 1)
		go func() {
			// Refused when a local reply has already sent the headers.
			_ = stream.SetHeader(metadata.Pairs("x-handler", "set"))
			for r := range replies {
				if err := stream.SendMsg(r); err != nil {
					sent <- err
					for range replies {
					}
					return
				}
			}
			sent <- nil
		}()
		for {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err == io.EOF {
				close(replies)
				return <-sent
			}
			if err != nil {
				close(replies)
				<-sent
				return err
			}
			handled.Add(1)
			replies <- &echopb.SayReply{Body: req.GetBody(), ServedBy: "handler"}
		}
	}, srt.ServerOptions()...)
	conn := dialConn(t, addr)
	// Sends bodies on another goroutine, then ends the sending side; returns the replies
	// by body, and the stream's headers.
	exchange := func(bodies []string) (map[string]int, metadata.MD) {
		cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true, ServerStreams: true})
		go func() {
			for _, body := range bodies {
				if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: body}); err != nil {
					return
				}
			}
			_ = cs.CloseSend()
		}()
		got := map[string]int{}
		for {
			var reply echopb.SayReply
			err := cs.RecvMsg(&reply)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("after %d replies: %v", len(got), err)
			}
			got[reply.GetBody()]++
		}
		h, err := cs.Header()
		if err != nil {
			t.Fatal(err)
		}
		return got, h
	}
	// The first stream fills the server's cache with five bodies.
	const cached, rounds = 5, 40
	var first []string
	for i := range cached {
		first = append(first, fmt.Sprint("cached-", i))
	}
	if got, _ := exchange(first); len(got) != cached {
		t.Fatalf("first stream: replies %v", got)
	}
	// On the second, cached bodies, answered on the receiving goroutine from the start,
	// alternate with new ones, which the handler answers from its sending goroutine.
	var second []string
	want := map[string]int{}
	for i := range rounds {
		c, n := fmt.Sprint("cached-", i%cached), fmt.Sprint("new-", i)
		second = append(second, c, n)
		want[c]++
		want[n]++
	}
	got, header := exchange(second)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("replies by body %v, want %v", got, want)
	}
	if n := handled.Load(); n != cached+rounds {
		t.Fatalf("the handler answered %d messages, want %d: the cache should answer the rest", n, cached+rounds)
	}
	if n := len(header.Get("x-handler")); n > 1 {
		t.Fatalf("the handler's header arrived %d times", n)
	}
	waitForNoWaitingRPCs(t, srt, "server")
}

// Options built by hand: Weft's server codec with the stream interceptor that works with
// any codec. A stream message that does not decode is rejected with INVALID_ARGUMENT and
// never reaches the handler, as with ServerOptions.
func TestStreamWithServerCodecBuiltByHandRejectsCorruptMessages(t *testing.T) {
	srt := open(t, edge("echo.Echo/SayStream", `    server:
      - logging
`), "echo")
	impl, addr := serve(t, "echo-0",
		grpc.ForceServerCodecV2(weft.ServerCodec()),
		grpc.StreamInterceptor(srt.StreamServerInterceptor()))
	conn := dialConn(t, addr, grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true, ServerStreams: true})
	good := []byte{0x0a, 0x02, 'h', 'i'} // user: "hi"
	if err := cs.SendMsg(&good); err != nil {
		t.Fatal(err)
	}
	var reply []byte
	if err := cs.RecvMsg(&reply); err != nil {
		t.Fatalf("a valid message: %v", err)
	}
	corrupt := []byte{0x0a, 0x64, 'h', 'i'} // claims 100 bytes, has 2
	if err := cs.SendMsg(&corrupt); err != nil {
		t.Fatal(err)
	}
	wantCode(t, cs.RecvMsg(&reply), codes.InvalidArgument, "not a valid protobuf message")
	if n := impl.calls.Load(); n != 1 {
		t.Fatalf("the handler received %d messages, want 1: the corrupt one reached it", n)
	}
	if c := srt.Counters(); c.MalformedRPCs != 1 {
		t.Fatalf("counters %+v, want one malformed message", c)
	}
}

// A stream runs the version its first message was stamped with: its headers carry the stamp,
// so the server runs that version for the whole stream, and so does the client for later
// messages after a reload, while a request of that version still waits for its response.
// Also when the caller's metadata carries a stamp copied from an incoming call (here one of a
// caller without an edge, which names no version): the chain's stamp replaces it.
func TestClientStreamKeepsItsVersionAcrossAReload(t *testing.T) {
	t.Run("unstamped", func(t *testing.T) { clientStreamKeepsItsVersion(t, ctx(t)) })
	t.Run("copied stamp", func(t *testing.T) {
		clientStreamKeepsItsVersion(t, metadata.AppendToOutgoingContext(ctx(t), "weft-version", "/web"))
	})
}

func clientStreamKeepsItsVersion(t *testing.T, callCtx context.Context) {
	cfg := func(deny string) string {
		return edge("echo.Echo/SayStream", "    client:\n      - metrics\n      - firewall: {field: user, deny: ["+deny+"]}\n")
	}
	crt := open(t, cfg("mallory"), "frontend")
	srv, addr := serve(t, "echo-0")
	c := dial(t, addr, crt.DialOptions()...)
	stream, err := c.SayStream(callCtx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&echopb.SayRequest{User: "alice", Body: "before"}); err != nil {
		t.Fatal(err)
	}
	// Its response not read yet, the first message's request keeps its version alive.
	if err := crt.ReloadYAML(cfg("alice"), echoDir); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&echopb.SayRequest{User: "alice", Body: "after"}); err != nil {
		t.Fatalf("a message of a stream opened before the reload ran the new version: %v", err)
	}
	for _, want := range []string{"before", "after"} {
		if r, err := stream.Recv(); err != nil || r.GetBody() != want {
			t.Fatalf("got %v, %v; want %q", r, err, want)
		}
	}
	_ = stream.CloseSend()
	if n := srv.calls.Load(); n != 2 {
		t.Fatalf("the server saw %d messages, want 2", n)
	}

	// A stream opened after the reload runs the new version.
	stream, err = c.SayStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	err = stream.Send(&echopb.SayRequest{User: "alice", Body: "new"})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.PermissionDenied, "acl")
}

// withoutHandles are configs whose SayStream requests on side have no response path: no
// edge, or a chain whose response handlers have nothing to do.
func withoutHandles(side string) map[string]string {
	return map[string]string{
		"no edge":          edge("echo.Echo/Say", "    any:\n      - metrics\n"),
		"no response path": edge("echo.Echo/SayStream", "    "+side+":\n      - firewall: {field: user, deny: [mallory]}\n"),
	}
}

// Requests of a stream without a response path keep their place in the pairing of requests
// and responses: after a reload gives the stream's method a cache, the request that waits has
// the response the server sent for it, not the one for the message sent before the reload
// (which the cache would store under the wrong key).
func TestClientStreamPairsResponsesAcrossMessagesWithoutHandles(t *testing.T) {
	for name, yaml := range withoutHandles("client") {
		t.Run(name, func(t *testing.T) { clientStreamPairsResponses(t, yaml) })
	}
}

func clientStreamPairsResponses(t *testing.T, yaml string) {
	crt := open(t, yaml, "frontend")
	srv, addr := serve(t, "echo-0")
	conn := dialConn(t, addr, crt.DialOptions()...)
	cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true, ServerStreams: true})
	if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "one"}); err != nil {
		t.Fatal(err)
	}
	if err := crt.ReloadYAML(edge("echo.Echo/SayStream", "    client:\n      - cache: {field: body}\n"), echoDir); err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "two"}); err != nil {
		t.Fatal(err)
	}
	closeAndExpect(t, cs, "one", "two")
	expectCached(t, conn, "two")
	if n := srv.calls.Load(); n != 2 {
		t.Fatalf("the server saw %d messages, want 2: the last is the cache's", n)
	}
	waitForNoWaitingRPCs(t, crt, "client")
}

// closeAndExpect ends the sending side of cs and expects the replies with bodies want, in
// order, then the end of the stream.
func closeAndExpect(t *testing.T, cs grpc.ClientStream, want ...string) {
	t.Helper()
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var reply echopb.SayReply
	for _, w := range want {
		if err := cs.RecvMsg(&reply); err != nil || reply.GetBody() != w {
			t.Fatalf("got %v, %v; want %q", &reply, err, w)
		}
	}
	if err := cs.RecvMsg(&reply); err != io.EOF {
		t.Fatalf("the stream ends with %v, want io.EOF", err)
	}
}

// expectCached sends body on a new stream, which the chain's cache answers with the response
// it stored for that body.
func expectCached(t *testing.T, conn *grpc.ClientConn, body string) {
	t.Helper()
	cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true, ServerStreams: true})
	if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: body}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var reply echopb.SayReply
	if err := cs.RecvMsg(&reply); err != nil || reply.GetBody() != body {
		t.Fatalf("the cache answers %q with %v, %v: it stored another message's response", body, &reply, err)
	}
}

// The same on the server: the handler reads both messages, then answers each.
func TestServerStreamPairsResponsesAcrossMessagesWithoutHandles(t *testing.T) {
	for name, yaml := range withoutHandles("server") {
		t.Run(name, func(t *testing.T) { serverStreamPairsResponses(t, yaml) })
	}
}

// readAllThenAnswer is a bidirectional handler that reads every message before it answers
// any, echoing each body in order: while it reads, it owes a response to each. It counts the
// messages it reads in handled and, when received is not nil, signals each there.
func readAllThenAnswer(handled *atomic.Int64, received chan<- struct{}) grpc.StreamHandler {
	return func(_ any, stream grpc.ServerStream) error {
		var bodies []string
		for {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			handled.Add(1)
			bodies = append(bodies, req.GetBody())
			if received != nil {
				received <- struct{}{}
			}
		}
		for _, b := range bodies {
			if err := stream.SendMsg(&echopb.SayReply{Body: b}); err != nil {
				return err
			}
		}
		return nil
	}
}

func serverStreamPairsResponses(t *testing.T, yaml string) {
	srt := open(t, yaml, "echo")
	received := make(chan struct{}, 8)
	var handled atomic.Int64
	addr := serveSayStream(t, grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, readAllThenAnswer(&handled, received), srt.ServerOptions()...)
	conn := dialConn(t, addr)
	cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true, ServerStreams: true})
	if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "one"}); err != nil {
		t.Fatal(err)
	}
	<-received // the server ran the message before the reload
	if err := srt.ReloadYAML(edge("echo.Echo/SayStream", "    server:\n      - cache: {field: body}\n"), echoDir); err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "two"}); err != nil {
		t.Fatal(err)
	}
	<-received
	closeAndExpect(t, cs, "one", "two")
	expectCached(t, conn, "two")
	if n := handled.Load(); n != 2 {
		t.Fatalf("the handler saw %d messages, want 2: the last is the cache's", n)
	}
	waitForNoWaitingRPCs(t, srt, "server")
}

// A caller takes an error from RecvMsg or SendMsg as its stream's end (grpc-go's contract)
// and walks away: the requests still waiting on the client must then end too, so an element
// counting requests in flight counts them down, and no handle waits in the library.
func TestClientStreamErrorsEndTheWaitingRequests(t *testing.T) {
	refuse := responseOnly("    send(err('refused', FAILED_PRECONDITION), Up)\n")
	cfg, _ := withElements(t, map[string]string{"refuse": refuse}, "echo.Echo/SayStream", "client")
	bidi := grpc.StreamDesc{ClientStreams: true, ServerStreams: true}

	t.Run("the response path rejects", func(t *testing.T) {
		crt := open(t, cfg("      - refuse\n"), "frontend")
		_, addr := serve(t, "echo-0")
		cs := openSayStream(t, dialConn(t, addr, crt.DialOptions()...), bidi)
		for _, body := range []string{"one", "two"} {
			if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: body}); err != nil {
				t.Fatal(err)
			}
		}
		var reply echopb.SayReply
		wantCode(t, cs.RecvMsg(&reply), codes.FailedPrecondition, "refused")
		// The caller stops here; "two" waits no more (reading on would have answered it).
		waitForNoWaitingRPCs(t, crt, "client")
		wantCode(t, cs.RecvMsg(&reply), codes.FailedPrecondition, "refused")
	})

	t.Run("grpc-go refuses a message", func(t *testing.T) {
		crt := open(t, cfg("      - circuitbreaker: {max_pending: 10}\n"), "frontend")
		_, addr := serve(t, "echo-0")
		conn := dialConn(t, addr, crt.DialOptions()...)
		cs, err := conn.NewStream(ctx(t), &grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true, ServerStreams: true},
			"/echo.Echo/SayStream", grpc.MaxCallSendMsgSize(64))
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "short"}); err != nil {
			t.Fatal(err)
		}
		big := &echopb.SayRequest{User: "alice", Body: strings.Repeat("x", 200)}
		wantCode(t, cs.SendMsg(big), codes.ResourceExhausted, "")
		waitForNoWaitingRPCs(t, crt, "client")
	})
}

// A goroutine receiving on a server stream may outlive the handler (grpc-go's RecvMsg
// returns when the stream is done, and may still hand over a message that had arrived).
// A request it receives then must not wait for ever in the library: its response path runs
// at once. grpc-go picks between the buffered message and the stream's end at random, so
// the test tries many streams; `make go-test` runs it under the race detector too.
func TestConcurrentReceiveAfterTheStreamHandlerReturnedLeavesNothingWaiting(t *testing.T) {
	yaml := edge("echo.Echo/SayStream", "    server:\n      - circuitbreaker: {max_pending: 1000}\n")
	srt := open(t, yaml, "echo")
	received := make(chan struct{}, 64)
	addr := serveSayStream(t, grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, func(_ any, stream grpc.ServerStream) error {
		var first echopb.SayRequest
		if err := stream.RecvMsg(&first); err != nil {
			return err
		}
		go func() {
			// After the handler has returned and the interceptor has ended the stream.
			time.Sleep(5 * time.Millisecond)
			var late echopb.SayRequest
			_ = stream.RecvMsg(&late)
			received <- struct{}{}
		}()
		// The second message is on its way, or here, when the handler returns.
		time.Sleep(2 * time.Millisecond)
		return nil
	}, srt.ServerOptions()...)
	conn := dialConn(t, addr)
	for i := 0; i < 30; i++ {
		cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true, ServerStreams: true})
		for _, body := range []string{"first", "second"} {
			if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: body}); err != nil && err != io.EOF {
				t.Fatal(err)
			}
		}
		var reply echopb.SayReply
		_ = cs.RecvMsg(&reply) // the handler's end
		<-received
	}
	waitForNoWaitingRPCs(t, srt, "server")
}
