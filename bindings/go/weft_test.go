package weft_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

func edge(method, body string) string {
	return `protos: [echo.proto]
edges:
  frontend->echo:
    from: frontend
    to: echo
    method: ` + method + `
` + body
}

func wantCode(t *testing.T, err error, code codes.Code, msgPart string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != code {
		t.Fatalf("got %v, want %s", err, code)
	}
	if !strings.Contains(st.Message(), msgPart) {
		t.Fatalf("status message %q does not mention %q", st.Message(), msgPart)
	}
}

func TestFirewallDeniesListedUser(t *testing.T) {
	c, srv := mesh(t, edge("echo.Echo/Say", `    any:
      - firewall: {field: user, deny: [mallory]}
`))
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "let me in"}); err == nil {
		t.Fatal("mallory got through")
	} else {
		wantCode(t, err, codes.PermissionDenied, "acl")
	}
	r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"})
	if err != nil || r.GetBody() != "hi" {
		t.Fatalf("alice: %v %v", r, err)
	}
	if n := srv.calls.Load(); n != 1 {
		t.Fatalf("server saw %d calls, want 1 (only alice's)", n)
	}
	// The first Weft hop stamps the version every later hop runs.
	if _, md := srv.lastRequest(); len(md.Get("weft-version")) != 1 {
		t.Fatalf("the server did not receive a weft-version stamp: %v", md)
	}
}

// A config that type-checks but does nothing as meant (a firewall denying an enum value by
// name: the language reads the enum's number) runs, and Warnings says so where the config
// has it, until a reload fixes it. A config with nothing to say has no warnings.
func TestWarningsSayWhatLoadingWarnedOf(t *testing.T) {
	if w := open(t, edge("echo.Echo/Say", "    any: [logging]\n"), "frontend").Warnings(); w != "" {
		t.Fatalf("warnings for a plain config: %q", w)
	}
	shop := repoPath("ir/tests/diagnostics")
	config := func(deny string) string {
		return "protos: [shop.proto]\nedges:\n  shop:\n    from: app\n    to: shop\n" +
			"    method: diag.Shop/Track\n    client:\n      - firewall: {field: speed, deny: [" + deny + "]}\n"
	}
	rt, err := weft.OpenYAML(config("EXPRESS"), shop, "app")
	if err != nil {
		t.Fatalf("a warning must not stop the config: %v", err)
	}
	defer rt.Close()
	w := rt.Warnings()
	for _, want := range []string{"warning:", "`deny` has `EXPRESS`, the name of value 2 of enum `diag.Speed`", "'2'"} {
		if !strings.Contains(w, want) {
			t.Fatalf("warnings %q do not say %q", w, want)
		}
	}
	if err := rt.ReloadYAML(config("'2'"), shop); err != nil {
		t.Fatal(err)
	}
	if w := rt.Warnings(); w != "" {
		t.Fatalf("warnings after the fix: %q", w)
	}
	_ = rt.Close()
	if w := rt.Warnings(); w != "" {
		t.Fatalf("warnings after Close: %q", w)
	}
}

func TestRateLimitExhaustsAfterBurst(t *testing.T) {
	c, srv := mesh(t, edge("echo.Echo/Say", `    any:
      - ratelimit: {capacity: 3, rate: 0.001}
`))
	for i := range 3 {
		if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: fmt.Sprint(i)}); err != nil {
			t.Fatalf("request %d within the burst: %v", i, err)
		}
	}
	_, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "one too many"})
	wantCode(t, err, codes.ResourceExhausted, "ratelimit")
	if n := srv.calls.Load(); n != 3 {
		t.Fatalf("server saw %d calls, want 3", n)
	}
}

func TestCacheAnswersRepeatWithoutServer(t *testing.T) {
	c, srv := mesh(t, edge("echo.Echo/Say", `    any:
      - cache: {field: body}
`))
	first, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := c.Say(ctx(t), &echopb.SayRequest{User: "bob", Body: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.calls.Load(); n != 1 {
		t.Fatalf("server saw %d calls, want 1: the repeat should be answered by the cache", n)
	}
	if second.GetBody() != first.GetBody() || second.GetServedBy() != "echo-0" {
		t.Fatalf("cached reply %v differs from the first %v", second, first)
	}
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "other"}); err != nil {
		t.Fatal(err)
	}
	if n := srv.calls.Load(); n != 2 {
		t.Fatalf("server saw %d calls, want 2 after a new body", n)
	}
}

func TestMutationVisibleAtServer(t *testing.T) {
	c, srv := mesh(t, edge("echo.Echo/Say", `    any:
      - mutation: {field: body, prefix: 'weft-'}
`))
	r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := srv.lastRequest()
	if req.GetBody() != "weft-hi" || r.GetBody() != "weft-hi" {
		t.Fatalf("server saw %q, client got %q; want weft-hi", req.GetBody(), r.GetBody())
	}
	if req.GetUser() != "alice" {
		t.Fatalf("the rewrite lost another field: user %q", req.GetUser())
	}
}

// plaintextGuard rejects a request whose body is the plaintext: placed between encrypt and
// decrypt, it proves what travels between them is ciphertext.
const plaintextGuard = `state:
    pass

init(secret: string):
    pass

req(rpc):
    if get(rpc, 'body') == secret:
        send(err('guard saw the plaintext', FAILED_PRECONDITION), Up)
    else:
        send(rpc, Down)

resp(rpc):
    send(rpc, Up)
`

