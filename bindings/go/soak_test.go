package weft_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strconv"
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

// The soak test drives a Weft client and server under mixed load for a while, reloading
// both every few hundred milliseconds, and checks that nothing the binding or the library
// holds per RPC or per version stays behind. WEFT_SOAK_SECONDS sets how long it runs
// (`make soak`, 600 by default there); without it, `go test` runs a short version that
// checks only that everything drains at the end. The samples it logs (run with -v) are the
// ones docs/benchmarks.md reports.

// soakConfig is the example chain over every method of the service, so streams run it too.
// The two versions differ in the rate limiter's and the firewall's parameters, so a reload
// between them replaces those instances and carries the cache over.
func soakConfig(capacity, rate int, deny string) string {
	return fmt.Sprintf(`protos: [echo.proto]
edges:
  frontend->echo:
    from: frontend
    to: echo
    method: echo.Echo/*
    client:
      - logging
    any:
      - ratelimit: {capacity: %d, rate: %d}
      - firewall: {field: user, deny: [%s]}
      - cache: {field: body}
    server:
      - metrics
`, capacity, rate, deny)
}

var (
	// The rates let most calls through; a burst still meets the limit now and then.
	soakA = soakConfig(300, 6000, "mallory")
	soakB = soakConfig(250, 5000, "mallory, eve")
	// Refused for four different reasons, by the client and the server alike: a parameter
	// value the rate limiter's init refuses (wherever the planner put it), an element that
	// does not exist, a parameter the element does not take, YAML that does not parse.
	soakBroken = []string{
		soakConfig(0, 10, "mallory"),
		strings.Replace(soakA, "- metrics", "- no_such_element", 1),
		strings.Replace(soakA, "{field: body}", "{field: body, ttl: 5}", 1),
		strings.Replace(soakA, "edges:", "edges: [", 1),
	}
)

// soakServer answers Say and the bidirectional SayStream. A request whose body is "fail"
// fails with ABORTED; metadata x-slow (a duration) makes the handler wait that long first
// (a header rather than the body, so the cache never answers those calls).
type soakServer struct {
	echopb.UnimplementedEchoServer
}

