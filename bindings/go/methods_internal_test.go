package weft

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// A server that takes any method name (grpc.UnknownServiceHandler) keeps nothing for the
// names without an edge that clients send, while a method with an edge still runs its chain
// and is kept once.
func TestUnknownMethodsAreNotKept(t *testing.T) {
	// Answers any method with its name.
	anyMethod := func(_ any, stream grpc.ServerStream) error {
		var req echopb.SayRequest
		if err := stream.RecvMsg(&req); err != nil {
			return err
		}
		name, _ := grpc.MethodFromServerStream(stream)
		return stream.SendMsg(&echopb.SayReply{Body: name})
	}
	rt, conn := firewalledEcho(t, "echo.Echo/SayStream", func(*grpc.Server) {}, grpc.UnknownServiceHandler(anyMethod))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for i := range 100 {
		method := fmt.Sprintf("/probe.Service%d/Method%d", i, i)
		var reply echopb.SayReply
		if err := conn.Invoke(ctx, method, &echopb.SayRequest{User: "mallory"}, &reply); err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if reply.GetBody() != method {
			t.Fatalf("%s answered %q", method, reply.GetBody())
		}
	}
	if n := len(*rt.methods.Load()); n != 0 {
		t.Fatalf("the runtime keeps %d methods after calls of methods without an edge, want 0", n)
	}

	for range 3 {
		err := conn.Invoke(ctx, "/echo.Echo/SayStream", &echopb.SayRequest{User: "mallory"}, &echopb.SayReply{})
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("the chain of a method with an edge did not run: %v", err)
		}
	}
	if n := len(*rt.methods.Load()); n != 1 {
		t.Fatalf("the runtime keeps %d methods, want 1: the one with an edge", n)
	}
}

// firewalledEcho serves, on a loopback port, the echo service's runtime with the firewall
// (mallory denied) on the server side of method, its server options then opts, and the
// handlers register adds; it returns the runtime and a plain client's connection, all
// closed when the test ends.
func firewalledEcho(t *testing.T, method string, register func(*grpc.Server), opts ...grpc.ServerOption) (*Runtime, *grpc.ClientConn) {
	t.Helper()
	yaml := `protos: [echo.proto]
edges:
  frontend->echo:
    from: frontend
    to: echo
    method: ` + method + `
    server:
      - firewall: {field: user, deny: [mallory]}
`
	rt, err := OpenYAML(yaml, "../../examples/echo", "echo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(append(rt.ServerOptions(), opts...)...)
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return rt, conn
}
