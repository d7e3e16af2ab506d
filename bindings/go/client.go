package weft

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// DialOptions installs Weft on a client connection: its codec (so messages are encoded once),
// the unary and stream interceptors, and the routing balancer (see Replicas).
func (r *Runtime) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(clientCodec)),
		grpc.WithChainUnaryInterceptor(r.UnaryClientInterceptor()),
		grpc.WithChainStreamInterceptor(r.StreamClientInterceptor()),
	}
}

// UnaryClientInterceptor runs the client side of the edge whose `from` is this service and
// whose method matches. With Weft's codec on the connection (DialOptions) each message is
// encoded once; without it the interceptor still works but gRPC encodes the request again.
func (r *Runtime) UnaryClientInterceptor() grpc.UnaryClientInterceptor { return r.unaryClient }

func (r *Runtime) unaryClient(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	// grpc-go calls a call's grpc.OnFinish options when its invoker ends, with its own
	// status; Weft calls them instead, once, with what the caller gets: grpc-go never sees a
	// call the chain refuses or answers, and the chain may change the status it saw.
	opts, finish := takeOnFinish(opts)
	err := r.unaryClientCall(ctx, method, req, reply, cc, invoker, opts)
	for _, o := range finish {
		o.OnFinish(err)
	}
	return err
}

// takeOnFinish splits a call's grpc.OnFinish options from the others; the options are the
// caller's slice, which is not changed (a copy is made only when there are some).
func takeOnFinish(opts []grpc.CallOption) ([]grpc.CallOption, []grpc.OnFinishCallOption) {
	var finish []grpc.OnFinishCallOption
	for _, o := range opts {
		if f, ok := o.(grpc.OnFinishCallOption); ok {
			finish = append(finish, f)
		}
	}
	if finish == nil {
		return opts, nil
	}
	rest := make([]grpc.CallOption, 0, len(opts)-len(finish))
	for _, o := range opts {
		if _, ok := o.(grpc.OnFinishCallOption); !ok {
			rest = append(rest, o)
		}
	}
	return rest, finish
}

