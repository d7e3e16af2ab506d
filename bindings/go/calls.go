package weft

/*
#include "weft.h"
*/
import "C"

import (
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// rcClosed is the binding's own code for a call on a closed Runtime.
const rcClosed = -1

// The lock is held only around the library call, never across the network: Close must not
// wait for a slow server, and a stream may live for hours.
func (r *Runtime) runRequest(s *callState, side C.int32_t, m cstr) C.int32_t {
	r.mu.RLock()
	if r.h == nil {
		r.mu.RUnlock()
		return rcClosed
	}
	rc := s.request(r.h, side, m)
	r.mu.RUnlock()
	if rc == rcOK && m.p == nil {
		// The method has an edge: later calls use a copy made once.
		r.methodInfo(m.name)
	}
	return rc
}

func (r *Runtime) runResponse(s *callState, side C.int32_t, m cstr, rpc uint64, code int32, msg string) C.int32_t {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.h == nil {
		return rcClosed
	}
	return s.response(r.h, side, m, rpc, code, msg)
}

// runExchange runs a deferred request path and the response path in one library call
// (deferredServer); age is how long ago the request arrived. rcMetadata: the version the RPC
// runs in cannot defer its request path, and nothing has run.
func (r *Runtime) runExchange(s *callState, m cstr, stamp string, age time.Duration, code int32, msg string) C.int32_t {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.h == nil {
		return rcClosed
	}
	return s.exchange(r.h, m, stamp, age, code, msg)
}

// endRPC runs the response path of a request that passed the chain but will get no response
// of its own: the call failed after the chain (a request that does not decode, a reply that
// does not encode), or its stream ended first. The response carries err's status (OK when
// err is nil or io.EOF, a stream's clean end), md as its metadata and no message. So every
// request that passed the chain has its response handlers run exactly once, and an element
// counting requests in flight (a circuit breaker) counts it down. What the chain answers is
// not used: the caller gets err.
func (r *Runtime) endRPC(side C.int32_t, m cstr, rpc uint64, err error, md metadata.MD) {
	if rpc == 0 {
		return
	}
	s := getCall()
	defer putCall(s)
	st := statusOf(err)
	s.encodeMD(md)
	s.msg.len = 0
	_ = r.runResponse(s, side, m, rpc, int32(st.Code()), st.Message())
}

// statusOf is the gRPC status a caller sees for err: OK for nil and io.EOF (a stream's clean
// end), else grpc-go's own mapping of a handler's error, so a plain cancelled or expired
// context is CANCELLED or DEADLINE_EXCEEDED rather than status.Convert's UNKNOWN.
func statusOf(err error) *status.Status {
	if err == nil || err == io.EOF {
		return status.New(codes.OK, "")
	}
	if st, ok := status.FromError(err); ok {
		return st
	}
	return status.FromContextError(err)
}

func failure(rc C.int32_t, s *callState, dir string) error {
	if rc == rcClosed {
		return status.Error(codes.Unavailable, ErrClosed.Error())
	}
	return callError(rc, s, dir)
}

// hasWeftCodec tells whether the call's options (the connection's defaults included, which
// grpc-go merges in before interceptors run) install Weft's codec, so pre-encoded messages
// can be passed down.
func hasWeftCodec(opts []grpc.CallOption) bool {
	mine := false
	for _, o := range opts { // the last codec option wins, as in grpc-go
		switch f := o.(type) {
		case grpc.ForceCodecV2CallOption:
			_, mine = f.CodecV2.(*Codec)
		case grpc.ForceCodecCallOption, grpc.CustomCodecCallOption:
			// A per-call codec of the older interface replaces Weft's as well.
			mine = false
		}
	}
	return mine
}

// encodeRequest marshals m once; the bytes are both what Weft reads and what gRPC sends.
func encodeInto(s *callState, m proto.Message) (mem.BufferSlice, error) {
	buf, err := marshalPooled(m)
	if err != nil {
		return nil, err
	}
	s.msg.setSlice(buf)
	return buf, nil
}

// copyOut gives gRPC its own copy of bytes held in C memory.
func copyOut(b []byte) mem.BufferSlice {
	if mem.IsBelowBufferPoolingThreshold(len(b)) {
		return mem.BufferSlice{mem.SliceBuffer(append([]byte(nil), b...))}
	}
	return mem.BufferSlice{mem.Copy(b, mem.DefaultBufferPool())}
}

// newMessageLike returns an empty message of m's type.
func newMessageLike(m proto.Message) proto.Message { return m.ProtoReflect().New().Interface() }

// newOutput returns an empty response message of a method, from the generated code's
// registration, for a local reply when no response value is at hand.
func newOutput(fullMethod string) (proto.Message, error) {
	name := fullMethod
	if len(name) > 0 && name[0] == '/' {
		name = name[1:]
	}
	for i := len(name) - 1; i >= 0; i-- {
		if name[i] == '/' {
			name = name[:i] + "." + name[i+1:]
			break
		}
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
	if err != nil {
		return nil, err
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return nil, status.Errorf(codes.Internal, "%s is not a method", name)
	}
	t, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return nil, err
	}
	return t.New().Interface(), nil
}

func unmarshalInto(b []byte, m proto.Message, what string) error {
	proto.Reset(m)
	if err := proto.Unmarshal(b, m); err != nil {
		return status.Errorf(codes.Internal, "weft: %s produced a message that does not decode: %v", what, err)
	}
	return nil
}