func TestEncryptOnClientDecryptOnServer(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "guard.weft"), []byte(plaintextGuard), 0o644); err != nil {
		t.Fatal(err)
	}
	proto := filepath.Join(echoDir, "echo.proto")
	chain := func(withPair bool) string {
		y := "protos: [" + proto + "]\nelement_paths: [" + dir + "]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n"
		if withPair {
			y += "    pair:\n      - [encrypt: {field: body, key: s3cret}, decrypt: {field: body, key: s3cret}]\n"
		}
		return y + "    any:\n      - guard: {secret: top secret}\n"
	}

	c, srv := mesh(t, chain(true))
	r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "top secret"})
	if err != nil {
		t.Fatalf("with the pair the guard must see ciphertext, got %v", err)
	}
	req, _ := srv.lastRequest()
	if req.GetBody() != "top secret" || r.GetBody() != "top secret" {
		t.Fatalf("server saw %q, client got %q; want the decrypted plaintext", req.GetBody(), r.GetBody())
	}

	// The same guard without the pair sees the plaintext: it really reads the body.
	c2, srv2 := mesh(t, chain(false))
	_, err = c2.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "top secret"})
	wantCode(t, err, codes.FailedPrecondition, "guard saw the plaintext")
	if srv2.calls.Load() != 0 {
		t.Fatal("the guard's rejection reached the server")
	}
}

func TestLoadBalanceAcrossThreeReplicasByDst(t *testing.T) {
	yaml := edge("echo.Echo/*", `    client:
      - element: loadbalance
        params: {policy: round_robin}
        state:
          replicas: [echo-0, echo-1, echo-2]
`)
	srt := open(t, yaml, "echo")
	crt := open(t, yaml, "frontend")
	var replicas []weft.Replica
	servers := map[string]*echoServer{}
	for i := range 3 {
		name := fmt.Sprintf("echo-%d", i)
		impl, addr := serve(t, name, srt.ServerOptions()...)
		servers[name] = impl
		replicas = append(replicas, weft.Replica{Name: name, Addr: addr})
	}
	target, lb := weft.Replicas(replicas...)
	c := dial(t, target, append(crt.DialOptions(), lb...)...)

	var got []string
	for i := range 6 {
		r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: fmt.Sprint(i)})
		if err != nil {
			t.Fatalf("rpc %d: %v", i, err)
		}
		got = append(got, r.GetServedBy())
	}
	// In turn, from a random place.
	list := []string{"echo-0", "echo-1", "echo-2"}
	start := slices.Index(list, got[0])
	var want []string
	for k := range 6 {
		want = append(want, turn(list, start, k))
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("served by %v, want round robin %v", got, want)
	}

	for name, s := range servers {
		if n := s.calls.Load(); n != 2 {
			t.Fatalf("%s saw %d calls, want 2", name, n)
		}
		if _, md := s.lastRequest(); strings.Join(md.Get("dst"), "") != name {
			t.Fatalf("%s received dst %v", name, md.Get("dst"))
		}
	}

	// A stream is routed by its first message: round robin is back where it started.
	back := list[start]
	stream, err := c.SayStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&echopb.SayRequest{User: "alice", Body: "s"}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetServedBy() != back {
		t.Fatalf("stream: served by %q (%v), want %s", r.GetServedBy(), err, back)
	}
	_ = stream.CloseSend()
	if n := servers[back].calls.Load(); n != 3 {
		t.Fatalf("%s saw %d calls after the stream, want 3", back, n)
	}
	if _, md := servers[back].lastRequest(); strings.Join(md.Get("dst"), "") != back {
		t.Fatalf("the stream reached %s with dst %v", back, md.Get("dst"))
	}
}

func TestStreamEveryMessagePassesTheChain(t *testing.T) {
	c, srv := mesh(t, edge("echo.Echo/*", `    any:
      - firewall: {field: user, deny: [mallory]}
      - mutation: {field: body, prefix: 'weft-'}
`))
	stream, err := c.SayStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := stream.Send(&echopb.SayRequest{User: "alice", Body: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("weft-%d", i); r.GetBody() != want {
			t.Fatalf("message %d came back as %q, want %q", i, r.GetBody(), want)
		}
	}
	if n := srv.calls.Load(); n != 3 {
		t.Fatalf("server saw %d messages, want 3", n)
	}
	// The stream opened with the first message's stamp.
	if _, md := srv.lastRequest(); len(md.Get("weft-version")) != 1 {
		t.Fatalf("the stream reached the server without a weft-version stamp: %v", md)
	}
	// A message the firewall denies fails the stream with the chain's status.
	err = stream.Send(&echopb.SayRequest{User: "mallory", Body: "x"})
	if err == nil {
		_, err = stream.Recv()
	}
	wantCode(t, err, codes.PermissionDenied, "acl")
	if n := srv.calls.Load(); n != 3 {
		t.Fatalf("server saw %d messages after the denial, want 3", n)
	}
}

// rawCodec sends bytes as they are: a caller that produces a corrupt payload.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

var _ encoding.CodecV2 = rawCodec{}

func TestCorruptPayloadIsInvalidArgument(t *testing.T) {
	err := callWithCorruptPayload(t, `    server:
      - firewall: {field: user, deny: [mallory]}
`)
	t.Logf("caller sees: %v", err)
}

// sendCorruptSay calls echo.Echo/Say at addr, without Weft, with bytes that do not decode:
// field 1 (user) as a length-delimited string claiming 100 bytes, with 2 present.
func sendCorruptSay(t *testing.T, addr string) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	corrupt := []byte{0x0a, 0x64, 'h', 'i'}
	var reply []byte
	return conn.Invoke(ctx(t), "/echo.Echo/Say", &corrupt, &reply)
}

