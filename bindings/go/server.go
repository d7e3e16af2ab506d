package weft

/*
#include "weft.h"
*/
import "C"

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// serverInterceptorKey marks the context a unary server interceptor of Weft's hands on, so
// that a second one on the same server finds it.
type serverInterceptorKey struct{}

// installedTwice is the error of a call that meets a second Weft interceptor on its side
// (side is "client" or "server"): the chain would run twice on each message.
func installedTwice(method, side string) error {
	opts, alone := "DialOptions", "UnaryClientInterceptor/StreamClientInterceptor"
	where := "connection"
	if side == "server" {
		opts, alone, where = "ServerOptions", "UnaryServerInterceptor/StreamServerInterceptor", "server"
	}
	return status.Errorf(codes.Internal, "weft: %s: Weft's %s interceptor is installed twice on this %s "+
		"(rt.%s() given twice, or together with rt.%s(), or the options of two runtimes), so its chain "+
		"would run twice on every RPC: install one runtime's %s once", method, side, where, opts, alone, opts)
}

// installMarkCalls: how many unary server calls of each method mark the context they hand
// on, so that a second Weft interceptor inside finds the mark. Interceptors are fixed when a
// grpc.Server is made, so the first marked call of a method finds a double install; marking
// every call cost a context allocation and 7% of the interceptor's time
// (BenchmarkServerInterceptor/weft, 1 075 against 1 150 ns).
const installMarkCalls = 8

// markedInFlight counts the calls, of every runtime, whose context carries the mark and whose
// handler has not returned: while it is 0, no interceptor can be inside a marked call, and
// none looks. Process-wide, as a runtime's interceptor may run inside another runtime's.
var markedInFlight atomic.Int64

// secondUnaryServer reports whether this unary server interceptor runs inside another of
// Weft's: the outer one marked the context it handed on. A find is kept (installedTwice), so
// every later call of the method on this runtime is refused too. The outer interceptor's
// chain has already run on a call refused this way.
func (r *Runtime) secondUnaryServer(ctx context.Context, mi *methodInfo) bool {
	if mi.installedTwice.Load() {
		return true
	}
	if markedInFlight.Load() == 0 || ctx.Value(serverInterceptorKey{}) == nil {
		return false
	}
	mi.installedTwice.Store(true)
	return true
}

// markForInner marks ctx for a Weft interceptor inside this one during the method's first
// installMarkCalls calls; unmark must run once the handler has returned.
func markForInner(ctx context.Context, mi *methodInfo) (marked context.Context, unmark func()) {
	if mi.installMarks.Load() >= installMarkCalls || mi.installMarks.Add(1) > installMarkCalls {
		return ctx, nil
	}
	markedInFlight.Add(1)
	return context.WithValue(ctx, serverInterceptorKey{}, true), func() { markedInFlight.Add(-1) }
}

// ServerOptions installs Weft on a server: its codec (so each message is decoded and encoded
// once and the interceptors see the received bytes) and the unary and stream interceptors.
func (r *Runtime) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(r.ServerCodec()),
		grpc.ChainUnaryInterceptor(r.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(r.streamServer(true)),
	}
}

// UnaryServerInterceptor runs the server side of the edge whose `to` is this service. With
// Weft's codec on the server (ServerOptions) it reads the bytes the request arrived in; without
// it, it encodes the decoded request once more.
func (r *Runtime) UnaryServerInterceptor() grpc.UnaryServerInterceptor { return r.unaryServer }

func (r *Runtime) unaryServer(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	mi := r.methodInfo(info.FullMethod)
	if r.secondUnaryServer(ctx, mi) {
		return nil, installedTwice(info.FullMethod, "server")
	}
	if marked, unmark := markForInner(ctx, mi); unmark != nil {
		ctx = marked
		defer unmark()
	}
	reqMsg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "weft: %s: request %T is not a protobuf message; Weft cannot apply the chain", info.FullMethod, req)
	}
	s := getCall()
	defer putCall(s)
	in, codec := requestBytes.take(reqMsg)
	if in.err != nil && in.buf == nil {
		// A request that did not decode whose bytes the stash let go (see byteStash).
		return nil, r.badRequest(info.FullMethod, in.err)
	}
	ks := r.serverKeys(mi, false)
	if ks != nil && ks.fetchedAt != atomic.LoadUint64(r.version) {
		// A reload since the keys were fetched: what the new version observes, and whether
		// its request path may wait, are its own. Without this check a request stamped with
		// the old version would be deferred until some call's answer told of the reload,
		// and its handler would run before the new version's request policy.
		ks = r.serverKeys(mi, true)
	}
	if ks != nil && ks.deferRequest && in.err == nil {
		// Only for a request stamped with the version the keys came from: a stamp that
		// differs names another version (or the keys are stale), whose request path may not
		// wait; the undeferred path finds out which runs.
		if stamp := metadata.ValueFromIncomingContext(ctx, versionHeader); len(stamp) == 1 && namesVersion(stamp[0], ks.stamp) {
			return r.deferredServer(ctx, req, reqMsg, info, handler, s, &in, codec, mi, ks, stamp[0])
		}
	}
	return r.chainedServer(ctx, req, reqMsg, info, handler, s, &in, codec, mi, ks)
}

