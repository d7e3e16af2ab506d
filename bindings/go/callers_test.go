package weft_test

import (
	"context"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

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

// TestEveryStreamKindRunsTheCallersEdgeOnEachMessage opens client-streaming and
// server-streaming calls (the bidirectional kind is above) from both callers: each message
// after the first runs the edge of the service the stream's stamp names, also after the
// caller's runtime reloads mid-stream.
func TestEveryStreamKindRunsTheCallersEdgeOnEachMessage(t *testing.T) {
	srt := open(t, twoCallers, "echo")
	srv, addr := serve(t, "echo-0", srt.ServerOptions()...)
	for _, kind := range []struct {
		name string
		desc grpc.StreamDesc
	}{{"client-streaming", grpc.StreamDesc{ClientStreams: true}}, {"server-streaming", grpc.StreamDesc{ServerStreams: true}}} {
		for _, caller := range []struct {
			service string
			denied  bool
		}{{"web", true}, {"cart", false}} {
			name := kind.name + "/" + caller.service
			crt := open(t, twoCallers, caller.service)
			cs := openSayStream(t, dialConn(t, addr, crt.DialOptions()...), kind.desc)
			users := []string{"alice", "mallory"}
			if !kind.desc.ClientStreams {
				users = users[1:]
			}
			for i, user := range users {
				if i == 1 {
					// The stream keeps the stamp it opened with; the caller's service is
					// the same in every version.
					if err := crt.ReloadYAML(strings.Replace(twoCallers, "- metrics", "- metrics\n      - logging", 1), echoDir); err != nil {
						t.Fatal(err)
					}
				}
				if err := cs.SendMsg(&echopb.SayRequest{User: user, Body: user}); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
			}
			if err := cs.CloseSend(); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			var last error
			for {
				var reply echopb.SayReply
				if err := cs.RecvMsg(&reply); err != nil {
					if err != io.EOF {
						last = err
					}
					break
				}
			}
			if caller.denied {
				wantCode(t, last, codes.PermissionDenied, "acl")
				continue
			}
			// The echo handler answers each message, which a client-streaming call takes
			// for one reply too many once mallory's has reached it.
			if st, _ := status.FromError(last); last != nil && !(kind.desc.ClientStreams && strings.Contains(st.Message(), "cardinality")) {
				t.Fatalf("%s: cart's edge has no firewall: %v", name, last)
			}
			if req, _ := srv.lastRequest(); req.GetUser() != "mallory" {
				t.Fatalf("%s: mallory's message did not reach the handler: %v", name, req)
			}
		}
	}
	if n := srt.Counters().UnknownCallers; n != 0 {
		t.Fatalf("UnknownCallers = %d, want 0", n)
	}
}

// proxy serves echo.Echo by calling the next hop with the metadata it received, as an
// application passing on its caller's headers does.
type proxy struct {
	echopb.UnimplementedEchoServer
	next echopb.EchoClient
}

func (p *proxy) Say(ctx context.Context, req *echopb.SayRequest) (*echopb.SayReply, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	return p.next.Say(metadata.NewOutgoingContext(ctx, md), req)
}

// serveProxy serves echo.Echo with a proxy whose calls to next go through rt's client side
// and its own requests through rt's server side; it returns the proxy's address.
func serveProxy(t *testing.T, rt *weft.Runtime, next string) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(rt.ServerOptions()...)
	echopb.RegisterEchoServer(srv, &proxy{next: dial(t, next, rt.DialOptions()...)})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// TestAProxyPassingOnItsCallersMetadataIsNamedAsItself: cart serves front's calls of
// echo.Echo/Say and makes its own, to echo, copying the request's metadata (front's stamp
// among it) onto them. Its Weft client restamps with its own service, so echo runs cart's
// edge; front's stamp would name no caller echo has an edge from.
func TestAProxyPassingOnItsCallersMetadataIsNamedAsItself(t *testing.T) {
	const config = twoCallers + `  front->cart:
    from: front
    to: cart
    method: echo.Echo/Say
    server:
      - metrics
`
	srt := open(t, config, "echo")
	srv, addr := serve(t, "echo-0", srt.ServerOptions()...)
	cartRT := open(t, config, "cart")
	proxyAddr := serveProxy(t, cartRT, addr)
	front := dial(t, proxyAddr, open(t, config, "front").DialOptions()...)

	r, err := front.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "via cart"})
	if err != nil || r.GetBody() != "via cart" {
		t.Fatalf("echo should run cart's edge on cart's call: %v %v", r, err)
	}
	_, md := srv.lastRequest()
	if stamps := md.Get("weft-version"); len(stamps) != 1 || !strings.HasSuffix(stamps[0], "/cart") {
		t.Fatalf("echo should see one stamp naming cart: %v", stamps)
	}
	if n := srt.Counters().UnknownCallers; n != 0 {
		t.Fatalf("UnknownCallers = %d, want 0", n)
	}
	// Straight from web, web's firewall applies.
	_, err = dial(t, addr, open(t, config, "web").DialOptions()...).Say(ctx(t), &echopb.SayRequest{User: "mallory"})
	wantCode(t, err, codes.PermissionDenied, "acl")
}