func soakDelay(ctx context.Context) error {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("x-slow"); len(v) > 0 {
		d, _ := time.ParseDuration(v[0])
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (soakServer) Say(ctx context.Context, req *echopb.SayRequest) (*echopb.SayReply, error) {
	if err := soakDelay(ctx); err != nil {
		return nil, err
	}
	if req.GetBody() == "fail" {
		return nil, status.Error(codes.Aborted, "failing as asked")
	}
	return &echopb.SayReply{Body: req.GetBody(), ServedBy: "soak"}, nil
}

func (soakServer) SayStream(stream echopb.Echo_SayStreamServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := soakDelay(stream.Context()); err != nil {
			return err
		}
		if req.GetBody() == "fail" {
			return status.Error(codes.Aborted, "failing as asked")
		}
		if err := stream.Send(&echopb.SayReply{Body: req.GetBody(), ServedBy: "soak"}); err != nil {
			return err
		}
	}
}

// soakServe starts a server with opts on a loopback port; register adds its services.
func soakServe(t *testing.T, register func(*grpc.Server), opts ...grpc.ServerOption) string {
	return soakServeStop(t, register, opts...).addr
}

type served struct {
	addr string
	srv  *grpc.Server
}

func soakServeStop(t *testing.T, register func(*grpc.Server), opts ...grpc.ServerOption) served {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return served{lis.Addr().String(), srv}
}

// soakStreamService registers SayStream alone, client streaming (collect: one reply with
// the number of messages) or server streaming (fan out: three replies to the one request).
func soakStreamService(clientStreams bool) func(*grpc.Server) {
	handler := func(_ any, stream grpc.ServerStream) error {
		n := 0
		for {
			var req echopb.SayRequest
			err := stream.RecvMsg(&req)
			if err == io.EOF && clientStreams {
				return stream.SendMsg(&echopb.SayReply{Body: strconv.Itoa(n)})
			}
			if err != nil {
				return err
			}
			if err := soakDelay(stream.Context()); err != nil {
				return err
			}
			if req.GetBody() == "fail" {
				return status.Error(codes.Aborted, "failing as asked")
			}
			n++
			if !clientStreams {
				for i := range 3 {
					if err := stream.SendMsg(&echopb.SayReply{Body: fmt.Sprint(req.GetBody(), i)}); err != nil {
						return err
					}
				}
				return nil
			}
		}
	}
	return func(s *grpc.Server) {
		s.RegisterService(&grpc.ServiceDesc{
			ServiceName: "echo.Echo",
			HandlerType: (*any)(nil),
			Streams: []grpc.StreamDesc{{StreamName: "SayStream", Handler: handler,
				ClientStreams: clientStreams, ServerStreams: !clientStreams}},
			Metadata: "echo.proto",
		}, nil)
	}
}

// soakSample is one reading of everything that must not grow.
type soakSample struct {
	at               time.Duration
	calls            int64
	reloads, refused int64
	anonKB           int64  // resident anonymous memory (procStatus)
	goKB             uint64 // what Go holds from the OS, less what it gave back
	heapKB           uint64 // live heap after a GC
	threads          int
	goroutines       int
	fds              int
	client, server   weft.Stats
	records, dropped uint64
}

func (s soakSample) String() string {
	return fmt.Sprintf("t=%4.0fs calls=%8d reloads=%5d refused=%4d anon=%6dKB go=%6dKB heap=%6dKB threads=%3d gor=%4d fds=%3d "+
		"waiting=%d/%d kept=%d/%d queued=%d/%d versions=%d/%d draining=%d/%d freed=%d/%d records=%d dropped=%d",
		s.at.Seconds(), s.calls, s.reloads, s.refused, s.anonKB, s.goKB, s.heapKB, s.threads, s.goroutines, s.fds,
		s.client.WaitingRPCs, s.server.WaitingRPCs, s.client.KeptOutputs, s.server.KeptOutputs,
		s.client.QueuedRecords, s.server.QueuedRecords, s.client.VersionsLive, s.server.VersionsLive,
		s.client.VersionsDraining, s.server.VersionsDraining, s.client.VersionsFreed, s.server.VersionsFreed,
		s.records, s.dropped)
}

// procStatus reads the resident anonymous memory (heaps: Go's, the library's malloc, the
// JIT's code) and the thread count. The binary's own pages, which count in RSS as the run
// first touches them, are left out: a climb there is code paged in, not a leak.
func procStatus() (anonKB int64, threads int) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "RssAnon:":
			anonKB, _ = strconv.ParseInt(f[1], 10, 64)
		case "Threads:":
			threads, _ = strconv.Atoi(f[1])
		}
	}
	return anonKB, threads
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// soakLoad is the client side: the connections and what the calls met.
type soakLoad struct {
	bidi, collect, fanout *grpc.ClientConn
	// root is every call's context or its parent: a context that lives as long as the
	// process, as an application's root context does, and that a call must not leave
	// anything registered with once it ends (grpc-go releases a stream read to its end
	// without a cancel).
	root       context.Context
	calls      atomic.Int64
	mu         sync.Mutex
	codes      map[codes.Code]int64
	unexpected []string
}

// expected are the outcomes the workload provokes: denied users, the rate limiter, the
// server failing, deadlines, cancellations.
var soakExpected = map[codes.Code]bool{
	codes.OK: true, codes.PermissionDenied: true, codes.ResourceExhausted: true,
	codes.Aborted: true, codes.DeadlineExceeded: true, codes.Canceled: true,
}

