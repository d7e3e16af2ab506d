package weft_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

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

// A handler that reads every message before it answers any (readAllThenAnswer): the
// chain's reply to a later message goes out after the responses owed before it, in the
// message's place, or the client pairs it with an earlier message.
func TestServerStreamLocalReplyWaitsForTheResponsesOwedBeforeIt(t *testing.T) {
	srt := serverCache(t)
	var handled atomic.Int64
	addr := serveSayStream(t, bidi, readAllThenAnswer(&handled, nil), srt.ServerOptions()...)
	conn := dialConn(t, addr)
	first := openSayStream(t, conn, bidi)
	sendBodies(t, first, "cached")
	closeAndExpect(t, first, "cached")

	second := openSayStream(t, conn, bidi)
	sendBodies(t, second, "one", "cached", "two", "cached")
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
	err, _ := recvErr.Load().(error)
	wantCode(t, err, codes.Canceled, "the chain answered this stream")
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
			err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: b})
			if err == io.EOF {
				// The server's answer (the cache's) ended the stream already: grpc-go
				// says so, and RecvMsg has the answer.
				break
			}
			if err != nil {
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
	err, _ := sendErr.Load().(error)
	wantCode(t, err, codes.Canceled, "the chain answered this stream")
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

// A handler that ignores the error RecvMsg returned for a rejected message and answers
// anyway (a sloppy `req, _ := stream.Recv()`) must not get that answer to the client: the
// client would take it as the reply to the message the chain refused. Found dogfooding a
// bidirectional method with a server-side firewall.
func TestServerStreamHandlerSendAfterARejectionDoesNotReachTheClient(t *testing.T) {
	srt := open(t, edge("echo.Echo/SayStream", "    server:\n      - firewall: {field: user, deny: [mallory]}\n"), "echo")
	sendErrs := make(chan error, 4)
	addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
		for {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err == io.EOF {
				return nil
			}
			body := req.GetBody()
			if err != nil {
				body = "leaked"
			}
			serr := stream.SendMsg(&echopb.SayReply{Body: body})
			if err != nil {
				sendErrs <- serr
				return nil
			}
		}
	}, srt.ServerOptions()...)
	cs := openSayStream(t, dialConn(t, addr), bidi)
	if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "one"}); err != nil {
		t.Fatal(err)
	}
	var reply echopb.SayReply
	if err := cs.RecvMsg(&reply); err != nil || reply.GetBody() != "one" {
		t.Fatalf("first reply %v, %v", &reply, err)
	}
	_ = cs.SendMsg(&echopb.SayRequest{User: "mallory", Body: "two"})
	_ = cs.CloseSend()
	got, err := recvAll(cs)
	if len(got) != 0 {
		t.Fatalf("the client got %v after its message was rejected", got)
	}
	wantCode(t, err, codes.PermissionDenied, "acl")
	wantCode(t, <-sendErrs, codes.PermissionDenied, "acl")
	waitForNoWaitingRPCs(t, srt, "server")
}

// clientCache opens a client runtime whose cache holds the reply to "cached", and a
// connection through it (with opts) to an echo server.
func clientCache(t *testing.T, opts func(*weft.Runtime) []grpc.DialOption) (*weft.Runtime, *grpc.ClientConn) {
	t.Helper()
	crt := open(t, edge("echo.Echo/SayStream", "    client:\n      - cache: {field: body}\n"), "frontend")
	_, addr := serve(t, "echo-0")
	conn := dialConn(t, addr, opts(crt)...)
	warmClientCache(t, conn)
	return crt, conn
}

// withClientCache runs body as two subtests, with Weft's codec (DialOptions) and without it
// (the stream interceptor alone), each with a client runtime whose cache holds the reply
// to "cached" and a connection through it to an echo server.
func withClientCache(t *testing.T, body func(t *testing.T, crt *weft.Runtime, conn *grpc.ClientConn)) {
	for name, opts := range map[string]func(*weft.Runtime) []grpc.DialOption{
		"codec": (*weft.Runtime).DialOptions,
		"interceptor": func(rt *weft.Runtime) []grpc.DialOption {
			return []grpc.DialOption{grpc.WithStreamInterceptor(rt.StreamClientInterceptor())}
		},
	} {
		t.Run(name, func(t *testing.T) {
			crt, conn := clientCache(t, opts)
			body(t, crt, conn)
		})
	}
}

