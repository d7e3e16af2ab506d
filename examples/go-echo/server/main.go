// Command server is the echo service of the Go demo: a grpc-go server whose RPCs pass the
// server side of weft.yaml's chain in-process.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	weft "github.com/weft-mesh/weft/bindings/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/weft-mesh/weft/examples/go-echo/echopb"
)

type echo struct {
	echopb.UnimplementedEchoServer
	name  string
	calls atomic.Int64
}

// Say numbers its replies, so the client can tell a reply the cache produced (an old number)
// from one the server just made.
func (e *echo) Say(ctx context.Context, req *echopb.SayRequest) (*echopb.SayReply, error) {
	n := e.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	fmt.Printf("  [server] handled #%d user=%s body=%q weft-version=%v\n", n, req.GetUser(), req.GetBody(), md.Get("weft-version"))
	return &echopb.SayReply{Body: req.GetBody(), ServedBy: fmt.Sprintf("%s #%d", e.name, n)}, nil
}

func main() {
	config := flag.String("config", "weft.yaml", "Weft chain config")
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	portFile := flag.String("port-file", "", "write the bound address here once listening")
	flag.Parse()

	// metrics' records: each RPC's latency in seconds, as the server-side chain measured it.
	// (The server numbers its RPCs on its own: #1 here is the first to reach it.)
	printLatency := func(r weft.Record) {
		var seconds float64
		if err := json.Unmarshal(r.Value, &seconds); err != nil {
			fmt.Printf("  [server] %s/%s rpc #%d: %s\n", r.Element, r.Channel, r.RPC, r.Value)
			return
		}
		fmt.Printf("  [server] %s/%s rpc #%d: %v\n", r.Element, r.Channel, r.RPC,
			time.Duration(seconds*float64(time.Second)).Round(time.Microsecond))
	}
	rt, err := weft.Open(*config, "echo", weft.WithRecords(printLatency))
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	// The config runs even when loading warned; a warning may mean a policy does nothing.
	if w := rt.Warnings(); w != "" {
		log.Printf("weft: %s", w)
	}

	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("listen on %s: %v", *addr, err)
	}
	srv := grpc.NewServer(rt.ServerOptions()...)
	echopb.RegisterEchoServer(srv, &echo{name: "echo-0"})
	fmt.Printf("  [server] echo listening on %s, Weft config version %d\n", lis.Addr(), rt.Version())
	if *portFile != "" {
		if err := os.WriteFile(*portFile, []byte(lis.Addr().String()), 0o644); err != nil {
			log.Fatal(err)
		}
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-stop
		srv.GracefulStop()
	}()
	if err := srv.Serve(lis); err != nil {
		log.Fatal(err)
	}
}
