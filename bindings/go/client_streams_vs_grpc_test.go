package weft_test

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

func rvMD(md metadata.MD) string {
	var ks []string
	for k, v := range md {
		if k == "content-type" {
			continue
		}
		ks = append(ks, k+"="+strings.Join(v, ","))
	}
	sort.Strings(ks)
	if md == nil {
		return "nil"
	}
	return "{" + strings.Join(ks, " ") + "}"
}

func rvErr(err error) string {
	if err == nil {
		return "nil"
	}
	if err == io.EOF {
		return "EOF"
	}
	if s, ok := status.FromError(err); ok {
		if s.Code() == codes.DeadlineExceeded {
			return "DeadlineExceeded"
		}
		return s.Code().String() + ":" + s.Message()
	}
	return "raw:" + err.Error()
}

type rvMode struct {
	name string
	opts func(rt *weft.Runtime) []grpc.DialOption
}

var rvModes = []rvMode{
	{"plain", func(*weft.Runtime) []grpc.DialOption { return nil }},
	{"dialopts", func(rt *weft.Runtime) []grpc.DialOption { return rt.DialOptions() }},
	{"streamonly", func(rt *weft.Runtime) []grpc.DialOption {
		return []grpc.DialOption{grpc.WithStreamInterceptor(rt.StreamClientInterceptor())}
	}},
}

// rvCompare runs scenario with a plain grpc-go client, then with a client-side chain that
// only observes (metrics, logging) installed by DialOptions and by the stream interceptor
// alone, and expects the same transcript of what every call returned: with such a chain a
// stream behaves as without Weft. (Not compared, by design: a stream opens at its first
// message, so NewStream does not fail for a deadline already past or a server that cannot
// be reached; SendMsg then returns io.EOF and RecvMsg the status. docs/go.md, "Streams".)
func rvCompare(t *testing.T, scenario func(t *testing.T, opts []grpc.DialOption, log func(string, ...any))) {
	yaml := edge("echo.Echo/SayStream", "    client:\n      - metrics\n      - logging\n")
	var base string
	for _, m := range rvModes {
		t.Run(m.name, func(t *testing.T) {
			crt := open(t, yaml, "frontend")
			var b strings.Builder
			scenario(t, m.opts(crt), func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) })
			waitForNoWaitingRPCs(t, crt, m.name)
			got := b.String()
			if m.name == "plain" {
				base = got
			} else if got != base {
				t.Errorf("%s differs:\nplain:\n%s\n%s:\n%s", m.name, base, m.name, got)
			}
		})
	}
}

// ready waits until conn has connected.
func ready(t *testing.T, conn *grpc.ClientConn) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx(t), 10*time.Second)
	defer cancel()
	conn.Connect()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(c, s) {
			t.Fatalf("the connection did not become ready: %v", s)
		}
	}
}

// rvNewWithin opens a stream that must end within d, on a connection made ready first so
// that connecting does not eat into the deadline.
func rvNewWithin(t *testing.T, conn *grpc.ClientConn, d time.Duration, desc grpc.StreamDesc) (grpc.ClientStream, error) {
	t.Helper()
	ready(t, conn)
	c, cancel := context.WithTimeout(ctx(t), d)
	t.Cleanup(cancel)
	return rvNew(t, conn, c, desc)
}

var rvBidi = grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true, ServerStreams: true}

func rvNew(t *testing.T, conn *grpc.ClientConn, c context.Context, d grpc.StreamDesc) (grpc.ClientStream, error) {
	return conn.NewStream(c, &d, "/echo.Echo/SayStream")
}

