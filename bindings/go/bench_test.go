package weft_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// The five benchmark elements with parameters that never reject, so every iteration is a full
// RPC: the cost measured is the policy's, not the short cut of a rejection.
const (
	benchLimit = "1000000000000.0"

	// As in the example service: logging on the caller, metrics on the callee, the rest
	// wherever the planner puts them.
	benchEdgeYAML = `protos: [echo.proto]
edges:
  frontend->echo:
    from: frontend
    to: echo
    method: echo.Echo/Say
    client:
      - logging
    any:
      - ratelimit: {capacity: ` + benchLimit + `, rate: ` + benchLimit + `}
      - firewall: {field: user, deny: [mallory]}
      - fault: {prob_pass: 1.0}
    server:
      - metrics
`
	// All five on the caller, for the one-interceptor micro-benchmark.
	benchClientYAML = `protos: [echo.proto]
edges:
  frontend->echo:
    from: frontend
    to: echo
    method: echo.Echo/Say
    client:
      - logging
      - ratelimit: {capacity: ` + benchLimit + `, rate: ` + benchLimit + `}
      - firewall: {field: user, deny: [mallory]}
      - fault: {prob_pass: 1.0}
      - metrics
`
)

var benchRequest = &echopb.SayRequest{User: "alice", Body: "hello, echo", Priority: 3, Tags: []string{"bench"}}

func handwrittenClient(log *slog.Logger) []grpc.UnaryClientInterceptor {
	return []grpc.UnaryClientInterceptor{
		loggingInterceptor(log),
		rateLimitInterceptor(newTokenBucket(1e12, 1e12)),
		firewallInterceptor("mallory"),
		faultInterceptor(1.0),
	}
}

