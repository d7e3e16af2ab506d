// Command client is the frontend of the Go demo: it sends a fixed sequence of echo RPCs
// through the client side of weft.yaml's chain and prints what each one met.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	weft "github.com/weft-mesh/weft/bindings/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/weft-mesh/weft/examples/go-echo/echopb"
)

func main() {
	config := flag.String("config", "weft.yaml", "Weft chain config")
	addr := flag.String("addr", "127.0.0.1:50051", "echo server address")
	flag.Parse()

	// logging's records: each request and response the chain saw, as JSON.
	printLog := func(r weft.Record) {
		fmt.Printf("[client] %s/%s rpc #%d: %s\n", r.Element, r.Channel, r.RPC, r.Value)
	}
	rt, err := weft.Open(*config, "frontend", weft.WithRecords(printLog))
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	// The config runs even when loading warned; a warning may mean a policy does nothing.
	if w := rt.Warnings(); w != "" {
		log.Printf("weft: %s", w)
	}

	conn, err := grpc.NewClient(*addr, append(rt.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	c := echopb.NewEchoClient(conn)

	// ratelimit holds 5 tokens and every request takes one, whatever happens to it later.
	rpcs := []struct{ user, body string }{
		{"alice", "hello"},
		{"mallory", "let me in"},
		{"bob", "hello"}, // same body as alice's: the cache answers
		{"carol", "news?"},
		{"dave", "weather?"},
		{"erin", "anyone?"}, // the sixth request within a second: rate limited
	}
	seen := map[string]string{}
	for i, r := range rpcs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		reply, err := c.Say(ctx, &echopb.SayRequest{User: r.user, Body: r.body})
		took := time.Since(start)
		cancel()
		what := ""
		switch {
		case err != nil:
			st := status.Convert(err)
			what = fmt.Sprintf("rejected: %s %q", st.Code(), st.Message())
		case seen[reply.GetServedBy()] != "":
			what = fmt.Sprintf("answered by the cache: %q from reply %s (first made for %s)", reply.GetBody(), reply.GetServedBy(), seen[reply.GetServedBy()])
		default:
			seen[reply.GetServedBy()] = r.user
			what = fmt.Sprintf("OK: %q from %s", reply.GetBody(), reply.GetServedBy())
		}
		fmt.Printf("[client] rpc %d %-7s %-12q -> %s (%v)\n", i+1, r.user, r.body, what, took.Round(time.Microsecond))
	}
	// Every request's response path has run: none is left waiting (a count that grows
	// would point at calls whose end never reached Weft).
	fmt.Printf("[client] requests waiting for a response: %d\n", rt.WaitingRPCs())
	// Rejections that are not policy: bytes that are not a valid message, handlers that
	// failed at run time (none here).
	counters := rt.Counters()
	fmt.Printf("[client] RPCs rejected as malformed: %d, for element errors: %d\n", counters.MalformedRPCs, counters.ElementErrors)
}