// Headers the server sends before any message, read before the first send; every call
// after the end, SendMsg after CloseSend included.
func TestClientStreamActsAsGrpcGo_HeaderBeforeSend(t *testing.T) {
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		addr := serveSayStream(t, rvBidi, func(_ any, ss grpc.ServerStream) error {
			_ = ss.SendHeader(metadata.Pairs("x-h", "1"))
			var req echopb.SayRequest
			for {
				if err := ss.RecvMsg(&req); err != nil {
					if err == io.EOF {
						ss.SetTrailer(metadata.Pairs("x-t", "2"))
						return nil
					}
					return err
				}
				_ = ss.SendMsg(&echopb.SayReply{Body: req.Body})
			}
		})
		conn := dialConn(t, addr, opts...)
		cs, err := rvNew(t, conn, ctx(t), rvBidi)
		log("new %s", rvErr(err))
		ctx0 := cs.Context()
		log("ctx0 err %v", ctx0.Err())
		h, err := cs.Header()
		log("header %s %s", rvMD(h), rvErr(err))
		log("trailer-before %s", rvMD(cs.Trailer()))
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "a"})))
		var r echopb.SayReply
		log("recv %s %s", rvErr(cs.RecvMsg(&r)), r.Body)
		log("close %s", rvErr(cs.CloseSend()))
		log("close2 %s", rvErr(cs.CloseSend()))
		// Read the end first: a SendMsg after CloseSend racing the server's end makes the
		// next RecvMsg return either, in grpc-go as in Weft (the next two tests).
		log("recv %s", rvErr(cs.RecvMsg(&r)))
		log("sendAfterClose %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "b"})))
		log("recv again %s", rvErr(cs.RecvMsg(&r)))
		h, err = cs.Header()
		log("header after %s %s", rvMD(h), rvErr(err))
		log("trailer after %s", rvMD(cs.Trailer()))
		time.Sleep(20 * time.Millisecond)
		log("ctx0 err after %v, ctx err %v", ctx0.Err(), cs.Context().Err())
	})
}

// SendMsg after CloseSend before the server answered, then the reads.
func TestClientStreamActsAsGrpcGo_SendAfterCloseSendThenRecv(t *testing.T) {
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		// The server holds its answer until the refused SendMsg has returned, so the
		// refusal always comes before the server's end.
		release := make(chan struct{})
		addr := serveSayStream(t, rvBidi, func(_ any, ss grpc.ServerStream) error {
			var req echopb.SayRequest
			if err := ss.RecvMsg(&req); err != nil {
				return err
			}
			if err := heldUntil(ss, release); err != nil {
				return err
			}
			return ss.SendMsg(&echopb.SayReply{Body: req.Body})
		})
		conn := dialConn(t, addr, opts...)
		cs, err := rvNew(t, conn, ctx(t), rvBidi)
		log("new %s", rvErr(err))
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "a"})))
		log("close %s", rvErr(cs.CloseSend()))
		log("sendAfterClose %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "b"})))
		close(release)
		var r echopb.SayReply
		log("recv %s %s", rvErr(cs.RecvMsg(&r)), r.Body)
		log("recv %s", rvErr(cs.RecvMsg(&r)))
		log("ctx err %v", cs.Context().Err())
	})
}

// A reader that waits before the first message is sent (it opens the stream).
func TestClientStreamActsAsGrpcGo_RecvBeforeSend(t *testing.T) {
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		_, addr := serve(t, "echo-0")
		conn := dialConn(t, addr, opts...)
		cs, err := rvNew(t, conn, ctx(t), rvBidi)
		log("new %s", rvErr(err))
		ctx0 := cs.Context()
		done := make(chan string)
		go func() {
			var r echopb.SayReply
			err := cs.RecvMsg(&r)
			done <- rvErr(err) + " " + r.Body
		}()
		time.Sleep(50 * time.Millisecond)
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "a"})))
		log("recv %s", <-done)
		log("close %s", rvErr(cs.CloseSend()))
		var r echopb.SayReply
		log("recv %s", rvErr(cs.RecvMsg(&r)))
		time.Sleep(20 * time.Millisecond)
		log("ctx0 %v ctx %v", ctx0.Err(), cs.Context().Err())
	})
}

// A server that answers, then fails with trailers.
func TestClientStreamActsAsGrpcGo_ErrorStatusWithTrailers(t *testing.T) {
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		addr := serveSayStream(t, rvBidi, func(_ any, ss grpc.ServerStream) error {
			var req echopb.SayRequest
			for {
				if err := ss.RecvMsg(&req); err != nil {
					return err
				}
				if req.Body == "fail" {
					ss.SetTrailer(metadata.Pairs("x-t", "why"))
					return status.Error(codes.Aborted, "failing")
				}
				_ = ss.SendMsg(&echopb.SayReply{Body: req.Body})
			}
		})
		conn := dialConn(t, addr, opts...)
		cs, err := rvNew(t, conn, ctx(t), rvBidi)
		log("new %s", rvErr(err))
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "a"})))
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "fail"})))
		var r echopb.SayReply
		log("recv %s %s", rvErr(cs.RecvMsg(&r)), r.Body)
		log("recv %s", rvErr(cs.RecvMsg(&r)))
		log("recv %s", rvErr(cs.RecvMsg(&r)))
		log("send after %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "b"})))
		log("close after %s", rvErr(cs.CloseSend()))
		h, err := cs.Header()
		log("header %s %s", rvMD(h), rvErr(err))
		log("trailer %s", rvMD(cs.Trailer()))
	})
}