// On the client, a local reply takes its message's place among the server's responses too,
// with Weft's codec (DialOptions) and without it (the interceptor alone).
func TestClientStreamLocalReplyComesInItsMessagesPlace(t *testing.T) {
	withClientCache(t, func(t *testing.T, crt *weft.Runtime, conn *grpc.ClientConn) {
		// Everything sent before anything is read.
		second := openSayStream(t, conn, bidi)
		sendBodies(t, second, "one", "cached", "two", "cached")
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
		sendBodies(t, third, "cached", "three")
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

func sendBodies(t *testing.T, cs grpc.ClientStream, bodies ...string) {
	t.Helper()
	for _, b := range bodies {
		if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: b}); err != nil {
			t.Fatal(err)
		}
	}
}

// recvAll reads cs to its end: the reply bodies, and the stream's error (nil at io.EOF).
func recvAll(cs grpc.ClientStream) ([]string, error) {
	var out []string
	for {
		var r echopb.SayReply
		if err := cs.RecvMsg(&r); err != nil {
			if err == io.EOF {
				err = nil
			}
			return out, err
		}
		out = append(out, r.GetBody())
	}
}

// A reply the chain made that still waits behind a message the handler never answered
// when the stream ends is dropped: sent, the client would pair it with that message.
func TestServerStreamDropsARepliesStillWaitingAtItsEnd(t *testing.T) {
	srt := serverCache(t)
	var answer atomic.Bool
	answer.Store(true)
	addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
		for {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if answer.Load() {
				if err := stream.SendMsg(&echopb.SayReply{Body: req.GetBody()}); err != nil {
					return err
				}
			}
		}
	}, srt.ServerOptions()...)
	conn := dialConn(t, addr)
	first := openSayStream(t, conn, bidi)
	sendBodies(t, first, "cached")
	closeAndExpect(t, first, "cached")
	answer.Store(false)
	second := openSayStream(t, conn, bidi)
	sendBodies(t, second, "one", "cached")
	if err := second.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(second); len(got) != 0 || err != nil {
		t.Fatalf("got %v, %v; want nothing: the handler answered neither message", got, err)
	}
	waitForNoWaitingRPCs(t, srt, "server")
}

// A client-streaming handler that sends its response before the stream ends has answered
// the stream: a later local reply is not sent as a second response.
func TestClientStreamingHandlerThatAnsweredEarlyKeepsTheOnlyResponse(t *testing.T) {
	srt := serverCache(t)
	addr := serveSayStream(t, grpc.StreamDesc{ClientStreams: true}, func(_ any, stream grpc.ServerStream) error {
		sent := false
		for {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if !sent {
				sent = true
				if err := stream.SendMsg(&echopb.SayReply{Body: "early:" + req.GetBody()}); err != nil {
					return err
				}
			}
		}
	}, srt.ServerOptions()...)
	conn := dialConn(t, addr)
	call := func(want string, bodies ...string) {
		t.Helper()
		cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true})
		sendBodies(t, cs, bodies...)
		if err := cs.CloseSend(); err != nil {
			t.Fatal(err)
		}
		var r echopb.SayReply
		if err := cs.RecvMsg(&r); err != nil || r.GetBody() != want {
			t.Fatalf("%v: got %v, %v; want %q", bodies, &r, err, want)
		}
	}
	call("early:a", "a") // cached for "a"
	call("early:y", "y", "a")
	waitForNoWaitingRPCs(t, srt, "server")
}

// A response the server's chain rejects ends the stream: the handler's later responses are
// not sent (the client would pair them with the rejected one's message).
func TestServerStreamResponseRejectionEndsTheStream(t *testing.T) {
	refuse := responseOnly("    if get(rpc, 'body') == 'bad':\n        send(err('refused', FAILED_PRECONDITION), Up)\n    else:\n        send(rpc, Up)\n")
	cfg, _ := withElements(t, map[string]string{"refuse": refuse}, "echo.Echo/SayStream", "server")
	srt := open(t, cfg("      - refuse\n"), "echo")
	var sendErrs []error
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
			bodies = append(bodies, req.GetBody())
		}
		for _, b := range bodies {
			sendErrs = append(sendErrs, stream.SendMsg(&echopb.SayReply{Body: b}))
		}
		return nil
	}, srt.ServerOptions()...)
	cs := openSayStream(t, dialConn(t, addr), bidi)
	sendBodies(t, cs, "bad", "two")
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got, err := recvAll(cs)
	if len(got) != 0 {
		t.Fatalf("%v went out after the response to \"bad\" was rejected", got)
	}
	wantCode(t, err, codes.FailedPrecondition, "refused")
	if len(sendErrs) != 2 {
		t.Fatalf("the handler's SendMsg calls returned %v", sendErrs)
	}
	for _, err := range sendErrs {
		wantCode(t, err, codes.FailedPrecondition, "refused")
	}
	waitForNoWaitingRPCs(t, srt, "server")
}

// sendBeforeReading serves SayStream with the server's cache, over flow-control windows of
// 64 KiB, and a handler that receives on one goroutine and echoes on another, as grpc-go
// allows (and, with setHeader, sets a header after the first message it receives); fills
// the cache with ten big bodies; then, on one stream, sends first, waits pause, sends then
// and closes, all before it reads. It fails the test unless the client can finish sending
// (the server must go on receiving), and checks that the replies are the bodies in order.
func sendBeforeReading(t *testing.T, first, then []string, pause time.Duration, setHeader bool) {
	t.Helper()
	srt := serverCache(t)
	window := []grpc.ServerOption{grpc.InitialWindowSize(65535), grpc.InitialConnWindowSize(65535)}
	addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
		bodies := make(chan string, 1000)
		done := make(chan error, 1)
		go func() {
			for b := range bodies {
				if err := stream.SendMsg(&echopb.SayReply{Body: b}); err != nil {
					done <- err
					for range bodies {
					}
					return
				}
			}
			done <- nil
		}()
		for received := 0; ; received++ {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err != nil {
				close(bodies)
				if err == io.EOF {
					return <-done
				}
				return err
			}
			if setHeader && received == 0 {
				_ = stream.SetHeader(metadata.Pairs("x-user", req.GetUser()))
			}
			bodies <- req.GetBody()
		}
	}, append(srt.ServerOptions(), window...)...)
	conn := dialConn(t, addr, grpc.WithInitialWindowSize(65535), grpc.WithInitialConnWindowSize(65535))
	for i := range 10 {
		cs := openSayStream(t, conn, bidi)
		sendBodies(t, cs, bigBody("cached", i))
		closeAndExpect(t, cs, bigBody("cached", i))
	}
	cs := openSayStream(t, conn, bidi)
	want := append(append([]string(nil), first...), then...)
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for i, b := range want {
			if i == len(first) {
				time.Sleep(pause)
			}
			if cs.SendMsg(&echopb.SayRequest{User: "alice", Body: b}) != nil {
				return
			}
		}
		_ = cs.CloseSend()
	}()
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the client cannot finish sending: the server stopped receiving")
	}
	got, err := recvAll(cs)
	if err != nil {
		t.Fatalf("after %d replies: %v", len(got), err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d replies, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("reply %d is %.12q…, want %.12q…", i, got[i], want[i])
		}
	}
	waitForNoWaitingRPCs(t, srt, "server")
}

