package weft_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/bindings/go/internal/echopb"
)

// repoPath resolves a path relative to the repository root, wherever `go test` runs from.
func repoPath(rel string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", rel)
}

// echoDir holds echo.proto; inline test configs use it as their base directory.
var echoDir = repoPath("examples/echo")

// echoServer is a real echo service that remembers what reached it.
type echoServer struct {
	echopb.UnimplementedEchoServer
	name  string
	calls atomic.Int64

	mu     sync.Mutex
	last   *echopb.SayRequest
	lastMD metadata.MD
	// Response headers and trailers Say sets with grpc.SetHeader / SetTrailer, as an
	// application handler may.
	replyHeader, replyTrailer metadata.MD
	// headerViaContext: SayStream sets replyHeader with grpc.SetHeader(stream.Context(), …)
	// instead of stream.SetHeader.
	headerViaContext bool
	// parallelMetadata: Say also sets headers x-h<i> and trailers x-t<i> for i < n, from n
	// goroutines at once, as grpc-go allows (its stream locks).
	parallelMetadata int
}

func (e *echoServer) Say(ctx context.Context, req *echopb.SayRequest) (*echopb.SayReply, error) {
	e.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	e.mu.Lock()
	e.last = proto.Clone(req).(*echopb.SayRequest)
	e.lastMD = md
	header, trailer, parallel := e.replyHeader, e.replyTrailer, e.parallelMetadata
	e.mu.Unlock()
	if err := setMetadataInParallel(ctx, parallel); err != nil {
		return nil, err
	}
	if header != nil {
		if err := grpc.SetHeader(ctx, header); err != nil {
			return nil, err
		}
	}
	if trailer != nil {
		if err := grpc.SetTrailer(ctx, trailer); err != nil {
			return nil, err
		}
	}
	return &echopb.SayReply{Body: req.GetBody(), ServedBy: e.name}, nil
}

// setMetadataInParallel sets headers x-h<i> and trailers x-t<i>, i < n, from n goroutines.
func setMetadataInParallel(ctx context.Context, n int) error {
	errs := make(chan error, 2*n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- grpc.SetHeader(ctx, metadata.Pairs(fmt.Sprintf("x-h%d", i), "1"))
			errs <- grpc.SetTrailer(ctx, metadata.Pairs(fmt.Sprintf("x-t%d", i), "1"))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (e *echoServer) setReplyMetadata(header, trailer metadata.MD) {
	e.mu.Lock()
	e.replyHeader, e.replyTrailer = header, trailer
	e.mu.Unlock()
}

func (e *echoServer) SayStream(stream echopb.Echo_SayStreamServer) error {
	for {
		req, err := stream.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		e.calls.Add(1)
		if req.GetBody() == "fail" {
			return status.Error(codes.Aborted, "failing as asked")
		}
		md, _ := metadata.FromIncomingContext(stream.Context())
		e.mu.Lock()
		e.last = proto.Clone(req).(*echopb.SayRequest)
		e.lastMD = md
		header, viaContext := e.replyHeader, e.headerViaContext
		e.mu.Unlock()
		// Set before each reply; after the first, grpc-go has sent the headers and refuses.
		switch {
		case header != nil && viaContext:
			_ = grpc.SetHeader(stream.Context(), header)
		case header != nil:
			_ = stream.SetHeader(header)
		}
		if err := stream.Send(&echopb.SayReply{Body: req.GetBody(), ServedBy: e.name}); err != nil {
			return err
		}
	}
}

func (e *echoServer) lastRequest() (*echopb.SayRequest, metadata.MD) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last, e.lastMD
}

// serve starts a gRPC server on a loopback port with the given options.
func serve(t testing.TB, name string, opts ...grpc.ServerOption) (*echoServer, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	impl := &echoServer{name: name}
	echopb.RegisterEchoServer(srv, impl)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return impl, lis.Addr().String()
}

func dial(t testing.TB, target string, opts ...grpc.DialOption) echopb.EchoClient {
	t.Helper()
	return echopb.NewEchoClient(dialConn(t, target, opts...))
}

// dialConn is dial's connection, for streams opened with a descriptor of the test's own.
func dialConn(t testing.TB, target string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	opts = append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// openSayStream opens /echo.Echo/SayStream as desc describes it (client, server or both
// streaming), whatever the server registered.
func openSayStream(t testing.TB, conn *grpc.ClientConn, desc grpc.StreamDesc) grpc.ClientStream {
	t.Helper()
	desc.StreamName = "SayStream"
	cs, err := conn.NewStream(ctx(t), &desc, "/echo.Echo/SayStream")
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// open loads an inline config for one service; protos resolve against examples/echo.
func open(t testing.TB, yaml, service string) *weft.Runtime {
	t.Helper()
	return openWith(t, yaml, service)
}

// openWith is open with options.
func openWith(t testing.TB, yaml, service string, opts ...weft.Option) *weft.Runtime {
	t.Helper()
	rt, err := weft.OpenYAML(yaml, echoDir, service, opts...)
	if err != nil {
		t.Fatalf("open %s: %v", service, err)
	}
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

// withElements writes element sources (file name without .weft → source) to a temporary
// directory and returns a config builder: the edge frontend->echo over method, with chain
// (YAML list items) on side, elements found in that directory.
func withElements(t *testing.T, elements map[string]string, method, side string) (cfg func(chain string) string, dir string) {
	t.Helper()
	dir = t.TempDir()
	for name, src := range elements {
		if err := os.WriteFile(filepath.Join(dir, name+".weft"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return func(chain string) string {
		return "protos: [" + filepath.Join(echoDir, "echo.proto") + "]\nelement_paths: [" + dir +
			"]\nedges:\n  frontend->echo:\n    from: frontend\n    to: echo\n    method: " + method + "\n" +
			"    " + side + ":\n" + chain
	}, dir
}

// mesh starts an echo server running the config as "echo" and a client running it as
// "frontend".
func mesh(t testing.TB, yaml string) (echopb.EchoClient, *echoServer) {
	t.Helper()
	srt := open(t, yaml, "echo")
	crt := open(t, yaml, "frontend")
	impl, addr := serve(t, "echo-0", srt.ServerOptions()...)
	return dial(t, addr, crt.DialOptions()...), impl
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}