// A server that fails before it sends anything (a trailers-only response).
func TestClientStreamActsAsGrpcGo_TrailersOnlyError(t *testing.T) {
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		addr := serveSayStream(t, rvBidi, func(_ any, ss grpc.ServerStream) error {
			ss.SetTrailer(metadata.Pairs("x-t", "why"))
			return status.Error(codes.PermissionDenied, "no")
		})
		conn := dialConn(t, addr, opts...)
		cs, err := rvNew(t, conn, ctx(t), rvBidi)
		log("new %s", rvErr(err))
		h, err := cs.Header()
		log("header %s %s", rvMD(h), rvErr(err))
		log("trailer %s", rvMD(cs.Trailer()))
		time.Sleep(20 * time.Millisecond)
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "a"})))
		var r echopb.SayReply
		log("recv %s", rvErr(cs.RecvMsg(&r)))
		log("recv %s", rvErr(cs.RecvMsg(&r)))
		log("trailer %s", rvMD(cs.Trailer()))
	})
}

// serveThreeReplies serves SayStream as desc says; the handler answers its one request with
// three replies and a trailer.
func serveThreeReplies(t *testing.T, desc grpc.StreamDesc) string {
	t.Helper()
	now := make(chan struct{})
	close(now)
	return serveThreeRepliesAfter(t, desc, now)
}

// heldUntil waits until release is closed, or returns the stream's end.
func heldUntil(ss grpc.ServerStream, release <-chan struct{}) error {
	select {
	case <-release:
		return nil
	case <-ss.Context().Done():
		return ss.Context().Err()
	}
}

// serveThreeReplies, with the replies held until release is closed.
func serveThreeRepliesAfter(t *testing.T, desc grpc.StreamDesc, release <-chan struct{}) string {
	t.Helper()
	return serveSayStream(t, desc, func(_ any, ss grpc.ServerStream) error {
		var req echopb.SayRequest
		if err := ss.RecvMsg(&req); err != nil {
			return err
		}
		if err := heldUntil(ss, release); err != nil {
			return err
		}
		ss.SetTrailer(metadata.Pairs("x-t", "1"))
		for i := range 3 {
			_ = ss.SendMsg(&echopb.SayReply{Body: fmt.Sprint(req.Body, i)})
		}
		return nil
	})
}

// A server-streaming call whose caller sends a second request before the replies came.
// (Had they come, RecvMsg would return them, in grpc-go as in Weft; holding them back
// until the refused second request returned keeps the outcome from racing.)
func TestClientStreamActsAsGrpcGo_ServerStreaming(t *testing.T) {
	desc := grpc.StreamDesc{StreamName: "SayStream", ServerStreams: true}
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		release := make(chan struct{})
		addr := serveThreeRepliesAfter(t, desc, release)
		conn := dialConn(t, addr, opts...)
		cs, err := rvNew(t, conn, ctx(t), desc)
		log("new %s", rvErr(err))
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "a"})))
		log("send2 %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "b"})))
		close(release)
		log("close %s", rvErr(cs.CloseSend()))
		for range 5 {
			var r echopb.SayReply
			log("recv %s %s", rvErr(cs.RecvMsg(&r)), r.Body)
		}
		// Not the trailers: whether the server's arrived before the client ended the
		// stream is a race in grpc-go alone too.
	})
}

// A server-streaming call closed without its request: grpc-go's server refuses it at once.
// (Weft's reads wait for the one request; CloseSend ends that wait.)
func TestClientStreamActsAsGrpcGo_ServerStreamingClosedWithoutARequest(t *testing.T) {
	desc := grpc.StreamDesc{StreamName: "SayStream", ServerStreams: true}
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		addr := serveThreeReplies(t, desc)
		conn := dialConn(t, addr, opts...)
		c, cancel := context.WithTimeout(ctx(t), 5*time.Second)
		defer cancel()
		cs, err := rvNew(t, conn, c, desc)
		log("new %s", rvErr(err))
		log("close %s", rvErr(cs.CloseSend()))
		var r echopb.SayReply
		start := time.Now()
		log("recv %s", rvErr(cs.RecvMsg(&r)))
		// At once, not when the deadline ends a wait for the request.
		log("recv within a second %v", time.Since(start) < time.Second)
		h, err := cs.Header()
		log("header %s %s", rvMD(h), rvErr(err))
	})
}