// callWithCorruptPayload sends bytes that do not decode to a server running the edge's
// server side, checks the caller gets INVALID_ARGUMENT and the handler never runs, and
// returns the caller's error.
func callWithCorruptPayload(t *testing.T, server string) error {
	t.Helper()
	srt := open(t, edge("echo.Echo/Say", server), "echo")
	srv, addr := serve(t, "echo-0", srt.ServerOptions()...)
	err := sendCorruptSay(t, addr)
	wantCode(t, err, codes.InvalidArgument, "")
	if srv.calls.Load() != 0 {
		t.Fatal("a corrupt request reached the handler")
	}
	if c := srt.Counters(); c != (weft.Counters{MalformedRPCs: 1}) {
		t.Fatalf("counters after one corrupt request: %+v", c)
	}
	return err
}

// A corrupt request that arrives while the server's cached metadata keys are a version
// old (a reload in between) is retried with everything passed: the retry must pass the
// bytes that arrived, not a re-encoding of the half-decoded request, which would be
// well-formed. Here the new version's whole-message check must refuse it before its rate
// limiter spends the only token; the next good request then passes.
func TestACorruptRequestRetriedAfterAReloadIsRefusedBeforeTheChain(t *testing.T) {
	srt := open(t, edge("echo.Echo/Say", "    server:\n      - metrics\n"), "echo")
	srv, addr := serve(t, "echo-0", srt.ServerOptions()...)
	c := dial(t, addr)
	// A first call fetches the keys of version 1, whose chain observes no request.
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
	limited := edge("echo.Echo/Say", `    server:
      - ratelimit: {capacity: 1, rate: 0.000001}
      - firewall: {field: user, deny: [mallory]}
`)
	if err := srt.ReloadYAML(limited, echoDir); err != nil {
		t.Fatal(err)
	}
	wantCode(t, sendCorruptSay(t, addr), codes.InvalidArgument, "")
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
		t.Fatalf("the corrupt request spent the rate limiter's token: %v", err)
	}
	if n := srv.calls.Load(); n != 2 {
		t.Fatalf("the handler ran %d times, want 2 (the good requests)", n)
	}
}

// A reply that does not decode fails the call with INTERNAL, as in grpc-go, and is counted,
// whether or not the client chain has a response path.
func TestCorruptReplyIsCounted(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A server that answers every call with bytes that are not a SayReply: field 1 claims
	// 100 bytes and has 2.
	srv := grpc.NewServer(grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(func(_ any, stream grpc.ServerStream) error {
			var in []byte
			if err := stream.RecvMsg(&in); err != nil {
				return err
			}
			out := []byte{0x0a, 0x64, 'h', 'i'}
			return stream.SendMsg(&out)
		}))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	for _, client := range []string{"firewall: {field: user, deny: [mallory]}", "metrics"} {
		rt := open(t, edge("echo.Echo/Say", "    client:\n      - "+client+"\n"), "frontend")
		conn, err := grpc.NewClient(lis.Addr().String(), append(rt.DialOptions(),
			grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		_, err = echopb.NewEchoClient(conn).Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"})
		_ = conn.Close()
		wantCode(t, err, codes.Internal, "")
		if c := rt.Counters(); c != (weft.Counters{MalformedRPCs: 1}) {
			t.Fatalf("%s: counters after one corrupt reply: %+v", client, c)
		}
	}
}

// openServerElement opens the echo service's runtime with element `name` (its source given)
// as the server side of frontend->echo, listed as `entry` (a name, or a mapping's lines).
func openServerElement(t *testing.T, name, source, entry string) *weft.Runtime {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "elements"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "elements", name+".weft"), []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	yaml := "protos: [" + filepath.Join(echoDir, "echo.proto") + "]\nelement_paths: [elements]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n    server:\n      - " + entry + "\n"
	rt, err := weft.OpenYAML(yaml, dir, "echo")
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// An element that fails at run time rejects the RPC with INTERNAL and is counted, and the
// count survives Close.
func TestElementErrorsAreCounted(t *testing.T) {
	divide := "state:\n    quotient: int\n\ninit():\n    pass\n\nreq(rpc):\n    quotient = 100 / get(rpc, 'priority')\n    send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n"
	rt := openServerElement(t, "divide", divide, "divide")
	srv, addr := serve(t, "echo-0", rt.ServerOptions()...)
	c := dial(t, addr)
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi", Priority: 4}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}) // 100 / 0
	wantCode(t, err, codes.Internal, "")
	if n := srv.calls.Load(); n != 1 {
		t.Fatalf("the handler saw %d calls, want 1", n)
	}
	want := weft.Counters{ElementErrors: 1}
	if got := rt.Counters(); got != want {
		t.Fatalf("counters: %+v, want %+v", got, want)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if got := rt.Counters(); got != want {
		t.Fatalf("counters after Close: %+v, want %+v", got, want)
	}
}

// An RPC whose handler passes its element's max_iterations is an element error counted
// apart as well, so an operator can tell a limit set too low from an element that fails.
func TestIterationLimitRejectionsAreCountedApart(t *testing.T) {
	count := "state:\n    tags: int\n\ninit():\n    pass\n\nreq(rpc):\n    foreach(get(rpc, 'tags'), lambda(t):\n        tags = tags + 1\n    )\n    send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n"
	rt := openServerElement(t, "tagcount", count, "element: tagcount\n        max_iterations: 2")
	defer rt.Close()
	srv, addr := serve(t, "echo-0", rt.ServerOptions()...)
	c := dial(t, addr)
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Tags: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Tags: []string{"a", "b", "c"}})
	wantCode(t, err, codes.Internal, "")
	if n := srv.calls.Load(); n != 1 {
		t.Fatalf("the handler saw %d calls, want 1", n)
	}
	want := weft.Counters{ElementErrors: 1, IterationLimited: 1}
	if got := rt.Counters(); got != want {
		t.Fatalf("counters: %+v, want %+v", got, want)
	}
}

// A server chain that reads no message (metrics) is passed none; one that does (a firewall)
// gets the request's bytes on its first call, before the codec has learnt to keep them, and
// on every later one.
func TestServerChainGetsTheRequestOnlyWhenItReadsIt(t *testing.T) {
	for _, tc := range []struct {
		server string
		denies bool
	}{
		{"      - metrics\n", false},
		{"      - firewall: {field: user, deny: [mallory]}\n      - metrics\n", true},
	} {
		// Plain grpc-go on the client: the server is the only Weft hop.
		srt := open(t, edge("echo.Echo/Say", "    server:\n"+tc.server), "echo")
		srv, addr := serve(t, "echo-0", srt.ServerOptions()...)
		c := dial(t, addr)
		for i, user := range []string{"mallory", "alice", "mallory", "alice"} {
			r, err := c.Say(ctx(t), &echopb.SayRequest{User: user, Body: "hi"})
			if tc.denies && user == "mallory" {
				wantCode(t, err, codes.PermissionDenied, "")
				continue
			}
			if err != nil || r.GetBody() != "hi" {
				t.Fatalf("%q call %d (%s): %v %v", tc.server, i, user, r, err)
			}
		}
		want := int64(4)
		if tc.denies {
			want = 2
		}
		if n := srv.calls.Load(); n != want {
			t.Fatalf("%q: the handler saw %d calls, want %d", tc.server, n, want)
		}
	}
}

// A corrupt request is INVALID_ARGUMENT even when the server chain reads no message.
func TestCorruptPayloadIsInvalidArgumentWhenTheChainReadsNoMessage(t *testing.T) {
	callWithCorruptPayload(t, "    server:\n      - metrics\n")
}

func TestBadConfigIsAnErrorNamingTheProblem(t *testing.T) {
	_, err := weft.Open("/nonexistent/weft.yaml", "echo")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/weft.yaml") {
		t.Fatalf("missing config: %v", err)
	}
	_, err = weft.OpenYAML(edge("echo.Echo/Say", "    any:\n      - no_such_element\n"), echoDir, "echo")
	if err == nil || !strings.Contains(err.Error(), "no_such_element") {
		t.Fatalf("unknown element: %v", err)
	}
	_, err = weft.OpenYAML("edges: [unclosed\n", echoDir, "echo")
	if err == nil {
		t.Fatal("broken YAML loaded")
	}
	t.Logf("operator sees: %v", err)
}