func (l *soakLoad) note(op string, err error) {
	l.calls.Add(1)
	if err == io.EOF {
		err = nil
	}
	c := status.Code(err)
	if errors.Is(err, context.Canceled) {
		c = codes.Canceled
	} else if errors.Is(err, context.DeadlineExceeded) {
		c = codes.DeadlineExceeded
	}
	if c == codes.ResourceExhausted {
		// A client backs off; without it the workers would spin on refusals, which cost
		// next to nothing, and hardly any call would pass the limiter.
		time.Sleep(2 * time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.codes[c]++
	if !soakExpected[c] && len(l.unexpected) < 20 {
		l.unexpected = append(l.unexpected, op+": "+err.Error())
	}
}

var bidiDesc = grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true, ServerStreams: true}

func soakBody(r *rand.Rand) string {
	switch n := r.IntN(10); {
	case n < 4:
		return "" // never cached: reaches the server
	case n == 4:
		return "fail"
	default:
		return "b" + strconv.Itoa(r.IntN(32)) // a bounded key space, so the cache stays bounded
	}
}

func soakUser(r *rand.Rand) string {
	switch r.IntN(12) {
	case 0:
		return "mallory"
	case 1:
		return "eve" // denied in one of the two versions
	}
	return "alice"
}

// one runs one randomly chosen call to its end.
func (l *soakLoad) one(r *rand.Rand) {
	ctx := l.root
	req := func() *echopb.SayRequest { return &echopb.SayRequest{User: soakUser(r), Body: soakBody(r)} }
	slow := func(ctx context.Context, d time.Duration) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "x-slow", d.String())
	}
	echo := echopb.NewEchoClient(l.bidi)
	switch op := r.IntN(12); op {
	case 0, 1, 2:
		_, err := echo.Say(ctx, req())
		l.note("unary", err)
	case 3: // a deadline that expires while the server works
		dctx, dcancel := context.WithTimeout(slow(ctx, 20*time.Millisecond), 3*time.Millisecond)
		_, err := echo.Say(dctx, &echopb.SayRequest{User: "alice"})
		dcancel()
		l.note("unary deadline", err)
	case 4: // cancelled while the server works
		cctx, ccancel := context.WithCancel(slow(ctx, 20*time.Millisecond))
		time.AfterFunc(time.Duration(r.IntN(4000))*time.Microsecond, ccancel)
		_, err := echo.Say(cctx, &echopb.SayRequest{User: "alice"})
		ccancel()
		l.note("unary cancel", err)
	case 5, 6: // bidi to its end, or to the server's failure or a denial
		l.note("bidi", l.bidiCall(ctx, r, 1+r.IntN(5), false))
	case 7: // bidi cancelled midway
		cctx, ccancel := context.WithCancel(ctx)
		err := l.bidiCall(cctx, r, 2+r.IntN(3), true)
		ccancel()
		l.note("bidi cancel", err)
	case 8: // bidi whose deadline expires while the server works
		dctx, dcancel := context.WithTimeout(slow(ctx, 20*time.Millisecond), 5*time.Millisecond)
		err := l.bidiCall(dctx, r, 2, false)
		dcancel()
		l.note("bidi deadline", err)
	case 9: // client streaming
		l.note("client stream", l.collectCall(ctx, r))
	case 10, 11: // server streaming, sometimes left after the first reply
		l.note("server stream", l.fanoutCall(ctx, r, op == 11))
	}
}

