package weft_test

// Hand-written grpc-go interceptors for the benchmark's five elements (ratelimit, firewall,
// logging, metrics, fault), written the way a Go team writes them without Weft: generic over
// the request type where the element is, typed where it reads a field, no reflection beyond
// what slog does. Their semantics follow elements/*.weft.

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// tokenBucket is ratelimit.weft: capacity tokens, refilled at rate per second.
type tokenBucket struct {
	mu       sync.Mutex
	capacity float64
	rate     float64
	tokens   float64
	last     time.Time
}

func newTokenBucket(capacity, rate float64) *tokenBucket {
	return &tokenBucket{capacity: capacity, rate: rate, tokens: capacity, last: time.Now()}
}

func (b *tokenBucket) allow() bool {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.capacity, b.tokens+b.rate*now.Sub(b.last).Seconds())
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}

func rateLimitInterceptor(b *tokenBucket) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !b.allow() {
			return status.Error(codes.ResourceExhausted, "ratelimit")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// firewall.weft over the `user` field.
type userGetter interface{ GetUser() string }

func firewallInterceptor(deny ...string) grpc.UnaryClientInterceptor {
	denied := make(map[string]bool, len(deny))
	for _, d := range deny {
		denied[d] = true
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if u, ok := req.(userGetter); ok && denied[u.GetUser()] {
			return status.Error(codes.PermissionDenied, "acl")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// logging.weft: every request and every response, as structured log records. The records go
// to io.Discard so the benchmark measures producing them, not a disk.
func loggingInterceptor(log *slog.Logger) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		log.LogAttrs(ctx, slog.LevelInfo, "request", slog.String("method", method), slog.Any("message", req))
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil {
			log.LogAttrs(ctx, slog.LevelInfo, "response", slog.String("method", method), slog.Any("error", err))
		} else {
			log.LogAttrs(ctx, slog.LevelInfo, "response", slog.String("method", method), slog.Any("message", reply))
		}
		return err
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

// droppingHandler takes every record and encodes none: logging whose records go nowhere.
type droppingHandler struct{}

func (droppingHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (droppingHandler) Handle(context.Context, slog.Record) error { return nil }
func (h droppingHandler) WithAttrs([]slog.Attr) slog.Handler      { return h }
func (h droppingHandler) WithGroup(string) slog.Handler           { return h }

// fault.weft: fails a request with UNAVAILABLE unless it passes with probability probPass.
func faultInterceptor(probPass float64) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if rand.Float64() >= probPass {
			return status.Error(codes.Unavailable, "fault_injected")
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// metrics.weft: counts RPCs and failures and records each latency, here in a fixed-bucket
// histogram with atomic counters (what a Prometheus histogram does underneath).
type rpcMetrics struct {
	total, failed atomic.Int64
	buckets       [len(latencyBounds) + 1]atomic.Int64
}

var latencyBounds = [...]time.Duration{
	50 * time.Microsecond, 100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 5 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond,
}

func (m *rpcMetrics) observe(d time.Duration, err error) {
	m.total.Add(1)
	if err != nil {
		m.failed.Add(1)
	}
	i := 0
	for i < len(latencyBounds) && d > latencyBounds[i] {
		i++
	}
	m.buckets[i].Add(1)
}

func metricsServerInterceptor(m *rpcMetrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.observe(time.Since(start), err)
		return resp, err
	}
}

func metricsClientInterceptor(m *rpcMetrics) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		start := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		m.observe(time.Since(start), err)
		return err
	}
}

// fusedHandwritten is all five in one interceptor: the best a hand-written chain can do for
// the one-call micro-benchmark (no chaining closures between elements).
func fusedHandwritten(log *slog.Logger) grpc.UnaryClientInterceptor {
	bucket := newTokenBucket(1e12, 1e12)
	denied := map[string]bool{"mallory": true}
	metrics := &rpcMetrics{}
	const probPass = 1.0
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		log.LogAttrs(ctx, slog.LevelInfo, "request", slog.String("method", method), slog.Any("message", req))
		start := time.Now()
		var err error
		switch u, _ := req.(userGetter); {
		case !bucket.allow():
			err = status.Error(codes.ResourceExhausted, "ratelimit")
		case u != nil && denied[u.GetUser()]:
			err = status.Error(codes.PermissionDenied, "acl")
		case rand.Float64() >= probPass:
			err = status.Error(codes.Unavailable, "fault_injected")
		default:
			err = invoker(ctx, method, req, reply, cc, opts...)
			metrics.observe(time.Since(start), err)
		}
		if err != nil {
			log.LogAttrs(ctx, slog.LevelInfo, "response", slog.String("method", method), slog.Any("error", err))
		} else {
			log.LogAttrs(ctx, slog.LevelInfo, "response", slog.String("method", method), slog.Any("message", reply))
		}
		return err
	}
}
