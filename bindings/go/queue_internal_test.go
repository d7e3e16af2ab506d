package weft

import (
	"sync"
	"testing"
)

// A receiving goroutine may outlive a server stream's handler and queue a request while the
// stream's end drains the queue: the request is either drained (its response path then
// runs with the stream's end) or refused (the receiver ends it), never lost between the two.
func TestAQueueClosedWhileARequestIsQueuedLosesNothing(t *testing.T) {
	for i := range 20000 {
		var h handleQueue
		h.push(7)
		h.queueReply(heldReply{msg: []byte("held")})
		start := make(chan struct{})
		var pushed bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			pushed = h.push(9)
		}()
		close(start)
		rpcs := h.closeAndDrain()
		wg.Wait()
		drained := false
		for _, r := range rpcs {
			drained = drained || r == 9
		}
		if pushed != drained {
			t.Fatalf("iteration %d: push accepted %v, drained %v (%v)", i, pushed, drained, rpcs)
		}
		if rpcs[0] != 7 {
			t.Fatalf("iteration %d: drained %v, want 7 first", i, rpcs)
		}
	}
}