func (l *soakLoad) bidiCall(ctx context.Context, r *rand.Rand, n int, cancelMidway bool) error {
	cs, err := l.bidi.NewStream(ctx, &bidiDesc, "/echo.Echo/SayStream")
	if err != nil {
		return err
	}
	user := soakUser(r)
	for i := range n {
		if err := cs.SendMsg(&echopb.SayRequest{User: user, Body: soakBody(r)}); err != nil {
			var reply echopb.SayReply // the stream ended: RecvMsg has the status
			return cs.RecvMsg(&reply)
		}
		if cancelMidway && i == n/2 {
			return context.Canceled // the caller cancels with messages unanswered
		}
		var reply echopb.SayReply
		if err := cs.RecvMsg(&reply); err != nil {
			return err
		}
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	var reply echopb.SayReply
	return cs.RecvMsg(&reply)
}

func (l *soakLoad) collectCall(ctx context.Context, r *rand.Rand) error {
	cs, err := l.collect.NewStream(ctx, &grpc.StreamDesc{StreamName: "SayStream", ClientStreams: true}, "/echo.Echo/SayStream")
	if err != nil {
		return err
	}
	user := soakUser(r)
	for range 1 + r.IntN(4) {
		if err := cs.SendMsg(&echopb.SayRequest{User: user, Body: soakBody(r)}); err != nil {
			break // the stream ended; RecvMsg has the status
		}
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	var reply echopb.SayReply
	return cs.RecvMsg(&reply)
}

func (l *soakLoad) fanoutCall(ctx context.Context, r *rand.Rand, leaveEarly bool) error {
	cctx, cancel := ctx, context.CancelFunc(func() {})
	if leaveEarly {
		cctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	cs, err := l.fanout.NewStream(cctx, &grpc.StreamDesc{StreamName: "SayStream", ServerStreams: true}, "/echo.Echo/SayStream")
	if err != nil {
		return err
	}
	if err := cs.SendMsg(req1(r)); err != nil && err != io.EOF {
		return err
	}
	if err := cs.CloseSend(); err != nil {
		return err
	}
	for {
		var reply echopb.SayReply
		if err := cs.RecvMsg(&reply); err != nil {
			return err
		}
		if leaveEarly {
			return nil // cancel() ends the stream with replies unread
		}
	}
}

func req1(r *rand.Rand) *echopb.SayRequest {
	return &echopb.SayRequest{User: soakUser(r), Body: soakBody(r)}
}

// keepAlive holds one bidirectional stream open for the whole soak, one message at a time,
// across every reload; it returns when stop closes. A message the rate limiter refuses ends
// the stream, and another one opens.
func (l *soakLoad) keepAlive(stop <-chan struct{}) error {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		err := l.keepOneAlive(stop, t.C)
		if status.Code(err) != codes.ResourceExhausted {
			return err
		}
	}
}

func (l *soakLoad) keepOneAlive(stop <-chan struct{}, tick <-chan time.Time) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs, err := l.bidi.NewStream(ctx, &bidiDesc, "/echo.Echo/SayStream")
	if err != nil {
		return err
	}
	for i := 0; ; i++ {
		select {
		case <-stop:
			if err := cs.CloseSend(); err != nil {
				return err
			}
			var reply echopb.SayReply
			if err := cs.RecvMsg(&reply); err != io.EOF {
				return fmt.Errorf("the long stream's end: %w", err)
			}
			return nil
		case <-tick:
		}
		if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "keep" + strconv.Itoa(i%8)}); err != nil {
			var reply echopb.SayReply
			return cs.RecvMsg(&reply)
		}
		var reply echopb.SayReply
		if err := cs.RecvMsg(&reply); err != nil {
			return fmt.Errorf("the long stream's message %d: %w", i, err)
		}
	}
}