func TestReloadWithBrokenElementKeepsOldVersion(t *testing.T) {
	dir := t.TempDir()
	elem := filepath.Join(dir, "elements", "guard.weft")
	if err := os.MkdirAll(filepath.Dir(elem), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(elem, []byte(plaintextGuard), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "weft.yaml")
	yaml := "protos: [" + filepath.Join(echoDir, "echo.proto") + "]\nelement_paths: [elements]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n    server:\n      - guard: {secret: forbidden}\n"
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	rt, err := weft.Open(cfg, "echo")
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	_, addr := serve(t, "echo-0", rt.ServerOptions()...)
	c := dial(t, addr)
	before := rt.Version()

	broken := strings.Replace(plaintextGuard, "get(rpc, 'body') == secret", "get(rpc, 'body') == = secret", 1)
	if err := os.WriteFile(elem, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	err = rt.Reload()
	if err == nil {
		t.Fatal("a broken element reloaded without error")
	}
	if !strings.Contains(err.Error(), "guard.weft") {
		t.Fatalf("the reload error does not point at the element: %v", err)
	}
	t.Logf("operator sees: %v", err)
	if rt.Version() != before {
		t.Fatalf("version moved from %d to %d after a failed reload", before, rt.Version())
	}
	// The old guard still runs.
	_, err = c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "forbidden"})
	wantCode(t, err, codes.FailedPrecondition, "guard")
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "fine"}); err != nil {
		t.Fatal(err)
	}
}

func TestClosedRuntimeFailsRPCs(t *testing.T) {
	yaml := edge("echo.Echo/Say", "    any:\n      - firewall: {field: user, deny: [mallory]}\n")
	crt, err := weft.OpenYAML(yaml, echoDir, "frontend")
	if err != nil {
		t.Fatal(err)
	}
	srt := open(t, yaml, "echo")
	_, addr := serve(t, "echo-0", srt.ServerOptions()...)
	c := dial(t, addr, crt.DialOptions()...)
	if err := crt.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Say(ctx(t), &echopb.SayRequest{User: "alice"})
	wantCode(t, err, codes.Unavailable, "closed")
	if err := crt.Reload(); !errors.Is(err, weft.ErrClosed) {
		t.Fatalf("reload after close: %v", err)
	}
}

// A service with no edge for a method passes the RPC through untouched.
func TestNoEdgePassesThrough(t *testing.T) {
	c, srv := mesh(t, edge("echo.Echo/SayStream", "    any:\n      - firewall: {field: user, deny: [mallory]}\n"))
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "mallory", Body: "x"}); err != nil {
		t.Fatalf("Say has no edge, yet: %v", err)
	}
	if srv.calls.Load() != 1 {
		t.Fatal("the call did not reach the server")
	}
}

// The interceptors also work on their own, with grpc-go's default codec (then each message is
// encoded once more for Weft).
func TestInterceptorsWithoutWeftCodec(t *testing.T) {
	yaml := edge("echo.Echo/*", `    any:
      - mutation: {field: body, prefix: 'weft-'}
      - cache: {field: user}
`)
	srt := open(t, yaml, "echo")
	crt := open(t, yaml, "frontend")
	srv, addr := serve(t, "echo-0",
		grpc.UnaryInterceptor(srt.UnaryServerInterceptor()),
		grpc.StreamInterceptor(srt.StreamServerInterceptor()))
	c := dial(t, addr,
		grpc.WithUnaryInterceptor(crt.UnaryClientInterceptor()),
		grpc.WithStreamInterceptor(crt.StreamClientInterceptor()))
	r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"})
	if err != nil || r.GetBody() != "weft-hi" {
		t.Fatalf("got %v, %v; want weft-hi", r, err)
	}
	r, err = c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "again"})
	if err != nil || r.GetBody() != "weft-hi" || srv.calls.Load() != 1 {
		t.Fatalf("cache: got %v, %v after %d server calls", r, err, srv.calls.Load())
	}
	stream, err := c.SayStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&echopb.SayRequest{User: "bob", Body: "s"}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetBody() != "weft-s" {
		t.Fatalf("stream: got %v, %v", r, err)
	}
	_ = stream.CloseSend()
}

