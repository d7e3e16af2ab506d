package weft_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// sayServer serves echo.Echo/Say with a handler of the test's own.
type sayServer struct {
	echopb.UnimplementedEchoServer
	say func(context.Context, *echopb.SayRequest) (*echopb.SayReply, error)
}

func (s sayServer) Say(ctx context.Context, req *echopb.SayRequest) (*echopb.SayReply, error) {
	return s.say(ctx, req)
}

func serveSay(t *testing.T, say func(context.Context, *echopb.SayRequest) (*echopb.SayReply, error), opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	echopb.RegisterEchoServer(srv, sayServer{say: say})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// A handler's error crosses a response path that leaves it alone as the handler returned it:
// its status details arrive, and a handler's own context error keeps the code grpc-go gives
// it (DEADLINE_EXCEEDED, not UNKNOWN).
func TestHandlerErrorPassesAnUnchangingResponsePathWhole(t *testing.T) {
	violation := &errdetails.BadRequest_FieldViolation{Field: "body", Description: "must not be empty"}
	say := func(ctx context.Context, req *echopb.SayRequest) (*echopb.SayReply, error) {
		if req.GetBody() == "wait" {
			// The handler's own deadline, far shorter than the caller's.
			c, cancel := context.WithTimeout(ctx, time.Millisecond)
			defer cancel()
			<-c.Done()
			return nil, c.Err()
		}
		st, err := status.New(codes.InvalidArgument, "bad request").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{violation},
		})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	for _, side := range []string{"client", "server"} {
		t.Run(side, func(t *testing.T) {
			yaml := edge("echo.Echo/Say", "    "+side+":\n      - metrics\n")
			srt := open(t, yaml, "echo")
			crt := open(t, yaml, "frontend")
			c := dial(t, serveSay(t, say, srt.ServerOptions()...), crt.DialOptions()...)

			_, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice"})
			wantCode(t, err, codes.InvalidArgument, "bad request")
			details := status.Convert(err).Details()
			if len(details) != 1 {
				t.Fatalf("the caller got details %v, want the handler's BadRequest", details)
			}
			br, ok := details[0].(*errdetails.BadRequest)
			if !ok || len(br.GetFieldViolations()) != 1 || br.GetFieldViolations()[0].GetField() != "body" {
				t.Fatalf("the caller got details %v, want the handler's BadRequest", details)
			}

			_, err = c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "wait"})
			wantCode(t, err, codes.DeadlineExceeded, "deadline exceeded")
		})
	}
}

// A response handler may answer a failed call with a success of its own (the test element
// `fallback` sends the last successful response in its place): the caller gets that response,
// not the handler's error, whichever side the element runs on.
func TestAChainMayTurnAnErrorIntoASuccess(t *testing.T) {
	say := func(ctx context.Context, req *echopb.SayRequest) (*echopb.SayReply, error) {
		if req.GetBody() == "fail" {
			return nil, status.Error(codes.Unavailable, "the backend is down")
		}
		return &echopb.SayReply{Body: req.GetBody(), ServedBy: "echo-0"}, nil
	}
	for _, side := range []string{"client", "server"} {
		t.Run(side, func(t *testing.T) {
			yaml := "element_paths: [../../ir/tests/elements]\n" +
				edge("echo.Echo/Say", "    "+side+":\n      - fallback\n")
			srt := open(t, yaml, "echo")
			crt := open(t, yaml, "frontend")
			c := dial(t, serveSay(t, say, srt.ServerOptions()...), crt.DialOptions()...)

			r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "fresh"})
			if err != nil || r.GetBody() != "fresh" {
				t.Fatalf("first call: %v, %v", r, err)
			}
			r, err = c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "fail"})
			if err != nil {
				t.Fatalf("the failed call reached the caller as %v; the fallback answered it", err)
			}
			if r.GetBody() != "fresh" || r.GetServedBy() != "echo-0" {
				t.Fatalf("the caller got %v, want the stored response", r)
			}
		})
	}
}

