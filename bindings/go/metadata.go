package weft

import (
	"encoding/binary"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// encodeMD writes md in the contract's encoding into s.md. gRPC keeps keys lower-case when md
// was built with its helpers; a hand-built MD may not, and the library expects lower case.
func (s *callState) encodeMD(md metadata.MD) {
	s.md.len = 0
	for k, vs := range md {
		if hasUpper(k) {
			k = strings.ToLower(k)
		}
		for _, v := range vs {
			s.md.appendPair(k, v)
		}
	}
}

func hasUpper(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return true
		}
	}
	return false
}

// decodeMD reads the complete metadata the chain produced. Most RPCs get the same rewrite
// (just the weft-version stamp, or the stamp and a dst), so the last result is kept per call
// state and reused when the bytes repeat; it is never modified after it is built, which is
// what makes sharing it between RPCs safe (grpc-go only reads outgoing metadata, and
// metadata.FromIncomingContext hands handlers a copy).
func (s *callState) decodeMD(b []byte) metadata.MD {
	if s.lastMD != nil && string(b) == string(s.lastMDBytes) {
		return s.lastMD
	}
	md := s.parseMD(b)
	s.lastMDBytes = append(s.lastMDBytes[:0], b...)
	s.lastMD = md
	return md
}

// parseMD interns keys and values per call state: they are mostly the same weft-version and
// dst strings.
func (s *callState) parseMD(b []byte) metadata.MD {
	md := make(metadata.MD, 4)
	for {
		k, rest, ok := lenPrefixed(b)
		if !ok {
			return md
		}
		v, rest, ok := lenPrefixed(rest)
		if !ok {
			return md
		}
		key := s.intern(k)
		md[key] = append(md[key], s.intern(v))
		b = rest
	}
}

// lenPrefixed splits off the bytes a u32 LE length prefixes, the C ABI's framing of
// metadata entries, metadata keys and record fields; false when b is empty or cut short.
func lenPrefixed(b []byte) (item, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, b, false
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(len(b)-4) < uint64(n) {
		return nil, b, false
	}
	return b[4 : 4+n], b[4+n:], true
}

// responseMeta captures the headers and trailers of a response whose chain runs on the
// client, so its elements read them (`get_rpc_header`) as the server sent them.
type responseMeta struct{ header, trailer metadata.MD }

// capture adds the call options that fill rm, without writing into the caller's slice.
func (rm *responseMeta) capture(opts []grpc.CallOption) []grpc.CallOption {
	return append(opts[:len(opts):len(opts)], grpc.Header(&rm.header), grpc.Trailer(&rm.trailer))
}

// encode passes the headers, then the trailers, as the response's metadata.
func (rm *responseMeta) encode(s *callState) {
	s.encodeMD(rm.header)
	for k, vs := range rm.trailer {
		if hasUpper(k) {
			k = strings.ToLower(k)
		}
		for _, v := range vs {
			s.md.appendPair(k, v)
		}
	}
}

// showMetadata gives the application the response metadata as the chain left it, through
// its own grpc.Header options, when an element changed it.
func showMetadata(s *callState, opts []grpc.CallOption) {
	if !s.metadataChanged() {
		return
	}
	md := s.decodeMD(s.outMetadata())
	for _, o := range opts {
		if h, ok := o.(grpc.HeaderCallOption); ok {
			*h.HeaderAddr = md.Copy()
		}
	}
}