// chainedServer serves a unary RPC with the chain's request path before the handler and
// its response path after it: two library calls.
func (r *Runtime) chainedServer(ctx context.Context, req any, reqMsg proto.Message, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler,
	s *callState, inp *stashed, codec bool, mi *methodInfo, ks *keySet) (any, error) {
	in := *inp
	*inp = stashed{}
	// The bytes the request arrived in stay until the request path has run: a retry below
	// passes them (requestInto frees them once copied; so does every return before that).
	defer in.free()
	m := mi.c
	// With only the observed keys passed, a request the chain cannot observe (metrics)
	// is not passed either: neither copied into C memory nor encoded again.
	partial := ks != nil && ks.version != 0
	passRequest := !partial || ks.requestMessage
	if passRequest {
		if err := r.requestInto(s, &in, codec, reqMsg); err != nil {
			return nil, status.Errorf(codes.Internal, "weft: %s: encoding the request: %v", info.FullMethod, err)
		}
	} else {
		s.msg.len = 0
	}
	if partial {
		// Only the keys the chain observes: copying all of the request's metadata out of
		// the context (FromIncomingContext) and encoding it was a sixth of this
		// interceptor's time (BenchmarkServerInterceptor).
		s.encodeKeys(ctx, ks)
	} else {
		s.encodeIncoming(ctx)
	}
	rc := r.runRequest(s, sideServer, m)
	if rc == rcMetadata {
		// The request runs in another version than the one the keys came from (a reload,
		// or a stamp naming an older version): pass everything, and learn the new keys.
		r.serverKeys(mi, true)
		s.encodeIncoming(ctx)
		if !passRequest {
			// The bytes that arrived, as on the first pass: a request that did not decode
			// re-encoded from what did would be well-formed, and the chain would run on it.
			if err := r.requestInto(s, &in, codec, reqMsg); err != nil {
				return nil, status.Errorf(codes.Internal, "weft: %s: encoding the request: %v", info.FullMethod, err)
			}
		}
		rc = r.runRequest(s, sideServer, m)
	}
	// Not kept through the handler.
	in.free()
	if rc == rcNoEdge {
		if in.err != nil {
			return nil, r.badRequest(info.FullMethod, in.err)
		}
		return handler(ctx, req)
	}
	if rc != rcOK {
		return nil, failure(rc, s, "server request "+info.FullMethod)
	}
	switch s.verdict() {
	case verdictReject:
		return nil, rejection(s)
	case verdictReply:
		// The reply's own headers (a cached response's), as the handler's would go out.
		if s.metadataChanged() {
			_ = grpc.SetHeader(ctx, s.decodeMD(s.outMetadata()))
		}
		return serverReply(s.outMessage(), codec, info.FullMethod, nil)
	}
	rpc := s.rpcHandle()
	if in.err != nil && !s.messageChanged() {
		err := r.badRequest(info.FullMethod, in.err)
		r.endRPC(sideServer, m, rpc, err, nil)
		return nil, err
	}
	if s.messageChanged() {
		if err := unmarshalInto(s.outMessage(), reqMsg, "the chain's rewritten request"); err != nil {
			r.endRPC(sideServer, m, rpc, err, nil)
			return nil, err
		}
	}
	if s.metadataChanged() {
		ctx = metadata.NewIncomingContext(ctx, s.incomingAfter(ctx, ks))
	}

	// When the response path runs, the handler's header and trailer calls are held back
	// until it has: the chain sees them, and what it changes replaces them (grpc-go can only
	// add to metadata once it has it).
	var rec *headerRecorder
	// Without a response path, or when the chain that ran observes no metadata, the
	// handler's metadata goes to grpc-go directly.
	observes := s.keysVersion == 0 || !ks.stampOnly
	if rpc != 0 && observes {
		if sts := grpc.ServerTransportStreamFromContext(ctx); sts != nil {
			rec = &headerRecorder{ServerTransportStream: sts}
			defer func() { rec.flush() }()
			ctx = grpc.NewContextWithServerTransportStream(ctx, rec)
		}
	}

	returned := false
	if rpc != 0 {
		// A handler that panics (for a recovery interceptor outside Weft's to catch) still
		// ends its RPC here: its handle would otherwise wait for good, and elements that
		// count requests in flight would never count it down. The panic goes on.
		defer func() {
			if !returned {
				r.endRPC(sideServer, m, rpc, errHandlerPanicked, nil)
			}
		}()
	}
	resp, err := handler(ctx, req)
	returned = true
	if rpc == 0 {
		return resp, err
	}
	respond := func(code int32, msg string) C.int32_t {
		return r.runResponse(s, sideServer, m, rpc, code, msg)
	}
	end := func(err error) { r.endRPC(sideServer, m, rpc, err, nil) }
	return r.serverResponse(ctx, s, info, ks, rec, codec, resp, err, respond, end)
}

// errHandlerPanicked is the status the chain's response path sees for an RPC whose handler
// panicked instead of returning.
var errHandlerPanicked = status.Error(codes.Internal, "weft: the handler panicked")

// errCannotDefer: the version the RPC runs in cannot wait with its request path after all
// (a reload since the method's keys were fetched); nothing has run.
var errCannotDefer = errors.New("weft: the request path cannot wait for the response")

// deferredServer serves a unary RPC whose server-side request path can wait for the
// response (the library's WEFT_DEFERRABLE_REQUEST: it reads nothing but the clock and keeps
// only per-RPC scratch, as `metrics` does). The handler runs first; then one library call
// runs the request path at the time the request arrived, and the response path. So such a
// chain costs one library call per RPC, not two (docs/go.md, "Deferred request paths").
func (r *Runtime) deferredServer(ctx context.Context, req any, reqMsg proto.Message, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler,
	s *callState, in *stashed, codec bool, mi *methodInfo, ks *keySet, stamp string) (any, error) {
	arrived := time.Now()
	// Kept until the end: should the request path have to run after all, it reads them.
	defer in.free()
	handlerCtx := ctx
	var rec *headerRecorder
	if ks.version == 0 || !ks.stampOnly {
		if sts := grpc.ServerTransportStreamFromContext(ctx); sts != nil {
			rec = &headerRecorder{ServerTransportStream: sts}
			defer func() { rec.flush() }()
			handlerCtx = grpc.NewContextWithServerTransportStream(ctx, rec)
		}
	}
	resp, err := handler(handlerCtx, req)
	// The response path sees the keys of the version they came from, like a request's.
	s.keysVersion = ks.version
	noChain := false
	respond := func(code int32, msg string) C.int32_t {
		rc := r.runExchange(s, mi.c, stamp, time.Since(arrived), code, msg)
		noChain = rc == rcNoEdge
		return rc
	}
	end := func(err error) {
		st := statusOf(err)
		s.md.len = 0
		s.msg.len = 0
		_ = respond(int32(st.Code()), st.Message())
	}
	out, oerr := r.serverResponse(handlerCtx, s, info, ks, rec, codec, resp, err, respond, end)
	if noChain {
		// A reload since the keys were fetched left this method no server chain: the RPC
		// passed as it would on the two-call path, and later ones must not be deferred on
		// the stale keys.
		r.serverKeys(mi, true)
	}
	if oerr != errCannotDefer {
		return out, oerr
	}
	// Rare: the request path runs late, with the request, and the handler's outcome is
	// replayed to the undeferred path as if the handler ran then.
	replay := func(ctx context.Context, _ any) (any, error) {
		rec.handOver(ctx)
		return resp, err
	}
	out, oerr = r.chainedServer(ctx, req, reqMsg, info, replay, s, in, codec, mi, r.serverKeys(mi, true))
	// When the late request path stopped the RPC, the replay never ran: what the handler
	// set goes nowhere, as its response does.
	rec.discard()
	return out, oerr
}

