package weft

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// BalancerName is the grpc-go load-balancing policy that sends each RPC to the replica the
// chain chose (an element that sets the `dst` header, e.g. loadbalance). RPCs the chain did
// not route go round-robin over the ready replicas.
const BalancerName = "weft_dst"

// Replica is one server replica: the name elements use in `dst` (the loadbalance element's
// `replicas` state) and its network address.
type Replica struct {
	Name string
	Addr string
}

type replicaKey struct{}
type knownKey struct{}
type routeKey struct{}

// replicaSet is every replica name of one connection; each address carries it, because the
// picker is built from the ready sub-connections only and must still tell "not ready yet"
// from "no such replica".
type replicaSet map[string]bool

func init() {
	balancer.Register(base.NewBalancerBuilder(BalancerName, pickerBuilder{}, base.Config{HealthCheck: false}))
}

var resolverSeq atomic.Uint64

// Replicas returns the target and dial options for a connection to a set of named replicas,
// balanced by the chain's `dst` choice. Use with DialOptions:
//
//	target, lb := weft.Replicas(replicas...)
//	conn, err := grpc.NewClient(target, append(append(rt.DialOptions(), lb...), creds)...)
func Replicas(replicas ...Replica) (string, []grpc.DialOption) {
	known := make(replicaSet, len(replicas))
	for _, r := range replicas {
		known[r.Name] = true
	}
	addrs := make([]resolver.Address, len(replicas))
	for i, r := range replicas {
		addrs[i] = resolver.Address{Addr: r.Addr, Attributes: attributes.New(replicaKey{}, r.Name).WithValue(knownKey{}, &known)}
	}
	// A scheme per connection: each resolver serves exactly one replica set.
	scheme := fmt.Sprintf("weft-replicas-%d", resolverSeq.Add(1))
	res := manual.NewBuilderWithScheme(scheme)
	res.InitialState(resolver.State{Addresses: addrs})
	return scheme + ":///replicas", []grpc.DialOption{
		grpc.WithResolvers(res),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"` + BalancerName + `": {}}]}`),
	}
}

func withRoute(ctx context.Context, dst string) context.Context {
	return context.WithValue(ctx, routeKey{}, dst)
}

type pickerBuilder struct{}

func (pickerBuilder) Build(info base.PickerBuildInfo) balancer.Picker {
	if len(info.ReadySCs) == 0 {
		return base.NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	p := &picker{byName: make(map[string]balancer.SubConn, len(info.ReadySCs))}
	for sc, sci := range info.ReadySCs {
		p.all = append(p.all, sc)
		if name, ok := sci.Address.Attributes.Value(replicaKey{}).(string); ok {
			p.byName[name] = sc
		}
		if known, ok := sci.Address.Attributes.Value(knownKey{}).(*replicaSet); ok {
			p.known = *known
		}
	}
	return p
}

type picker struct {
	byName map[string]balancer.SubConn
	known  replicaSet
	all    []balancer.SubConn
	next   atomic.Uint32
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	if dst, ok := info.Ctx.Value(routeKey{}).(string); ok {
		if sc, ok := p.byName[dst]; ok {
			return balancer.PickResult{SubConn: sc}, nil
		}
		if p.known[dst] {
			// Not ready yet: grpc-go waits for the next picker.
			return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
		}
		// A mismatch between the chain's replica state and the dial target; waiting
		// cannot fix it.
		return balancer.PickResult{}, status.Errorf(codes.Unavailable, "weft: the chain routed to replica %q, which is not ready or not among this connection's replicas", dst)
	}
	n := p.next.Add(1)
	return balancer.PickResult{SubConn: p.all[int(n)%len(p.all)]}, nil
}