func (r *Runtime) unaryClientCall(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	reqMsg, ok1 := req.(proto.Message)
	replyMsg, ok2 := reply.(proto.Message)
	if !ok1 || !ok2 {
		if _, twice := req.(*rawMessage); twice {
			// An outer interceptor of Weft's has already run a chain and encoded the request.
			return installedTwice(method, "client")
		}
		return status.Errorf(codes.Internal, "weft: %s: request %T or reply %T is not a protobuf message; Weft cannot apply the chain", method, req, reply)
	}
	s := getCall()
	defer putCall(s)
	buf, err := encodeInto(s, reqMsg)
	if err != nil {
		return status.Errorf(codes.Internal, "weft: %s: encoding the request: %v", method, err)
	}
	defer func() { buf.Free() }()
	md, _ := metadata.FromOutgoingContext(ctx)
	s.encodeMD(md)
	m := r.method(method)
	codec := hasWeftCodec(opts)

	rc := r.runRequest(s, sideClient, m)
	if rc == rcNoEdge {
		ctx = r.stampCaller(ctx, md)
		if codec {
			s.out.buf = buf
			err := invoker(ctx, method, &s.out, reply, cc, opts...)
			s.out.buf = nil
			return err
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if rc != rcOK {
		return failure(rc, s, "client request "+method)
	}
	switch s.verdict() {
	case verdictReject:
		return rejection(s)
	case verdictReply:
		// grpc-go fails a call whose context has already ended before anything is sent; a
		// local reply does not turn that into a success.
		if err := ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		// The reply's own headers (a cached response's), as a server's would arrive.
		showMetadata(s, opts)
		return unmarshalInto(s.outMessage(), replyMsg, "the chain's local reply")
	}

	rpc := s.rpcHandle()
	if s.messageChanged() {
		buf.Free()
		buf = copyOut(s.outMessage())
	}
	if s.metadataChanged() {
		ctx = metadata.NewOutgoingContext(ctx, s.decodeMD(s.outMetadata()))
	}
	if dst := s.routeTo(); dst != "" {
		ctx = withRoute(ctx, dst)
	}
	var rm responseMeta
	if rpc != 0 {
		opts = rm.capture(opts)
	}

	if !codec {
		return r.unaryClientTyped(ctx, s, m, rpc, method, reqMsg, buf, replyMsg, cc, invoker, opts, &rm)
	}
	s.out.buf = buf
	s.raw.buf = nil
	err = invoker(ctx, method, &s.out, &s.raw, cc, opts...)
	s.out.buf = nil
	if err != nil {
		return r.clientErrorResponse(s, m, rpc, method, err, replyMsg, &rm, opts)
	}
	in := s.raw.buf
	s.raw.buf = nil
	defer in.Free()
	b, extra := contiguous(in)
	if extra != nil {
		defer extra.Free()
	}
	if rpc == 0 {
		return r.decodeReply(b, replyMsg)
	}
	s.msg.set(b)
	rm.encode(s)
	return r.clientResponse(s, m, rpc, method, replyMsg, opts)
}

// unaryClientTyped is the path without Weft's codec: gRPC gets message values, so a rewritten
// request is decoded into a new value and the reply is encoded once more for the chain.
func (r *Runtime) unaryClientTyped(ctx context.Context, s *callState, m cstr, rpc uint64, method string, reqMsg proto.Message, buf mem.BufferSlice, replyMsg proto.Message, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption, rm *responseMeta) error {
	send := reqMsg
	if s.messageChanged() {
		send = newMessageLike(reqMsg)
		b, extra := contiguous(buf)
		err := unmarshalInto(b, send, "the chain's rewritten request")
		if extra != nil {
			extra.Free()
		}
		if err != nil {
			r.endRPC(sideClient, m, rpc, err, nil)
			return err
		}
	}
	if err := invoker(ctx, method, send, replyMsg, cc, opts...); err != nil {
		return r.clientErrorResponse(s, m, rpc, method, err, replyMsg, rm, opts)
	}
	if rpc == 0 {
		return nil
	}
	if _, err := encodeInto(s, replyMsg); err != nil {
		err = status.Errorf(codes.Internal, "weft: %s: encoding the reply: %v", method, err)
		r.endRPC(sideClient, m, rpc, err, nil)
		return err
	}
	rm.encode(s)
	return r.clientResponse(s, m, rpc, method, replyMsg, opts)
}

// clientResponse runs the response path over the reply bytes in s.msg and decodes the result
// into replyMsg.
func (r *Runtime) clientResponse(s *callState, m cstr, rpc uint64, method string, replyMsg proto.Message, opts []grpc.CallOption) error {
	rc := r.runResponse(s, sideClient, m, rpc, 0, "")
	if rc != rcOK {
		return failure(rc, s, "client response "+method)
	}
	showMetadata(s, opts)
	switch s.verdict() {
	case verdictReject:
		return rejection(s)
	case verdictReply:
		return unmarshalInto(s.outMessage(), replyMsg, "the chain's reply")
	}
	if s.messageChanged() {
		return unmarshalInto(s.outMessage(), replyMsg, "the chain's rewritten reply")
	}
	return r.decodeReply(s.msg.bytes(), replyMsg)
}

// decodeReply decodes the bytes a server sent; bytes that do not decode fail the call with
// INTERNAL, as in grpc-go, and are counted (Counters) unless an element read them: then the
// library counted them and rejected the call itself.
func (r *Runtime) decodeReply(b []byte, m proto.Message) error {
	err := unmarshalInto(b, m, "the server")
	if err != nil {
		r.malformed.Add(1)
	}
	return err
}

// clientErrorResponse runs the response path for a failed RPC, so elements before the failure
// see it (metrics count it, a circuit breaker opens); the chain may also turn it into a reply.
func (r *Runtime) clientErrorResponse(s *callState, m cstr, rpc uint64, method string, err error, replyMsg proto.Message, rm *responseMeta, opts []grpc.CallOption) error {
	if rpc == 0 {
		return err
	}
	st := statusOf(err)
	rm.encode(s)
	s.msg.len = 0
	rc := r.runResponse(s, sideClient, m, rpc, int32(st.Code()), st.Message())
	if rc != rcOK {
		return err
	}
	showMetadata(s, opts)
	switch s.verdict() {
	case verdictReject:
		return errorRejection(s, err, st)
	case verdictReply:
		return unmarshalInto(s.outMessage(), replyMsg, "the chain's reply")
	}
	return unmarshalInto(s.successInPlace(), replyMsg, "the chain's response")
}

// stampCaller gives a call no chain of this runtime ran for the runtime's caller stamp
// ("/<service>"). A server with edges from several services into the method picks the edge
// by the service the stamp names and refuses a request that names none, so without it a
// caller whose config did not have its edge yet would be refused while the config rolled
// out. A stamp the call carries already was copied from an incoming call (an application
// passing its metadata on): it names the caller's caller, whose client side ran for that
// call, not this one, so its service is replaced with this one, as the library replaces it
// on a call that has an edge (or dropped, when this service's name cannot be carried in a
// header). Its digest stays: it names the version the caller's caller ran, which the server
// runs while it has it, as it did when the stamp passed on untouched.
func (r *Runtime) stampCaller(ctx context.Context, md metadata.MD) context.Context {
	stamps := md[versionHeader]
	switch {
	case len(stamps) == 0 && r.callerStamp != "":
		// The common cases, each the cheapest way to add the header: the shared metadata
		// of the stamp alone, or the pair kept beside the caller's metadata (grpc-go does
		// not copy it).
		if len(md) == 0 {
			return metadata.NewOutgoingContext(ctx, r.callerMD)
		}
		return metadata.AppendToOutgoingContext(ctx, versionHeader, r.callerStamp)
	case len(stamps) == 0:
		return ctx
	}
	stamp := r.callerStamp
	if len(stamps) == 1 {
		digest, _, _ := strings.Cut(stamps[0], "/")
		stamp = digest + r.callerStamp
		if stamp == stamps[0] {
			return ctx
		}
	}
	md = md.Copy()
	if stamp == "" {
		delete(md, versionHeader)
	} else {
		md[versionHeader] = []string{stamp}
	}
	return metadata.NewOutgoingContext(ctx, md)
}

// StreamClientInterceptor runs the client side of the chain on every message of a stream:
// each message sent is a request, each message received the response to the oldest request
// still waiting for one.
//
// The stream opens when its first message has passed the chain (or when the caller first
// reads, asks for headers or closes the sending side; on a call with one request, reads and
// headers wait for it), so the metadata the chain set on that message — the weft-version
// stamp, a dst route — goes out with the stream's headers.
func (r *Runtime) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, cancel := context.WithCancel(ctx)
		md, _ := metadata.FromOutgoingContext(ctx)
		// The caller's grpc.OnFinish options are Weft's to call (endCallOptions), with the
		// status the caller gets: grpc-go's is a cancellation when the chain ends the stream.
		opts, onFinish := takeOnFinish(opts)
		w := &clientStream{
			r: r, name: method, m: r.method(method), md: md, codec: hasWeftCodec(opts), cancel: cancel,
			ctx: ctx, desc: desc, cc: cc, streamer: streamer, opts: opts, onFinish: onFinish,
		}
		if !desc.ClientStreams {
			w.firstSent = make(chan struct{})
		}
		// A caller may stop reading before the stream's end and cancel its context instead,
		// grpc-go's other way to release a stream: the requests still waiting then get the
		// context's status.
		w.stopWatch = context.AfterFunc(ctx, func() {
			w.endWaiting(ctx.Err(), nil)
			w.endCallOptions(ctx.Err())
		})
		return w, nil
	}
}

