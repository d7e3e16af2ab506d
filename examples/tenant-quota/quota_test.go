// The example's weft.yaml run by a real grpc-go client (checkout) and server (inventory),
// each with its side of the chains compiled in through the Go binding.
package tenantquota_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	weft "github.com/weft-mesh/weft/bindings/go"
	"github.com/weft-mesh/weft/examples/tenant-quota/inventorypb"
)

type inventory struct {
	inventorypb.UnimplementedInventoryServer
	reserves, stocks atomic.Int64
}

func (s *inventory) Reserve(ctx context.Context, req *inventorypb.ReserveRequest) (*inventorypb.ReserveReply, error) {
	s.reserves.Add(1)
	return &inventorypb.ReserveReply{Reserved: true, Remaining: 100 - req.GetQuantity()}, nil
}

func (s *inventory) Stock(ctx context.Context, req *inventorypb.StockRequest) (*inventorypb.StockReply, error) {
	n := s.stocks.Add(1)
	return &inventorypb.StockReply{Sku: req.GetSku(), Available: int32(n)}, nil
}

// start serves inventory and dials it as checkout, both through weft.yaml.
func start(t *testing.T) (*inventory, inventorypb.InventoryClient) {
	t.Helper()
	t.Setenv("WEFT_WATCH_MS", "0")
	srt, err := weft.Open("weft.yaml", "inventory")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srt.Close() })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(srt.ServerOptions()...)
	svc := &inventory{}
	inventorypb.RegisterInventoryServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)

	crt, err := weft.Open("weft.yaml", "checkout")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { crt.Close() })
	conn, err := grpc.NewClient(lis.Addr().String(), append(crt.DialOptions(),
		grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return svc, inventorypb.NewInventoryClient(conn)
}

func reserve(client inventorypb.InventoryClient, tenant, sku string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if tenant != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant", tenant)
	}
	_, err := client.Reserve(ctx, &inventorypb.ReserveRequest{OrderId: "o", Sku: sku, Quantity: 1})
	return err
}

func wantCode(t *testing.T, err error, code codes.Code, text string) {
	t.Helper()
	st, _ := status.FromError(err)
	if st.Code() != code || !strings.Contains(st.Message(), text) {
		t.Fatalf("got %v, want %v containing %q", err, code, text)
	}
}

func TestEachTenantHasItsOwnQuota(t *testing.T) {
	svc, client := start(t)
	// rate 2 with burst 2 holds 4 requests; the fifth comes well within the 0.5 s a token
	// takes to come back.
	for i := 0; i < 4; i++ {
		if err := reserve(client, "acme", "sku-1"); err != nil {
			t.Fatalf("acme's request %d: %v", i+1, err)
		}
	}
	wantCode(t, reserve(client, "acme", "sku-1"), codes.ResourceExhausted, "tenant acme is over its quota")
	// Another tenant's bucket is untouched by acme's.
	if err := reserve(client, "globex", "sku-1"); err != nil {
		t.Fatalf("globex: %v", err)
	}
	// bigcorp's rate comes from the control-plane state in weft.yaml (100/s, burst 200).
	for i := 0; i < 50; i++ {
		if err := reserve(client, "bigcorp", "sku-1"); err != nil {
			t.Fatalf("bigcorp's request %d: %v", i+1, err)
		}
	}
	if got := svc.reserves.Load(); got != 4+1+50 {
		t.Fatalf("the server handled %d reservations, want 55 (the rejected one never reaches it)", got)
	}
	// A token comes back after half a second.
	time.Sleep(600 * time.Millisecond)
	if err := reserve(client, "acme", "sku-1"); err != nil {
		t.Fatalf("acme after the refill: %v", err)
	}
}

func TestRequestWithoutTenantIsUnauthenticated(t *testing.T) {
	svc, client := start(t)
	wantCode(t, reserve(client, "", "sku-1"), codes.Unauthenticated, "tenantquota: no x-tenant header")
	if got := svc.reserves.Load(); got != 0 {
		t.Fatalf("the server handled %d reservations, want 0", got)
	}
}

func TestRecalledSkuIsDeniedBeforeTheQuota(t *testing.T) {
	svc, client := start(t)
	// The firewall runs before the quota: five denied requests cost acme nothing.
	for i := 0; i < 5; i++ {
		wantCode(t, reserve(client, "acme", "recalled-1"), codes.PermissionDenied, "acl")
	}
	for i := 0; i < 4; i++ {
		if err := reserve(client, "acme", "sku-1"); err != nil {
			t.Fatalf("acme's request %d after the denied ones: %v", i+1, err)
		}
	}
	if got := svc.reserves.Load(); got != 4 {
		t.Fatalf("the server handled %d reservations, want 4", got)
	}
}

func TestStockAnswersComeFromTheCache(t *testing.T) {
	svc, client := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < 3; i++ {
		reply, err := client.Stock(ctx, &inventorypb.StockRequest{Sku: "sku-1"})
		if err != nil {
			t.Fatal(err)
		}
		if reply.GetAvailable() != 1 {
			t.Fatalf("call %d got the server's answer #%d, want the cached #1", i+1, reply.GetAvailable())
		}
	}
	if _, err := client.Stock(ctx, &inventorypb.StockRequest{Sku: "sku-2"}); err != nil {
		t.Fatal(err)
	}
	if got := svc.stocks.Load(); got != 2 {
		t.Fatalf("the server answered %d stock calls, want 2 (one per sku)", got)
	}
}