// bigBodies is n big bodies: prefix0, prefix1, …
func bigBodies(prefix string, n int) []string {
	var out []string
	for i := range n {
		out = append(out, bigBody(prefix, i))
	}
	return out
}

// bigBody is a body larger than a flow-control window of 64 KiB.
func bigBody(prefix string, i int) string { return fmt.Sprint(prefix, i, strings.Repeat("x", 100000)) }

// While flow control holds up the handler's sends, a message the cache answers is queued
// behind the responses owed, so receiving goes on, and every reply comes in its place.
func TestServerStreamCacheHitDoesNotWaitForAHeldUpSend(t *testing.T) {
	sendBeforeReading(t, bigBodies("new", 10), bigBodies("cached", 10), 0, false)
}

// The cache's replies go out first and flow control holds them up; the handler sets a
// header on its receiving goroutine after the first message it gets. Its SetHeader does
// not wait for the held-up send, so receiving goes on.
func TestServerStreamHandlerSetHeaderDoesNotWaitForAHeldUpReply(t *testing.T) {
	sendBeforeReading(t, bigBodies("cached", 10), bigBodies("new", 10), 0, true)
}

// A reader already waiting for the server when the chain answers the last messages: every
// local reply comes before the stream's end.
func TestClientStreamLocalReplyComesBeforeTheServersEnd(t *testing.T) {
	withClientCache(t, func(t *testing.T, crt *weft.Runtime, conn *grpc.ClientConn) {
		second := openSayStream(t, conn, bidi)
		got := make(chan []string, 1)
		go func() {
			replies, err := recvAll(second)
			if err != nil {
				replies = append(replies, err.Error())
			}
			got <- replies
		}()
		time.Sleep(50 * time.Millisecond) // let the reader block
		sendBodies(t, second, "cached", "cached")
		if err := second.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if replies := <-got; strings.Join(replies, ",") != "cached,cached" {
			t.Fatalf("the reader got %v, want [cached cached] then the end", replies)
		}
		var r echopb.SayReply
		if err := second.RecvMsg(&r); err != io.EOF {
			t.Fatalf("after the end, RecvMsg returns %v, %v; want io.EOF", &r, err)
		}
		waitForNoWaitingRPCs(t, crt, "client")
	})
}

// A client-streaming call has one response: the chain's reply to a later message is it,
// and the call is over (later RecvMsg calls return io.EOF).
func TestClientStreamingCallEndsAtTheChainsReply(t *testing.T) {
	crt, _ := clientCache(t, (*weft.Runtime).DialOptions)
	collector := dialConn(t, serveCollector(t, nil), crt.DialOptions()...)
	cs := openSayStream(t, collector, grpc.StreamDesc{ClientStreams: true})
	sendBodies(t, cs, "one", "cached")
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var r echopb.SayReply
	if err := cs.RecvMsg(&r); err != nil || r.GetBody() != "cached" {
		t.Fatalf("the call's response is %v, %v; want the chain's \"cached\"", &r, err)
	}
	if err := cs.RecvMsg(&r); err != io.EOF {
		t.Fatalf("a second RecvMsg returns %v, %v; want io.EOF", &r, err)
	}
	waitForNoWaitingRPCs(t, crt, "client")
}

// After the chain rejected a response, a local reply the receiving goroutine makes is not
// sent either (the client would pair it with the rejected response's message).
func TestServerStreamSendsNoLocalReplyAfterARejectedResponse(t *testing.T) {
	refuse := responseOnly("    if get(rpc, 'body') == 'bad':\n        send(err('refused', FAILED_PRECONDITION), Up)\n    else:\n        send(rpc, Up)\n")
	cacheSrc, err := os.ReadFile(repoPath("elements/cache.weft"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := withElements(t, map[string]string{"refuse": refuse, "cache": string(cacheSrc)}, "echo.Echo/SayStream", "server")
	srt := open(t, cfg("      - refuse\n      - cache: {field: body}\n"), "echo")
	addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
		toSend := make(chan string, 8)
		go func() {
			for b := range toSend {
				time.Sleep(50 * time.Millisecond)
				_ = stream.SendMsg(&echopb.SayReply{Body: b})
			}
		}()
		defer close(toSend)
		for {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err == io.EOF {
				time.Sleep(100 * time.Millisecond)
				return nil
			}
			if err != nil {
				return err
			}
			toSend <- req.GetBody()
		}
	}, srt.ServerOptions()...)
	conn := dialConn(t, addr)
	first := openSayStream(t, conn, bidi)
	sendBodies(t, first, "cached")
	closeAndExpect(t, first, "cached")

	cs := openSayStream(t, conn, bidi)
	sendBodies(t, cs, "bad")
	time.Sleep(200 * time.Millisecond) // the handler's response to "bad" is rejected
	sendBodies(t, cs, "cached")
	_ = cs.CloseSend()
	got, err := recvAll(cs)
	if len(got) != 0 {
		t.Fatalf("a message went out after the rejected response: %v (status %v)", got, err)
	}
	waitForNoWaitingRPCs(t, srt, "server")
}