func TestSoak(t *testing.T) {
	duration, interval, warmup := 6*time.Second, time.Second, 2*time.Second
	long := false
	if v := os.Getenv("WEFT_SOAK_SECONDS"); v != "" {
		secs, err := strconv.Atoi(v)
		if err != nil || secs < 10 {
			t.Fatalf("WEFT_SOAK_SECONDS=%q: give a number of seconds, at least 10", v)
		}
		duration, interval, warmup, long = time.Duration(secs)*time.Second, 10*time.Second, time.Duration(secs)*time.Second/5, true
	}

	var records atomic.Uint64
	count := func(weft.Record) { records.Add(1) }
	srt, err := weft.OpenYAML(soakA, echoDir, "echo", weft.WithRecords(count))
	if err != nil {
		t.Fatal(err)
	}
	defer srt.Close()
	crt, err := weft.OpenYAML(soakA, echoDir, "frontend", weft.WithRecords(count))
	if err != nil {
		t.Fatal(err)
	}
	defer crt.Close()

	bidiAddr := soakServe(t, func(s *grpc.Server) { echopb.RegisterEchoServer(s, soakServer{}) }, srt.ServerOptions()...)
	collectAddr := soakServe(t, soakStreamService(true), srt.ServerOptions()...)
	fanoutAddr := soakServe(t, soakStreamService(false), srt.ServerOptions()...)
	load := &soakLoad{
		bidi:    dialConn(t, bidiAddr, crt.DialOptions()...),
		collect: dialConn(t, collectAddr, crt.DialOptions()...),
		fanout:  dialConn(t, fanoutAddr, crt.DialOptions()...),
		codes:   map[codes.Code]int64{},
	}
	root, cancelRoot := context.WithCancel(context.Background())
	defer cancelRoot()
	load.root = root
	// One call on each connection first, so the baseline counts their goroutines and sockets.
	r0 := rand.New(rand.NewPCG(0, 0))
	for range 3 {
		load.one(r0)
	}
	_ = load.collectCall(root, r0)
	_ = load.fanoutCall(root, r0, false)

	runtime.GC()
	baseGoroutines, baseFDs := runtime.NumGoroutine(), openFDs()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w)+1, 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				load.one(r)
			}
		}()
	}
	keepAliveErr := make(chan error, 1)
	go func() { keepAliveErr <- load.keepAlive(stop) }()

	var reloads, refused atomic.Int64
	var reloadErr atomic.Pointer[string]
	wg.Add(1)
	go func() {
		defer wg.Done()
		r := rand.New(rand.NewPCG(99, 99))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(150+r.IntN(250)) * time.Millisecond):
			}
			rts := []*weft.Runtime{srt, crt}
			if r.IntN(2) == 0 { // either end may reload first, as in a rollout
				rts[0], rts[1] = rts[1], rts[0]
			}
			if r.IntN(8) == 0 {
				bad := soakBroken[r.IntN(len(soakBroken))]
				for _, rt := range rts {
					before := rt.Version()
					if err := rt.ReloadYAML(bad, echoDir); err == nil || rt.Version() != before {
						msg := fmt.Sprintf("a broken config was installed (err %v, version %d -> %d)", err, before, rt.Version())
						reloadErr.Store(&msg)
					}
				}
				refused.Add(1)
				continue
			}
			next := soakA
			if reloads.Load()%2 == 0 {
				next = soakB
			}
			for _, rt := range rts {
				if err := rt.ReloadYAML(next, echoDir); err != nil {
					msg := err.Error()
					reloadErr.Store(&msg)
				}
			}
			reloads.Add(1)
		}
	}()

	start := time.Now()
	sample := func() soakSample {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		anon, threads := procStatus()
		return soakSample{
			at: time.Since(start), calls: load.calls.Load(), reloads: reloads.Load(), refused: refused.Load(),
			anonKB: anon, goKB: (ms.Sys - ms.HeapReleased) / 1024, heapKB: ms.HeapAlloc / 1024,
			threads: threads, goroutines: runtime.NumGoroutine(), fds: openFDs(),
			client: crt.Stats(), server: srt.Stats(), records: records.Load(),
			dropped: crt.DroppedRecords() + srt.DroppedRecords(),
		}
	}
	var samples []soakSample
	t.Logf("baseline: goroutines=%d fds=%d", baseGoroutines, baseFDs)
	for time.Since(start) < duration {
		time.Sleep(min(interval, duration-time.Since(start)))
		s := sample()
		samples = append(samples, s)
		t.Log(s)
	}
	close(stop)
	wg.Wait()
	if err := <-keepAliveErr; err != nil {
		t.Errorf("the stream held open through the soak failed: %v", err)
	}
	if msg := reloadErr.Load(); msg != nil {
		t.Errorf("reload: %s", *msg)
	}

	load.mu.Lock()
	t.Logf("outcomes: %v", load.codes)
	for _, u := range load.unexpected {
		t.Errorf("unexpected outcome: %s", u)
	}
	load.mu.Unlock()
	if reloads.Load() < 4 || refused.Load() < 1 && long {
		t.Errorf("only %d reloads (%d refused): the soak did not exercise reloading", reloads.Load(), refused.Load())
	}

	// With the load stopped, everything held for RPCs must be given back: no handle
	// waiting, no kept output, one version per runtime, no goroutine or socket left over.
	// (A server stream's end may reach the server's runtime a moment after the client's.)
	var end soakSample
	deadline := time.Now().Add(10 * time.Second)
	for {
		end = sample()
		drained := end.client.WaitingRPCs == 0 && end.server.WaitingRPCs == 0 &&
			end.client.KeptOutputs == 0 && end.server.KeptOutputs == 0 &&
			end.client.VersionsLive == 1 && end.server.VersionsLive == 1 &&
			end.goroutines <= baseGoroutines+2 && end.fds <= baseFDs
		if drained || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("drained: %v", end)
	if end.client.WaitingRPCs != 0 || end.server.WaitingRPCs != 0 {
		t.Errorf("requests still wait for a response after every call ended: client %d, server %d",
			end.client.WaitingRPCs, end.server.WaitingRPCs)
	}
	if end.client.KeptOutputs != 0 || end.server.KeptOutputs != 0 {
		t.Errorf("outputs kept after every call ended: client %d, server %d", end.client.KeptOutputs, end.server.KeptOutputs)
	}
	if end.client.VersionsLive != 1 || end.server.VersionsLive != 1 {
		t.Errorf("versions alive after every call ended: client %d, server %d (one each expected)",
			end.client.VersionsLive, end.server.VersionsLive)
	}
	if end.goroutines > baseGoroutines+2 {
		t.Errorf("%d goroutines after the soak, %d before it", end.goroutines, baseGoroutines)
		buf := make([]byte, 1<<20)
		t.Logf("%s", buf[:runtime.Stack(buf, true)])
	}
	if end.fds > baseFDs {
		t.Errorf("%d open files after the soak, %d before it", end.fds, baseFDs)
	}
	if !long {
		return
	}
	// Past the warm-up, memory may wander but not climb: compare the last third's lowest
	// reading with the first reading after the warm-up, with room for noise (malloc's
	// arenas settle over minutes).
	var first soakSample
	for _, s := range samples {
		if s.at >= warmup {
			first = s
			break
		}
	}
	tail := samples[len(samples)*2/3:]
	minHeap, minAnon := tail[0].heapKB, tail[0].anonKB
	for _, s := range tail {
		minHeap, minAnon = min(minHeap, s.heapKB), min(minAnon, s.anonKB)
	}
	t.Logf("after warm-up (t=%.0fs): heap %d KB, anon %d KB; last third's lowest: heap %d KB, anon %d KB",
		first.at.Seconds(), first.heapKB, first.anonKB, minHeap, minAnon)
	if minHeap > first.heapKB+first.heapKB/4+2048 {
		t.Errorf("the live heap grew from %d KB to at least %d KB over the soak", first.heapKB, minHeap)
	}
	if minAnon > first.anonKB+first.anonKB/5+4096 {
		t.Errorf("resident anonymous memory grew from %d KB to at least %d KB over the soak", first.anonKB, minAnon)
	}
}