type clientStream struct {
	r      *Runtime
	name   string
	m      cstr
	md     metadata.MD
	codec  bool
	cancel context.CancelFunc

	// What opening the stream needs, kept until the first message has run the chain.
	ctx      context.Context
	desc     *grpc.StreamDesc
	cc       *grpc.ClientConn
	streamer grpc.Streamer
	opts     []grpc.CallOption // without the caller's grpc.OnFinish options: onFinish
	onFinish []grpc.OnFinishCallOption

	// openMu is held while the stream opens, so a caller that needs the stream waits for
	// an open under way. The fields below are guarded by csMu, which is never held across
	// a call out: Context, Trailer and requestMD read them without waiting for an open
	// (grpc-go's Context and Trailer never block).
	openMu  sync.Mutex
	csMu    sync.Mutex
	opened  bool
	cs      grpc.ClientStream
	openErr error
	// preOpen: what Context() returns while the stream is not open, made when first asked
	// for. unopened: the stream never opened and never will (keepUnopened); optionsEnded:
	// endCallOptions has run for it. Guarded by csMu.
	preOpen      context.Context
	unopened     bool
	optionsEnded bool
	// stampedMD: the caller's metadata with the weft-version stamp the stream opened with,
	// which its headers carry, so the server runs that version for the whole stream. Later
	// messages pass it so the client runs the same one after a reload (while the version
	// lives: the library keeps one only as long as a request of it waits); nil when the
	// headers carry the caller's metadata as it was (no chain ran, or its stamp was there).
	stampedMD metadata.MD

	pending handleQueue

	mu sync.Mutex // SendMsg and RecvMsg may run on two goroutines
	// early: a message the server sent, received while a local reply was due before it;
	// the next RecvMsg returns it. Only RecvMsg touches it (one goroutine at a time).
	early *earlyResponse
	// answer: on a call without server streaming, the chain's reply, which is the call's
	// one response. over: how the stream ended for the caller, which later RecvMsg calls
	// return. Both guarded by mu.
	answer []byte
	over   error
	// sendClosed: CloseSend was called. Guarded by mu.
	sendClosed bool
	// answered: the chain answered a message itself. Until some message goes to the
	// server, ending the sending side then opens no stream (errAnsweredLocally).
	answered bool
	// localHeader: the first local reply's headers, the stream's headers when it never
	// opens.
	localHeader metadata.MD
	failed      error

	stopWatch func() bool // stops the watch on the context set up at the start

	// reading: a RecvMsg call is under way, which ends the stream for the chain itself when
	// it finds grpc-go's stream over. grpcEnded, grpcErr: grpc-go has ended its stream, with
	// that status (see grpcFinished). finished: finish has run; a request queued later ends
	// itself (SendMsg). All guarded by mu.
	reading   bool
	grpcEnded bool
	grpcErr   error
	finished  bool

	// firstSent: on a call with one request, closed when SendMsg has run the chain on it.
	// RecvMsg and Header wait for it (see awaitFirstSend); nil on client-streaming calls.
	firstSent     chan struct{}
	firstSentOnce sync.Once
}