// A client-streaming call whose reader waits when the chain answers, and whose server then
// fails: the chain's reply came first and is the call's response; nothing follows it.
func TestClientStreamingLocalReplyWhileTheServerFails(t *testing.T) {
	crt := open(t, edge("echo.Echo/SayStream", "    client:\n      - cache: {field: body}\n"), "frontend")
	cachedSent := make(chan struct{})
	addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
		for {
			var req echopb.SayRequest
			if err := stream.RecvMsg(&req); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			if req.GetBody() == "fail" {
				// Only after the client sent "cached", which the cache answers: the reply
				// must come first whatever the timing.
				select {
				case <-cachedSent:
				case <-stream.Context().Done():
				}
				return status.Error(codes.Unavailable, "server failed")
			}
			if err := stream.SendMsg(&echopb.SayReply{Body: req.GetBody()}); err != nil {
				return err
			}
		}
	})
	conn := dialConn(t, addr, crt.DialOptions()...)
	first := openSayStream(t, conn, bidi)
	sendBodies(t, first, "cached")
	closeAndExpect(t, first, "cached")

	cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true})
	sendBodies(t, cs, "fail")
	errc := make(chan error, 1)
	go func() {
		var r echopb.SayReply
		errc <- cs.RecvMsg(&r)
	}()
	time.Sleep(50 * time.Millisecond)
	sendBodies(t, cs, "cached")
	close(cachedSent)
	e1 := <-errc
	var r echopb.SayReply
	e2 := cs.RecvMsg(&r)
	if e1 != nil || e2 != io.EOF {
		t.Fatalf("first RecvMsg: %v; second: %v, body %q; want the reply, then io.EOF", e1, e2, r.GetBody())
	}
	waitForNoWaitingRPCs(t, crt, "client")
}

