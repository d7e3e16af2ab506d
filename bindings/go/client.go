package weft

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
	reqMsg, ok1 := req.(proto.Message)
	replyMsg, ok2 := reply.(proto.Message)
	if !ok1 || !ok2 {
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

	if !codec {
		return r.unaryClientTyped(ctx, s, m, rpc, method, reqMsg, buf, replyMsg, cc, invoker, opts)
	}
	s.out.buf = buf
	s.raw.buf = nil
	err = invoker(ctx, method, &s.out, &s.raw, cc, opts...)
	s.out.buf = nil
	if err != nil {
		return r.clientErrorResponse(s, m, rpc, method, err, replyMsg)
	}
	in := s.raw.buf
	s.raw.buf = nil
	defer in.Free()
	b, extra := contiguous(in)
	if extra != nil {
		defer extra.Free()
	}
	if rpc == 0 {
		return unmarshalInto(b, replyMsg, "the server")
	}
	s.msg.set(b)
	s.md.len = 0
	return r.clientResponse(s, m, rpc, method, replyMsg)
}

// unaryClientTyped is the path without Weft's codec: gRPC gets message values, so a rewritten
// request is decoded into a new value and the reply is encoded once more for the chain.
func (r *Runtime) unaryClientTyped(ctx context.Context, s *callState, m cstr, rpc uint64, method string, reqMsg proto.Message, buf mem.BufferSlice, replyMsg proto.Message, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	send := reqMsg
	if s.messageChanged() {
		send = newMessageLike(reqMsg)
		b, extra := contiguous(buf)
		err := unmarshalInto(b, send, "the chain's rewritten request")
		if extra != nil {
			extra.Free()
		}
		if err != nil {
			r.abandon(rpc)
			return err
		}
	}
	if err := invoker(ctx, method, send, replyMsg, cc, opts...); err != nil {
		return r.clientErrorResponse(s, m, rpc, method, err, replyMsg)
	}
	if rpc == 0 {
		return nil
	}
	if _, err := encodeInto(s, replyMsg); err != nil {
		r.abandon(rpc)
		return status.Errorf(codes.Internal, "weft: %s: encoding the reply: %v", method, err)
	}
	s.md.len = 0
	return r.clientResponse(s, m, rpc, method, replyMsg)
}

// clientResponse runs the response path over the reply bytes in s.msg and decodes the result
// into replyMsg.
func (r *Runtime) clientResponse(s *callState, m cstr, rpc uint64, method string, replyMsg proto.Message) error {
	rc := r.runResponse(s, sideClient, m, rpc, 0, "")
	if rc != rcOK {
		return failure(rc, s, "client response "+method)
	}
	switch s.verdict() {
	case verdictReject:
		return rejection(s)
	case verdictReply:
		return unmarshalInto(s.outMessage(), replyMsg, "the chain's reply")
	}
	if s.messageChanged() {
		return unmarshalInto(s.outMessage(), replyMsg, "the chain's rewritten reply")
	}
	return unmarshalInto(s.msg.bytes(), replyMsg, "the server")
}

// clientErrorResponse runs the response path for a failed RPC, so elements before the failure
// see it (metrics count it, a circuit breaker opens); the chain may also turn it into a reply.
func (r *Runtime) clientErrorResponse(s *callState, m cstr, rpc uint64, method string, err error, replyMsg proto.Message) error {
	if rpc == 0 {
		return err
	}
	st := status.Convert(err)
	s.md.len = 0
	s.msg.len = 0
	rc := r.runResponse(s, sideClient, m, rpc, int32(st.Code()), st.Message())
	if rc != rcOK {
		return err
	}
	switch s.verdict() {
	case verdictReject:
		return rejection(s)
	case verdictReply:
		return unmarshalInto(s.outMessage(), replyMsg, "the chain's reply")
	}
	return err
}

// StreamClientInterceptor runs the client side of the chain on every message of a stream:
// each message sent is a request, each message received the response to the oldest request
// still waiting for one.
func (r *Runtime) StreamClientInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx, cancel := context.WithCancel(ctx)
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			cancel()
			return nil, err
		}
		md, _ := metadata.FromOutgoingContext(ctx)
		w := &clientStream{ClientStream: cs, r: r, name: method, m: r.method(method), md: md, codec: hasWeftCodec(opts), cancel: cancel}
		return w, nil
	}
}

