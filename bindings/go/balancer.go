package weft

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
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
type routeKey struct{}

func init() {
	balancer.Register(dstBuilder{})
}

var resolverSeq atomic.Uint64

// Replicas returns the target and dial options for a connection to a set of named replicas,
// balanced by the chain's `dst` choice. Use with DialOptions:
//
//	target, lb := weft.Replicas(replicas...)
//	conn, err := grpc.NewClient(target, append(append(rt.DialOptions(), lb...), creds)...)
func Replicas(replicas ...Replica) (string, []grpc.DialOption) {
	addrs := make([]resolver.Address, len(replicas))
	for i, r := range replicas {
		addrs[i] = resolver.Address{Addr: r.Addr, Attributes: attributes.New(replicaKey{}, r.Name)}
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

type dstBuilder struct{}

func (dstBuilder) Name() string { return BalancerName }

func (dstBuilder) Build(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
	return &dstBalancer{cc: cc, replicas: map[replicaAddr]*replicaConn{}}
}

// dstBalancer keeps a sub-connection to every replica and tells the picker each one's state,
// so an RPC routed to a replica that cannot be reached fails as grpc-go fails any pick then,
// instead of waiting for that replica until its deadline. grpc-go calls it on one goroutine
// at a time, the sub-connections' state listeners included.
type dstBalancer struct {
	cc       balancer.ClientConn
	replicas map[replicaAddr]*replicaConn
	// resolverErr: why the resolver gave no replicas, while it gives none.
	resolverErr error
}

type replicaAddr struct{ name, addr string }

type replicaConn struct {
	key   replicaAddr
	sc    balancer.SubConn
	state connectivity.State
	err   error // the last connection error, in TRANSIENT_FAILURE
}

func (b *dstBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	b.resolverErr = nil
	seen := make(map[replicaAddr]bool, len(s.ResolverState.Addresses))
	for _, a := range s.ResolverState.Addresses {
		name, _ := a.Attributes.Value(replicaKey{}).(string)
		key := replicaAddr{name, a.Addr}
		seen[key] = true
		if _, ok := b.replicas[key]; ok {
			continue
		}
		rc := &replicaConn{key: key, state: connectivity.Idle}
		sc, err := b.cc.NewSubConn([]resolver.Address{a}, balancer.NewSubConnOptions{
			StateListener: func(st balancer.SubConnState) { b.updateSubConnState(rc, st) },
		})
		if err != nil { // the connection is closing
			continue
		}
		rc.sc = sc
		b.replicas[key] = rc
		sc.Connect()
	}
	for key, rc := range b.replicas {
		if !seen[key] {
			rc.sc.Shutdown()
			delete(b.replicas, key)
		}
	}
	if len(s.ResolverState.Addresses) == 0 {
		b.ResolverError(errors.New("weft: the resolver gave no replicas"))
		return balancer.ErrBadResolverState
	}
	b.update()
	return nil
}

func (b *dstBalancer) ResolverError(err error) {
	b.resolverErr = err
	if len(b.replicas) == 0 {
		b.update()
	}
}

func (b *dstBalancer) updateSubConnState(rc *replicaConn, st balancer.SubConnState) {
	if b.replicas[rc.key] != rc || st.ConnectivityState == connectivity.Shutdown {
		return // removed by the resolver, or the connection is closing
	}
	if st.ConnectivityState == connectivity.Idle {
		rc.sc.Connect() // stay connected to every replica, as the routes may name any
	}
	// As in grpc-go's own policies, a replica that failed counts as failed until it is
	// READY again: RPCs routed to it fail at once while it retries, not only between tries.
	if rc.state == connectivity.TransientFailure && st.ConnectivityState != connectivity.Ready {
		if st.ConnectivityState == connectivity.TransientFailure {
			rc.err = st.ConnectionError
			b.update()
		}
		return
	}
	rc.state, rc.err = st.ConnectivityState, st.ConnectionError
	b.update()
}

// update hands grpc-go a picker over the replicas' current states, which also makes RPCs
// waiting for a pick try again.
func (b *dstBalancer) update() {
	p := &picker{byName: make(map[string]*replicaConn, len(b.replicas))}
	state := connectivity.TransientFailure
	var lastErr error
	for _, rc := range b.replicas {
		snap := *rc
		if cur, ok := p.byName[rc.key.name]; !ok || cur.state != connectivity.Ready {
			p.byName[rc.key.name] = &snap
		}
		switch rc.state {
		case connectivity.Ready:
			p.ready = append(p.ready, rc.sc)
			state = connectivity.Ready
		case connectivity.TransientFailure:
			lastErr = rc.err
		default:
			if state != connectivity.Ready {
				state = connectivity.Connecting
			}
		}
	}
	if state == connectivity.TransientFailure {
		if len(b.replicas) == 0 {
			p.failed = fmt.Errorf("weft: no replicas: %v", b.resolverErr)
		} else {
			p.failed = fmt.Errorf("weft: no replica is reachable; last connection error: %v", lastErr)
		}
	}
	b.cc.UpdateState(balancer.State{ConnectivityState: state, Picker: p})
}

// UpdateSubConnState is not called: every sub-connection has a state listener.
func (b *dstBalancer) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}

// ExitIdle has nothing to do: the balancer reconnects each replica as soon as it goes idle.
func (b *dstBalancer) ExitIdle() {}

func (b *dstBalancer) Close() {
	for key, rc := range b.replicas {
		rc.sc.Shutdown()
		delete(b.replicas, key)
	}
}

// picker picks by the state the balancer saw when it made it.
type picker struct {
	byName map[string]*replicaConn
	ready  []balancer.SubConn
	// failed: no replica is ready or trying to connect.
	failed error
	next   atomic.Uint32
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	if dst, ok := info.Ctx.Value(routeKey{}).(string); ok {
		rc, ok := p.byName[dst]
		switch {
		case !ok:
			// A mismatch between the chain's replica state and the dial target; waiting
			// cannot fix it.
			return balancer.PickResult{}, status.Errorf(codes.Unavailable, "weft: the chain routed to replica %q, which is not among this connection's replicas", dst)
		case rc.state == connectivity.Ready:
			return balancer.PickResult{SubConn: rc.sc}, nil
		case rc.state == connectivity.TransientFailure:
			// Not a status: grpc-go then fails the RPC with UNAVAILABLE, or keeps an RPC
			// that waits for ready waiting, as for any pick that finds no connection.
			return balancer.PickResult{}, fmt.Errorf("weft: the chain routed to replica %q, which is unreachable: %v", dst, rc.err)
		default:
			// Connecting: grpc-go waits for the next picker.
			return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
		}
	}
	if len(p.ready) == 0 {
		if p.failed != nil {
			return balancer.PickResult{}, p.failed
		}
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	}
	n := p.next.Add(1)
	return balancer.PickResult{SubConn: p.ready[int(n)%len(p.ready)]}, nil
}
