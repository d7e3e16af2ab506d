package weft

/*
#cgo CFLAGS: -I${SRCDIR}/../../runtime/include
#cgo !weft_external,!weft_debug LDFLAGS: ${SRCDIR}/../../target/release/libweft_runtime.a
#cgo !weft_external,weft_debug LDFLAGS: ${SRCDIR}/../../target/debug/libweft_runtime.a
#cgo LDFLAGS: -ldl -lm -lpthread -lgcc_s -lrt -lutil

#include <stdlib.h>
#include <string.h>
#include "weft.h"

// The helpers below keep every RPC at one cgo call: growing an output buffer and reading the
// thread-local error text happen on the C side of that call. weft_last_error is per OS
// thread, and a goroutine may move to another thread between two cgo calls, so it must be
// read inside the same call that failed.

// go_weft_put_error copies text (NULL: none) into err, cut to cap.
static void go_weft_put_error(char *err, size_t cap, const char *text) {
	if (cap == 0) return;
	size_t n = text == NULL ? 0 : strlen(text);
	if (n >= cap) n = cap - 1;
	if (n > 0) memcpy(err, text, n); // never with a NULL text
	err[n] = 0;
}

static void go_weft_copy_error(char *err, size_t cap) {
	go_weft_put_error(err, cap, weft_last_error());
}

static int go_weft_grow(WeftBuf *b) {
	if (b->len <= b->cap) return 1;
	uint8_t *p = realloc(b->ptr, b->len);
	if (p == NULL) return 0;
	b->ptr = p;
	b->cap = b->len;
	return 1;
}

static int32_t go_weft_finish(WeftRuntime *rt, WeftCall *c, int32_t rc, char *err, size_t errcap) {
	if (rc == WEFT_E_BUFFER) {
		if (go_weft_grow(&c->out_message) && go_weft_grow(&c->out_metadata) && go_weft_grow(&c->route)) {
			rc = weft_call_output(rt, c);
		}
	}
	if (rc == WEFT_E_NO_EDGE) {
		// No error text for this outcome: none of an earlier call's may show through.
		go_weft_put_error(err, errcap, NULL);
	} else if (rc != WEFT_OK) {
		go_weft_copy_error(err, errcap);
	}
	return rc;
}

// The per-RPC calls take their pointers as integers: cgo checks every pointer argument for
// Go memory on each call (a few percent of a call), and these all point to C memory.
static int32_t go_weft_request(uintptr_t rt, int32_t side, uintptr_t c, uintptr_t err, size_t errcap) {
	WeftCall *call = (WeftCall *)c;
	int32_t rc = go_weft_finish((WeftRuntime *)rt, call, weft_request((WeftRuntime *)rt, side, call),
	                            (char *)err, errcap);
	// After WEFT_E_BUFFER the handle is already set; if the outputs still cannot be had (no
	// memory to grow a buffer), the call fails and nobody would answer the RPC.
	if (rc != WEFT_OK && call->rpc != 0) {
		weft_rpc_abandon((WeftRuntime *)rt, call->rpc);
		call->rpc = 0;
	}
	return rc;
}

static int32_t go_weft_response(uintptr_t rt, int32_t side, uintptr_t c, uintptr_t err, size_t errcap) {
	return go_weft_finish((WeftRuntime *)rt, (WeftCall *)c,
	                      weft_response((WeftRuntime *)rt, side, (WeftCall *)c), (char *)err, errcap);
}

static int32_t go_weft_server_exchange(uintptr_t rt, uintptr_t c, uintptr_t stamp, size_t stamp_len,
                                       uint64_t age_ns, uintptr_t err, size_t errcap) {
	return go_weft_finish((WeftRuntime *)rt, (WeftCall *)c,
	                      weft_server_exchange((WeftRuntime *)rt, (WeftCall *)c, (const uint8_t *)stamp, stamp_len, age_ns),
	                      (char *)err, errcap);
}

// The keys come back in a malloc'd buffer (the caller frees it), grown here when too small.
static int32_t go_weft_metadata_keys(WeftRuntime *rt, int32_t side, const uint8_t *method, size_t method_len,
                                     WeftBuf *out, uint64_t *version, uint32_t *messages, uint8_t *stamp) {
	int32_t rc = weft_metadata_keys(rt, side, method, method_len, out, version, messages, stamp);
	if (rc == WEFT_E_BUFFER && go_weft_grow(out))
		rc = weft_metadata_keys(rt, side, method, method_len, out, version, messages, stamp);
	return rc;
}

// The caller stamp into the malloc'd buffer out, grown here when too small.
static int32_t go_weft_caller_stamp(WeftRuntime *rt, WeftBuf *out) {
	int32_t rc = weft_caller_stamp(rt, out);
	if (rc == WEFT_E_BUFFER && go_weft_grow(out)) rc = weft_caller_stamp(rt, out);
	return rc;
}

// What loading warned of into the malloc'd buffer out, grown here when too small.
static int32_t go_weft_warnings(WeftRuntime *rt, WeftBuf *out) {
	int32_t rc = weft_warnings(rt, out);
	if (rc == WEFT_E_BUFFER && go_weft_grow(out)) rc = weft_warnings(rt, out);
	return rc;
}

static WeftRuntime *go_weft_open(const char *path, const char *yaml, const char *base, const char *service,
                                 uint32_t records, char *err, size_t errcap) {
	WeftRuntime *rt = yaml ? weft_open_yaml(yaml, base, service, records) : weft_open(path, service, records);
	if (rt == NULL) go_weft_copy_error(err, errcap);
	return rt;
}

// Queued channel records into the malloc'd buffer out, grown here when the oldest record
// does not fit.
static int32_t go_weft_records(WeftRuntime *rt, WeftBuf *out, uint64_t *dropped, char *err, size_t errcap) {
	int32_t rc = weft_records(rt, out, dropped);
	if (rc == WEFT_E_BUFFER && go_weft_grow(out)) rc = weft_records(rt, out, dropped);
	if (rc == WEFT_E_BUFFER) {
		// The library sets no error text for a buffer that is too small; only a failed
		// grow gets here, and it must not read as success with no records.
		go_weft_put_error(err, errcap, "no memory to grow the buffer for the oldest channel record");
	} else if (rc != WEFT_OK) {
		go_weft_copy_error(err, errcap);
	}
	return rc;
}

static int32_t go_weft_reload(WeftRuntime *rt, const char *yaml, const char *base, char *err, size_t errcap) {
	int32_t rc = yaml ? weft_reload_yaml(rt, yaml, base) : weft_reload(rt);
	if (rc != WEFT_OK) go_weft_copy_error(err, errcap);
	return rc;
}

static int32_t go_weft_watch_result(WeftRuntime *rt, char *err, size_t errcap) {
	int32_t rc = weft_watch_result(rt);
	if (rc != WEFT_OK) go_weft_copy_error(err, errcap);
	return rc;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
)

const (
	sideClient = C.WEFT_SIDE_CLIENT
	sideServer = C.WEFT_SIDE_SERVER

	verdictForward = C.WEFT_VERDICT_FORWARD
	verdictReject  = C.WEFT_VERDICT_REJECT
	verdictReply   = C.WEFT_VERDICT_REPLY

	rcOK       = C.WEFT_OK
	rcArgument = C.WEFT_E_ARGUMENT
	rcConfig   = C.WEFT_E_CONFIG
	rcNoEdge   = C.WEFT_E_NO_EDGE
	rcBuffer   = C.WEFT_E_BUFFER
	rcPanic    = C.WEFT_E_PANIC
	rcMetadata = C.WEFT_E_METADATA

	// versionHeader is the metadata key the first Weft hop stamps (the library's
	// VERSION_HEADER).
	versionHeader = "weft-version"
)

// Diagnostics for a broken element can be long (source line, caret, hint, several errors);
// anything past this is cut, which an operator still reads as the first errors.
const errCap = 16 << 10

// cbuf is a growable byte buffer in C memory. Everything the library reads or writes lives in
// C memory, so no Go pointer crosses the boundary: no pinning and no cgocheck work per call.
type cbuf struct {
	p   unsafe.Pointer
	len int
	cap int
}

func (b *cbuf) reserve(n int) {
	if n <= b.cap {
		return
	}
	c := b.cap * 2
	if c < n {
		c = n
	}
	if c < 256 {
		c = 256
	}
	p := C.realloc(b.p, C.size_t(c))
	if p == nil {
		panic("weft: out of memory growing a call buffer")
	}
	b.p, b.cap = p, c
}

func (b *cbuf) bytes() []byte { return unsafe.Slice((*byte)(b.p), b.cap)[:b.len] }

func (b *cbuf) set(data []byte) {
	b.reserve(len(data))
	b.len = copy(unsafe.Slice((*byte)(b.p), b.cap), data)
}

// setSlice is set for bytes in several buffers, as gRPC hands them over: copied buffer by
// buffer, not joined in Go memory first.
func (b *cbuf) setSlice(s mem.BufferSlice) {
	b.reserve(s.Len())
	b.len = 0
	for _, part := range s {
		b.len += copy(unsafe.Slice((*byte)(b.p), b.cap)[b.len:], part.ReadOnlyData())
	}
}

func (b *cbuf) appendString(s string) {
	b.reserve(b.len + len(s))
	b.len += copy(unsafe.Slice((*byte)(b.p), b.cap)[b.len:], s)
}

func (b *cbuf) appendU32(v uint32) {
	b.reserve(b.len + 4)
	d := unsafe.Slice((*byte)(b.p), b.cap)[b.len:]
	d[0], d[1], d[2], d[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	b.len += 4
}

// appendPair writes one metadata entry in the contract's encoding.
func (b *cbuf) appendPair(k, v string) {
	b.appendU32(uint32(len(k)))
	b.appendString(k)
	b.appendU32(uint32(len(v)))
	b.appendString(v)
}

func (b *cbuf) free() {
	C.free(b.p)
	b.p, b.len, b.cap = nil, 0, 0
}

// callMem is the C memory of one callState. It is a separate object so that the cleanup
// that frees it does not keep the callState itself reachable.
type callMem struct {
	c    *C.WeftCall
	msg  cbuf
	md   cbuf
	st   cbuf // status message of an error response
	name cbuf // the method name, when it has no cached copy (cstr)
	err  *C.char
}

// callState is the per-RPC scratch: the C WeftCall, its input buffers and the error text.
// Pooled, so a steady stream of RPCs allocates nothing here.
type callState struct {
	*callMem

	// interned keeps the strings of rewritten metadata (mostly the same weft-version and dst
	// values over and over) so decoding them does not allocate each time.
	interned    map[string]string
	lastMD      metadata.MD
	lastMDBytes []byte

	// The pre-encoded request and the reply holder of the client-side codec path; in the
	// pooled state so passing them to grpc-go does not allocate.
	out rawMessage
	raw rawMessage

	// keysVersion: the metadata in md holds only the keys this version's chain observes
	// (WeftCall.metadata_keys_version); 0 when it is complete.
	keysVersion uint64
}

func newCallState() *callState {
	m := &callMem{
		c: (*C.WeftCall)(C.calloc(1, C.size_t(unsafe.Sizeof(C.WeftCall{})))),
		// Zeroed: an error text is read only after a failure, but never uninitialised.
		err: (*C.char)(C.calloc(1, errCap)),
	}
	m.msg.reserve(512)
	m.md.reserve(512)
	initOut(&m.c.out_message, 1024)
	initOut(&m.c.out_metadata, 512)
	initOut(&m.c.route, 64)
	s := &callState{callMem: m, interned: make(map[string]string)}
	// sync.Pool drops idle objects at GC without telling anyone; the C memory goes with them.
	runtime.AddCleanup(s, freeCallMem, m)
	return s
}

func freeCallMem(m *callMem) {
	C.free(unsafe.Pointer(m.c.out_message.ptr))
	C.free(unsafe.Pointer(m.c.out_metadata.ptr))
	C.free(unsafe.Pointer(m.c.route.ptr))
	C.free(unsafe.Pointer(m.c))
	C.free(unsafe.Pointer(m.err))
	m.msg.free()
	m.md.free()
	m.st.free()
	m.name.free()
}

func initOut(b *C.WeftBuf, n int) {
	b.ptr = (*C.uint8_t)(C.malloc(C.size_t(n)))
	b.cap = C.size_t(n)
	b.len = 0
}

func outBytes(b *C.WeftBuf) []byte {
	if b.len == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(b.ptr)), int(b.len))
}

// cAddr passes a pointer to C memory as an integer; the memory is the library's or
// C.malloc'd, so the garbage collector neither moves nor frees it.
func cAddr(p unsafe.Pointer) C.uintptr_t { return C.uintptr_t(uintptr(p)) }

func (s *callState) errorText() string { return C.GoString(s.err) }

// prepare fills the inputs that both directions share. The message and metadata must already
// be in s.msg and s.md.
func (s *callState) prepare(method cstr) {
	c := s.c
	if method.p == nil {
		s.name.reserve(len(method.name) + 1) // never NULL, even for an empty name
		s.name.len = 0
		s.name.appendString(method.name)
		method = cstr{p: s.name.p, n: s.name.len}
	}
	c.method = (*C.uint8_t)(method.p)
	c.method_len = C.size_t(method.n)
	c.metadata = (*C.uint8_t)(s.md.p)
	c.metadata_len = C.size_t(s.md.len)
	c.message = (*C.uint8_t)(s.msg.p)
	c.message_len = C.size_t(s.msg.len)
	c.verdict, c.code = 0, 0
	c.message_changed, c.metadata_changed = 0, 0
	c.out_message.len, c.out_metadata.len, c.route.len = 0, 0, 0
}

func (s *callState) request(h *C.WeftRuntime, side C.int32_t, method cstr) C.int32_t {
	s.prepare(method)
	s.c.rpc = 0
	s.c.status_code = 0
	s.c.status_message_len = 0
	s.c.metadata_keys_version = C.uint64_t(s.keysVersion)
	return C.go_weft_request(cAddr(unsafe.Pointer(h)), side, cAddr(unsafe.Pointer(s.c)), cAddr(unsafe.Pointer(s.err)), errCap)
}

// response runs the response path of the RPC that request returned rpc for. code != 0 is an
// error response (the message buffer is then ignored).
func (s *callState) response(h *C.WeftRuntime, side C.int32_t, method cstr, rpc uint64, code int32, msg string) C.int32_t {
	s.prepare(method)
	s.c.rpc = C.uint64_t(rpc)
	s.c.status_code = C.int32_t(code)
	if code != 0 {
		s.c.message_len = 0
		s.st.len = 0
		s.st.appendString(msg)
		s.c.status_message = (*C.uint8_t)(s.st.p)
		s.c.status_message_len = C.size_t(s.st.len)
	} else {
		s.c.status_message = nil
		s.c.status_message_len = 0
	}
	return C.go_weft_response(cAddr(unsafe.Pointer(h)), side, cAddr(unsafe.Pointer(s.c)), cAddr(unsafe.Pointer(s.err)), errCap)
}

// exchange runs a deferred request path, at the time age ago, and the response path of the
// same RPC (weft_server_exchange). The stamp's bytes follow the status message in the status
// buffer, which the pooled call state keeps: no allocation per call.
func (s *callState) exchange(h *C.WeftRuntime, method cstr, stamp string, age time.Duration, code int32, msg string) C.int32_t {
	s.prepare(method)
	s.c.rpc = 0
	s.c.status_code = C.int32_t(code)
	// The version whose keys shaped these inputs: the library runs no other on them.
	s.c.metadata_keys_version = C.uint64_t(s.keysVersion)
	s.st.len = 0
	if code != 0 {
		s.c.message_len = 0
		s.st.appendString(msg)
	}
	s.c.status_message = (*C.uint8_t)(s.st.p)
	s.c.status_message_len = C.size_t(s.st.len)
	at := s.st.len
	s.st.appendString(stamp)
	// The status message was set from s.st.p before the append; should the buffer have
	// moved, point at where it is now.
	s.c.status_message = (*C.uint8_t)(s.st.p)
	if age < 0 {
		age = 0
	}
	return C.go_weft_server_exchange(cAddr(unsafe.Pointer(h)), cAddr(unsafe.Pointer(s.c)),
		cAddr(unsafe.Add(s.st.p, at)), C.size_t(len(stamp)), C.uint64_t(age), cAddr(unsafe.Pointer(s.err)), errCap)
}

// metadataKeys asks the library which request metadata keys the chain observes for a method
// in the current version; ok is false on any failure (the caller then passes everything).
func metadataKeys(h *C.WeftRuntime, side C.int32_t, method cstr) (*keySet, bool) {
	var out C.WeftBuf
	var version C.uint64_t
	var messages C.uint32_t
	initOut(&out, 256)
	defer func() { C.free(unsafe.Pointer(out.ptr)) }()
	stamp := (*C.uint8_t)(C.malloc(C.WEFT_STAMP_LEN))
	defer C.free(unsafe.Pointer(stamp))
	if C.go_weft_metadata_keys(h, side, (*C.uint8_t)(method.p), C.size_t(method.n), &out, &version, &messages, stamp) != rcOK {
		return nil, false
	}
	ks := &keySet{
		version:         uint64(version),
		requestMessage:  messages&C.WEFT_OBSERVES_REQUEST_MESSAGE != 0,
		responseMessage: messages&C.WEFT_OBSERVES_RESPONSE_MESSAGE != 0,
		deferRequest:    messages&C.WEFT_DEFERRABLE_REQUEST != 0,
		stamp:           C.GoStringN((*C.char)(unsafe.Pointer(stamp)), C.WEFT_STAMP_LEN),
	}
	for b := outBytes(&out); len(b) > 0; {
		key, rest, ok := lenPrefixed(b)
		if !ok {
			return nil, false
		}
		ks.keys = append(ks.keys, string(key))
		b = rest
	}
	ks.stampOnly = ks.version != 0 && len(ks.keys) == 1 && ks.keys[0] == versionHeader
	return ks, true
}

// cstr is a method name copied once into C memory; the methods a config has edges for are
// few and live as long as the process, so they are never freed. With p nil it is a name
// not copied (yet): each call copies it into its own C memory (callMem.name).
type cstr struct {
	p    unsafe.Pointer
	n    int
	name string
}

func newCstr(s string) cstr {
	p := C.malloc(C.size_t(len(s) + 1))
	d := unsafe.Slice((*byte)(p), len(s)+1)
	copy(d, s)
	d[len(s)] = 0
	return cstr{p: p, n: len(s)}
}

func openRuntime(path, yaml, base, service string, records int) (*C.WeftRuntime, string) {
	err := (*C.char)(C.malloc(errCap))
	defer C.free(unsafe.Pointer(err))
	cpath, cyaml, cbase, csvc := cString(path), (*C.char)(nil), cString(base), cString(service)
	defer C.free(unsafe.Pointer(cpath))
	defer C.free(unsafe.Pointer(cbase))
	defer C.free(unsafe.Pointer(csvc))
	if yaml != "" {
		cyaml = cString(yaml)
		defer C.free(unsafe.Pointer(cyaml))
	}
	h := C.go_weft_open(cpath, cyaml, cbase, csvc, C.uint32_t(records), err, errCap)
	if h == nil {
		return nil, C.GoString(err)
	}
	return h, ""
}

func reloadRuntime(h *C.WeftRuntime, yaml, base string, fromText bool) string {
	err := (*C.char)(C.malloc(errCap))
	defer C.free(unsafe.Pointer(err))
	var cyaml, cbase *C.char
	if fromText {
		cyaml, cbase = cString(yaml), cString(base)
		defer C.free(unsafe.Pointer(cyaml))
		defer C.free(unsafe.Pointer(cbase))
	}
	if C.go_weft_reload(h, cyaml, cbase, err, errCap) != rcOK {
		return C.GoString(err)
	}
	return ""
}

// watchFailure is the diagnostic of the config watcher's last reload when it failed, else "".
func watchFailure(h *C.WeftRuntime) string {
	err := (*C.char)(C.malloc(errCap))
	defer C.free(unsafe.Pointer(err))
	if C.go_weft_watch_result(h, err, errCap) != rcOK {
		return C.GoString(err)
	}
	return ""
}

// recordBuf is the C buffer queued channel records are copied into; it grows to fit the
// largest record seen.
type recordBuf struct{ b C.WeftBuf }

const recordBufSize = 64 << 10

func newRecordBuf() *recordBuf {
	return &recordBuf{C.WeftBuf{ptr: (*C.uint8_t)(C.malloc(recordBufSize)), cap: recordBufSize}}
}

func (b *recordBuf) free() { C.free(unsafe.Pointer(b.b.ptr)) }

// collectRecords moves queued records into b: (the encoded records, records dropped so
// far, error).
// The bytes alias b until its next use.
func collectRecords(h *C.WeftRuntime, b *recordBuf) ([]byte, uint64, string) {
	err := (*C.char)(C.malloc(errCap))
	defer C.free(unsafe.Pointer(err))
	var dropped C.uint64_t
	if rc := C.go_weft_records(h, &b.b, &dropped, err, errCap); rc != rcOK {
		msg := C.GoString(err)
		if msg == "" {
			// A failure must never read as "no records".
			msg = fmt.Sprintf("library returned code %d", int(rc))
		}
		return nil, uint64(dropped), msg
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(b.b.ptr)), int(b.b.len)), uint64(dropped), ""
}

func cString(s string) *C.char { return C.CString(s) }

func closeRuntime(h *C.WeftRuntime)          { C.weft_close(h) }
func runtimeVersion(h *C.WeftRuntime) uint64 { return uint64(C.weft_version(h)) }

// versionWord is the library's word holding the active version's number; it stays valid for
// the life of the process, after Close too.
func versionWord(h *C.WeftRuntime) *uint64 {
	return (*uint64)(unsafe.Pointer(C.weft_version_word(h)))
}

// callerStamp is the runtime's stamp for client calls no edge covers ("" if it has none,
// or if the call fails, which it only does for arguments this package never passes).
func callerStamp(h *C.WeftRuntime) string {
	return runtimeText(64, func(out *C.WeftBuf) C.int32_t { return C.go_weft_caller_stamp(h, out) })
}

// runtimeText is the text read calls write into a buffer of n bytes (grown by the C helper
// when too small), or "" when it fails.
func runtimeText(n int, read func(*C.WeftBuf) C.int32_t) string {
	var out C.WeftBuf
	initOut(&out, n)
	defer func() { C.free(unsafe.Pointer(out.ptr)) }()
	if read(&out) != rcOK || out.len == 0 {
		return ""
	}
	return C.GoStringN((*C.char)(unsafe.Pointer(out.ptr)), C.int(out.len))
}

// loadWarnings is what loading the runtime's current version warned of ("" if nothing, or
// if the call fails, which it only does for arguments this package never passes).
func loadWarnings(h *C.WeftRuntime) string {
	return runtimeText(256, func(out *C.WeftBuf) C.int32_t { return C.go_weft_warnings(h, out) })
}

func rpcsWaiting(h *C.WeftRuntime) uint64 { return uint64(C.weft_rpcs_waiting(h)) }

// libraryStats reads the library's gauges; zero if the call fails, which it only does for
// arguments this package never passes (NULL).
func libraryStats(h *C.WeftRuntime) Stats {
	var s C.WeftStats
	if C.weft_stats(h, &s) != rcOK {
		return Stats{}
	}
	return Stats{
		WaitingRPCs:       uint64(s.rpcs_waiting),
		KeptOutputs:       uint64(s.kept_outputs),
		QueuedRecords:     uint64(s.records_queued),
		QueuedRecordBytes: uint64(s.records_bytes),
		VersionsLive:      uint64(s.versions_installed - s.versions_freed),
		VersionsFreed:     uint64(s.versions_freed),
		VersionsDraining:  uint64(s.versions_draining),
	}
}

// libraryCounters reads the library's counters; zero if the call fails, which it only does
// for arguments this package never passes (NULL).
func libraryCounters(h *C.WeftRuntime) Counters {
	var c C.WeftCounters
	if C.weft_counters(h, &c) != rcOK {
		return Counters{}
	}
	return Counters{
		MalformedRPCs:    uint64(c.malformed),
		ElementErrors:    uint64(c.element_errors),
		IterationLimited: uint64(c.iteration_limited),
		UnknownCallers:   uint64(c.unknown_callers),
	}
}