// serverResponse runs the chain's response path on the handler's outcome (resp, err) and
// returns what the client gets. respond makes the library call with the response in s; end
// tells the chain of an RPC that fails after the handler without the chain's say.
// errCannotDefer (from respond's rcMetadata) means nothing has run.
func (r *Runtime) serverResponse(ctx context.Context, s *callState, info *grpc.UnaryServerInfo, ks *keySet, rec *headerRecorder, codec bool,
	resp any, err error, respond func(code int32, msg string) C.int32_t, end func(error)) (any, error) {
	if err != nil {
		st := statusOf(err)
		rec.encode(s)
		s.msg.len = 0
		switch respond(int32(st.Code()), st.Message()) {
		case rcOK:
		case rcMetadata:
			return nil, errCannotDefer
		default:
			// A failed library call, or no chain for the method any more (rcNoEdge, after
			// a reload, on a deferred request path): the handler's error as it is.
			return nil, err
		}
		if s.metadataChanged() {
			rec.replace(ctx, s.decodeMD(s.outMetadata()))
		}
		switch s.verdict() {
		case verdictReject:
			return nil, errorRejection(s, err, st)
		case verdictReply:
			return serverReply(s.outMessage(), codec, info.FullMethod, nil)
		}
		return serverReply(s.successInPlace(), codec, info.FullMethod, nil)
	}
	respMsg, ok := resp.(proto.Message)
	if !ok {
		err := status.Errorf(codes.Internal, "weft: %s: response %T is not a protobuf message", info.FullMethod, resp)
		end(err)
		return nil, err
	}
	// The response's bytes go to the chain only if it can observe them; otherwise grpc-go
	// encodes the message as it would without Weft.
	var out mem.BufferSlice
	if s.keysVersion == 0 || ks.responseMessage {
		if !codec {
			// Only kept request bytes tell that Weft's codec is installed and can send these
			// bytes as they are; without them grpc-go would encode the response again. Keep
			// them from now on.
			r.stashRequests.Store(true)
		}
		if out, err = encodeInto(s, respMsg); err != nil {
			err = status.Errorf(codes.Internal, "weft: %s: encoding the response: %v", info.FullMethod, err)
			end(err)
			return nil, err
		}
	} else {
		s.msg.len = 0
	}
	rec.encode(s)
	if rc := respond(0, ""); rc != rcOK {
		out.Free()
		switch rc {
		case rcMetadata:
			return nil, errCannotDefer
		case rcNoEdge:
			// Only a deferred request path can find no chain here (a reload removed it
			// since the keys were fetched): nothing ran, and the response passes as it
			// would without Weft.
			return resp, nil
		}
		return nil, failure(rc, s, "server response "+info.FullMethod)
	}
	if s.metadataChanged() {
		rec.replace(ctx, s.decodeMD(s.outMetadata()))
	}
	switch s.verdict() {
	case verdictReject:
		out.Free()
		return nil, rejection(s)
	case verdictReply:
		out.Free()
		return serverReply(s.outMessage(), codec, info.FullMethod, respMsg)
	}
	if s.messageChanged() {
		out.Free()
		return serverReply(s.outMessage(), codec, info.FullMethod, respMsg)
	}
	if codec && out != nil {
		return &rawMessage{buf: out, transfer: true}, nil
	}
	out.Free()
	return resp, nil
}

// requestInto puts the request's bytes in s.msg: those the codec kept in `in` (when kept),
// else the message encoded once more. It frees what the codec kept. A request that needed
// its bytes and found none kept makes the runtime's codec keep them from now on.
func (r *Runtime) requestInto(s *callState, in *stashed, kept bool, req proto.Message) error {
	if !kept {
		r.stashRequests.Store(true)
		buf, err := encodeInto(s, req)
		if err != nil {
			return err
		}
		buf.Free()
		return nil
	}
	s.msg.setSlice(in.buf)
	in.free()
	return nil
}

// encodeIncoming passes the request's complete metadata.
func (s *callState) encodeIncoming(ctx context.Context) {
	s.keysVersion = 0
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		s.encodeMD(md)
	} else {
		s.md.len = 0
	}
}

// encodeKeys passes only the keys of ks, read one by one from the context.
func (s *callState) encodeKeys(ctx context.Context, ks *keySet) {
	s.keysVersion = ks.version
	s.md.len = 0
	for _, k := range ks.keys {
		for _, v := range metadata.ValueFromIncomingContext(ctx, k) {
			s.md.appendPair(k, v)
		}
	}
}

// incomingAfter is the request metadata the handler sees after the chain rewrote it. With
// only the keys of ks passed, the chain returned those keys (and any it added), but for
// those it removed (set_rpc_header with an empty value): they replace every value of the
// passed keys, and every other key stays as it came. Laid over the request's own without
// the removal, a header the chain stripped reached the handler.
func (s *callState) incomingAfter(ctx context.Context, ks *keySet) metadata.MD {
	out := s.decodeMD(s.outMetadata())
	if s.keysVersion == 0 {
		return out
	}
	md, _ := metadata.FromIncomingContext(ctx) // a copy: out is shared and never modified
	if md == nil {
		md = metadata.MD{}
	}
	for _, k := range ks.keys {
		delete(md, k)
	}
	for k, v := range out {
		md[k] = v
	}
	return md
}

// serverReply turns bytes from the chain (in C memory) into what the handler returns: the
// bytes themselves for Weft's codec, else a message of the method's response type.
func serverReply(b []byte, codec bool, fullMethod string, like proto.Message) (any, error) {
	if codec {
		return &rawMessage{buf: copyOut(b), transfer: true}, nil
	}
	var m proto.Message
	if like != nil {
		m = newMessageLike(like)
	} else {
		var err error
		if m, err = newOutput(fullMethod); err != nil {
			return nil, status.Errorf(codes.Internal, "weft: %s: cannot build the local reply without Weft's codec: %v", fullMethod, err)
		}
	}
	if err := unmarshalInto(b, m, "the chain's reply"); err != nil {
		return nil, err
	}
	return m, nil
}