// RPCs keep flowing while both processes' configs are reloaded: none fails because of it, and
// each side ends on a newer version.
func TestReloadUnderLoad(t *testing.T) {
	cfg := func(deny string) string {
		return edge("echo.Echo/Say", "    any:\n      - firewall: {field: user, deny: ["+deny+"]}\n      - ratelimit: {capacity: 1000000000.0, rate: 1000000000.0}\n")
	}
	srt := open(t, cfg("mallory"), "echo")
	crt := open(t, cfg("mallory"), "frontend")
	srv, addr := serve(t, "echo-0", srt.ServerOptions()...)
	c := dial(t, addr, crt.DialOptions()...)
	v0c, v0s := crt.Version(), srt.Version()

	const workers, perWorker = 4, 200
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range perWorker {
				if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: fmt.Sprint(w, i)}); err != nil {
					errs <- fmt.Errorf("worker %d rpc %d: %w", w, i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for i := range 20 {
		deny := []string{"mallory", "eve"}[i%2]
		if err := crt.ReloadYAML(cfg(deny), echoDir); err != nil {
			t.Fatal(err)
		}
		if err := srt.ReloadYAML(cfg(deny), echoDir); err != nil {
			t.Fatal(err)
		}
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.calls.Load(); n != workers*perWorker {
		t.Fatalf("server saw %d calls, want %d", n, workers*perWorker)
	}
	if crt.Version() <= v0c || srt.Version() <= v0s {
		t.Fatalf("versions did not advance: client %d→%d, server %d→%d", v0c, crt.Version(), v0s, srt.Version())
	}
}

// A rewrite larger than the call's output buffers: the library asks for more room and the
// binding grows them within the same cgo call; messages above grpc-go's pooling threshold take
// the pooled-buffer path.
func TestLargeRewrittenMessage(t *testing.T) {
	c, srv := mesh(t, edge("echo.Echo/*", `    any:
      - mutation: {field: body, prefix: 'weft-'}
`))
	body := strings.Repeat("x", 256<<10)
	r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: body})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := srv.lastRequest()
	if req.GetBody() != "weft-"+body || r.GetBody() != "weft-"+body {
		t.Fatalf("large body: server saw %d bytes, client got %d, want %d", len(req.GetBody()), len(r.GetBody()), len(body)+5)
	}
	stream, err := c.SayStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&echopb.SayRequest{User: "alice", Body: body}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetBody() != "weft-"+body {
		t.Fatalf("large stream message: %d bytes, %v", len(r.GetBody()), err)
	}
	_ = stream.CloseSend()
}

// The Go demo's config loads for both of its services, from its file.
func TestExampleConfigLoads(t *testing.T) {
	for _, svc := range []string{"frontend", "echo"} {
		rt, err := weft.Open(repoPath("examples/go-echo/weft.yaml"), svc)
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
		if rt.Version() != 1 || rt.Service() != svc {
			t.Fatalf("%s: version %d, service %q", svc, rt.Version(), rt.Service())
		}
		if err := rt.Reload(); err != nil {
			t.Fatalf("%s: reloading an unchanged file: %v", svc, err)
		}
		_ = rt.Close()
	}
}

// tenantGate reads one request header and writes another: the server passes the library only
// the keys the chain observes, and the handler must still see every other key.
const tenantGate = `state:
    pass

init():
    pass

req(rpc):
    if get_rpc_header(rpc, 'x-tenant') == 'blocked':
        send(err('tenant blocked', PERMISSION_DENIED), Up)
    else:
        set_rpc_header(rpc, 'x-gate', 'passed')
        send(rpc, Down)

resp(rpc):
    send(rpc, Up)
`

func TestServerSeesOnlyObservedKeysAndHandlerSeesAll(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gate.weft"), []byte(tenantGate), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := func(server string) string {
		return "protos: [" + filepath.Join(echoDir, "echo.proto") + "]\nelement_paths: [" + dir +
			"]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n    server:\n" + server
	}
	gate := cfg("      - gate\n")
	srt := open(t, gate, "echo")
	crt := open(t, gate, "frontend")
	srv, addr := serve(t, "echo-0", srt.ServerOptions()...)
	c := dial(t, addr, crt.DialOptions()...)
	call := func(tenant string) error {
		md := metadata.Pairs("x-tenant", tenant, "x-other", "kept", "x-bin-bin", "\xff\x00")
		_, err := c.Say(metadata.NewOutgoingContext(ctx(t), md), &echopb.SayRequest{User: "alice", Body: "hi"})
		return err
	}
	check := func(wantGate string) {
		t.Helper()
		if err := call("acme"); err != nil {
			t.Fatal(err)
		}
		_, md := srv.lastRequest()
		for k, want := range map[string]string{"x-tenant": "acme", "x-other": "kept", "x-bin-bin": "\xff\x00", "x-gate": wantGate} {
			got := md.Get(k)
			if (want == "" && len(got) != 0) || (want != "" && (len(got) != 1 || got[0] != want)) {
				t.Fatalf("handler saw %s = %q, want %q (all: %v)", k, got, want, md)
			}
		}
		if len(md.Get("weft-version")) != 1 || len(md.Get("user-agent")) == 0 {
			t.Fatalf("handler lost grpc-go's or Weft's metadata: %v", md)
		}
	}
	check("passed")
	wantCode(t, call("blocked"), codes.PermissionDenied, "tenant blocked")

	// A server-only reload changes what the chain observes; the client still stamps the old
	// version, which the server no longer has, so requests run the new one and the binding
	// learns its keys.
	if err := srt.ReloadYAML(cfg("      - metrics\n"), echoDir); err != nil {
		t.Fatal(err)
	}
	check("")
	if err := srt.ReloadYAML(gate, echoDir); err != nil {
		t.Fatal(err)
	}
	check("passed")
	wantCode(t, call("blocked"), codes.PermissionDenied, "tenant blocked")
}