// TestACallerWithoutItsEdgeYetIsNamedByItsCallerStamp: the config that adds cart's edge
// into echo.Echo/* has reached the server but not cart, whose runtime runs no chain for the
// call. Its binding still names cart ("/cart"), so the server runs cart's edge rather than
// refuse an unknown caller while the config rolls out. A stamp copied from an incoming call
// names cart instead: its service's client side did not run for this call.
func TestACallerWithoutItsEdgeYetIsNamedByItsCallerStamp(t *testing.T) {
	// cart runs Weft (a runtime needs an edge to or from its service) but has no edge
	// into echo yet.
	before := twoCallers[:strings.Index(twoCallers, "  cart->echo:")] + `  web->cart:
    from: web
    to: cart
    method: echo.Echo/*
    server:
      - metrics
`
	srt := open(t, twoCallers, "echo")
	srv, addr := serve(t, "echo-0", srt.ServerOptions()...)
	for _, codec := range []bool{true, false} {
		crt := open(t, before, "cart")
		opts := crt.DialOptions()
		if !codec {
			opts = []grpc.DialOption{grpc.WithChainUnaryInterceptor(crt.UnaryClientInterceptor()),
				grpc.WithChainStreamInterceptor(crt.StreamClientInterceptor())}
		}
		cart := dial(t, addr, opts...)
		r, err := cart.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "from cart"})
		if err != nil || r.GetBody() != "from cart" {
			t.Fatalf("codec %v: cart's edge, which has no firewall: %v %v", codec, r, err)
		}
		if _, md := srv.lastRequest(); !slices.Equal(md.Get("weft-version"), []string{"/cart"}) {
			t.Fatalf("codec %v: the stamp should be cart's caller stamp: %v", codec, md)
		}

		// A stream opens with the caller stamp in its headers.
		stream, err := cart.SayStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&echopb.SayRequest{User: "mallory", Body: "streamed"}); err != nil {
			t.Fatalf("codec %v: %v", codec, err)
		}
		if r, err := stream.Recv(); err != nil || r.GetBody() != "streamed" {
			t.Fatalf("codec %v: a stream from cart runs cart's edge: %v %v", codec, r, err)
		}
		if err := stream.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != io.EOF {
			t.Fatalf("codec %v: the stream's end: %v", codec, err)
		}

		// A stamp copied from an incoming call names web, whose client side did not run
		// for this call: cart replaces web in it, keeping the version, and web's firewall
		// does not run.
		withStamp := metadata.AppendToOutgoingContext(ctx(t), "weft-version", "0123456789abcdef/web")
		if _, err := cart.Say(withStamp, &echopb.SayRequest{User: "mallory"}); err != nil {
			t.Fatalf("codec %v: cart's edge for a call passing web's stamp on: %v", codec, err)
		}
		if _, md := srv.lastRequest(); !slices.Equal(md.Get("weft-version"), []string{"0123456789abcdef/cart"}) {
			t.Fatalf("codec %v: one stamp, naming cart: %v", codec, md)
		}
	}
	if n := srt.Counters().UnknownCallers; n != 0 {
		t.Fatalf("UnknownCallers = %d, want 0", n)
	}
	// A caller without Weft names nobody and is still refused.
	_, err := dial(t, addr).Say(ctx(t), &echopb.SayRequest{User: "alice"})
	wantCode(t, err, codes.PermissionDenied, "does not say which service it comes from")
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