// A reply the chain makes itself carries the headers it has: a cache hit arrives with the
// headers of the response it stored, as that response did, whichever side the cache runs on.
func TestLocalReplyCarriesItsHeaders(t *testing.T) {
	for _, side := range []string{"client", "server"} {
		t.Run(side, func(t *testing.T) {
			c, srv := mesh(t, edge("echo.Echo/Say", "    "+side+":\n      - cache: {field: body}\n"))
			srv.setReplyMetadata(metadata.Pairs("x-app", "v1"), nil)
			for i, who := range []string{"alice", "bob"} {
				var header metadata.MD
				r, err := c.Say(ctx(t), &echopb.SayRequest{User: who, Body: "hello"}, grpc.Header(&header))
				if err != nil || r.GetBody() != "hello" {
					t.Fatalf("call %d: %v, %v", i, r, err)
				}
				if got := header.Get("x-app"); len(got) != 1 || got[0] != "v1" {
					t.Fatalf("call %d: the caller got x-app = %q, want \"v1\" (all: %v)", i, got, header)
				}
			}
			if n := srv.calls.Load(); n != 1 {
				t.Fatalf("the server saw %d calls, want 1: the repeat is the cache's", n)
			}
		})
	}
}

// On a stream too, whichever side the cache runs on: the headers of a stream whose message
// the cache answered are the stored response's.
func TestStreamLocalReplyCarriesItsHeaders(t *testing.T) {
	for _, side := range []string{"client", "server"} {
		t.Run(side, func(t *testing.T) {
			c, srv := mesh(t, edge("echo.Echo/SayStream", "    "+side+":\n      - cache: {field: body}\n"))
			srv.setReplyMetadata(metadata.Pairs("x-app", "v1"), nil)
			for i := range 2 {
				stream, err := c.SayStream(ctx(t))
				if err != nil {
					t.Fatal(err)
				}
				if err := stream.Send(&echopb.SayRequest{User: "alice", Body: "hello"}); err != nil {
					t.Fatal(err)
				}
				// The client's stream opens only for a message the chain did not answer.
				if err := stream.CloseSend(); err != nil {
					t.Fatal(err)
				}
				if r, err := stream.Recv(); err != nil || r.GetBody() != "hello" {
					t.Fatalf("stream %d: %v, %v", i, r, err)
				}
				header, err := stream.Header()
				if err != nil {
					t.Fatal(err)
				}
				if got := header.Get("x-app"); len(got) != 1 || got[0] != "v1" {
					t.Fatalf("stream %d: the caller got x-app = %q, want \"v1\" (all: %v)", i, got, header)
				}
			}
			if n := srv.calls.Load(); n != 1 {
				t.Fatalf("the server saw %d messages, want 1: the repeat is the cache's", n)
			}
		})
	}
}

// panickingEcho panics in its handlers, after reading the stream's first message.
type panickingEcho struct {
	echopb.UnimplementedEchoServer
}

func (panickingEcho) Say(context.Context, *echopb.SayRequest) (*echopb.SayReply, error) {
	panic("boom")
}

func (panickingEcho) SayStream(s echopb.Echo_SayStreamServer) error {
	if _, err := s.Recv(); err != nil {
		return err
	}
	panic("boom")
}

// recovered turns a handler's panic into INTERNAL, as a recovery interceptor does; grpc-go
// runs interceptors given with grpc.UnaryInterceptor outside those it chains.
func recoveredUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return h(ctx, req)
}

func recoveredStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return h(srv, ss)
}