// awaitFirstSend waits, on a call with one request, until SendMsg has run the chain on it,
// CloseSend has ended the sending side, the context ends or the ClientConn closes. A reader
// that got ahead of the request would find no reply yet and open the stream without it: a
// server then waits for the request for ever, and a reply the chain makes is lost. So the
// stream opens with its request, as grpc-go's generated stubs send it before they return
// the stream. The cost: a caller that reads or asks for headers before sending, in one
// goroutine, waits for its context, even from a server that answers before it reads
// (docs/go.md, "Limits today"). After the context's end or the ClientConn's close the
// caller opens the stream, which fails at once with grpc-go's status for either.
func (c *clientStream) awaitFirstSend() {
	if c.firstSent == nil {
		return
	}
	select {
	case <-c.firstSent:
		return
	default:
	}
	wctx, stop := context.WithCancel(c.ctx)
	defer stop()
	closed := make(chan struct{})
	onConnClose(wctx, c.cc, func() { close(closed) })
	select {
	case <-c.firstSent:
	case <-c.ctx.Done():
	case <-closed:
	}
}

// onConnClose calls f, on a goroutine of its own, once cc shuts down (ClientConn.Close),
// unless ctx ends first; without a ClientConn, never. grpc-go gives an interceptor no other
// way to learn of the close, and Weft needs it only for what is not grpc-go's yet (a stream
// not open), so the goroutine lives only while something waits on that.
func onConnClose(ctx context.Context, cc *grpc.ClientConn, f func()) {
	if cc == nil {
		return
	}
	go func() {
		for st := cc.GetState(); st != connectivity.Shutdown; st = cc.GetState() {
			if !cc.WaitForStateChange(ctx, st) {
				return
			}
		}
		f()
	}()
}

// endWaiting gives every request still waiting the stream's end as its response: err's
// status (OK for a clean end) and the stream's trailers when known (docs/go.md, "Streams").
func (c *clientStream) endWaiting(err error, trailer metadata.MD) {
	for _, rpc := range c.pending.drain() {
		c.r.endRPC(sideClient, c.m, rpc, err, trailer)
	}
}

// finish ends the stream for the chain once grpc-go has ended it (or the chain failed it),
// and releases its context. trailer is the stream's, when grpc-go has read them.
func (c *clientStream) finish(err error, trailer metadata.MD) {
	// Cancelling grpc-go's stream makes grpc-go end it with CANCELLED, which is not the
	// stream's end when the chain failed it: grpcFinished leaves the end to this call.
	c.mu.Lock()
	c.finished = true
	c.mu.Unlock()
	// Cancelled before the drain: a request that SendMsg queues after the drain then sees
	// the context done and ends itself (SendMsg checks after queueing), so none is missed.
	c.stopWatch()
	c.cancel()
	c.endWaiting(err, trailer)
	c.endCallOptions(err)
}

// endCallOptions gives the caller's call options the stream's end, once: grpc.OnFinish gets
// the status the caller got (nil for OK), on every stream, and on a stream grpc-go never
// saw a grpc.Header option gets the headers of the chain's first local reply, if it set
// any (as on a unary call); grpc-go fills those of the streams it opened. A stream not open
// when it ends never opens (its context is cancelled), so it is one of those; its later
// calls return its end, or for one the chain answered, the local replies as before.
func (c *clientStream) endCallOptions(err error) {
	c.mu.Lock()
	answered, header := c.answered, c.localHeader
	c.mu.Unlock()
	err = statusOf(err).Err() // nil for OK; a context's end as grpc-go gives it
	if answered || err == nil {
		c.keepUnopened(errAnsweredLocally)
	} else {
		c.keepUnopened(err)
	}
	c.csMu.Lock()
	first, unopened := !c.optionsEnded, c.unopened
	c.optionsEnded = true
	c.csMu.Unlock()
	if !first {
		return
	}
	// The headers first, as grpc-go fills them before it calls OnFinish.
	if unopened && header != nil {
		for _, o := range c.opts {
			if h, ok := o.(grpc.HeaderCallOption); ok {
				*h.HeaderAddr = header.Copy()
			}
		}
	}
	for _, o := range c.onFinish {
		o.OnFinish(err)
	}
}

// grpcFinished is grpc-go's OnFinish for the stream: it has ended, with err (nil for OK).
// Unless someone else gives the chain the end, the requests still waiting get it now:
//   - a RecvMsg under way does, as when grpc-go's RecvMsg returns the end. On a call without
//     server streaming grpc-go ends the stream inside the RecvMsg that returns its one
//     response, whose response path must run before the requests still waiting get the
//     end (endRead ends them if that RecvMsg did not);
//   - finish does when it brought this end about by cancelling grpc-go's stream.
//
// grpc-go calls this without its locks held, and from inside the streamer when the stream
// fails to open (openMu is held there, csMu is not).
func (c *clientStream) grpcFinished(err error) {
	c.mu.Lock()
	c.grpcEnded, c.grpcErr = true, err
	leave := c.reading || c.finished
	c.mu.Unlock()
	if !leave {
		c.finishWithGrpc(err)
	}
}