// responseOnly is an element that passes requests on and runs `resp` (indented lines) on
// responses.
func responseOnly(resp string) string {
	return "state:\n    pass\n\ninit():\n    pass\n\nreq(rpc):\n    send(rpc, Down)\n\nresp(rpc):\n" + resp
}

// loadMark sets a response header on the server side, as prequal_server and
// servicerouter_server do.
var loadMark = responseOnly(`    set_rpc_header(rpc, 'x-load', '7')
    send(rpc, Up)
`)

// loadCheck reads it on the client side, as prequal_client and servicerouter_client do, and
// rejects a response without it; it also tells the application what it read.
var loadCheck = responseOnly(`    if get_rpc_header(rpc, 'x-load') == '7':
        set_rpc_header(rpc, 'x-seen', get_rpc_header(rpc, 'x-load'))
        send(rpc, Up)
    else:
        send(err('no x-load header', FAILED_PRECONDITION), Up)
`)

func TestClientChainSeesResponseHeaders(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{"loadmark.weft": loadMark, "loadcheck.weft": loadCheck} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := "protos: [" + filepath.Join(echoDir, "echo.proto") + "]\nelement_paths: [" + dir +
		"]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n" +
		"    client:\n      - loadcheck\n    server:\n      - loadmark\n"
	c, _ := mesh(t, cfg)
	var header metadata.MD
	r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}, grpc.Header(&header))
	if err != nil {
		t.Fatalf("the client chain must see the server chain's response header: %v", err)
	}
	if r.GetBody() != "hi" {
		t.Fatalf("reply body %q", r.GetBody())
	}
	if got := header.Get("x-seen"); len(got) != 1 || got[0] != "7" {
		t.Fatalf("the application's header option got x-seen = %q, want the chain's \"7\" (all: %v)", got, header)
	}

	// Without the server's element the header is missing, and the client chain says so.
	c2, _ := mesh(t, strings.Replace(cfg, "    server:\n      - loadmark\n", "", 1))
	_, err = c2.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"})
	wantCode(t, err, codes.FailedPrecondition, "no x-load header")
}

// appHeaderCheck, on the server side, reads a response header the handler set.
var appHeaderCheck = responseOnly(`    if get_rpc_header(rpc, 'x-app') == 'v1':
        set_rpc_header(rpc, 'x-app-seen', 'yes')
        send(rpc, Up)
    else:
        send(err('no x-app header', FAILED_PRECONDITION), Up)
`)

// appcheckMesh is a mesh whose server side runs appHeaderCheck on method.
func appcheckMesh(t *testing.T, method string) (echopb.EchoClient, *echoServer) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "appcheck.weft"), []byte(appHeaderCheck), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "protos: [" + filepath.Join(echoDir, "echo.proto") + "]\nelement_paths: [" + dir +
		"]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: " + method + "\n" +
		"    server:\n      - appcheck\n"
	return mesh(t, cfg)
}

func TestServerChainSeesHeadersTheHandlerSets(t *testing.T) {
	c, srv := appcheckMesh(t, "echo.Echo/Say")
	srv.setReplyMetadata(metadata.Pairs("x-app", "v1"), metadata.Pairs("x-done", "1"))
	var header, trailer metadata.MD
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatalf("the server chain must see the handler's header: %v", err)
	}
	// Each once, and the handler's trailer still a trailer after the chain changed the
	// response's metadata.
	for _, c := range []struct {
		md        metadata.MD
		key, want string
	}{{header, "x-app", "v1"}, {header, "x-app-seen", "yes"}, {trailer, "x-done", "1"}} {
		if got := c.md.Get(c.key); len(got) != 1 || got[0] != c.want {
			t.Fatalf("client got %s = %q, want %q (header %v, trailer %v)", c.key, got, c.want, header, trailer)
		}
	}

	srv.setReplyMetadata(nil, nil)
	_, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"})
	wantCode(t, err, codes.FailedPrecondition, "no x-app header")
}

// requestStrip, on the server side, removes the request's x-secret and adds x-tag.
const requestStrip = "state:\n    pass\n\ninit():\n    pass\n\nreq(rpc):\n" +
	"    set_rpc_header(rpc, 'x-secret', '')\n    set_rpc_header(rpc, 'x-tag', 'v')\n" +
	"    send(rpc, Down)\n\nresp(rpc):\n    send(rpc, Up)\n"

