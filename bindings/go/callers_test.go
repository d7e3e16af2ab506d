package weft_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// twoCallers: web and cart both call the echo service, each over its own edge. web's edge
// runs a firewall on the server side; cart's counts latencies.
const twoCallers = `protos: [echo.proto]
edges:
  web->echo:
    from: web
    to: echo
    method: echo.Echo/*
    server:
      - firewall: {field: user, deny: [mallory]}
  cart->echo:
    from: cart
    to: echo
    method: echo.Echo/*
    server:
      - metrics
`

// TestEachCallerRunsTheEdgeFromItsService runs one server and two Weft clients over real
// gRPC: the server applies the policy of the edge from the service that called, and refuses
// a caller that names none rather than guess whose policy applies.
func TestEachCallerRunsTheEdgeFromItsService(t *testing.T) {
	srt := open(t, twoCallers, "echo")
	srv, addr := serve(t, "echo-0", srt.ServerOptions()...)
	web := dial(t, addr, open(t, twoCallers, "web").DialOptions()...)
	cart := dial(t, addr, open(t, twoCallers, "cart").DialOptions()...)

	_, err := web.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "from web"})
	wantCode(t, err, codes.PermissionDenied, "acl")
	r, err := cart.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "from cart"})
	if err != nil || r.GetBody() != "from cart" {
		t.Fatalf("cart's edge has no firewall: %v %v", r, err)
	}
	if _, md := srv.lastRequest(); len(md.Get("weft-version")) != 1 || !strings.HasSuffix(md.Get("weft-version")[0], "/cart") {
		t.Fatalf("the stamp should name the calling service: %v", md)
	}

	// A stream opens with the first message's stamps, so every message runs the caller's
	// edge.
	for _, c := range []struct {
		name   string
		client echopb.EchoClient
		denied bool
	}{{"web", web, true}, {"cart", cart, false}} {
		stream, err := c.client.SayStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, user := range []string{"alice", "mallory"} {
			if err := stream.Send(&echopb.SayRequest{User: user, Body: user}); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			_, err := stream.Recv()
			if user == "mallory" && c.denied {
				wantCode(t, err, codes.PermissionDenied, "acl")
			} else if err != nil {
				t.Fatalf("%s, %s: %v", c.name, user, err)
			}
		}
	}

	plain := dial(t, addr)
	_, err = plain.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "no weft here"})
	wantCode(t, err, codes.PermissionDenied, "does not say which service it comes from")
	if n := srt.Counters().UnknownCallers; n != 1 {
		t.Fatalf("UnknownCallers = %d, want 1", n)
	}
}

// TestACallingServiceNamedOutsideASCIIIsRefusedWhenItOpens: its stamp, a header value,
// would carry a name grpc-go refuses to send, failing every call it makes; the runtime says
// so when it opens instead.
func TestACallingServiceNamedOutsideASCIIIsRefusedWhenItOpens(t *testing.T) {
	config := strings.ReplaceAll(twoCallers, "cart", "café")
	if _, err := weft.OpenYAML(config, echoDir, "café"); err == nil || !strings.Contains(err.Error(), "printable ASCII") {
		t.Fatalf("OpenYAML as café: %v", err)
	}
	// Serving it is fine: a server sends no stamp.
	srt := open(t, config, "echo")
	_, addr := serve(t, "echo-0", srt.ServerOptions()...)
	_, err := dial(t, addr, open(t, config, "web").DialOptions()...).Say(ctx(t), &echopb.SayRequest{User: "alice"})
	if err != nil {
		t.Fatal(err)
	}
}