type clientStream struct {
	grpc.ClientStream
	r      *Runtime
	name   string
	m      cstr
	md     metadata.MD
	codec  bool
	cancel context.CancelFunc

	pending handleQueue

	mu     sync.Mutex // SendMsg and RecvMsg may run on two goroutines
	local  [][]byte   // local replies not yet received
	failed error
}

func (c *clientStream) SendMsg(v any) error {
	msg, ok := v.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "weft: %s: %T is not a protobuf message", c.name, v)
	}
	s := getCall()
	defer putCall(s)
	buf, err := encodeInto(s, msg)
	if err != nil {
		return status.Errorf(codes.Internal, "weft: %s: encoding a stream message: %v", c.name, err)
	}
	defer func() { buf.Free() }()
	s.encodeMD(c.md)
	rc := c.r.runRequest(s, sideClient, c.m)
	if rc == rcNoEdge {
		return c.send(buf, msg, false)
	}
	if rc != rcOK {
		return c.fail(failure(rc, s, "client stream request "+c.name))
	}
	switch s.verdict() {
	case verdictReject:
		return c.fail(rejection(s))
	case verdictReply:
		c.mu.Lock()
		c.local = append(c.local, append([]byte(nil), s.outMessage()...))
		c.mu.Unlock()
		return nil
	}
	// Headers went out when the stream opened; a stamp or dst the chain sets per message
	// cannot follow, and the server side then runs its current version (docs/go.md).
	changed := s.messageChanged()
	if changed {
		buf.Free()
		buf = copyOut(s.outMessage())
	}
	if rpc := s.rpcHandle(); rpc != 0 {
		c.pending.push(rpc)
	}
	return c.send(buf, msg, changed)
}

func (c *clientStream) send(buf mem.BufferSlice, msg proto.Message, rewritten bool) error {
	if c.codec {
		out := rawMessage{buf: buf}
		return c.ClientStream.SendMsg(&out)
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
	return c.ClientStream.SendMsg(msg)
}

// fail ends the stream with a policy error: the server sees a cancellation, the caller the
// chain's status on this and every later call.
func (c *clientStream) fail(err error) error {
	c.mu.Lock()
	if c.failed == nil {
		c.failed = err
	}
	c.mu.Unlock()
	for _, rpc := range c.pending.drain() {
		c.r.abandon(rpc)
	}
	c.cancel()
	return err
}

func (c *clientStream) RecvMsg(v any) error {
	msg, ok := v.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "weft: %s: %T is not a protobuf message", c.name, v)
	}
	c.mu.Lock()
	if len(c.local) > 0 {
		b := c.local[0]
		c.local = c.local[1:]
		c.mu.Unlock()
		return unmarshalInto(b, msg, "the chain's local reply")
	}
	failed := c.failed
	c.mu.Unlock()
	if failed != nil {
		return failed
	}

	s := getCall()
	defer putCall(s)
	var err error
	if c.codec {
		s.raw.buf = nil
		err = c.ClientStream.RecvMsg(&s.raw)
	} else {
		err = c.ClientStream.RecvMsg(msg)
	}
	if err != nil {
		c.mu.Lock()
		if c.failed != nil {
			err = c.failed
		}
		c.mu.Unlock()
		pending := c.pending.drain()
		if err == io.EOF {
			for _, rpc := range pending {
				c.r.abandon(rpc)
			}
			return err
		}
		// The stream failed: the oldest request gets the error on its response path, the
		// rest will never have a response.
		if len(pending) > 0 {
			st := status.Convert(err)
			s.md.len, s.msg.len = 0, 0
			c.r.runResponse(s, sideClient, c.m, pending[0], int32(st.Code()), st.Message())
			for _, rpc := range pending[1:] {
				c.r.abandon(rpc)
			}
		}
		return err
	}
	if c.codec {
		in := s.raw.buf
		s.raw.buf = nil
		defer in.Free()
		b, extra := contiguous(in)
		if extra != nil {
			defer extra.Free()
		}
		s.msg.set(b)
	} else if _, err := encodeInto(s, msg); err != nil {
		return status.Errorf(codes.Internal, "weft: %s: encoding a stream reply: %v", c.name, err)
	}
	rpc := c.pending.pop()
	if rpc == 0 {
		if c.codec {
			return unmarshalInto(s.msg.bytes(), msg, "the server")
		}
		return nil
	}
	s.md.len = 0
	return c.r.clientResponse(s, c.m, rpc, c.name, msg)
}