// The unary server interceptor passes the chain only the keys it observes and puts the
// chain's version of them back into the request's metadata: a key the chain removed must
// not reach the handler (it did, laid over the request's own), while keys the chain never
// saw stay.
func TestServerChainRemovesARequestHeader(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "strip.weft"), []byte(requestStrip), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "protos: [" + filepath.Join(echoDir, "echo.proto") + "]\nelement_paths: [" + dir +
		"]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: echo.Echo/Say\n" +
		"    server:\n      - strip\n"
	c, srv := mesh(t, cfg)
	call := metadata.AppendToOutgoingContext(ctx(t), "x-secret", "s3cret", "x-other", "o")
	if _, err := c.Say(call, &echopb.SayRequest{User: "alice", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
	_, md := srv.lastRequest()
	if got := md.Get("x-secret"); len(got) != 0 {
		t.Fatalf("the handler got x-secret = %q, which the chain removed (all: %v)", got, md)
	}
	for key, want := range map[string]string{"x-tag": "v", "x-other": "o"} {
		if got := md.Get(key); len(got) != 1 || got[0] != want {
			t.Fatalf("the handler got %s = %q, want %q (all: %v)", key, got, want, md)
		}
	}
}

// A unary handler may set headers and trailers from several goroutines, as grpc-go's own
// stream allows: Weft's recorder, which holds them for the response chain, must too. `make
// go-test` runs this under the race detector.
func TestConcurrentHeaderCallsOfAUnaryHandler(t *testing.T) {
	c, srv := appcheckMesh(t, "echo.Echo/Say")
	const n = 8
	srv.mu.Lock()
	srv.parallelMetadata = n
	srv.mu.Unlock()
	srv.setReplyMetadata(metadata.Pairs("x-app", "v1"), nil)
	for round := 0; round < 20; round++ {
		var header, trailer metadata.MD
		if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		for i := range n {
			h, tr := fmt.Sprintf("x-h%d", i), fmt.Sprintf("x-t%d", i)
			if len(header.Get(h)) != 1 || len(trailer.Get(tr)) != 1 {
				t.Fatalf("round %d: missing %s or %s (header %v, trailer %v)", round, h, tr, header, trailer)
			}
		}
		if got := header.Get("x-app-seen"); len(got) != 1 {
			t.Fatalf("round %d: the chain's header is missing: %v", round, header)
		}
	}
}

// On a server stream, the chain sees the headers the handler set with each response, and what
// it adds to them before the first message goes out reaches the client.
func TestServerStreamChainSeesHeadersTheHandlerSets(t *testing.T) {
	for _, viaContext := range []bool{false, true} {
		name := "stream.SetHeader"
		if viaContext {
			name = "grpc.SetHeader(stream.Context())"
		}
		t.Run(name, func(t *testing.T) { serverStreamChainSeesHandlerHeaders(t, viaContext) })
	}
}

func serverStreamChainSeesHandlerHeaders(t *testing.T, viaContext bool) {
	c, srv := appcheckMesh(t, "echo.Echo/SayStream")
	srv.mu.Lock()
	srv.headerViaContext = viaContext
	srv.mu.Unlock()
	srv.setReplyMetadata(metadata.Pairs("x-app", "v1"), nil)
	stream, err := c.SayStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := stream.Send(&echopb.SayRequest{User: "alice", Body: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("message %d: the server chain must see the handler's header: %v", i, err)
		}
	}
	header, err := stream.Header()
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"x-app": "v1", "x-app-seen": "yes"} {
		if got := header.Get(key); len(got) != 1 || got[0] != want {
			t.Fatalf("client got %s = %q, want %q (header %v)", key, got, want, header)
		}
	}
	_ = stream.CloseSend()

	srv.setReplyMetadata(nil, nil)
	stream, err = c.SayStream(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&echopb.SayRequest{User: "alice", Body: "x"}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	wantCode(t, err, codes.FailedPrecondition, "no x-app header")
}

// A stream handler that fails while a request waits for its response: that request's
// response path runs with the failure, so a breaker counting requests in flight counts it
// down (as the client side does when a stream fails).
func TestServerStreamFailureRunsTheWaitingResponsePath(t *testing.T) {
	c, _ := mesh(t, edge("echo.Echo/SayStream", `    server:
      - circuitbreaker: {max_pending: 1}
`))
	for range 2 {
		stream, err := c.SayStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&echopb.SayRequest{User: "alice", Body: "fail"}); err != nil {
			t.Fatal(err)
		}
		// Had the first stream's request stayed counted, the breaker would answer the
		// second with UNAVAILABLE before the handler ran.
		_, err = stream.Recv()
		wantCode(t, err, codes.Aborted, "failing as asked")
	}
}

// A server chain that observes no metadata (metrics) leaves the handler's headers and
// trailers to grpc-go, unrecorded: they still arrive, once each.
func TestHandlerMetadataPassesAChainThatObservesNone(t *testing.T) {
	cfg := "protos: [" + filepath.Join(echoDir, "echo.proto") + "]\nedges:\n  frontend->echo:\n" +
		"    from: frontend\n    to: echo\n    method: echo.Echo/Say\n    server:\n      - metrics\n"
	c, srv := mesh(t, cfg)
	srv.setReplyMetadata(metadata.Pairs("x-app", "v1"), metadata.Pairs("x-done", "1"))
	var header, trailer metadata.MD
	if _, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if got := header.Get("x-app"); len(got) != 1 || got[0] != "v1" {
		t.Fatalf("header x-app = %q, want [v1] (header %v)", got, header)
	}
	if got := trailer.Get("x-done"); len(got) != 1 || got[0] != "1" {
		t.Fatalf("trailer x-done = %q, want [1] (trailer %v)", got, trailer)
	}
}

// protoV1 is a codec of grpc-go's older interface, as an application may force per call.
type protoV1 struct{}

func (protoV1) Name() string                       { return "proto" }
func (protoV1) Marshal(v any) ([]byte, error)      { return proto.Marshal(v.(proto.Message)) }
func (protoV1) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }

// A per-call codec of the older interface replaces Weft's on that call: the interceptor
// must then pass messages, not Weft's pre-encoded bytes, which that codec cannot marshal.
func TestAPerCallCodecOfTheOlderInterfaceReplacesWefts(t *testing.T) {
	c, srv := mesh(t, edge("echo.Echo/Say", "    client:\n      - logging\n"))
	r, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"}, grpc.ForceCodec(protoV1{}))
	if err != nil {
		t.Fatal(err)
	}
	if r.GetBody() != "hi" || srv.calls.Load() != 1 {
		t.Fatalf("reply %q after %d calls", r.GetBody(), srv.calls.Load())
	}
}