// Stats follows what a stream holds: a request of version 1 waiting for its response keeps
// version 1 alive through two reloads, and once the response comes and the stream ends,
// every gauge is back to one live version and nothing waiting.
func TestStatsFollowAStreamHoldingAReplacedVersion(t *testing.T) {
	v1 := edge("echo.Echo/SayStream", "    client:\n      - logging\n")
	v2 := edge("echo.Echo/SayStream", "    client:\n      - logging\n      - metrics\n")
	var records atomic.Uint64
	crt := openWith(t, v1, "frontend", weft.WithRecords(func(weft.Record) { records.Add(1) }))
	release := make(chan struct{})
	addr := serveSayStream(t, bidiDesc, func(_ any, stream grpc.ServerStream) error {
		for {
			var req echopb.SayRequest
			if err := stream.RecvMsg(&req); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			<-release
			if err := stream.SendMsg(&echopb.SayReply{Body: req.GetBody()}); err != nil {
				return err
			}
		}
	})
	conn := dialConn(t, addr, crt.DialOptions()...)
	cs := openSayStream(t, conn, bidiDesc)
	if err := cs.SendMsg(&echopb.SayRequest{User: "alice", Body: "held"}); err != nil {
		t.Fatal(err)
	}
	for _, y := range []string{v2, v1} {
		if err := crt.ReloadYAML(y, echoDir); err != nil {
			t.Fatal(err)
		}
	}
	held := crt.Stats()
	want := weft.Stats{WaitingRPCs: 1, VersionsLive: 2, VersionsFreed: 1, VersionsDraining: 1, QueuedRecords: held.QueuedRecords, QueuedRecordBytes: held.QueuedRecordBytes}
	if held != want {
		t.Fatalf("while the stream's request waits: %+v, want %+v", held, want)
	}
	close(release)
	var reply echopb.SayReply
	if err := cs.RecvMsg(&reply); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := cs.RecvMsg(&reply); err != io.EOF {
		t.Fatalf("the stream's end: %v", err)
	}
	end := crt.Stats()
	want = weft.Stats{VersionsLive: 1, VersionsFreed: 2, QueuedRecords: end.QueuedRecords, QueuedRecordBytes: end.QueuedRecordBytes}
	if end != want {
		t.Fatalf("after the stream ended: %+v, want %+v", end, want)
	}
	if err := crt.Close(); err != nil {
		t.Fatal(err)
	}
	if s := crt.Stats(); s != (weft.Stats{}) {
		t.Fatalf("after Close: %+v", s)
	}
}