// BenchmarkEcho is one echo RPC over loopback TCP, client and server in this process, with no
// policy, the hand-written interceptors, and Weft.
func BenchmarkEcho(b *testing.B) {
	// Returns the number of RPCs made, the first (outside the timing) included.
	run := func(b *testing.B, c echopb.EchoClient) int {
		ctx := context.Background()
		if _, err := c.Say(ctx, benchRequest); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := processCPU()
		n := 0
		for b.Loop() {
			if _, err := c.Say(ctx, benchRequest); err != nil {
				b.Fatal(err)
			}
			n++
		}
		// CPU time of the whole process (client, server, library threads) per RPC: on a
		// shared machine it moves far less than the latency, which waits for a core.
		b.ReportMetric(float64(processCPU()-cpu0)/float64(n), "cpu-ns/op")
		return n + 1
	}
	b.Run("none", func(b *testing.B) {
		_, addr := serve(b, "echo-0")
		run(b, dial(b, addr))
	})
	b.Run("handwritten", func(b *testing.B) {
		_, addr := serve(b, "echo-0", grpc.ChainUnaryInterceptor(metricsServerInterceptor(&rpcMetrics{})))
		run(b, dial(b, addr, grpc.WithChainUnaryInterceptor(handwrittenClient(discardLogger())...)))
	})
	// Log records built but not encoded: the cheapest hand-written logging that still produces
	// records (Weft, with no channel observer through the C ABI, builds none).
	b.Run("handwritten-noencode", func(b *testing.B) {
		_, addr := serve(b, "echo-0", grpc.ChainUnaryInterceptor(metricsServerInterceptor(&rpcMetrics{})))
		run(b, dial(b, addr, grpc.WithChainUnaryInterceptor(handwrittenClient(slog.New(droppingHandler{}))...)))
	})
	// A client runtime with no edge for the method: the library runs nothing and the
	// binding adds the caller stamp (weft-version: /echo), the cost of Weft on a call it
	// has no policy for.
	b.Run("weft-no-edge", func(b *testing.B) {
		crt := open(b, benchEdgeYAML, "echo")
		_, addr := serve(b, "echo-0")
		run(b, dial(b, addr, crt.DialOptions()...))
	})
	// Weft on one side only, to tell the two sides' costs apart.
	b.Run("weft-client", func(b *testing.B) {
		crt := open(b, benchEdgeYAML, "frontend")
		_, addr := serve(b, "echo-0")
		run(b, dial(b, addr, crt.DialOptions()...))
	})
	b.Run("weft-server", func(b *testing.B) {
		srt := open(b, benchEdgeYAML, "echo")
		_, addr := serve(b, "echo-0", srt.ServerOptions()...)
		run(b, dial(b, addr))
	})
	b.Run("weft", func(b *testing.B) {
		srt := open(b, benchEdgeYAML, "echo")
		crt := open(b, benchEdgeYAML, "frontend")
		_, addr := serve(b, "echo-0", srt.ServerOptions()...)
		run(b, dial(b, addr, crt.DialOptions()...))
	})
	// With the channel records (logging's messages, metrics' latencies) handed to Go as
	// decoded records, the counterpart of `handwritten`, whose slog handler encodes each.
	b.Run("weft-records", func(b *testing.B) {
		var n atomic.Int64
		count := weft.WithRecords(func(weft.Record) { n.Add(1) })
		srt := openWith(b, benchEdgeYAML, "echo", count)
		crt := openWith(b, benchEdgeYAML, "frontend", count)
		_, addr := serve(b, "echo-0", srt.ServerOptions()...)
		rpcs := run(b, dial(b, addr, crt.DialOptions()...))
		// Close collects what is still queued, so every record is counted.
		_ = crt.Close()
		_ = srt.Close()
		if got, dropped := n.Load(), crt.DroppedRecords()+srt.DroppedRecords(); got == 0 {
			b.Fatalf("no records reached Go (%d dropped)", dropped)
		} else {
			b.ReportMetric(float64(got)/float64(rpcs), "records/op")
			b.ReportMetric(float64(dropped)/float64(rpcs), "dropped/op")
		}
	})
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// evictionBuffer is larger than this machine's per-core L2 (1 MiB) and smaller than its L3.
var evictionBuffer = make([]byte, 3<<20)

// evictCaches writes one byte per cache line of evictionBuffer: what the interceptors used
// leaves the L1 and L2 caches, as it does between the RPCs of a real service, where the
// network stack and gRPC run in between (the echo benchmark's interceptor costs several
// times their hot-loop cost).
func evictCaches() {
	for i := 0; i < len(evictionBuffer); i += 64 {
		evictionBuffer[i]++
	}
}

// callTimer times the calls of a cold benchmark without their evictions. The eviction takes
// about 35 µs and varies by more than the ~1 µs a cold call costs, so ns/op alone does not
// resolve a change of a few hundred nanoseconds; call-ns/op does (two clock reads per call,
// the same for every variant).
type callTimer struct {
	total time.Duration
	start time.Time
}

func (t *callTimer) begin() { t.start = time.Now() }
func (t *callTimer) end()   { t.total += time.Since(t.start) }

func (t *callTimer) report(b *testing.B) {
	b.ReportMetric(float64(t.total.Nanoseconds())/float64(b.N), "call-ns/op")
}

// BenchmarkInterceptor is one client interceptor call with all five elements and no network:
// the invoker does what grpc-go's codec does for the call (encode the request, decode a
// reply), so each variant pays the same encoding work a real call would.
func BenchmarkInterceptor(b *testing.B) { interceptorBench(b, false) }

// BenchmarkInterceptorCold is BenchmarkInterceptor with the caches evicted before each call;
// every variant, none included, pays the same eviction, so the added cost is comparable.
func BenchmarkInterceptorCold(b *testing.B) { interceptorBench(b, true) }

func interceptorBench(b *testing.B, cold bool) {
	replyBytes, err := encoding.GetCodecV2("proto").Marshal(&echopb.SayReply{Body: "hello, echo", ServedBy: "echo-0"})
	if err != nil {
		b.Fatal(err)
	}
	invoker := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		codec := encoding.GetCodecV2("proto")
		for _, o := range opts {
			if f, ok := o.(grpc.ForceCodecV2CallOption); ok {
				codec = f.CodecV2
			}
		}
		out, err := codec.Marshal(req)
		if err != nil {
			return err
		}
		out.Free()
		return codec.Unmarshal(replyBytes, reply)
	}
	run := func(b *testing.B, ic grpc.UnaryClientInterceptor, opts ...grpc.CallOption) {
		ctx := context.Background()
		b.ReportAllocs()
		var timer callTimer
		for b.Loop() {
			if cold {
				evictCaches()
				timer.begin()
			}
			var reply echopb.SayReply
			if err := ic(ctx, "/echo.Echo/Say", benchRequest, &reply, nil, invoker, opts...); err != nil {
				b.Fatal(err)
			}
			if cold {
				timer.end()
			}
		}
		if cold {
			timer.report(b)
		}
	}
	b.Run("none", func(b *testing.B) {
		run(b, func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			return inv(ctx, method, req, reply, cc, opts...)
		})
	})
	b.Run("handwritten", func(b *testing.B) {
		run(b, fusedHandwritten(discardLogger()))
	})
	// The same with log records built but not encoded.
	b.Run("handwritten-noencode", func(b *testing.B) {
		run(b, fusedHandwritten(slog.New(droppingHandler{})))
	})
	b.Run("weft", func(b *testing.B) {
		rt := open(b, benchClientYAML, "frontend")
		run(b, rt.UnaryClientInterceptor(), grpc.ForceCodecV2(weft.ClientCodec()))
	})
	// A runtime with no edge for the method (echo's): what Weft adds to a call it has no
	// policy for, the library's answer and the caller stamp.
	b.Run("weft-no-edge", func(b *testing.B) {
		rt := open(b, benchClientYAML, "echo")
		run(b, rt.UnaryClientInterceptor(), grpc.ForceCodecV2(weft.ClientCodec()))
	})
	// With logging's and metrics' records handed to Go, as the hand-written variant hands its
	// log records to slog. They are collected on another goroutine: cpu-ns/op counts the
	// whole process, Close's last collection included.
	b.Run("weft-records", func(b *testing.B) {
		var n atomic.Int64
		// A queue large enough for a collection interval of calls this short.
		rt := openWith(b, benchClientYAML, "frontend",
			weft.WithRecords(func(weft.Record) { n.Add(1) }), weft.WithRecordQueue(1<<22))
		cpu0 := processCPU()
		run(b, rt.UnaryClientInterceptor(), grpc.ForceCodecV2(weft.ClientCodec()))
		_ = rt.Close()
		b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(n.Load())/float64(b.N), "records/op")
		b.ReportMetric(float64(rt.DroppedRecords())/float64(b.N), "dropped/op")
		if n.Load() == 0 {
			b.Fatal("no records reached Go")
		}
	})
}