// StreamServerInterceptor runs the server side of the chain on every message of a stream:
// each message received is a request, each message sent the response to the oldest request
// still waiting for one. It works with any codec; ServerOptions installs the variant that
// reads the received bytes through Weft's codec.
func (r *Runtime) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return r.streamServer(false)
}

func (r *Runtime) streamServer(codec bool) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if _, ok := ss.(*serverStream); ok {
			return installedTwice(info.FullMethod, "server")
		}
		w := &serverStream{ServerStream: ss, r: r, name: info.FullMethod, m: r.method(info.FullMethod), codec: codec,
			oneReply: !info.IsClientStream || !info.IsServerStream}
		w.ctx = ss.Context()
		if md, ok := metadata.FromIncomingContext(w.ctx); ok {
			w.md = md
		}
		// grpc.SetHeader(stream.Context(), …) reaches the stream's transport through the
		// context: route it to the same hold-back as stream.SetHeader.
		if sts := grpc.ServerTransportStreamFromContext(w.ctx); sts != nil {
			w.transport = sts
			w.ctx = grpc.NewContextWithServerTransportStream(w.ctx, streamHeaders{sts, w})
		}
		// A receiving goroutine waiting for room to queue a reply (waitForRoom) stops when
		// the stream's context ends: the replies it waits on will never go out.
		stopWatch := context.AfterFunc(ss.Context(), w.pending.stop)
		defer stopWatch()
		returned := false
		// As for a unary handler: the requests still waiting when the handler panics end
		// with INTERNAL, and the panic goes on.
		defer func() {
			if !returned {
				w.ended.Store(true)
				for _, rpc := range w.pending.closeAndDrain() {
					r.endRPC(sideServer, w.m, rpc, errHandlerPanicked, nil)
				}
			}
		}()
		err := handler(srv, w)
		returned = true
		// A goroutine the handler left behind inside SendMsg (held up by flow control) is
		// not waited for: grpc-go ends the stream under it once the status is written, as
		// it would without Weft. The end then goes on without the send lock, and drops
		// what it would have sent.
		locked := w.handlerSends.Load() == 0
		if locked {
			w.sendMu.Lock()
		}
		// Replies of the chain's with nothing owed before them go out (a goroutine of
		// their own may not have sent them yet), unless a rejected response ended the
		// stream; those behind responses the handler never sent are dropped: sent, the
		// client would pair them with those messages.
		var herr error
		if locked && w.sendOver == nil {
			herr = w.sendLeadingHeld()
		}
		// A receiving goroutine may outlive the handler (grpc-go's RecvMsg returns only
		// when the stream is done): from here on it neither queues a request nor sends.
		w.ended.Store(true)
		waiting := w.pending.closeAndDrain()
		// The chain decided how the stream ends when it rejected a message (whatever the
		// handler made of that), or answered the stream's one request or its one response.
		switch over := w.over.get(); {
		case over == errAnsweredStream:
			err = nil
		case over != nil:
			err = over
		}
		w.headerMu.Lock()
		header := w.header
		w.headerMu.Unlock()
		// Headers the handler set but no message carried go out with the status (without
		// the send lock too: a goroutine left behind will send nothing more). This fails
		// only when the stream is gone, which is not the handler's status.
		_ = w.flushHeader()
		if locked {
			w.sendMu.Unlock()
		}
		// Requests still waiting get the stream's end as their response: the handler's
		// error, or OK when it returned nil (docs/go.md, "Streams").
		for _, rpc := range waiting {
			r.endRPC(sideServer, w.m, rpc, err, header)
		}
		if err == nil && w.ctx.Err() == nil {
			// A reply of the chain's that could not go out while the client is still there.
			err = herr
		}
		return err
	}
}

type serverStream struct {
	grpc.ServerStream
	ctx     context.Context
	r       *Runtime
	name    string
	m       cstr
	md      metadata.MD
	codec   bool
	pending handleQueue

	// sendMu orders the sends of a stream: the handler's SendMsg and the chain's replies
	// (sent from RecvMsg on a stream with one request or one response, else from a send
	// that flushes them), since grpc-go's SendMsg must not run on two goroutines at once.
	sendMu sync.Mutex
	// headerMu guards the headers, apart from sendMu: a handler's SetHeader on its
	// receiving goroutine must not wait for a send that flow control holds up. Taken
	// inside sendMu, never the other way round.
	headerMu sync.Mutex
	// transport: the transport stream the handler's context carries, nil without one.
	transport grpc.ServerTransportStream
	// header: the response headers the handler set, held back until the first message
	// goes out, so that the chain sees them on each response and may change them until
	// then. Guarded by headerMu, as are headerSent and chainSentHeader.
	header     metadata.MD
	headerSent bool
	// ended: the handler has returned and the requests still waiting were answered with
	// its status. handlerSends: the handler's SendMsg calls under way.
	ended        atomic.Bool
	handlerSends atomic.Int32
	// oneReply: the method has one request or one response (it is not bidirectional), so
	// a reply the chain makes is the stream's only reply and ends it.
	oneReply bool
	over     streamEnd
	// sent: a message went out, the handler's or the chain's. sendOver: the chain
	// rejected a response, which ends the stream: later SendMsg calls return it. Both
	// guarded by sendMu.
	sent     bool
	sendOver error
	// chainSentHeader: the stream's headers went out with a reply of the chain's, before
	// the handler sent anything. The handler's later header calls are then dropped, not
	// refused: without Weft, nothing would have been sent yet.
	chainSentHeader bool
}

// streamEnd is how the chain ended a stream, which RecvMsg keeps returning and the stream's
// status becomes: a message's rejection, or errAnsweredStream. Read on every message, so
// an atomic pointer rather than a lock; it is apart from sendMu, so that receiving never
// waits for a send that flow control holds up.
type streamEnd struct{ err atomic.Pointer[error] }

func (e *streamEnd) get() error {
	if p := e.err.Load(); p != nil {
		return *p
	}
	return nil
}

// set records err unless the stream already ended: the first end is the stream's.
func (e *streamEnd) set(err error) {
	e.err.CompareAndSwap(nil, &err)
}

// errAnsweredStream is what RecvMsg returns, and a later SendMsg, once the chain has sent the
// one reply of a stream that has one request or one response; the stream then ends OK.
var errAnsweredStream = status.Error(codes.Canceled, "weft: the chain answered this stream")