// A handler that panics under a recovery interceptor still ends its RPC in the chain:
// before, its handle waited for good (WaitingRPCs grew by one per panic, and elements that
// count requests in flight never counted it down). Found by a review.
func TestAHandlerThatPanicsStillEndsItsRPC(t *testing.T) {
	srt := open(t, edge("echo.Echo/*", "    server:\n      - metrics\n"), "echo")
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(srt.ServerOptions(),
		grpc.UnaryInterceptor(recoveredUnary), grpc.StreamInterceptor(recoveredStream))...)
	echopb.RegisterEchoServer(srv, panickingEcho{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c := dial(t, lis.Addr().String())
	for i := 0; i < 3; i++ {
		_, err := c.Say(ctx(t), &echopb.SayRequest{Body: "x"})
		wantCode(t, err, codes.Internal, "panic")
	}
	for i := 0; i < 3; i++ {
		st, err := c.SayStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&echopb.SayRequest{Body: "x"}); err != nil {
			t.Fatal(err)
		}
		_, err = st.Recv()
		wantCode(t, err, codes.Internal, "panic")
	}
	// The server's interceptor has returned once the client has the status.
	if n := srt.WaitingRPCs(); n != 0 {
		t.Errorf("%d RPCs still waiting after 6 panicking handlers, want 0", n)
	}
}

// A call whose context has already ended fails as grpc-go fails it, even when the client's
// chain would answer it locally (a cache hit): DEADLINE_EXCEEDED or CANCELLED, not the
// cached reply.
func TestALocalReplyDoesNotOutliveTheCallersContext(t *testing.T) {
	c, srv := mesh(t, edge("echo.Echo/Say", "    client:\n      - cache: {field: body}\n"))
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hello"}); err != nil {
		t.Fatal(err)
	}
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := c.Say(expired, &echopb.SayRequest{User: "bob", Body: "hello"})
	wantCode(t, err, codes.DeadlineExceeded, "")
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	_, err = c.Say(cancelled, &echopb.SayRequest{User: "bob", Body: "hello"})
	wantCode(t, err, codes.Canceled, "")
	if n := srv.calls.Load(); n != 1 {
		t.Fatalf("the server saw %d calls, want 1", n)
	}
}

// grpc.OnFinish options of a unary call are called once, with the status the caller gets:
// also when the client's chain refuses the call or answers it itself (grpc-go never sees
// those), and when it turns the server's error into a success (grpc-go saw the error).
func TestUnaryOnFinishGetsTheStatusTheCallerGets(t *testing.T) {
	say := func(ctx context.Context, req *echopb.SayRequest) (*echopb.SayReply, error) {
		if req.GetBody() == "fail" {
			return nil, status.Error(codes.Unavailable, "the backend is down")
		}
		return &echopb.SayReply{Body: req.GetBody(), ServedBy: "echo-0"}, nil
	}
	yaml := "element_paths: [../../ir/tests/elements]\n" + edge("echo.Echo/Say", `    client:
      - firewall: {field: user, deny: [mallory]}
      - cache: {field: body}
      - fallback
`)
	srt := open(t, yaml, "echo")
	crt := open(t, yaml, "frontend")
	c := dial(t, serveSay(t, say, srt.ServerOptions()...), crt.DialOptions()...)

	call := func(user, body string) (callErr error, finished []error) {
		_, callErr = c.Say(ctx(t), &echopb.SayRequest{User: user, Body: body},
			grpc.OnFinish(func(err error) { finished = append(finished, err) }))
		return callErr, finished
	}
	for _, tc := range []struct {
		name, user, body string
		want             codes.Code
	}{
		{"to the server", "alice", "fresh", codes.OK},
		{"refused by the firewall", "mallory", "hi", codes.PermissionDenied},
		{"answered by the cache", "bob", "fresh", codes.OK},
		{"the server's error turned into the stored response", "alice", "fail", codes.OK},
	} {
		err, finished := call(tc.user, tc.body)
		if status.Code(err) != tc.want {
			t.Fatalf("%s: the caller got %v, want %v", tc.name, err, tc.want)
		}
		if len(finished) != 1 {
			t.Fatalf("%s: OnFinish called %d times (%v), want once", tc.name, len(finished), finished)
		}
		if status.Code(finished[0]) != tc.want || (err == nil) != (finished[0] == nil) {
			t.Fatalf("%s: OnFinish got %v, the caller %v", tc.name, finished[0], err)
		}
	}
}