// openServerStreaming opens a server-streaming SayStream call that ends within timeout
// (or with the test).
func openServerStreaming(t *testing.T, conn *grpc.ClientConn, timeout time.Duration) grpc.ClientStream {
	t.Helper()
	c, cancel := context.WithTimeout(ctx(t), timeout)
	t.Cleanup(cancel)
	desc := grpc.StreamDesc{StreamName: "SayStream", ServerStreams: true}
	cs, err := conn.NewStream(c, &desc, "/echo.Echo/SayStream")
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// warmClientCache fills the client-side cache with the reply to "cached".
func warmClientCache(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	first := openSayStream(t, conn, bidi)
	sendBodies(t, first, "cached")
	closeAndExpect(t, first, "cached")
}

// A server-streaming call whose one request the client's cache answers ends after the
// reply without CloseSend, as a plain grpc-go call does (its SendMsg closes the sending
// side). It used to open an empty stream at the next RecvMsg and wait on the server.
func TestServerStreamingCallAnsweredLocallyEndsWithoutCloseSend(t *testing.T) {
	withClientCache(t, func(t *testing.T, crt *weft.Runtime, conn *grpc.ClientConn) {
		cs := openServerStreaming(t, conn, 2*time.Second)
		sendBodies(t, cs, "cached")
		var r echopb.SayReply
		if err := cs.RecvMsg(&r); err != nil || r.GetBody() != "cached" {
			t.Fatalf("RecvMsg: %v, body %q; want the cached reply", err, r.GetBody())
		}
		if err := cs.RecvMsg(&r); err != io.EOF {
			t.Fatalf("second RecvMsg: %v; want io.EOF", err)
		}
		waitForNoWaitingRPCs(t, crt, "client")
	})
}

// The same with the reader started before the one request is sent, racing it: the reader
// waits for the request to have run the chain instead of opening the stream without it
// (which waited on the server for ever and lost the reply, in about one run in ten).
func TestServerStreamingCallWithAnEarlyReaderGetsTheLocalReply(t *testing.T) {
	withClientCache(t, func(t *testing.T, crt *weft.Runtime, conn *grpc.ClientConn) {
		for i := range 40 {
			cs := openServerStreaming(t, conn, 2*time.Second)
			got := make(chan string, 1)
			go func() {
				var r echopb.SayReply
				err := cs.RecvMsg(&r)
				var end error
				if err == nil {
					end = cs.RecvMsg(&r)
				}
				got <- fmt.Sprintf("%v %q %v", err, r.GetBody(), end)
			}()
			sendBodies(t, cs, "cached")
			if g, want := <-got, `<nil> "cached" EOF`; g != want {
				t.Fatalf("run %d: reader got %s; want %s", i, g, want)
			}
		}
		waitForNoWaitingRPCs(t, crt, "client")
	})
}

// A SendMsg the caller gets wrong (not a protobuf message) ends the stream, as in grpc-go:
// a reader waiting for the one request of a server-streaming call gets the error at once
// rather than opening the stream without it.
func TestServerStreamingCallWithABadRequestEndsAtOnce(t *testing.T) {
	withClientCache(t, func(t *testing.T, crt *weft.Runtime, conn *grpc.ClientConn) {
		cs := openServerStreaming(t, conn, 5*time.Second)
		wantCode(t, cs.SendMsg("not a message"), codes.Internal, "not a protobuf message")
		var r echopb.SayReply
		wantCode(t, cs.RecvMsg(&r), codes.Internal, "not a protobuf message")
		waitForNoWaitingRPCs(t, crt, "client")
	})
}

// Header() on a stream whose only message so far the client's cache answered returns the
// local reply's headers at once: opening the stream would send no message and wait for
// headers a server waiting for one never sends.
func TestClientStreamHeaderAfterALocallyAnsweredFirstMessage(t *testing.T) {
	crt, conn := clientCache(t, (*weft.Runtime).DialOptions)

	cs := openSayStream(t, conn, bidi)
	sendBodies(t, cs, "cached")
	done := make(chan error, 1)
	go func() { _, err := cs.Header(); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Header: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Header() still blocked: it opened a stream with no message and waits for the server")
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if got, err := recvAll(cs); err != nil || strings.Join(got, ",") != "cached" {
		t.Fatalf("after CloseSend: %v, %v; want [cached]", got, err)
	}
	waitForNoWaitingRPCs(t, crt, "client")
}

// A client-streaming call whose first message the chain answers and whose second it
// rejects: the rejection ended the stream, so RecvMsg returns it, not the earlier reply.
func TestClientStreamingRejectionEndsTheCallDespiteAnEarlierLocalReply(t *testing.T) {
	crt := open(t, edge("echo.Echo/SayStream", "    client:\n      - firewall: {field: body, deny: [bad]}\n      - cache: {field: body}\n"), "frontend")
	_, addr := serve(t, "echo-0")
	conn := dialConn(t, addr, crt.DialOptions()...)
	warmClientCache(t, conn)

	cs := openSayStream(t, conn, grpc.StreamDesc{ClientStreams: true})
	sendBodies(t, cs, "cached")
	serr := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "bad"})
	if status.Code(serr) != codes.PermissionDenied {
		t.Fatalf("SendMsg(bad) = %v", serr)
	}
	_ = cs.CloseSend()
	var r echopb.SayReply
	wantCode(t, cs.RecvMsg(&r), codes.PermissionDenied, "acl")
	waitForNoWaitingRPCs(t, crt, "client")
}

// A sender goroutine sends while the server ends the stream: a request queued while the
// reader's end runs still ends (the end cancels the context before it drains the queue).
func TestConcurrentSendAtAStreamsEndLeavesNothingWaiting(t *testing.T) {
	crt := open(t, edge("echo.Echo/SayStream", "    client:\n      - metrics\n"), "frontend")
	addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
		var req echopb.SayRequest
		for i := 0; i < 20; i++ {
			if err := stream.RecvMsg(&req); err != nil {
				return err
			}
		}
		return status.Error(codes.Aborted, "enough")
	})
	conn := dialConn(t, addr, crt.DialOptions()...)
	for i := range 100 {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cs, err := conn.NewStream(c, &grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true, ServerStreams: true}, "/echo.Echo/SayStream")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "x"}); err != nil {
					return
				}
			}
		}()
		var r echopb.SayReply
		for cs.RecvMsg(&r) == nil {
		}
		wg.Wait()
		cancel()
		time.Sleep(time.Millisecond)
		if n := crt.WaitingRPCs(); n != 0 {
			time.Sleep(100 * time.Millisecond)
			if n := crt.WaitingRPCs(); n != 0 {
				t.Fatalf("stream %d: %d requests still wait after the stream ended and its context was cancelled", i, n)
			}
		}
	}
}

// answerOnceWithClientCache opens a client runtime whose cache holds the reply to "cached",
// and a connection through it to a server that answers a stream's first message and ends
// the stream.
func answerOnceWithClientCache(t *testing.T) (*weft.Runtime, *grpc.ClientConn) {
	t.Helper()
	crt, _ := clientCache(t, (*weft.Runtime).DialOptions)
	answerOnce := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
		var req echopb.SayRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		return stream.SendMsg(&echopb.SayReply{Body: req.GetBody()})
	})
	return crt, dialConn(t, answerOnce, crt.DialOptions()...)
}

// After RecvMsg returned io.EOF (the server ended the stream; the caller never closed its
// side), SendMsg returns io.EOF, as grpc-go's does, even for a message the cache would
// answer, and RecvMsg goes on returning io.EOF.
func TestClientStreamSendAfterTheEndReturnsEOF(t *testing.T) {
	crt, conn := answerOnceWithClientCache(t)
	cs := openSayStream(t, conn, bidi)
	sendBodies(t, cs, "one")
	if got, err := recvAll(cs); err != nil || strings.Join(got, ",") != "one" {
		t.Fatalf("stream: %v, %v", got, err)
	}
	serr := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "cached"})
	var r echopb.SayReply
	rerr := cs.RecvMsg(&r)
	if serr != io.EOF || rerr != io.EOF {
		t.Fatalf("after io.EOF: SendMsg = %v, then RecvMsg = %q, %v; want io.EOF twice", serr, r.GetBody(), rerr)
	}
	waitForNoWaitingRPCs(t, crt, "client")
}