// errHandlerReturned ends a RecvMsg still running when the handler has returned.
var errHandlerReturned = status.Error(codes.Canceled, "weft: the stream's handler has returned")

func (w *serverStream) Context() context.Context { return w.ctx }

// SetHeader and SendHeader check the headers when they are set, as grpc-go's stream
// methods do: held back, a refused header would fail the first message instead.
func (w *serverStream) SetHeader(md metadata.MD) error {
	if err := validHeader(md); err != nil {
		return err
	}
	return w.holdHeader(md)
}

func (w *serverStream) SendHeader(md metadata.MD) error {
	if err := validHeader(md); err != nil {
		return err
	}
	return w.sendHeader(md)
}

// holdHeader and sendHeader are the header calls without grpc-go's check, as it makes none
// on the transport stream a handler's context carries (grpc.SetHeader, grpc.SendHeader).
func (w *serverStream) holdHeader(md metadata.MD) error {
	w.headerMu.Lock()
	defer w.headerMu.Unlock()
	if w.chainSentHeader {
		return nil
	}
	return holdHeader(&w.header, w.headerSent, w.headerTo(), md)
}

func (w *serverStream) sendHeader(md metadata.MD) error {
	w.headerMu.Lock()
	defer w.headerMu.Unlock()
	if w.chainSentHeader {
		return nil
	}
	return sendHeaderNow(&w.header, &w.headerSent, w.headerTo(), md)
}

// headerTo is where held headers go: the transport stream, which sends them as they are,
// as grpc-go does with headers set through the context; grpc-go's stream when the
// context carries none.
func (w *serverStream) headerTo() headerSender {
	if w.transport != nil {
		return w.transport
	}
	return w.ServerStream
}

// streamHeaders is the transport stream a stream handler's context carries, with its
// headers held back by the serverStream like those set on the stream itself; trailers and
// the method pass through.
type streamHeaders struct {
	grpc.ServerTransportStream
	w *serverStream
}

func (h streamHeaders) SetHeader(md metadata.MD) error  { return h.w.holdHeader(md) }
func (h streamHeaders) SendHeader(md metadata.MD) error { return h.w.sendHeader(md) }

// headerSender is where held-back headers go: grpc-go's stream, unary or streaming.
type headerSender interface {
	SetHeader(metadata.MD) error
	SendHeader(metadata.MD) error
}

// holdHeader is a handler's SetHeader while its headers are held back in held; once they
// were sent, it passes md on (grpc-go then refuses it).
func holdHeader(held *metadata.MD, sent bool, to headerSender, md metadata.MD) error {
	if sent {
		return to.SetHeader(md)
	}
	*held = metadata.Join(*held, md)
	return nil
}

// sendHeaderNow is a handler's SendHeader: the held headers and md go out at once.
func sendHeaderNow(held *metadata.MD, sent *bool, to headerSender, md metadata.MD) error {
	*held = metadata.Join(*held, md)
	*sent = true
	return to.SendHeader(*held)
}

// validHeader refuses the headers grpc-go's stream SetHeader and SendHeader refuse
// (internal/metadata.Validate), with their error.
func validHeader(md metadata.MD) error {
	for k, vals := range md {
		if k == "" {
			return status.Error(codes.Internal, "there is an empty key in the header")
		}
		// A pseudo-header's key is not checked; its values are.
		for i := 0; i < len(k) && k[0] != ':'; i++ {
			if c := k[i]; !(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '.' && c != '-' && c != '_' {
				return status.Errorf(codes.Internal, "header key %q contains illegal characters not in [0-9a-z-_.]", k)
			}
		}
		if strings.HasSuffix(k, "-bin") {
			continue
		}
		for _, v := range vals {
			for i := 0; i < len(v); i++ {
				if v[i] < 0x20 || v[i] > 0x7E {
					return status.Errorf(codes.Internal, "header key %q contains value with non-printable ASCII characters", k)
				}
			}
		}
	}
	return nil
}

// flushHeader hands grpc-go the held-back headers, before the first message (or the status)
// carries them. Called with sendMu held.
func (w *serverStream) flushHeader() error {
	w.headerMu.Lock()
	defer w.headerMu.Unlock()
	if w.headerSent {
		return nil
	}
	w.headerSent = true
	if len(w.header) == 0 {
		return nil
	}
	return w.headerTo().SetHeader(w.header)
}

func (w *serverStream) RecvMsg(v any) error {
	msg, ok := v.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "weft: %s: %T is not a protobuf message", w.name, v)
	}
	for {
		if err := w.over.get(); err != nil {
			return err
		}
		s := getCall()
		err := w.recvOne(s, msg)
		putCall(s)
		if err != errAnswered {
			return err
		}
	}
}

// errAnswered: the chain answered the message locally; the handler waits for the next one.
var errAnswered = errors.New("weft: answered locally")

func (w *serverStream) recvOne(s *callState, msg proto.Message) error {
	if w.codec {
		var raw rawMessage
		if err := w.ServerStream.RecvMsg(&raw); err != nil {
			return err
		}
		s.msg.setSlice(raw.buf)
		raw.buf.Free()
	} else {
		if err := w.ServerStream.RecvMsg(msg); err != nil {
			return err
		}
		// Weft's server codec, installed by hand with this interceptor (not the one that
		// reads raw bytes), kept the bytes it decoded, or failed to decode, for an
		// interceptor to take: taken here, they neither pile up in the stash nor let a
		// message that did not decode reach the handler.
		if in, ok := requestBytes.take(msg); ok {
			if in.err != nil {
				in.free()
				return w.r.badRequest(w.name, in.err)
			}
			s.msg.setSlice(in.buf)
			in.free()
		} else {
			buf, err := encodeInto(s, msg)
			if err != nil {
				return status.Errorf(codes.Internal, "weft: %s: encoding a stream message: %v", w.name, err)
			}
			buf.Free()
		}
	}
	s.encodeMD(w.md)
	rc := w.r.runRequest(s, sideServer, w.m)
	if rc == rcNoEdge {
		if w.codec {
			if err := w.r.decodeRequest(s.msg.bytes(), msg, w.name); err != nil {
				return err
			}
		}
		if !w.pending.push(0) {
			return errHandlerReturned
		}
		return nil
	}
	if rc != rcOK {
		return failure(rc, s, "server stream request "+w.name)
	}
	switch s.verdict() {
	case verdictReject:
		// The stream's status is the rejection, even if the handler reads on.
		err := rejection(s)
		w.over.set(err)
		return err
	case verdictReply:
		return w.reply(s)
	}
	rpc := s.rpcHandle()
	var err error
	if s.messageChanged() {
		err = unmarshalInto(s.outMessage(), msg, "the chain's rewritten message")
	} else if w.codec {
		err = w.r.decodeRequest(s.msg.bytes(), msg, w.name)
	}
	if err != nil {
		w.r.endRPC(sideServer, w.m, rpc, err, nil)
		return err
	}
	if !w.pending.push(rpc) {
		// The end's drain has run: this request would wait for ever.
		w.r.endRPC(sideServer, w.m, rpc, errHandlerReturned, nil)
		return errHandlerReturned
	}
	return nil
}