// A server-streaming call read to its end, then used after it.
func TestClientStreamActsAsGrpcGo_ServerStreamingNormal(t *testing.T) {
	desc := grpc.StreamDesc{StreamName: "SayStream", ServerStreams: true}
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		addr := serveThreeReplies(t, desc)
		conn := dialConn(t, addr, opts...)
		cs, err := rvNew(t, conn, ctx(t), desc)
		log("new %s", rvErr(err))
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "a"})))
		log("close %s", rvErr(cs.CloseSend()))
		for range 5 {
			var r echopb.SayReply
			log("recv %s %s", rvErr(cs.RecvMsg(&r)), r.Body)
		}
		log("send after end %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "c"})))
		h, err := cs.Header()
		log("header %s %s trailer %s", rvMD(h), rvErr(err), rvMD(cs.Trailer()))
	})
}

// A client-streaming call, and calls after its one response.
func TestClientStreamActsAsGrpcGo_ClientStreaming(t *testing.T) {
	desc := grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true}
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		addr := serveCollector(t, metadata.Pairs("x-load", "7"))
		conn := dialConn(t, addr, opts...)
		cs, err := rvNew(t, conn, ctx(t), desc)
		log("new %s", rvErr(err))
		for i := range 3 {
			log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: fmt.Sprint(i)})))
		}
		log("close %s", rvErr(cs.CloseSend()))
		var r echopb.SayReply
		log("recv %s %s", rvErr(cs.RecvMsg(&r)), r.Body)
		log("recv %s", rvErr(cs.RecvMsg(&r)))
		log("send after %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "x"})))
		h, err := cs.Header()
		log("header %s %s trailer %s", rvMD(h), rvErr(err), rvMD(cs.Trailer()))
		time.Sleep(20 * time.Millisecond)
		log("ctx %v", cs.Context().Err())
	})
}

// A client-streaming call read before its sending side is closed.
func TestClientStreamActsAsGrpcGo_ClientStreamingRecvWithoutClose(t *testing.T) {
	desc := grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true}
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		addr := serveCollector(t, metadata.Pairs("x-load", "7"))
		conn := dialConn(t, addr, opts...)
		cs, err := rvNewWithin(t, conn, 200*time.Millisecond, desc)
		log("new %s", rvErr(err))
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "0"})))
		var r echopb.SayReply
		log("recv %s %s", rvErr(cs.RecvMsg(&r)), r.Body)
		log("send after %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "x"})))
		log("close %s", rvErr(cs.CloseSend()))
		log("recv %s", rvErr(cs.RecvMsg(&r)))
	})
}

// The context cancelled before the first message.
func TestClientStreamActsAsGrpcGo_CancelBeforeFirstMessage(t *testing.T) {
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		_, addr := serve(t, "echo-0")
		conn := dialConn(t, addr, opts...)
		c, cancel := context.WithCancel(ctx(t))
		cs, err := rvNew(t, conn, c, rvBidi)
		log("new %s", rvErr(err))
		cancel()
		// Header sees the cancelled context and ends the stream within the call, in
		// grpc-go (which otherwise ends it from a goroutine, some time later) as in Weft.
		h, err := cs.Header()
		log("header %s %s", rvMD(h), rvErr(err))
		log("ctx %v", cs.Context().Err())
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "c"})))
		var r echopb.SayReply
		log("recv %s", rvErr(cs.RecvMsg(&r)))
		log("close %s", rvErr(cs.CloseSend()))
		h, err = cs.Header()
		log("header %s %s trailer %s", rvMD(h), rvErr(err), rvMD(cs.Trailer()))
	})
}

// A deadline that passes mid-stream.
func TestClientStreamActsAsGrpcGo_Deadline(t *testing.T) {
	rvCompare(t, func(t *testing.T, opts []grpc.DialOption, log func(string, ...any)) {
		addr := serveSayStream(t, rvBidi, func(_ any, ss grpc.ServerStream) error {
			var req echopb.SayRequest
			if err := ss.RecvMsg(&req); err != nil {
				return err
			}
			<-ss.Context().Done()
			return ss.Context().Err()
		})
		conn := dialConn(t, addr, opts...)
		cs, err := rvNewWithin(t, conn, 100*time.Millisecond, rvBidi)
		log("new %s", rvErr(err))
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "a"})))
		var r echopb.SayReply
		log("recv %s", rvErr(cs.RecvMsg(&r)))
		log("send %s", rvErr(cs.SendMsg(&echopb.SayRequest{Body: "a"})))
		log("recv %s", rvErr(cs.RecvMsg(&r)))
	})
}