// finishWithGrpc ends the stream for the chain with grpc-go's end and the stream's trailers
// (grpc-go has read them by the time it calls OnFinish).
func (c *clientStream) finishWithGrpc(err error) {
	var trailer metadata.MD
	if cs := c.current(); cs != nil {
		trailer = cs.Trailer()
	}
	c.finish(err, trailer)
}

// beginRead and endRead mark a RecvMsg call (see grpcFinished).
func (c *clientStream) beginRead() {
	c.mu.Lock()
	c.reading = true
	c.mu.Unlock()
}

func (c *clientStream) endRead() {
	c.mu.Lock()
	c.reading = false
	ended, err := c.grpcEnded && !c.finished, c.grpcErr
	c.mu.Unlock()
	if ended {
		// grpc-go's stream ended while this RecvMsg ran the chain on a message it had
		// received, and the RecvMsg returns that message: the requests after it wait.
		c.finishWithGrpc(err)
	}
}

// errAnsweredLocally is the "open error" of a stream that never opened: its sending side
// ended when the chain had answered its messages itself and none had gone to the server.
// The caller reads the local replies, then io.EOF.
var errAnsweredLocally = errors.New("weft: every message of the stream was answered locally")

// stream opens the underlying stream on first use; md and dst are the first message's
// rewrites (nil and "" when the caller reads before sending).
func (c *clientStream) stream(md metadata.MD, dst string) (grpc.ClientStream, error) {
	c.openMu.Lock()
	defer c.openMu.Unlock()
	// Whether to open is decided under csMu: keepUnopened decides the other way without
	// openMu.
	c.csMu.Lock()
	open := !c.opened
	c.opened = true
	c.csMu.Unlock()
	if open {
		ctx := c.ctx
		var stamped metadata.MD
		if md != nil {
			ctx = metadata.NewOutgoingContext(ctx, md)
			// The caller's metadata may carry a stamp of its own, copied from an incoming
			// call: it names the caller's caller, and its digest another version, or none.
			if stamp := md[versionHeader]; len(stamp) > 0 && !slices.Equal(stamp, c.md[versionHeader]) {
				stamped = c.md.Copy()
				stamped[versionHeader] = stamp
			}
		} else {
			// No chain ran for a message before the stream opened (no edge covers it, or
			// the caller read first): the headers still name the caller.
			ctx = c.r.stampCaller(ctx, c.md)
		}
		if dst != "" {
			ctx = withRoute(ctx, dst)
		}
		c.csMu.Lock()
		c.stampedMD = stamped
		c.csMu.Unlock()
		// grpc-go calls OnFinish however its stream ends, also where no call of the
		// caller's sees the end: ClientConn.Close, or a failure Header() finds (it returns
		// no error). The stream's context would tell as much, but asking a grpc-go stream
		// for it ends the stream's retries, so Weft does not.
		opts := append(c.opts[:len(c.opts):len(c.opts)], grpc.OnFinish(c.grpcFinished))
		cs, err := c.streamer(ctx, c.desc, c.cc, c.name, opts...)
		c.csMu.Lock()
		c.cs, c.openErr = cs, err
		c.csMu.Unlock()
		if err != nil {
			c.finish(err, nil)
		}
	}
	c.csMu.Lock()
	defer c.csMu.Unlock()
	return c.cs, c.openErr
}

// current is the stream grpc-go opened; nil before it has (or when it did not open).
func (c *clientStream) current() grpc.ClientStream {
	c.csMu.Lock()
	defer c.csMu.Unlock()
	return c.cs
}

// keepUnopened makes a stream that has not opened one that never will (err is then what
// opening it returns), and reports whether it had not: grpc-go then never has the caller's
// call options, and endCallOptions gives them the stream's end.
func (c *clientStream) keepUnopened(err error) bool {
	c.csMu.Lock()
	defer c.csMu.Unlock()
	if c.opened {
		return false
	}
	c.opened, c.openErr, c.unopened = true, err, true
	return true
}

// requestMD is the metadata a message passes to the chain.
func (c *clientStream) requestMD() metadata.MD {
	c.csMu.Lock()
	defer c.csMu.Unlock()
	if c.stampedMD != nil {
		return c.stampedMD
	}
	return c.md
}

// Header returns no error, as grpc-go's does not: when the stream failed, or did not open,
// it returns no headers and leaves the status to RecvMsg.
func (c *clientStream) Header() (metadata.MD, error) {
	c.awaitFirstSend()
	c.mu.Lock()
	failed := c.failed
	c.mu.Unlock()
	if failed != nil {
		// What the server sent before the chain ended the stream, if it opened.
		cs := c.current()
		if cs == nil {
			return nil, nil
		}
		h, _ := cs.Header()
		return h, nil
	}
	// While the chain has answered every message so far, the stream has no server to ask
	// (opening it now would send no message and wait for headers a server waiting for one
	// never sends): its headers are the first local reply's.
	c.csMu.Lock()
	unopened := !c.opened
	c.csMu.Unlock()
	if unopened && c.answeredLocally() {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.localHeader.Copy(), nil
	}
	cs, err := c.stream(nil, "")
	if err == errAnsweredLocally {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.localHeader.Copy(), nil
	}
	if err != nil {
		return nil, nil
	}
	// grpc-go's Header returns no error: when it finds the stream over, it ends it, which
	// ends it for the chain too (grpcFinished), and returns nil.
	return cs.Header()
}