// reply sends the reply the chain made to a received message, in its place among the
// responses: while the handler still owes responses to earlier messages, the reply waits
// in the queue behind them (the client pairs responses with its messages in order). On a
// stream with one request or one response, the reply is the stream's answer: the handler's
// RecvMsg gets errAnsweredStream, and the stream ends OK.
func (w *serverStream) reply(s *callState) error {
	var header metadata.MD
	if s.metadataChanged() {
		header = s.decodeMD(s.outMetadata()).Copy()
	}
	h := heldReply{msg: bytes.Clone(s.outMessage()), header: header}
	if !w.oneReply {
		// Never sent from here: the receiving goroutine must not wait for a send, which
		// flow control holds up while the client sends before it reads (a handler that
		// receives and sends on two goroutines would then stop both ends). The reply
		// waits in the queue; a response owed before it, or a send under way, flushes it
		// after its own, and when there is neither, a goroutine of its own sends it.
		switch w.pending.hold(h) {
		case heldBehind:
		case heldAlone:
			go w.flushHeld()
		default:
			return errHandlerReturned
		}
		w.pending.waitForRoom()
		return errAnswered
	}
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	if w.ended.Load() {
		return errHandlerReturned
	}
	if w.sendOver != nil {
		// A rejected response ended the stream: nothing more goes out.
		return w.sendOver
	}
	// The stream has one request or one response: this reply is its answer.
	if w.sent {
		// The handler has sent the stream's one response already; a second would be
		// refused by the client. The message is answered, and the handler reads on.
		return errAnswered
	}
	if err := w.sendHeld(h); err != nil {
		w.over.set(err)
		return err
	}
	w.over.set(errAnsweredStream)
	return errAnsweredStream
}

// flushHeld sends the replies at the head of the queue, for a reply queued when nothing
// else would send it.
func (w *serverStream) flushHeld() {
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	if w.ended.Load() || w.sendOver != nil {
		return
	}
	if err := w.sendLeadingHeld(); err != nil {
		// Nobody waits for this send's outcome: it ends the stream, as a failed send of
		// the handler's would (its next SendMsg and RecvMsg return it), and the replies
		// behind it are dropped at the end.
		w.endSends(err)
	}
}

// endSends ends the stream's sends with err: later sends return it, as RecvMsg does, and a
// receiving goroutine waiting for room stops waiting. Called with sendMu held.
func (w *serverStream) endSends(err error) {
	w.sendOver = err
	w.over.set(err)
	w.pending.stop()
}

// sendHeld sends a reply of the chain's. Called with sendMu held.
func (w *serverStream) sendHeld(h heldReply) error {
	w.headerMu.Lock()
	if !w.headerSent && !w.sent {
		w.chainSentHeader = true
	}
	if h.header != nil && !w.headerSent {
		// The reply's own headers (a cached response's) go out with it, in place of what
		// the handler set under the same keys.
		w.header = w.header.Copy()
		for k, vs := range h.header {
			w.header[k] = vs
		}
	}
	w.headerMu.Unlock()
	return w.sendBytes(h.msg)
}

// heldReply is a reply the chain made, waiting for its turn.
type heldReply struct {
	msg    []byte
	header metadata.MD
}

// decodeRequest decodes bytes a caller sent; bytes that do not decode are the caller's error.
func (r *Runtime) decodeRequest(b []byte, m proto.Message, method string) error {
	proto.Reset(m)
	if err := proto.Unmarshal(b, m); err != nil {
		return r.badRequest(method, err)
	}
	return nil
}

// badRequest rejects a request whose bytes are not a valid message and counts it (the
// library counts those its elements find; these are the ones no element read).
func (r *Runtime) badRequest(method string, err error) error {
	r.malformed.Add(1)
	return status.Errorf(codes.InvalidArgument, "weft: %s: the request is not a valid protobuf message: %v", method, err)
}

// sendBytes sends a message the chain produced. Called with sendMu held.
func (w *serverStream) sendBytes(b []byte) error {
	if err := w.flushHeader(); err != nil {
		return err
	}
	w.sent = true
	if w.codec {
		out := rawMessage{buf: copyOut(b), transfer: true}
		return w.ServerStream.SendMsg(&out)
	}
	m, err := newOutput(w.name)
	if err != nil {
		return status.Errorf(codes.Internal, "weft: %s: cannot build the chain's reply: %v", w.name, err)
	}
	if err := unmarshalInto(b, m, "the chain's reply"); err != nil {
		return err
	}
	return w.ServerStream.SendMsg(m)
}

func (w *serverStream) SendMsg(v any) error {
	msg, ok := v.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "weft: %s: %T is not a protobuf message", w.name, v)
	}
	// Counted before the lock is taken: while a send is on its way, the chain's replies
	// queue behind it (hold) instead of waiting for the lock on the receiving goroutine,
	// which flow control holding up this send would stop.
	w.handlerSends.Add(1)
	defer w.handlerSends.Add(-1)
	w.pending.beginSend()
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	err := w.sendMsg(v, msg)
	// Replies queued behind this send go out now (after a failure, nothing more may go
	// out: they are dropped). The count ends only when none is left, under the queue's
	// lock, so a reply queued meanwhile is never stranded.
	for {
		h, ok := w.pending.nextHeldOrEndSend()
		if !ok {
			return err
		}
		if err == nil {
			err = w.sendHeld(h)
		}
	}
}