// Weft's interceptors given twice on one side (rt.ServerOptions() twice, or with
// rt.UnaryServerInterceptor(); rt.DialOptions() with rt.UnaryClientInterceptor()) ran the
// chain twice per RPC: a server-side rate limit of 3 admitted one call, and streams failed
// with "*weft.rawMessage is not a protobuf message". The second interceptor refuses every
// call instead, with an error that says what is wrong and what to do.
func TestWeftInstalledTwiceRefusesCallsSayingSo(t *testing.T) {
	yaml := edge("echo.Echo/*", "    server:\n      - ratelimit: {capacity: 3, rate: 0}\n    client:\n      - logging\n")
	check := func(t *testing.T, c echopb.EchoClient, side string) {
		t.Helper()
		// More calls than the server's interceptor looks on (the first 8 of a method):
		// once found, a double install refuses every call.
		for range 12 {
			_, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"})
			wantCode(t, err, codes.Internal, "Weft's "+side+" interceptor is installed twice")
		}
		stream, err := c.SayStream(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		_ = stream.Send(&echopb.SayRequest{User: "alice", Body: "s"})
		_, err = stream.Recv()
		wantCode(t, err, codes.Internal, "Weft's "+side+" interceptor is installed twice")
	}
	for name, opts := range map[string]func(*weft.Runtime) []grpc.ServerOption{
		"ServerOptions twice": func(rt *weft.Runtime) []grpc.ServerOption {
			return append(rt.ServerOptions(), rt.ServerOptions()...)
		},
		"ServerOptions and the interceptors": func(rt *weft.Runtime) []grpc.ServerOption {
			return append(rt.ServerOptions(), grpc.ChainUnaryInterceptor(rt.UnaryServerInterceptor()),
				grpc.ChainStreamInterceptor(rt.StreamServerInterceptor()))
		},
	} {
		t.Run("server "+name, func(t *testing.T) {
			_, addr := serve(t, "echo-0", opts(open(t, yaml, "echo"))...)
			c := dial(t, addr)
			// A burst of first calls, more than mark their context: each one's inner
			// interceptor still finds its outer one's mark.
			errs := make(chan error, 32)
			for range cap(errs) {
				go func() {
					_, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "burst"})
					errs <- err
				}()
			}
			for range cap(errs) {
				wantCode(t, <-errs, codes.Internal, "Weft's server interceptor is installed twice")
			}
			check(t, c, "server")
		})
	}
	for name, opts := range map[string]func(*weft.Runtime) []grpc.DialOption{
		"DialOptions twice": func(rt *weft.Runtime) []grpc.DialOption {
			return append(rt.DialOptions(), rt.DialOptions()...)
		},
		"DialOptions and the interceptors": func(rt *weft.Runtime) []grpc.DialOption {
			return append(rt.DialOptions(), grpc.WithChainUnaryInterceptor(rt.UnaryClientInterceptor()),
				grpc.WithChainStreamInterceptor(rt.StreamClientInterceptor()))
		},
	} {
		t.Run("client "+name, func(t *testing.T) {
			_, addr := serve(t, "echo-0")
			check(t, dial(t, addr, opts(open(t, yaml, "frontend"))...), "client")
		})
	}
	// Once on each side, a Weft client calling a Weft server: the server's bucket of 3
	// admits 3 calls.
	_, addr := serve(t, "echo-0", open(t, yaml, "echo").ServerOptions()...)
	c := dial(t, addr, open(t, yaml, "frontend").DialOptions()...)
	for i := range 4 {
		_, err := c.Say(ctx(t), &echopb.SayRequest{User: "alice", Body: "hi"})
		if i < 3 && err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if i == 3 {
			wantCode(t, err, codes.ResourceExhausted, "ratelimit")
		}
	}
}

// A Runtime opened from a file reloads it when it changes (the library's watcher); an edit
// that does not load kept the running version with nothing to tell the application, so a
// typo in weft.yaml went unnoticed. WatchError tells, and clears once a later edit loads.
func TestWatchErrorTellsOfAnEditTheWatcherRefused(t *testing.T) {
	t.Setenv("WEFT_WATCH_MS", "20")
	path := filepath.Join(t.TempDir(), "weft.yaml")
	good := func(deny string) string {
		return strings.Replace(edge("echo.Echo/Say", "    server:\n      - firewall: {field: user, deny: ["+deny+"]}\n"),
			"protos: [echo.proto]", "protos: ["+filepath.Join(echoDir, "echo.proto")+"]", 1)
	}
	write := func(text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(good("mallory"))
	rt, err := weft.Open(path, "echo")
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if err := rt.WatchError(); err != nil {
		t.Fatalf("before any edit: %v", err)
	}
	write(good("mallory") + "      - ratelimit: {capacity: lots}\n")
	deadline := time.Now().Add(5 * time.Second)
	for rt.WatchError() == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	err = rt.WatchError()
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "version 1 keeps running") ||
		!strings.Contains(err.Error(), "parameter `capacity` is given a string") {
		t.Fatalf("after a broken edit: %v", err)
	}
	if v := rt.Version(); v != 1 {
		t.Fatalf("version %d after a refused edit", v)
	}
	write(good("eve"))
	for (rt.Version() != 2 || rt.WatchError() != nil) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if v, err := rt.Version(), rt.WatchError(); v != 2 || err != nil {
		t.Fatalf("after a good edit: version %d, %v", v, err)
	}
	rt.Close()
	if err := rt.WatchError(); err != weft.ErrClosed {
		t.Fatalf("after Close: %v", err)
	}
}