func (c *clientStream) Trailer() metadata.MD {
	cs := c.current()
	if cs == nil {
		// As grpc-go's before the stream's end, or for one that ended without trailers.
		return metadata.MD{}
	}
	return cs.Trailer()
}

func (c *clientStream) CloseSend() error {
	c.releaseReaders()
	c.mu.Lock()
	failed := c.failed
	c.sendClosed = true
	c.mu.Unlock()
	if failed != nil {
		return nil
	}
	// A stream none of whose messages went to the server stays unopened: opening it now
	// would call the server with no message (a server-streaming method then fails with
	// "no request message"), where the chain has already answered.
	if c.answeredLocally() {
		c.keepUnopened(errAnsweredLocally)
	}
	cs, err := c.stream(nil, "")
	if err != nil {
		// Answered locally, or the stream did not open: as grpc-go's CloseSend, it
		// returns nil and leaves the status to RecvMsg.
		return nil
	}
	return cs.CloseSend()
}

func (c *clientStream) answeredLocally() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.answered
}

// Context is grpc-go's stream context once the stream is open. Before (the stream opens at
// its first message), and while it opens, it is a context of Weft's: the caller's (values,
// deadline) without the peer, which no transport has been picked for yet. It ends when the
// stream ends, as grpc-go's does: finish cancels c.ctx, its parent, however the stream ends
// once open; ClientConn.Close before that ends it through a watch on the connection.
func (c *clientStream) Context() context.Context {
	c.csMu.Lock()
	cs := c.cs
	if cs == nil && c.preOpen == nil {
		ctx, cancel := context.WithCancel(c.ctx)
		c.preOpen = ctx
		onConnClose(ctx, c.cc, cancel)
	}
	pre := c.preOpen
	c.csMu.Unlock()
	if cs == nil {
		return pre
	}
	return cs.Context()
}

// releaseReaders ends awaitFirstSend's wait: the one request has run the chain, or will
// not come.
func (c *clientStream) releaseReaders() {
	if c.firstSent != nil {
		c.firstSentOnce.Do(func() { close(c.firstSent) })
	}
}

func (c *clientStream) SendMsg(v any) error {
	defer c.releaseReaders()
	msg, ok := v.(proto.Message)
	if _, twice := v.(*rawMessage); twice {
		return c.fail(installedTwice(c.name, "client"))
	}
	if !ok {
		// As grpc-go's SendMsg, an error of the caller's ends the stream.
		return c.fail(status.Errorf(codes.Internal, "weft: %s: %T is not a protobuf message", c.name, v))
	}
	c.mu.Lock()
	failed, over, closed := c.failed, c.over, c.sendClosed
	if !c.desc.ClientStreams {
		// A call with one request closes its sending side with it, as grpc-go's does.
		c.sendClosed = true
	}
	c.mu.Unlock()
	if failed != nil {
		// The chain ended the stream: later messages neither run it nor go anywhere.
		return failed
	}
	if closed {
		// grpc-go's answer, given before the chain runs (it might answer locally); as in
		// grpc-go, it ends the stream, and RecvMsg returns it too.
		return c.fail(status.Error(codes.Internal, "SendMsg called after CloseSend"))
	}
	if over != nil {
		// The caller has read the stream's end: as grpc-go does, SendMsg says so.
		return io.EOF
	}
	s := getCall()
	defer putCall(s)
	buf, err := encodeInto(s, msg)
	if err != nil {
		return c.fail(status.Errorf(codes.Internal, "weft: %s: encoding a stream message: %v", c.name, err))
	}
	defer func() { buf.Free() }()
	s.encodeMD(c.requestMD())
	rc := c.r.runRequest(s, sideClient, c.m)
	if rc == rcNoEdge {
		c.pending.push(0)
		return c.sent(c.send(buf, msg, false, nil, ""))
	}
	if rc != rcOK {
		return c.fail(failure(rc, s, "client stream request "+c.name))
	}
	switch s.verdict() {
	case verdictReject:
		return c.fail(rejection(s))
	case verdictReply:
		reply := bytes.Clone(s.outMessage())
		c.mu.Lock()
		if c.over != nil {
			// The caller read the stream's end while the chain ran: nothing follows it.
			c.mu.Unlock()
			return io.EOF
		}
		if c.desc.ServerStreams {
			// The reply takes the message's place: the caller reads it after the
			// responses the server owes to earlier messages. Queued under mu, which the
			// stream's end takes too, so it is never queued after the end was read.
			c.pending.queueReply(heldReply{msg: reply})
		} else if c.answer == nil {
			// The one response of a call without server streaming: the next RecvMsg
			// returns it and ends the call.
			c.answer = reply
		}
		c.answered = true
		if s.metadataChanged() && c.localHeader == nil {
			c.localHeader = s.decodeMD(s.outMetadata()).Copy()
		}
		c.mu.Unlock()
		if !c.desc.ClientStreams {
			// The call's one request was answered: nothing will go to the server. As
			// CloseSend does for a stream whose messages were all answered, the stream
			// stays unopened, so RecvMsg returns the reply, then io.EOF. (Opened without
			// a message, the stream would wait for ever on a server waiting for one.)
			c.keepUnopened(errAnsweredLocally)
		}
		return nil
	}
	// Metadata travels with the stream's headers: the first message's rewrite opens the
	// stream; later messages' rewrites cannot follow (docs/go.md).
	var md metadata.MD
	if s.metadataChanged() {
		md = s.decodeMD(s.outMetadata())
	}
	dst := s.routeTo()
	changed := s.messageChanged()
	if changed {
		buf.Free()
		buf = copyOut(s.outMessage())
	}
	rpc := s.rpcHandle()
	c.pending.push(rpc)
	if rpc != 0 {
		// The stream may have ended (its context is then done) before this request
		// joined the queue; the end's drain did not see it.
		if err := c.ctx.Err(); err != nil {
			c.endWaiting(err, nil)
		}
	}
	return c.sent(c.send(buf, msg, changed, md, dst))
}