// sendMsg is SendMsg under the send lock.
func (w *serverStream) sendMsg(v any, msg proto.Message) error {
	if w.ended.Load() {
		// A goroutine the handler left behind: the stream is over.
		return errHandlerReturned
	}
	switch over := w.over.get(); {
	case over == errAnsweredStream:
		// The chain sent the stream's one reply; grpc-go would refuse a second.
		return errAnsweredStream
	case over != nil && !w.pending.owesResponse():
		// The chain rejected a message and every response owed to an earlier one has gone
		// out: this one could only answer the rejected message (a handler that ignored
		// RecvMsg's error), and the client would take it for that message's reply.
		return over
	}
	if w.sendOver != nil {
		return w.sendOver
	}
	if err := w.sendLeadingHeld(); err != nil {
		return err
	}
	return w.sendOne(v, msg)
}

// sendLeadingHeld sends the chain's replies waiting at the head of the queue. Called with
// sendMu held.
func (w *serverStream) sendLeadingHeld() error {
	for {
		h, ok := w.pending.nextHeld()
		if !ok {
			return nil
		}
		if err := w.sendHeld(h); err != nil {
			return err
		}
	}
}

// sendOne sends a response of the handler's through the chain. Called with sendMu held.
func (w *serverStream) sendOne(v any, msg proto.Message) error {
	rpc := w.pending.pop()
	if rpc == 0 {
		if err := w.flushHeader(); err != nil {
			return err
		}
		w.sent = true
		return w.ServerStream.SendMsg(v)
	}
	s := getCall()
	defer putCall(s)
	out, err := encodeInto(s, msg)
	if err != nil {
		err = status.Errorf(codes.Internal, "weft: %s: encoding a stream reply: %v", w.name, err)
		w.r.endRPC(sideServer, w.m, rpc, err, nil)
		return err
	}
	// The chain sees the headers the handler set. Once they went out with an earlier
	// message, a change the chain makes to them cannot follow (grpc-go sends headers once).
	w.headerMu.Lock()
	s.encodeMD(w.header)
	w.headerMu.Unlock()
	rc := w.r.runResponse(s, sideServer, w.m, rpc, 0, "")
	if rc != rcOK {
		out.Free()
		return failure(rc, s, "server stream response "+w.name)
	}
	if s.metadataChanged() {
		w.headerMu.Lock()
		if !w.headerSent {
			w.header = s.decodeMD(s.outMetadata()).Copy()
		}
		w.headerMu.Unlock()
	}
	switch s.verdict() {
	case verdictReject:
		out.Free()
		// As a rejected request does, this ends the stream with the chain's status, and
		// nothing more is sent: the client would pair it with the rejected response.
		err := rejection(s)
		w.endSends(err)
		return err
	case verdictReply:
		out.Free()
		return w.sendBytes(s.outMessage())
	}
	if s.messageChanged() {
		out.Free()
		return w.sendBytes(s.outMessage())
	}
	if err := w.flushHeader(); err != nil {
		out.Free()
		return err
	}
	w.sent = true
	if w.codec {
		raw := rawMessage{buf: out, transfer: true}
		return w.ServerStream.SendMsg(&raw)
	}
	out.Free()
	return w.ServerStream.SendMsg(v)
}

// handleQueue holds, oldest first, an entry for each of a stream's requests that went to the
// other side and waits for its response: its rpc handle, or 0 when it has no response path
// (no edge, or a chain with nothing to do on the response). The other side answers every
// message, so those must keep their place, or a later request would be paired with an
// earlier one's response once a reload changes which messages have handles. On the server,
// a reply the chain made waits in it too, behind the responses owed before it. SendMsg and
// RecvMsg may run on two goroutines at once.
type handleQueue struct {
	mu sync.Mutex
	q  []handleRun
	// closed: drained at the stream's end; nothing more is queued.
	closed bool
	// sending: the server's SendMsg calls under way, which flush the replies queued
	// behind them (beginSend, nextHeldOrEndSend).
	sending int
	// owed: the requests queued (responses owed); heldBytes: the size of the replies
	// queued. A server's receiving goroutine waits on room while replies with nothing owed
	// before them pass maxHeldBytes (waitForRoom).
	owed      int
	heldBytes int
	room      *sync.Cond
	// stopped: the stream failed or its context ended; nothing more will go out.
	stopped bool
}

// maxHeldBytes bounds the replies of the chain's a server stream queues when nothing is
// owed before them: past it, receiving waits for them to go out, as it would for a send
// of its own that flow control holds up, so a client that sends without reading cannot
// make the server buffer without limit. Replies behind owed responses are not bounded: a
// handler that reads every message before it answers would never send them.
const maxHeldBytes = 4 << 20

// handleRun is one handle, or with rpc 0 a run of n requests without one, so a stream whose
// requests run far ahead of its responses (client streaming) without handles queues nothing
// per message; or a held reply of the chain's (n 0).
type handleRun struct {
	rpc  uint64
	n    int
	held *heldReply
}

// push queues a request; false once the queue is closed (closeAndDrain).
func (h *handleQueue) push(rpc uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if last := len(h.q) - 1; rpc == 0 && last >= 0 && h.q[last].rpc == 0 && h.q[last].held == nil {
		h.q[last].n++
	} else {
		h.q = append(h.q, handleRun{rpc: rpc, n: 1})
	}
	h.owed++
	return true
}

// pop takes the oldest entry: the handle of the request a response answers, 0 if it has
// none (or the other side answers more messages than it was sent). The caller has sent
// the held replies at the head first.
func (h *handleQueue) pop() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.q) == 0 || h.q[0].held != nil {
		return 0
	}
	rpc := h.q[0].rpc
	if h.q[0].n--; h.q[0].n == 0 {
		h.q = h.q[1:]
	}
	h.owed--
	return rpc
}

// owesResponse: some request queued still waits for the handler's response.
func (h *handleQueue) owesResponse() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.owed > 0
}

// How hold queued a reply.
type holding int

const (
	heldNot    holding = iota // the queue is closed: the stream has ended
	heldBehind                // behind an owed response or a send under way, which flush it
	heldAlone                 // with nothing before it and no send under way
)

// hold queues a server stream's reply in its message's place.
func (h *handleQueue) hold(r heldReply) holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return heldNot
	}
	alone := len(h.q) == 0 && h.sending == 0
	h.q = append(h.q, handleRun{held: &r})
	h.heldBytes += len(r.msg)
	if alone {
		return heldAlone
	}
	return heldBehind
}