// After the chain rejected the first message, Header() opens nothing and, as grpc-go's,
// returns no error: RecvMsg returns the rejection.
func TestClientStreamHeaderAfterARejectionLeavesItToRecvMsg(t *testing.T) {
	crt := open(t, edge("echo.Echo/SayStream", "    client:\n      - firewall: {field: body, deny: [bad]}\n"), "frontend")
	impl, addr := serve(t, "echo-0")
	conn := dialConn(t, addr, crt.DialOptions()...)
	cs := openSayStream(t, conn, bidi)
	wantCode(t, cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "bad"}), codes.PermissionDenied, "acl")
	if h, err := cs.Header(); h != nil || err != nil {
		t.Fatalf("Header() = %v, %v; want nil, nil", h, err)
	}
	var r echopb.SayReply
	wantCode(t, cs.RecvMsg(&r), codes.PermissionDenied, "acl")
	if n := impl.calls.Load(); n != 0 {
		t.Fatalf("the server saw %d messages", n)
	}
}

// SendMsg after CloseSend is refused as grpc-go refuses it, before the chain runs (a message
// the cache would answer does not slip through), and, as in grpc-go, it ends the stream.
func TestClientStreamSendAfterCloseSendIsRefused(t *testing.T) {
	crt, conn := clientCache(t, (*weft.Runtime).DialOptions)
	cs := openSayStream(t, conn, bidi)
	sendBodies(t, cs, "one")
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	wantCode(t, cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "cached"}), codes.Internal, "after CloseSend")
	var r echopb.SayReply
	wantCode(t, cs.RecvMsg(&r), codes.Internal, "after CloseSend")
	waitForNoWaitingRPCs(t, crt, "client")
}

// The same when nothing is owed when the cache answers: the handler's sender has sent its
// one response (into the window) and waits for more. The reply is not sent from the
// receiving goroutine (it would wait for the window, the client for the server to read,
// and the stream would stop), as a plain grpc-go server with the same handler never waits
// there.
func TestServerStreamLocalReplyWithNothingOwedDoesNotStopReceiving(t *testing.T) {
	sendBeforeReading(t, bigBodies("new", 1), bigBodies("cached", 10), 200*time.Millisecond, false)
}

// A handler that sets its headers after its first Recv, and treats an error from SetHeader
// as fatal, on a stream whose first message the server's cache answers: the reply carried
// the headers, so the handler's call is dropped rather than refused.
func TestServerStreamHandlerSetHeaderAfterALocalReplyIsNoError(t *testing.T) {
	srt := serverCache(t)
	addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
		first := true
		for {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if first {
				first = false
				if err := grpc.SetHeader(stream.Context(), metadata.Pairs("x-user", req.GetUser())); err != nil {
					return err
				}
			}
			if err := stream.SendMsg(&echopb.SayReply{Body: req.GetBody()}); err != nil {
				return err
			}
		}
	}, srt.ServerOptions()...)
	conn := dialConn(t, addr)
	cs := openSayStream(t, conn, bidi)
	sendBodies(t, cs, "cached")
	closeAndExpect(t, cs, "cached")
	cs = openSayStream(t, conn, bidi)
	sendBodies(t, cs, "cached", "new")
	_ = cs.CloseSend()
	got, err := recvAll(cs)
	if err != nil || strings.Join(got, ",") != "cached,new" {
		t.Fatalf("got %v, %v; want [cached new]", got, err)
	}
}

// A sender goroutine's cache hits race the server's clean end: no message follows io.EOF.
func TestClientStreamNoLocalReplyAfterTheEnd(t *testing.T) {
	crt, econn := answerOnceWithClientCache(t)
	bad := 0
	for i := range 100 {
		cs := openSayStream(t, econn, bidi)
		sendBodies(t, cs, fmt.Sprint("one", i))
		done := make(chan struct{})
		go func() {
			defer close(done)
			for j := 0; j < 200; j++ {
				if cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "cached"}) != nil {
					return
				}
			}
		}()
		var r echopb.SayReply
		var err error
		for err == nil {
			err = cs.RecvMsg(&r)
		}
		if err != io.EOF {
			continue
		}
		<-done
		r.Reset()
		if err := cs.RecvMsg(&r); err == nil {
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of 100 streams returned a message after io.EOF", bad)
	}
	waitForNoWaitingRPCs(t, crt, "client")
}