// sent is SendMsg's outcome once the message was handed on. A non-EOF error means grpc-go
// has ended the stream (its contract), or the message never left: either way no response
// will come for the requests waiting, the last one included, so they get the error now, and
// so do later calls. io.EOF leaves the end to RecvMsg, which reads the stream's status.
func (c *clientStream) sent(err error) error {
	if err != nil && err != io.EOF {
		return c.fail(err)
	}
	return err
}

func (c *clientStream) send(buf mem.BufferSlice, msg proto.Message, rewritten bool, md metadata.MD, dst string) error {
	cs, err := c.stream(md, dst)
	if err != nil {
		// The stream did not open (a deadline already past, a cancelled context): as
		// grpc-go's SendMsg does, say the stream is over and leave its status to RecvMsg.
		return io.EOF
	}
	if c.codec {
		out := rawMessage{buf: buf}
		return cs.SendMsg(&out)
	}
	if rewritten {
		b, extra := contiguous(buf)
		msg = newMessageLike(msg)
		err := proto.Unmarshal(b, msg)
		if extra != nil {
			extra.Free()
		}
		if err != nil {
			return status.Errorf(codes.Internal, "weft: %s: the chain's rewritten message does not decode: %v", c.name, err)
		}
	}
	return cs.SendMsg(msg)
}

// fail ends the stream with a policy error: the server sees a cancellation, the caller the
// chain's status on this and every later call.
func (c *clientStream) fail(err error) error {
	c.mu.Lock()
	if c.failed == nil {
		c.failed = err
	}
	c.answer = nil // a reply of the chain's does not follow the failure
	c.mu.Unlock()
	c.finish(err, nil)
	return err
}

func (c *clientStream) RecvMsg(v any) error {
	msg, ok := v.(proto.Message)
	if _, twice := v.(*rawMessage); twice {
		return c.fail(installedTwice(c.name, "client"))
	}
	if !ok {
		// As grpc-go's RecvMsg, which fails to decode into it, an error of the caller's
		// ends the stream (grpc-go fails once a message has arrived; nothing would
		// decode into it).
		return c.fail(status.Errorf(codes.Internal, "weft: %s: %T is not a protobuf message", c.name, v))
	}
	c.beginRead()
	defer c.endRead()
	c.awaitFirstSend()
	if answer := c.takeAnswer(); answer != nil {
		return c.oneResponse(localReply(answer, msg), nil)
	}
	c.mu.Lock()
	over, failed := c.over, c.failed
	c.mu.Unlock()
	if over == io.EOF {
		// A clean end after messages the chain answered: their replies first.
		if h, ok := c.pending.nextHeld(); ok {
			return localReply(h.msg, msg)
		}
	}
	if over != nil {
		return over
	}
	if failed != nil {
		c.early.free()
		c.early = nil
		return failed
	}
	if h, ok := c.pending.nextHeld(); ok {
		return localReply(h.msg, msg)
	}

	cs, err := c.stream(nil, "")
	if err == errAnsweredLocally {
		// A reply the chain made just before the sending side closed comes first.
		if h, ok := c.pending.nextHeld(); ok {
			return localReply(h.msg, msg)
		}
		c.finish(nil, nil)
		return c.end(io.EOF)
	}
	if err != nil {
		return err
	}
	s := getCall()
	defer putCall(s)
	if early := c.early; early != nil {
		c.early = nil
		if err := c.ctx.Err(); err != nil {
			// The caller cancelled the stream: grpc-go would not hand it anything more.
			early.free()
			return c.end(statusOf(err).Err())
		}
		early.restore(s, msg)
	} else {
		if c.codec {
			s.raw.buf = nil
			err = cs.RecvMsg(&s.raw)
		} else {
			err = cs.RecvMsg(msg)
		}
		if err != nil {
			c.mu.Lock()
			if c.failed != nil {
				err = c.failed
			}
			c.mu.Unlock()
			// Without server streaming, a reply the chain made while this waited is the
			// call's one response, which came first.
			if !c.desc.ServerStreams {
				if answer := c.takeAnswer(); answer != nil {
					return c.oneResponse(localReply(answer, msg), cs.Trailer())
				}
			}
			// grpc-go has ended the stream: its trailers are read.
			c.end(err)
			c.finish(err, cs.Trailer())
			if err == io.EOF {
				// A clean end after messages the chain answered: their replies first.
				if h, ok := c.pending.nextHeld(); ok {
					return localReply(h.msg, msg)
				}
			}
			return err
		}
		// While this RecvMsg waited, the chain answered a message sent before the one
		// this responds to: that reply comes first. Without server streaming it is the
		// call's one response, and the server's goes unread.
		if !c.desc.ServerStreams {
			if answer := c.takeAnswer(); answer != nil {
				keepEarly(s, msg, c.codec).free()
				return c.oneResponse(localReply(answer, msg), nil)
			}
		}
		if h, ok := c.pending.nextHeld(); ok {
			c.early = keepEarly(s, msg, c.codec)
			return localReply(h.msg, msg)
		}
	}
	err = c.response(cs, s, msg)
	if !c.desc.ServerStreams {
		return c.oneResponse(err, cs.Trailer())
	}
	if err != nil {
		// A caller takes an error from RecvMsg as the stream's end (grpc-go's contract),
		// so it ends here: the server sees a cancellation, the requests still waiting get
		// this error, and later calls return it.
		return c.fail(err)
	}
	return err
}

