package weft_test

import (
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// How a server stream carries what its chain decides on a message: a reply the chain makes
// (cache) or a rejection (firewall), on each kind of streaming method.

var bidi = grpc.StreamDesc{ClientStreams: true, ServerStreams: true}

// serverCache opens the echo service's runtime with a cache on the server side of SayStream.
func serverCache(t *testing.T) *weft.Runtime {
	t.Helper()
	return open(t, edge("echo.Echo/SayStream", "    server:\n      - cache: {field: body}\n"), "echo")
}

// A bidirectional handler that reads every message before it answers any: while it reads,
// it owes a response to each. The chain's reply to a later message goes out after those,
// in the message's place, or the client pairs it with an earlier message.
func TestServerStreamLocalReplyWaitsForTheResponsesOwedBeforeIt(t *testing.T) {
	srt := serverCache(t)
	var handled atomic.Int64
	addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
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
		}
		for _, b := range bodies {
			if err := stream.SendMsg(&echopb.SayReply{Body: b, ServedBy: "handler"}); err != nil {
				return err
			}
		}
		return nil
	}, srt.ServerOptions()...)
	conn := dialConn(t, addr)
	send := func(cs grpc.ClientStream, bodies ...string) {
		t.Helper()
		for _, b := range bodies {
			if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: b}); err != nil {
				t.Fatal(err)
			}
		}
	}
	first := openSayStream(t, conn, bidi)
	send(first, "cached")
	closeAndExpect(t, first, "cached")

	second := openSayStream(t, conn, bidi)
	send(second, "one", "cached", "two", "cached")
	closeAndExpect(t, second, "one", "cached", "two", "cached")
	if n := handled.Load(); n != 3 {
		t.Fatalf("the handler read %d messages, want 3: the cache answers the rest", n)
	}
	waitForNoWaitingRPCs(t, srt, "server")
}

// A server-streaming method has one request: the chain's reply to it is the whole answer.
// The handler's RecvMsg reports that, the handler sends nothing, and the stream ends OK.
func TestServerStreamingLocalReplyIsTheStreamsAnswer(t *testing.T) {
	srt := serverCache(t)
	var handled atomic.Int64
	var recvErr atomic.Value
	addr := serveSayStream(t, grpc.StreamDesc{ServerStreams: true}, func(_ any, stream grpc.ServerStream) error {
		// What a generated server-streaming handler does.
		var req echopb.SayRequest
		if err := stream.RecvMsg(&req); err != nil {
			recvErr.Store(err)
			return err
		}
		handled.Add(1)
		for _, b := range []string{req.GetBody(), req.GetBody() + " again"} {
			if err := stream.SendMsg(&echopb.SayReply{Body: b, ServedBy: "handler"}); err != nil {
				return err
			}
		}
		return nil
	}, srt.ServerOptions()...)
	conn := dialConn(t, addr)
	call := func(want ...string) {
		t.Helper()
		cs := openSayStream(t, conn, grpc.StreamDesc{ServerStreams: true})
		if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "hello"}); err != nil {
			t.Fatal(err)
		}
		closeAndExpect(t, cs, want...)
	}
	call("hello", "hello again")
	call("hello") // the cache keeps the first response of the stream
	if n := handled.Load(); n != 1 {
		t.Fatalf("the handler ran %d times, want 1", n)
	}
	if err, _ := recvErr.Load().(error); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("the handler's RecvMsg returned %v: it should say the chain answered", err)
	}
	waitForNoWaitingRPCs(t, srt, "server")
}

// A client-streaming method has one response: the chain's reply to any message is it. The
// handler reads no further, its own response is not sent, and the stream ends OK.
func TestClientStreamingLocalReplyIsTheStreamsAnswer(t *testing.T) {
	srt := serverCache(t)
	var handled atomic.Int64
	var sendErr atomic.Value
	addr := serveSayStream(t, grpc.StreamDesc{ClientStreams: true}, func(_ any, stream grpc.ServerStream) error {
		var bodies []string
		for {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err == io.EOF {
				break
			}
			if err != nil {
				// A handler that answers anyway: the chain has answered, so this is refused.
				if err := stream.SendMsg(&echopb.SayReply{Body: "late"}); err != nil {
					sendErr.Store(err)
				}
				return err
			}
			handled.Add(1)
			bodies = append(bodies, req.GetBody())
		}
		return stream.SendMsg(&echopb.SayReply{Body: strings.Join(bodies, ","), ServedBy: "handler"})
	}, srt.ServerOptions()...)
	conn := dialConn(t, addr)
	call := func(want string, bodies ...string) {
		t.Helper()
		cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true})
		for _, b := range bodies {
			if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: b}); err != nil {
				t.Fatal(err)
			}
		}
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var reply echopb.SayReply
		if err := cs.RecvMsg(&reply); err != nil || reply.GetBody() != want {
			t.Fatalf("the stream's reply is %v, %v; want %q", &reply, err, want)
		}
	}
	call("a", "a")           // the one response is the first message's, so it is cached for "a"
	call("a", "z", "a", "b") // "a" is answered from the cache: the handler saw only "z"
	if n := handled.Load(); n != 2 {
		t.Fatalf("the handler read %d messages, want 2", n)
	}
	if sendErr.Load() == nil {
		t.Fatal("the handler's response after the chain's went out without an error")
	}
	waitForNoWaitingRPCs(t, srt, "server")
}

