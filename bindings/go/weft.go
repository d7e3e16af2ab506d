// Package weft runs Weft policy chains inside a grpc-go service.
//
// A Runtime loads weft.yaml (with its elements and protos), compiles the chain segments that
// belong to this service to native code, and exposes them as gRPC client and server
// interceptors. Each RPC crosses into the Rust library once per direction, with the message
// as the protobuf wire bytes the codec produced.
//
//	rt, err := weft.Open("weft.yaml", "frontend")
//	conn, err := grpc.NewClient(addr, append(rt.DialOptions(), creds)...)
//
//	rt, err := weft.Open("weft.yaml", "echo")
//	srv := grpc.NewServer(rt.ServerOptions()...)
//
// The records elements send to channels (logging's messages, metrics' latencies) reach Go
// through WithRecords:
//
//	rt, err := weft.Open("weft.yaml", "echo", weft.WithRecords(func(r weft.Record) {
//		slog.Info("weft", "element", r.Element, "channel", r.Channel, "value", r.Value)
//	}))
//
// See docs/go.md in the repository for how the package is built and linked.
package weft

/*
#include "weft.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Runtime is a loaded configuration for one service. It is safe for concurrent use.
type Runtime struct {
	// mu is held for reading by every RPC and for writing by Close, so Close never frees the
	// library's runtime under a call in flight.
	mu      sync.RWMutex
	h       *C.WeftRuntime
	path    string
	service string
	// version: the library's word holding its active version's number, read atomically; it
	// changes with every reload, the library's file watcher's included. Valid after Close.
	version *uint64
	// callerStamp: the weft-version stamp this service adds to a client call no edge
	// covers, "/<service>" ("" when the name cannot ride in a header), so a server with
	// edges from several services into the method knows the caller (stampCaller).
	callerStamp string
	// callerMD: metadata of the stamp alone, shared by every call that has none of its
	// own (grpc-go never changes a context's metadata): attaching it takes one allocation
	// where AppendToOutgoingContext takes three.
	callerMD metadata.MD

	methods atomic.Pointer[map[string]*methodInfo]
	methMu  sync.Mutex

	// stashRequests: some server-side chain of this runtime has needed a request's or a
	// response's bytes, so the codec ServerOptions installs keeps request bytes for the
	// interceptor (which also tells it the codec can send a response's bytes as they are).
	// Until then (a server running only elements that read no message, such as metrics) it
	// keeps none.
	stashRequests atomic.Bool

	// records collects channel records for WithRecords; nil without it.
	records *recordPump

	// malformed counts the messages this package found not to be a valid message where
	// no element had read them (see Counters); closed keeps the library's counters from
	// Close on.
	malformed atomic.Uint64
	closed    Counters
}

// Counters is what went wrong with RPCs over a Runtime's life, every configuration
// version included.
type Counters struct {
	// MalformedRPCs: messages whose bytes are not a valid message. Requests and stream
	// messages are rejected with INVALID_ARGUMENT (an element read them, or the server
	// decoded them for its handler); a reply fails its call with INTERNAL, as in grpc-go,
	// or with the status the chain gave when an element read it.
	MalformedRPCs uint64
	// ElementErrors: RPCs rejected with INTERNAL because an element's handler failed at
	// run time (integer division by zero, an index out of range, ...).
	ElementErrors uint64
	// IterationLimited: of ElementErrors, the RPCs where a handler made more foreach
	// iterations than its element's max_iterations (a limit set too low for the state the
	// element holds, rather than a failing element).
	IterationLimited uint64
	// UnknownCallers: requests refused with PERMISSION_DENIED because edges from several
	// services lead into their method on this server and their weft-version stamp named
	// none of those services (a caller without Weft sends none).
	UnknownCallers uint64
}

// Counters returns the Runtime's counters. After Close the library's part keeps its value
// at Close; calls that were already waiting for a reply still count an undecodable one.
func (r *Runtime) Counters() Counters {
	r.mu.RLock()
	c := r.closed
	if r.h != nil {
		c = libraryCounters(r.h)
	}
	r.mu.RUnlock()
	c.MalformedRPCs += r.malformed.Load()
	return c
}

// namesVersion tells whether a weft-version stamp, "<digest>/<service>" from a Weft client,
// names the version whose digest is given.
func namesVersion(stamp, digest string) bool {
	rest, ok := strings.CutPrefix(stamp, digest)
	return ok && (rest == "" || rest[0] == '/')
}

// methodInfo is what the binding keeps per method name.
type methodInfo struct {
	c cstr
	// serverKeys: the request metadata keys the server-side chain observes, fetched once
	// per version (nil until the first call).
	serverKeys atomic.Pointer[keySet]
	// installMarks counts the unary server calls that marked their context for a second Weft
	// interceptor (installMarkCalls at most); installedTwice is set once one was found
	// (server.go).
	installMarks   atomic.Int32
	installedTwice atomic.Bool
}

// keySet is weft_metadata_keys' answer: version 0 means the chain observes every key.
type keySet struct {
	version uint64
	keys    []string
	// stampOnly: the only key is weft-version, which the library reads to pick the version;
	// no element reads or writes metadata.
	stampOnly bool
	// requestMessage, responseMessage: the chain's request (response) handlers can observe
	// that message. When one cannot, a call that passes only these keys passes no message
	// for that direction.
	requestMessage, responseMessage bool
	// deferRequest: on the server side, the request path only reads the clock and keeps
	// per-RPC scratch, so it may run in the response's library call (deferredServer) for a
	// request whose weft-version names stamp, the version's digest (namesVersion).
	deferRequest bool
	stamp        string
	// fetchedAt: the library's active version when these keys were asked for (read before
	// asking, so a reload in between makes the next RPC ask again). The version they belong
	// to is no guide: it is 0 for a chain that observes every key, deferrable or not.
	fetchedAt uint64
}

// ErrClosed is returned by RPCs and reloads on a Runtime after Close. RPCs fail rather than
// pass without their policy.
var ErrClosed = errors.New("weft: runtime is closed")

// Open loads the configuration at path (weft.yaml) for the service named service (the name
// it has in the config's edges' from/to).
func Open(path, service string, opts ...Option) (*Runtime, error) {
	if path == "" {
		return nil, errors.New("weft: open: no config path given")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	h, msg := openRuntime(path, "", "", service, o.queue)
	if h == nil {
		return nil, fmt.Errorf("weft: open %s as service %q: %s", path, service, msg)
	}
	return newRuntime(h, path, service, o), nil
}

// OpenYAML loads a configuration given as YAML text. Relative paths in it (protos, element
// directories) are resolved against baseDir.
func OpenYAML(yaml, baseDir, service string, opts ...Option) (*Runtime, error) {
	if yaml == "" {
		return nil, errors.New("weft: open: the YAML text is empty")
	}
	o, err := buildOptions(opts)
	if err != nil {
		return nil, err
	}
	if baseDir == "" {
		baseDir = "."
	}
	if abs, err := filepath.Abs(baseDir); err == nil {
		baseDir = abs
	}
	h, msg := openRuntime("", yaml, baseDir, service, o.queue)
	if h == nil {
		return nil, fmt.Errorf("weft: open YAML config (base %s) as service %q: %s", baseDir, service, msg)
	}
	return newRuntime(h, "", service, o), nil
}

func newRuntime(h *C.WeftRuntime, path, service string, o options) *Runtime {
	r := &Runtime{h: h, path: path, service: service, version: versionWord(h), callerStamp: callerStamp(h)}
	if r.callerStamp != "" {
		r.callerMD = metadata.Pairs(versionHeader, r.callerStamp)
	}
	empty := map[string]*methodInfo{}
	r.methods.Store(&empty)
	r.startRecords(o)
	return r
}

// Reload re-reads the config file this Runtime was opened with. On error the running version
// stays in place and the error carries the diagnostic.
func (r *Runtime) Reload() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.h == nil {
		return ErrClosed
	}
	if r.path == "" {
		return errors.New("weft: reload: this runtime was opened from YAML text; use ReloadYAML")
	}
	if msg := reloadRuntime(r.h, "", "", false); msg != "" {
		return fmt.Errorf("weft: reload %s failed, version %d keeps running: %s", r.path, runtimeVersion(r.h), msg)
	}
	return nil
}

// WatchError is the failure of the last reload the config watcher made, nil when it has made
// none, the last one worked, or a Reload or ReloadYAML has worked since. A Runtime opened from a file re-reads it, its protos and its
// elements when they change (polled every second; WEFT_WATCH_MS sets the interval, 0 turns
// watching off), and a change that does not load leaves the running version in place with
// nothing else to tell of it: check WatchError after editing a config, or poll it.
func (r *Runtime) WatchError() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.h == nil {
		return ErrClosed
	}
	if msg := watchFailure(r.h); msg != "" {
		what := r.path
		if what == "" {
			what = "the config's protos and elements"
		}
		return fmt.Errorf("weft: the config watcher's reload of %s failed, version %d keeps running: %s", what, runtimeVersion(r.h), msg)
	}
	return nil
}

// ReloadYAML installs a new configuration given as text. On error the running version stays.
func (r *Runtime) ReloadYAML(yaml, baseDir string) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.h == nil {
		return ErrClosed
	}
	if baseDir == "" {
		baseDir = "."
	}
	if abs, err := filepath.Abs(baseDir); err == nil {
		baseDir = abs
	}
	if msg := reloadRuntime(r.h, yaml, baseDir, true); msg != "" {
		return fmt.Errorf("weft: reload failed, version %d keeps running: %s", runtimeVersion(r.h), msg)
	}
	return nil
}

// Version is the number of the active configuration in this process (1, 2, … per install).
func (r *Runtime) Version() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.h == nil {
		return 0
	}
	return runtimeVersion(r.h)
}

// Warnings is what loading the active configuration warned of, as `weft check --config`
// prints it (the place in weft.yaml or in an element, the line, a caret, a hint), or ""
// when nothing. The configuration runs either way; log this after Open and each reload,
// since a warning may mean a policy does nothing (a firewall denying an enum value by
// name, docs/config.md).
func (r *Runtime) Warnings() string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.h == nil {
		return ""
	}
	return loadWarnings(r.h)
}

// WaitingRPCs is the number of requests that ran the chain and whose response path has not
// run yet: calls and stream messages waiting for their response. Every request's response
// path runs once, when its response arrives or its call or stream ends; a count that only
// grows points at calls whose end never reaches Weft (docs/go.md, "Streams").
func (r *Runtime) WaitingRPCs() uint64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.h == nil {
		return 0
	}
	return rpcsWaiting(r.h)
}

// Stats is what a Runtime holds that grows with use and must shrink again once the RPCs
// that need it end: gauges to watch for leaks in a long-running process.
type Stats struct {
	// WaitingRPCs: as Runtime.WaitingRPCs.
	WaitingRPCs uint64
	// KeptOutputs: a call's outputs the library kept because the binding's buffers were
	// too small, not collected yet; the binding collects them in the same call, so this
	// is 0 between calls.
	KeptOutputs uint64
	// QueuedRecords: channel records waiting for the next collection (WithRecords).
	QueuedRecords uint64
	// QueuedRecordBytes: the bytes of messages and strings those records keep alive,
	// bounded by WEFT_RECORD_BYTES (64 MiB by default); records past it are dropped and
	// counted.
	QueuedRecordBytes uint64
	// VersionsLive: config versions in memory, the active one included: 1 plus those a
	// reload replaced while RPCs still ran in them, each freed with its last RPC.
	VersionsLive uint64
	// VersionsFreed: replaced versions freed so far.
	VersionsFreed uint64
	// VersionsDraining: replaced versions still alive (RPCs running in them).
	VersionsDraining uint64
}

// Stats returns the Runtime's gauges; zero after Close.
func (r *Runtime) Stats() Stats {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.h == nil {
		return Stats{}
	}
	return libraryStats(r.h)
}

// Service is the service name this Runtime runs as.
func (r *Runtime) Service() string { return r.service }

// Close waits for calls in flight and frees the runtime. Later RPCs through its interceptors
// fail with UNAVAILABLE. With WithRecords, the records still queued are handed over before
// Close returns.
func (r *Runtime) Close() error {
	p := r.records
	if p != nil {
		p.stopped.Do(func() { close(p.stop) })
		<-p.done
	}
	var last []Record
	r.mu.Lock()
	if r.h != nil {
		if p != nil {
			last = p.collectAll(r.h)
			p.buf.free()
		}
		r.closed = libraryCounters(r.h)
		closeRuntime(r.h)
		r.h = nil
	}
	r.mu.Unlock()
	if p != nil {
		p.deliver(last)
	}
	return nil
}

// method returns the C copy of a method name once a request of it has run a chain, else the
// name for each call to copy. Copies are made only for methods with an edge (runRequest):
// a server that takes any method name (grpc.UnknownServiceHandler) would otherwise keep
// memory for every name a client sends.
func (r *Runtime) method(name string) cstr {
	if m, ok := (*r.methods.Load())[name]; ok {
		return m.c
	}
	return cstr{name: name}
}

// methodInfo returns what the binding keeps for a method, making it on first use: only for
// methods whose names are bounded (registered unary methods) or that have an edge.
func (r *Runtime) methodInfo(name string) *methodInfo {
	if m, ok := (*r.methods.Load())[name]; ok {
		return m
	}
	r.methMu.Lock()
	defer r.methMu.Unlock()
	old := *r.methods.Load()
	if m, ok := old[name]; ok {
		return m
	}
	next := make(map[string]*methodInfo, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	m := &methodInfo{c: newCstr(name)}
	next[name] = m
	r.methods.Store(&next)
	return m
}

// serverKeys is the key set the server side of the method observes, as last fetched; refresh
// fetches it again (the version changed). nil when the runtime is closed.
func (r *Runtime) serverKeys(m *methodInfo, refresh bool) *keySet {
	if ks := m.serverKeys.Load(); ks != nil && !refresh {
		return ks
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.h == nil {
		return nil
	}
	at := atomic.LoadUint64(r.version)
	ks, ok := metadataKeys(r.h, sideServer, m.c)
	if !ok {
		// No edge for the method, or an error: the complete metadata is always right, and
		// asking again on every call (until a reload) would cost a library call each.
		ks = &keySet{requestMessage: true, responseMessage: true}
	}
	ks.fetchedAt = at
	m.serverKeys.Store(ks)
	return ks
}

var callPool = sync.Pool{New: func() any { return newCallState() }}

func getCall() *callState { return callPool.Get().(*callState) }

func putCall(s *callState) {
	if s.raw.buf != nil { // a reply that arrived with an error status
		s.raw.buf.Free()
		s.raw.buf = nil
	}
	if len(s.interned) > 1024 {
		clear(s.interned)
	}
	if len(s.lastMDBytes) > 4096 { // do not pin one huge rewrite in the pool
		s.lastMD, s.lastMDBytes = nil, nil
	}
	s.keysVersion = 0
	callPool.Put(s)
}

// callError turns a failed library call into the status the RPC fails with. Policy errors
// never let the RPC through unchecked.
func callError(rc C.int32_t, s *callState, dir string) error {
	switch rc {
	case rcArgument:
		return status.Errorf(codes.Internal, "weft: %s: bad call into the library: %s", dir, s.errorText())
	case rcPanic:
		return status.Errorf(codes.Internal, "weft: %s: internal error in the library (a bug): %s", dir, s.errorText())
	case rcConfig:
		return status.Errorf(codes.Internal, "weft: %s: configuration error: %s", dir, s.errorText())
	case rcBuffer:
		return status.Errorf(codes.Internal, "weft: %s: out of memory for the chain's output", dir)
	}
	return status.Errorf(codes.Internal, "weft: %s: library returned code %d: %s", dir, int(rc), s.errorText())
}

// rejection is the error for a REJECT verdict.
func rejection(s *callState) error {
	return status.Error(codes.Code(s.c.code), string(outBytes(&s.c.out_message)))
}

// errorRejection is the error for a REJECT verdict on the response path of a call that
// failed with err, whose status is st. The library hands back only a code and a text, so
// when the chain passed them on unchanged the caller gets err itself, with what only err
// carries: status details, or a handler's context error for grpc-go to map.
func errorRejection(s *callState, err error, st *status.Status) error {
	if codes.Code(s.c.code) == st.Code() && string(outBytes(&s.c.out_message)) == st.Message() {
		return err
	}
	return rejection(s)
}

func (s *callState) verdict() C.int32_t   { return s.c.verdict }
func (s *callState) rpcHandle() uint64    { return uint64(s.c.rpc) }
func (s *callState) messageChanged() bool { return s.c.message_changed != 0 }
func (s *callState) metadataChanged() bool {
	return s.c.metadata_changed != 0
}
func (s *callState) outMessage() []byte  { return outBytes(&s.c.out_message) }
func (s *callState) outMetadata() []byte { return outBytes(&s.c.out_metadata) }

// successInPlace is the response a chain forwarded in place of an error it was given: a
// response handler answered the failed call with a success of its own. The message is the
// one the chain wrote, or the error's (empty) message when it wrote none.
func (s *callState) successInPlace() []byte {
	if s.messageChanged() {
		return s.outMessage()
	}
	return nil
}

// routeTo is the replica the chain chose, "" if none; interned, so steady routing does not
// allocate.
func (s *callState) routeTo() string {
	b := outBytes(&s.c.route)
	if len(b) == 0 {
		return ""
	}
	return s.intern(b)
}

func (s *callState) intern(b []byte) string {
	if v, ok := s.interned[string(b)]; ok {
		return v
	}
	v := string(b)
	s.interned[v] = v
	return v
}