// serveEchoWithCache serves SayStream with the server's cache, over flow-control windows of
// 64 KiB, echoing each message from the receiving goroutine, or with split from a second
// goroutine, as grpc-go allows; it fills the cache with body's reply and returns a
// connection with the same windows and a channel that gets each handler's return.
func serveEchoWithCache(t *testing.T, split bool, body string) (*weft.Runtime, *grpc.ClientConn, chan error) {
	t.Helper()
	srt := serverCache(t)
	returned := make(chan error, 4)
	window := []grpc.ServerOption{grpc.InitialWindowSize(65535), grpc.InitialConnWindowSize(65535)}
	addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) (err error) {
		defer func() { returned <- err }()
		reply := func(b string) error { return stream.SendMsg(&echopb.SayReply{Body: b}) }
		send := reply
		var bodies chan string
		done := make(chan error, 1)
		if split {
			bodies = make(chan string, 1000)
			go func() {
				for b := range bodies {
					if err := reply(b); err != nil {
						done <- err
						for range bodies {
						}
						return
					}
				}
				done <- nil
			}()
			send = func(b string) error { bodies <- b; return nil }
		}
		for {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err != nil {
				if split {
					close(bodies)
					if serr := <-done; err == io.EOF {
						return serr
					}
				}
				if err == io.EOF {
					return nil
				}
				return err
			}
			if err := send(req.GetBody()); err != nil {
				return err
			}
		}
	}, append(srt.ServerOptions(), window...)...)
	conn := dialConn(t, addr, grpc.WithInitialWindowSize(65535), grpc.WithInitialConnWindowSize(65535))
	warm := openSayStream(t, conn, bidi)
	sendBodies(t, warm, body)
	closeAndExpect(t, warm, body)
	<-returned
	return srt, conn, returned
}

// A client that sends messages the server's cache answers without reading the replies
// meets backpressure, as it would from a server sending its own replies: the queued
// replies that can go out are bounded (maxHeldBytes, 4 MiB), then the server stops
// receiving until they have. So too when one message goes to a handler that sends from a
// goroutine of its own, which then owes its response. Nothing is lost once the client reads.
func TestServerStreamLocalRepliesKeepBackpressure(t *testing.T) {
	for name, split := range map[string]bool{"one goroutine": false, "two goroutines, one message not cached": true} {
		t.Run(name, func(t *testing.T) {
			body := bigBody("cached", 0)
			srt, conn, _ := serveEchoWithCache(t, split, body)
			const n = 200 // 20 MB of replies
			want := make([]string, n)
			for i := range want {
				want[i] = body
			}
			if split {
				want[5] = bigBody("fresh", 0)
			}
			cs := openSayStream(t, conn, bidi)
			var sent atomic.Int64
			go func() {
				for _, b := range want {
					if cs.SendMsg(&echopb.SayRequest{User: "alice", Body: b}) != nil {
						return
					}
					sent.Add(1)
				}
				_ = cs.CloseSend()
			}()
			time.Sleep(1500 * time.Millisecond)
			if k := sent.Load(); k >= n/2 {
				t.Fatalf("the client sent %d of %d messages without reading: the server buffers their replies without bound", k, n)
			}
			got, err := recvAll(cs)
			if err != nil || len(got) != n {
				t.Fatalf("got %d replies, %v; want %d", len(got), err, n)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("reply %d is %.12q…, want %.12q…", i, got[i], want[i])
				}
			}
			waitForNoWaitingRPCs(t, srt, "server")
		})
	}
}

// A client that meets that backpressure and gives up (cancels) ends the stream: the
// receiving goroutine stops waiting for room, and the handler returns.
func TestServerStreamWaitingForRoomEndsWithTheStream(t *testing.T) {
	body := bigBody("cached", 0)
	srt, conn, returned := serveEchoWithCache(t, false, body)
	c, cancel := context.WithCancel(ctx(t))
	cs, err := conn.NewStream(c, &grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true, ServerStreams: true}, "/echo.Echo/SayStream")
	if err != nil {
		t.Fatal(err)
	}
	var sent atomic.Int64
	go func() {
		for range 200 {
			if cs.SendMsg(&echopb.SayRequest{User: "alice", Body: body}) != nil {
				return
			}
			sent.Add(1)
		}
	}()
	time.Sleep(1500 * time.Millisecond)
	if k := sent.Load(); k >= 100 {
		t.Fatalf("the client sent %d messages without reading: no backpressure to give up on", k)
	}
	cancel()
	select {
	case err := <-returned:
		wantCode(t, err, codes.Canceled, "")
	case <-time.After(5 * time.Second):
		t.Fatal("the handler still runs 5 s after the client cancelled: its RecvMsg waits for room for ever")
	}
	waitForNoWaitingRPCs(t, srt, "server")
}