// localReply decodes a reply the chain made into the caller's message.
func localReply(b []byte, msg proto.Message) error {
	return unmarshalInto(b, msg, "the chain's local reply")
}

// oneResponse ends a call without server streaming at its one response, the server's or
// the chain's, as grpc-go ends it (it has read the status behind it): the requests still
// waiting get what the caller gets, a stream opened for earlier messages is cancelled, and
// later calls return io.EOF.
func (c *clientStream) oneResponse(err error, trailer metadata.MD) error {
	c.end(io.EOF)
	c.finish(err, trailer)
	return err
}

// takeAnswer takes the chain's reply that is a call's one response, if there is one, and
// ends the call with it in the same step, so a later reply cannot make a second response.
func (c *clientStream) takeAnswer() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	answer := c.answer
	if answer != nil {
		c.answer = nil
		c.over = io.EOF
	}
	return answer
}

// end records how the stream ended for the caller, and returns it. A reply of the chain's
// not yet taken then never is: nothing follows the end.
func (c *clientStream) end(err error) error {
	c.mu.Lock()
	c.over = err
	c.answer = nil
	c.mu.Unlock()
	return err
}

// earlyResponse is a message from the server kept for the next RecvMsg: its bytes with
// Weft's codec, else the decoded message.
type earlyResponse struct {
	raw mem.BufferSlice
	msg proto.Message
}

func keepEarly(s *callState, msg proto.Message, codec bool) *earlyResponse {
	if codec {
		e := &earlyResponse{raw: s.raw.buf}
		s.raw.buf = nil
		return e
	}
	return &earlyResponse{msg: proto.Clone(msg)}
}

// free releases what the message holds (nothing without Weft's codec). Nil-safe.
func (e *earlyResponse) free() {
	if e != nil && e.raw != nil {
		e.raw.Free()
		e.raw = nil
	}
}

// restore puts the message back where RecvMsg would have received it.
func (e *earlyResponse) restore(s *callState, msg proto.Message) {
	if e.msg == nil {
		s.raw.buf = e.raw
		return
	}
	proto.Reset(msg)
	proto.Merge(msg, e.msg)
}

// response runs the chain over a message received from the server, as the response to the
// oldest request still waiting.
func (c *clientStream) response(cs grpc.ClientStream, s *callState, msg proto.Message) error {
	if c.codec {
		s.msg.setSlice(s.raw.buf)
		s.raw.buf.Free()
		s.raw.buf = nil
	} else if _, err := encodeInto(s, msg); err != nil {
		return status.Errorf(codes.Internal, "weft: %s: encoding a stream reply: %v", c.name, err)
	}
	rpc := c.pending.pop()
	if rpc == 0 {
		if c.codec {
			return c.r.decodeReply(s.msg.bytes(), msg)
		}
		return nil
	}
	// The stream's headers have arrived with its first message. Its trailers come at its
	// end: after this one response when the server does not stream, as for a unary call;
	// after every response otherwise, too late for them.
	var rm responseMeta
	if h, err := cs.Header(); err == nil {
		rm.header = h
	}
	if !c.desc.ServerStreams {
		rm.trailer = cs.Trailer()
	}
	rm.encode(s)
	return c.r.clientResponse(s, c.m, rpc, c.name, msg, nil)
}