func (h *handleQueue) beginSend() {
	h.mu.Lock()
	h.sending++
	h.mu.Unlock()
}

// nextHeldOrEndSend takes the held reply at the head of the queue for a send under way
// (beginSend) to send after its own; when there is none, it ends that send, in the same
// step, so no reply is queued behind a send that will not flush it.
func (h *handleQueue) nextHeldOrEndSend() (heldReply, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.q) > 0 && h.q[0].held != nil {
		return h.takeHeldLocked(), true
	}
	h.sending--
	return heldReply{}, false
}

// takeHeldLocked takes the held reply at the head of the queue.
func (h *handleQueue) takeHeldLocked() heldReply {
	r := *h.q[0].held
	h.q = h.q[1:]
	h.heldBytes -= len(r.msg)
	if h.room != nil {
		h.room.Broadcast()
	}
	return r
}

// waitForRoom holds a server's receiving goroutine back while the queued replies pass
// maxHeldBytes and can go out (nothing is owed before them, or the handler is sending),
// until they have, or the stream ended or failed.
func (h *handleQueue) waitForRoom() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.heldBytes > maxHeldBytes && (h.owed == 0 || h.sending > 0) && !h.closed && !h.stopped {
		if h.room == nil {
			h.room = sync.NewCond(&h.mu)
		}
		h.room.Wait()
	}
}

// queueReply queues a reply behind everything queued (the client hands it to the caller in
// that place).
func (h *handleQueue) queueReply(r heldReply) {
	h.mu.Lock()
	h.q = append(h.q, handleRun{held: &r})
	h.heldBytes += len(r.msg)
	h.mu.Unlock()
}

// nextHeld takes the held reply at the head of the queue, if one is there.
func (h *handleQueue) nextHeld() (heldReply, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.q) == 0 || h.q[0].held == nil {
		return heldReply{}, false
	}
	return h.takeHeldLocked(), true
}

// stop wakes a receiving goroutine waiting for room, for good: the stream failed or its
// context ended.
func (h *handleQueue) stop() {
	h.mu.Lock()
	h.stopped = true
	if h.room != nil {
		h.room.Broadcast()
	}
	h.mu.Unlock()
}

// closeAndDrain is a server stream's end: it takes every handle still waiting, drops the
// held replies, and nothing is queued after it.
func (h *handleQueue) closeAndDrain() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	rpcs := h.drainLocked()
	h.q = nil
	h.heldBytes = 0
	if h.room != nil {
		h.room.Broadcast()
	}
	return rpcs
}

// drain takes every handle still waiting; held replies stay, in order.
func (h *handleQueue) drain() []uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.drainLocked()
}

func (h *handleQueue) drainLocked() []uint64 {
	var rpcs []uint64
	kept := h.q[:0]
	for _, e := range h.q {
		switch {
		case e.held != nil:
			kept = append(kept, e)
		case e.rpc != 0:
			rpcs = append(rpcs, e.rpc)
		}
	}
	h.q = kept
	h.owed = 0
	return rpcs
}

// headerRecorder stands in for grpc-go's stream while a unary handler runs: it keeps the
// headers and trailers the handler sets, for the response chain to see, and hands grpc-go
// either those or the chain's version of them when the interceptor returns (flush).
type headerRecorder struct {
	grpc.ServerTransportStream
	// Guards what follows: a handler may set metadata from several goroutines, as grpc-go's
	// own stream (which locks) allows, and one of them may outlive the handler.
	mu sync.Mutex
	responseMeta
	// The handler sent its headers itself (SendHeader): later header changes cannot follow.
	sent bool
	// The chain's response metadata, when it changed it.
	chain metadata.MD
}

func (h *headerRecorder) SetHeader(md metadata.MD) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return holdHeader(&h.header, h.sent, h.ServerTransportStream, md)
}

func (h *headerRecorder) SendHeader(md metadata.MD) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return sendHeaderNow(&h.header, &h.sent, h.ServerTransportStream, md)
}

func (h *headerRecorder) SetTrailer(md metadata.MD) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.trailer = metadata.Join(h.trailer, md)
	return nil
}

// encode passes what the handler set as the response's metadata (none without a recorder).
func (h *headerRecorder) encode(s *callState) {
	if h == nil {
		s.md.len = 0
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.responseMeta.encode(s)
}

// replace makes md, the chain's response metadata, what the client gets. Without a recorder
// it can only be added to grpc-go's headers (best effort: the handler may have sent them).
func (h *headerRecorder) replace(ctx context.Context, md metadata.MD) {
	if h == nil {
		_ = grpc.SetHeader(ctx, md)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.chain = md
}

// handOver passes what the handler set to the stream of ctx (another recorder's, when the
// undeferred path runs after all), leaving this recorder nothing to flush.
func (h *headerRecorder) handOver(ctx context.Context) {
	if h == nil {
		return
	}
	h.mu.Lock()
	header, trailer, sent := h.header, h.trailer, h.sent
	h.header, h.trailer, h.chain = nil, nil, nil
	// Unlocked before calling into ctx's stream, which may be another recorder.
	h.mu.Unlock()
	if len(header) > 0 && !sent {
		_ = grpc.SetHeader(ctx, header)
	}
	if len(trailer) > 0 {
		_ = grpc.SetTrailer(ctx, trailer)
	}
}

// discard forgets what the handler set and the chain changed.
func (h *headerRecorder) discard() {
	if h != nil {
		h.mu.Lock()
		h.header, h.trailer, h.chain = nil, nil, nil
		h.mu.Unlock()
	}
}

// flush hands grpc-go the response metadata: the chain's when it changed it (a key the
// handler set as a trailer stays a trailer), else the handler's own.
func (h *headerRecorder) flush() {
	h.mu.Lock()
	defer h.mu.Unlock()
	header, trailer := h.header, h.trailer
	if h.chain != nil {
		header, trailer = metadata.MD{}, metadata.MD{}
		for k, vs := range h.chain {
			if _, isTrailer := h.trailer[k]; isTrailer {
				trailer[k] = vs
			} else {
				header[k] = vs
			}
		}
	}
	if len(header) > 0 && !h.sent {
		_ = h.ServerTransportStream.SetHeader(header)
	}
	if len(trailer) > 0 {
		_ = h.ServerTransportStream.SetTrailer(trailer)
	}
}