// BenchmarkServerInterceptor is one server interceptor call with no network: what grpc-go
// does around it for a unary call (decode the request with the server codec, incoming
// metadata as grpc-go builds it, encode what the handler returns), with no interceptor, the
// hand-written metrics interceptor, and Weft running `metrics` on the server side.
func BenchmarkServerInterceptor(b *testing.B) { serverInterceptorBench(b, false) }

// BenchmarkServerInterceptorCold evicts the caches before each call (evictCaches).
func BenchmarkServerInterceptorCold(b *testing.B) { serverInterceptorBench(b, true) }

func serverInterceptorBench(b *testing.B, cold bool) {
	reqBytes, err := encoding.GetCodecV2("proto").Marshal(benchRequest)
	if err != nil {
		b.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{
		":authority":   {"127.0.0.1:40000"},
		"content-type": {"application/grpc"},
		"user-agent":   {"grpc-go/1.85.0"},
	})
	info := &grpc.UnaryServerInfo{FullMethod: "/echo.Echo/Say"}
	handler := func(ctx context.Context, req any) (any, error) {
		return &echopb.SayReply{Body: req.(*echopb.SayRequest).GetBody(), ServedBy: "echo-0"}, nil
	}
	run := func(b *testing.B, ic grpc.UnaryServerInterceptor, codec encoding.CodecV2, ctx context.Context) {
		b.ReportAllocs()
		var timer callTimer
		for b.Loop() {
			if cold {
				evictCaches()
				timer.begin()
			}
			var req echopb.SayRequest
			if err := codec.Unmarshal(reqBytes, &req); err != nil {
				b.Fatal(err)
			}
			resp, err := ic(ctx, &req, info, handler)
			if err != nil {
				b.Fatal(err)
			}
			out, err := codec.Marshal(resp)
			if err != nil {
				b.Fatal(err)
			}
			out.Free()
			if cold {
				timer.end()
			}
		}
		if cold {
			timer.report(b)
		}
	}
	plain := encoding.GetCodecV2("proto")
	b.Run("none", func(b *testing.B) {
		run(b, func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		}, plain, ctx)
	})
	b.Run("handwritten", func(b *testing.B) {
		run(b, metricsServerInterceptor(&rpcMetrics{}), plain, ctx)
	})
	b.Run("weft", func(b *testing.B) {
		crt := open(b, benchEdgeYAML, "frontend")
		rt := open(b, benchEdgeYAML, "echo")
		// The client side's stamp, as it arrives.
		var stamped context.Context
		_ = crt.UnaryClientInterceptor()(context.Background(), "/echo.Echo/Say", benchRequest, &echopb.SayReply{}, nil,
			func(c context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				out, _ := metadata.FromOutgoingContext(c)
				in, _ := metadata.FromIncomingContext(ctx)
				stamped = metadata.NewIncomingContext(ctx, metadata.Join(in, out))
				return status.Error(codes.Unavailable, "no server")
			})
		run(b, rt.UnaryServerInterceptor(), rt.ServerCodec(), stamped)
	})
}