// A second caller's edge added by a reload, then taken away again, on a method whose one
// edge's request path could wait (metrics): with several callers the binding passes every
// key and runs the request path first, so the firewall of frontend's edge stops mallory
// before the handler and a caller without Weft is refused; with one edge again, everyone
// runs it.
func TestAReloadBetweenOneAndSeveralCallersOfADeferredMethod(t *testing.T) {
	one := edge("echo.Echo/Say", "    server:\n      - metrics\n")
	several := edge("echo.Echo/Say", "    server:\n      - metrics\n      - firewall: {field: user, deny: [mallory]}\n") +
		"  cart->echo:\n    from: cart\n    to: echo\n    method: echo.Echo/Say\n    server:\n      - metrics\n"
	// frontend's first RPC is deferred; the server reloads during its handler, so its
	// request path runs late, in the version of several callers: mallory is refused after
	// the handler ran (docs/go.md, "Deferred request paths").
	frontend, impl := reloadDuringFirstHandler(t, one, several, echoDir)
	_, err := frontend.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "hi"})
	wantCode(t, err, codes.PermissionDenied, "acl")
	if n := impl.calls.Load(); n != 1 {
		t.Fatalf("handler calls: %d, want 1", n)
	}
	// The client is a version behind; its stamp still names frontend.
	_, err = frontend.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "hi"})
	wantCode(t, err, codes.PermissionDenied, "acl")
	if n := impl.calls.Load(); n != 1 {
		t.Fatalf("handler calls: %d, want 1: mallory's request reached the handler", n)
	}
	if _, err := frontend.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
	cart := dial(t, impl.addr, open(t, several, "cart").DialOptions()...)
	if _, err := cart.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "hi"}); err != nil {
		t.Fatalf("cart's edge has no firewall: %v", err)
	}
	plain := dial(t, impl.addr)
	_, err = plain.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"})
	wantCode(t, err, codes.PermissionDenied, "does not say which service")
	if n := impl.calls.Load(); n != 3 {
		t.Fatalf("handler calls: %d, want 3", n)
	}

	if err := impl.rt.ReloadYAML(one, echoDir); err != nil {
		t.Fatal(err)
	}
	for _, c := range []echopb.EchoClient{plain, cart, frontend} {
		if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "hi"}); err != nil {
			t.Fatalf("one edge again, without a firewall: %v", err)
		}
	}
	if n := impl.rt.Counters().UnknownCallers; n != 1 {
		t.Fatalf("UnknownCallers = %d, want 1", n)
	}
}

// TestAForwardingServiceWithoutAnEdgeKeepsItsCallersVersion: cart, a Weft service with no
// edge into echo, serves web's calls of echo.Echo/Say by passing them on with the metadata it
// received, web's stamp among it. Its binding names cart in the stamp but keeps the version
// web's client half ran, as the library does on a call it has an edge for: echo, reloaded
// while an RPC of that version is in flight, runs the server half of the same version.
// Replacing the whole stamp with "/cart" ran echo's new version on web's request.
func TestAForwardingServiceWithoutAnEdgeKeepsItsCallersVersion(t *testing.T) {
	cfg := func(deny string) string {
		return `protos: [echo.proto]
edges:
  web->echo:
    from: web
    to: echo
    method: echo.Echo/Say
    server:
      - metrics
      - firewall: {field: user, deny: [` + deny + `]}
  cart->web:
    from: cart
    to: web
    method: echo.Echo/SayStream
    client:
      - metrics
`
	}
	srt := open(t, cfg("mallory"), "echo")
	release := make(chan struct{})
	impl := &slowEcho{}
	impl.during = func() {
		if impl.calls.Load() == 1 {
			<-release
		}
	}
	addr := serveSlow(t, impl, srt.ServerOptions()...)
	cartRT := open(t, cfg("mallory"), "cart")
	proxyAddr := serveProxy(t, cartRT, addr)
	webRT := open(t, cfg("mallory"), "web")
	web := dial(t, addr, webRT.DialOptions()...)
	viaCart := dial(t, proxyAddr, webRT.DialOptions()...)

	// An RPC of the first version waits in echo's handler, keeping that version alive
	// there while echo reloads; web and cart stay on it.
	first := make(chan error, 1)
	go func() {
		_, err := web.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "held"})
		first <- err
	}()
	for impl.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := srt.ReloadYAML(cfg("eve"), echoDir); err != nil {
		t.Fatal(err)
	}
	_, err := web.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "direct"})
	wantCode(t, err, codes.PermissionDenied, "acl")
	_, err = viaCart.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "via cart"})
	wantCode(t, err, codes.PermissionDenied, "acl")
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if n := impl.calls.Load(); n != 1 {
		t.Fatalf("handler calls: %d, want 1: mallory's requests ran echo's new version", n)
	}
}