// With a server chain that only observes (metrics, logging), a stream behaves as without
// Weft, whatever the handler does with headers or goroutines. Each case runs on plain
// grpc-go too, so the expectations are grpc-go's own.
func TestServerStreamWithAnObservingChainActsAsGrpcGo(t *testing.T) {
	serverOpts := func(t *testing.T, weftOn bool, extra ...grpc.ServerOption) []grpc.ServerOption {
		if !weftOn {
			return extra
		}
		srt := open(t, edge("echo.Echo/SayStream", "    server:\n      - metrics\n      - logging\n"), "echo")
		t.Cleanup(func() { waitForNoWaitingRPCs(t, srt, "server") })
		return append(extra, srt.ServerOptions()...)
	}
	// A handler's own interceptor, outside Weft's: what grpc-go gets back, and when.
	observe := func(returned chan error) grpc.ServerOption {
		return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			err := h(srv, ss)
			returned <- err
			return err
		})
	}
	echoOnce := func(stream grpc.ServerStream) error {
		var req echopb.SayRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		return stream.SendMsg(&echopb.SayReply{Body: req.GetBody()})
	}
	// headerCall serves a stream whose handler makes call, then echoes one message; the
	// client sends "hi" and reads the echo. It returns the stream, and what call returned.
	headerCall := func(t *testing.T, weftOn bool, call func(grpc.ServerStream) error) (grpc.ClientStream, error) {
		t.Helper()
		called := make(chan error, 1)
		addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
			called <- call(stream)
			return echoOnce(stream)
		}, serverOpts(t, weftOn)...)
		cs := openSayStream(t, dialConn(t, addr), bidi)
		sendBodies(t, cs, "hi")
		closeAndExpect(t, cs, "hi")
		return cs, <-called
	}
	cases := map[string]func(t *testing.T, weftOn bool){
		// An upper-case key: SetHeader refuses it at once; a handler that ignores the
		// error still serves the stream.
		"invalid header ignored": func(t *testing.T, weftOn bool) {
			_, err := headerCall(t, weftOn, func(stream grpc.ServerStream) error {
				return stream.SetHeader(metadata.MD{"X-Request-Id": {"1"}})
			})
			wantCode(t, err, codes.Internal, "illegal characters")
		},
		// A pseudo-header's value is checked, as grpc-go checks it.
		"pseudo-header with a bad value": func(t *testing.T, weftOn bool) {
			_, err := headerCall(t, weftOn, func(stream grpc.ServerStream) error {
				return stream.SetHeader(metadata.MD{":x": {"a\nb"}})
			})
			wantCode(t, err, codes.Internal, "non-printable")
		},
		// Through the context, grpc-go checks nothing: a value outside printable ASCII
		// reaches the client.
		"header through the context": func(t *testing.T, weftOn bool) {
			cs, err := headerCall(t, weftOn, func(stream grpc.ServerStream) error {
				return grpc.SetHeader(stream.Context(), metadata.Pairs("x-app", "café"))
			})
			if err != nil {
				t.Fatalf("grpc.SetHeader: %v", err)
			}
			if h, err := cs.Header(); err != nil || strings.Join(h.Get("x-app"), ",") != "café" {
				t.Fatalf("headers %v, %v; want x-app: café", h, err)
			}
		},
		// A SendHeader that fails (a value with a newline) keeps what SetHeader held.
		"failed SendHeader": func(t *testing.T, weftOn bool) {
			cs, err := headerCall(t, weftOn, func(stream grpc.ServerStream) error {
				_ = stream.SetHeader(metadata.Pairs("x-a", "1"))
				return stream.SendHeader(metadata.MD{"x-b": {"bad\nvalue"}})
			})
			wantCode(t, err, codes.Internal, "non-printable")
			if h, err := cs.Header(); err != nil || strings.Join(h.Get("x-a"), ",") != "1" {
				t.Fatalf("headers %v, %v; want x-a: 1", h, err)
			}
		},
		// The client goes away after the handler set a header; the handler returns nil,
		// and that is what grpc-go gets.
		"client gone": func(t *testing.T, weftOn bool) {
			returned := make(chan error, 1)
			addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
				_ = stream.SetHeader(metadata.Pairs("x-a", "1"))
				var req echopb.SayRequest
				_ = stream.RecvMsg(&req)
				<-stream.Context().Done()
				return nil
			}, serverOpts(t, weftOn, observe(returned))...)
			c, cancel := context.WithCancel(ctx(t))
			cs, err := dialConn(t, addr).NewStream(c, &grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true, ServerStreams: true}, "/echo.Echo/SayStream")
			if err != nil {
				t.Fatal(err)
			}
			sendBodies(t, cs, "hi")
			time.Sleep(50 * time.Millisecond)
			cancel()
			if err := <-returned; err != nil {
				t.Fatalf("grpc-go got %v from the handler's return, want nil", err)
			}
		},
		// The handler returns while a goroutine it left behind is held up in SendMsg by a
		// client that does not read: the stream ends without waiting for that goroutine.
		"sender left behind": func(t *testing.T, weftOn bool) {
			returned := make(chan error, 1)
			addr := serveSayStream(t, bidi, func(_ any, stream grpc.ServerStream) error {
				var req echopb.SayRequest
				if err := stream.RecvMsg(&req); err != nil {
					return err
				}
				go func() {
					big := strings.Repeat("x", 256<<10)
					for stream.SendMsg(&echopb.SayReply{Body: big}) == nil {
					}
				}()
				time.Sleep(200 * time.Millisecond)
				return status.Error(codes.Aborted, "giving up")
			}, serverOpts(t, weftOn, observe(returned))...)
			c, cancel := context.WithCancel(ctx(t))
			defer cancel()
			cs, err := dialConn(t, addr).NewStream(c, &grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true, ServerStreams: true}, "/echo.Echo/SayStream")
			if err != nil {
				t.Fatal(err)
			}
			sendBodies(t, cs, "hi")
			select {
			case err := <-returned:
				wantCode(t, err, codes.Aborted, "giving up")
			case <-time.After(3 * time.Second):
				t.Fatal("the stream still waits for the handler's goroutine 3 s after the handler returned")
			}
		},
	}
	for name, run := range cases {
		for _, weftOn := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/weft=%v", name, weftOn), func(t *testing.T) { run(t, weftOn) })
		}
	}
}