// A message the chain rejects ends the stream with the chain's status, even when the handler
// keeps reading: later messages are not delivered, and the handler's own status (nil here)
// does not replace the rejection.
func TestServerStreamRejectionEndsTheStreamWhateverTheHandlerDoes(t *testing.T) {
	srt := open(t, edge("echo.Echo/SayStream", "    server:\n      - firewall: {field: user, deny: [mallory]}\n"), "echo")
	var mu sync.Mutex
	var handled []string
	var recvErrs []error
	addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
		for len(recvErrs) < 3 {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err == io.EOF {
				return nil
			}
			mu.Lock()
			if err != nil {
				recvErrs = append(recvErrs, err)
			} else {
				handled = append(handled, req.GetBody())
			}
			mu.Unlock()
			if err == nil {
				if err := stream.SendMsg(&echopb.SayReply{Body: req.GetBody()}); err != nil {
					return err
				}
			}
		}
		return nil // a handler that swallows the errors
	}, srt.ServerOptions()...)
	conn := dialConn(t, addr)
	cs := openSayStream(t, conn, bidi)
	if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "one"}); err != nil {
		t.Fatal(err)
	}
	var reply echopb.SayReply
	if err := cs.RecvMsg(&reply); err != nil || reply.GetBody() != "one" {
		t.Fatalf("first reply %v, %v", &reply, err)
	}
	// The stream may already be over when the later ones go: their errors are not the point.
	_ = cs.SendMsg(&echopb.SayRequest{User: "mallory", Body: "two"})
	_ = cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "three"})
	_ = cs.CloseSend()
	wantCode(t, cs.RecvMsg(&reply), codes.PermissionDenied, "acl")
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 1 {
		t.Fatalf("the handler got %v: nothing after the rejected message may reach it", handled)
	}
	for _, err := range recvErrs {
		wantCode(t, err, codes.PermissionDenied, "acl")
	}
	waitForNoWaitingRPCs(t, srt, "server")
}

// On the client, a local reply takes its message's place among the server's responses too,
// with Weft's codec (DialOptions) and without it (the interceptor alone).
func TestClientStreamLocalReplyComesInItsMessagesPlace(t *testing.T) {
	for name, opts := range map[string]func(*weft.Runtime) []grpc.DialOption{
		"codec": (*weft.Runtime).DialOptions,
		"interceptor": func(rt *weft.Runtime) []grpc.DialOption {
			return []grpc.DialOption{grpc.WithStreamInterceptor(rt.StreamClientInterceptor())}
		},
	} {
		t.Run(name, func(t *testing.T) {
			crt := open(t, edge("echo.Echo/SayStream", "    client:\n      - cache: {field: body}\n"), "frontend")
			_, addr := serve(t, "echo-0")
			conn := dialConn(t, addr, opts(crt)...)
			send := func(cs grpc.ClientStream, bodies ...string) {
				t.Helper()
				for _, b := range bodies {
					if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: b}); err != nil {
						t.Fatal(err)
					}
				}
			}
			first := openSayStream(t, conn, bidi)
			send(first, "cached")
			closeAndExpect(t, first, "cached")

			// Everything sent before anything is read.
			second := openSayStream(t, conn, bidi)
			send(second, "one", "cached", "two", "cached")
			closeAndExpect(t, second, "one", "cached", "two", "cached")

			// A reader already waiting for the server when the chain answers: the server's
			// response to the next message reaches it first, and waits for the next call.
			third := openSayStream(t, conn, bidi)
			got := make(chan string, 4)
			go func() {
				defer close(got)
				for {
					var reply echopb.SayReply
					if err := third.RecvMsg(&reply); err != nil {
						if err != io.EOF {
							got <- err.Error()
						}
						return
					}
					got <- reply.GetBody()
				}
			}()
			time.Sleep(50 * time.Millisecond) // let the reader block
			send(third, "cached", "three")
			if err := third.CloseSend(); err != nil {
				t.Fatal(err)
			}
			var order []string
			for b := range got {
				order = append(order, b)
			}
			if strings.Join(order, ",") != "cached,three" {
				t.Fatalf("the reader got %v, want [cached three]", order)
			}
			waitForNoWaitingRPCs(t, crt, "client")
		})
	}
}
