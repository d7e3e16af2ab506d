/* Drives a real chain through the C ABI: the examples/echo chain (logging, ratelimit,
 * firewall, cache, metrics) between a "frontend" runtime (client side) and an "echo"
 * runtime (server side), with this program playing both applications. Exits non-zero on
 * the first failed expectation. Usage: drive <path to examples/echo/weft.yaml> */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "weft.h"

static int failures = 0;
#define EXPECT(cond, ...) do { if (!(cond)) { failures++; fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " [last error: %s]\n", weft_last_error()); } } while (0)

static uint8_t msg_out[4096], meta_out[4096], route_out[256];
static int server_calls = 0;

/* Two length-delimited fields 1 and 2: SayRequest{user, body} or SayReply{body, served_by}. */
static size_t two_strings(uint8_t *buf, const char *a, const char *b) {
    size_t n = 0, la = strlen(a), lb = strlen(b);
    buf[n++] = 0x0a; buf[n++] = (uint8_t)la; memcpy(buf + n, a, la); n += la;
    buf[n++] = 0x12; buf[n++] = (uint8_t)lb; memcpy(buf + n, b, lb); n += lb;
    return n;
}

static void reset(WeftCall *c, const char *method, const uint8_t *meta, size_t meta_len,
                  const uint8_t *msg, size_t msg_len) {
    memset(c, 0, sizeof *c);
    c->method = (const uint8_t *)method; c->method_len = strlen(method);
    c->metadata = meta; c->metadata_len = meta_len;
    c->message = msg; c->message_len = msg_len;
    c->out_message = (WeftBuf){ msg_out, sizeof msg_out, 0 };
    c->out_metadata = (WeftBuf){ meta_out, sizeof meta_out, 0 };
    c->route = (WeftBuf){ route_out, sizeof route_out, 0 };
}

typedef struct { int verdict; int code; } Outcome;

/* One RPC end to end: client request, server request, the server application, server
 * response, client response. Returns what the calling application finally sees. */
static Outcome rpc_bytes(WeftRuntime *client, WeftRuntime *server, const uint8_t *req, size_t req_len,
                         const char *body) {
    const char *m = "/echo.Echo/Say";
    Outcome o = { -1, 0 };
    uint8_t meta[4096], wire[4096], resp[256], status[256];
    WeftCall c;
    reset(&c, m, NULL, 0, req, req_len);
    int rc = weft_request(client, WEFT_SIDE_CLIENT, &c);
    EXPECT(rc == WEFT_OK, "client request rc %d", rc);
    if (rc != WEFT_OK) return o;
    if (c.verdict != WEFT_VERDICT_FORWARD) { o.verdict = c.verdict; o.code = c.code; return o; }
    EXPECT(c.metadata_changed == 1, "the first hop must stamp weft-version");
    EXPECT(memmem(meta_out, c.out_metadata.len, "weft-version", 12) != NULL, "no weft-version in the metadata");
    uint64_t client_rpc = c.rpc;
    size_t meta_len = c.out_metadata.len;
    memcpy(meta, meta_out, meta_len);
    size_t wire_len = req_len;
    memcpy(wire, c.message_changed ? msg_out : req, c.message_changed ? c.out_message.len : req_len);
    if (c.message_changed) wire_len = c.out_message.len;

    WeftCall s;
    reset(&s, m, meta, meta_len, wire, wire_len);
    rc = weft_request(server, WEFT_SIDE_SERVER, &s);
    EXPECT(rc == WEFT_OK, "server request rc %d", rc);
    int32_t status_code = 0;
    size_t status_len = 0, back_len = 0;
    if (s.verdict == WEFT_VERDICT_FORWARD) {
        server_calls++;
        size_t resp_len = two_strings(resp, body, "echo-0");
        if (s.rpc != 0) {
            WeftCall r;
            reset(&r, m, NULL, 0, resp, resp_len);
            r.rpc = s.rpc;
            rc = weft_response(server, WEFT_SIDE_SERVER, &r);
            EXPECT(rc == WEFT_OK, "server response rc %d", rc);
            if (r.verdict == WEFT_VERDICT_REJECT) {
                status_code = r.code; status_len = r.out_message.len; memcpy(status, msg_out, status_len);
            } else {
                back_len = r.message_changed ? r.out_message.len : resp_len;
                memcpy(wire, r.message_changed ? msg_out : resp, back_len);
            }
        } else {
            back_len = resp_len; memcpy(wire, resp, resp_len);
        }
    } else if (s.verdict == WEFT_VERDICT_REPLY) {
        back_len = s.out_message.len; memcpy(wire, msg_out, back_len);
    } else {
        status_code = s.code; status_len = s.out_message.len; memcpy(status, msg_out, status_len);
    }
    if (client_rpc == 0) {
        o.verdict = status_code ? WEFT_VERDICT_REJECT : WEFT_VERDICT_FORWARD; o.code = status_code;
        return o;
    }
    WeftCall r;
    reset(&r, m, NULL, 0, wire, status_code ? 0 : back_len);
    r.rpc = client_rpc;
    r.status_code = status_code;
    r.status_message = status; r.status_message_len = status_len;
    rc = weft_response(client, WEFT_SIDE_CLIENT, &r);
    EXPECT(rc == WEFT_OK, "client response rc %d", rc);
    o.verdict = r.verdict; o.code = r.code;
    return o;
}

static Outcome rpc(WeftRuntime *client, WeftRuntime *server, const char *user, const char *body) {
    uint8_t req[256];
    return rpc_bytes(client, server, req, two_strings(req, user, body), body);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: drive weft.yaml\n"); return 2; }
    WeftRuntime *bad = weft_open("/nonexistent/weft.yaml", "frontend", 0);
    EXPECT(bad == NULL, "opening a missing file must fail");
    EXPECT(strstr(weft_last_error(), "/nonexistent/weft.yaml") != NULL, "the error must name the path");

    /* The client queues the records its logging element sends, up to 64. */
    WeftRuntime *client = weft_open(argv[1], "frontend", 64);
    WeftRuntime *server = weft_open(argv[1], "echo", 0);
    EXPECT(client && server, "open");
    if (!client || !server) return 1;
    EXPECT(weft_version(client) == 1, "the first version is 1");

    Outcome o = rpc(client, server, "alice", "hello");
    EXPECT(o.verdict == WEFT_VERDICT_FORWARD, "alice: verdict %d code %d", o.verdict, o.code);
    EXPECT(server_calls == 1, "alice reached the server once, not %d times", server_calls);

    o = rpc(client, server, "bob", "hello");
    EXPECT(o.verdict != WEFT_VERDICT_REJECT, "cached hello: verdict %d code %d", o.verdict, o.code);
    EXPECT(server_calls == 1, "the cached answer must not reach the server (%d calls)", server_calls);

    o = rpc(client, server, "mallory", "let me in");
    EXPECT(o.verdict == WEFT_VERDICT_REJECT && o.code == 7, "mallory: verdict %d code %d", o.verdict, o.code);

    uint8_t corrupt[] = { 0x0a, 0x50, 'x' }; /* field 1 claims 80 bytes, has 1 */
    o = rpc_bytes(client, server, corrupt, sizeof corrupt, "x");
    EXPECT(o.verdict == WEFT_VERDICT_REJECT && o.code == 3, "corrupt payload: verdict %d code %d", o.verdict, o.code);
    WeftCounters counters = { 0 };
    EXPECT(weft_counters(client, &counters) == WEFT_OK, "weft_counters: %s", weft_last_error());
    EXPECT(counters.malformed == 1 && counters.element_errors == 0 && counters.iteration_limited == 0
               && counters.unknown_callers == 0,
           "after one corrupt payload: malformed %llu, element errors %llu, iteration-limited %llu, unknown callers %llu",
           (unsigned long long)counters.malformed, (unsigned long long)counters.element_errors,
           (unsigned long long)counters.iteration_limited, (unsigned long long)counters.unknown_callers);
    EXPECT(weft_counters(client, NULL) == WEFT_E_ARGUMENT, "weft_counters with NULL out");
    EXPECT(weft_counters(NULL, &counters) == WEFT_E_ARGUMENT, "weft_counters with a NULL runtime");

    /* A metadata buffer too small: the call keeps its outputs for weft_call_output. */
    uint8_t req[64];
    WeftCall c;
    reset(&c, "echo.Echo/Say", NULL, 0, req, two_strings(req, "carol", "small"));
    c.out_metadata.cap = 4;
    int rc = weft_request(client, WEFT_SIDE_CLIENT, &c);
    EXPECT(rc == WEFT_E_BUFFER, "a 4-byte metadata buffer must give WEFT_E_BUFFER, got %d", rc);
    EXPECT(c.out_metadata.len > 4, "len must hold the size needed, got %zu", c.out_metadata.len);
    c.out_metadata.cap = sizeof meta_out;
    rc = weft_call_output(client, &c);
    EXPECT(rc == WEFT_OK, "weft_call_output rc %d", rc);
    EXPECT(memmem(meta_out, c.out_metadata.len, "weft-version", 12) != NULL, "the kept metadata has the stamp");
    EXPECT(weft_call_output(client, &c) == WEFT_E_ARGUMENT, "outputs are handed over once");
    weft_rpc_abandon(client, c.rpc);

    /* No room at all, and none given for weft_call_output either: WEFT_E_BUFFER again, with
       each len the size needed. (Forwarded, the stamped metadata needs room; rejected by the
       rate limiter, whose tokens run low here, the status text does.) */
    reset(&c, "echo.Echo/Say", NULL, 0, req, two_strings(req, "carol", "small 2"));
    c.out_message.cap = 0;
    c.out_metadata.cap = 0;
    EXPECT(weft_request(client, WEFT_SIDE_CLIENT, &c) == WEFT_E_BUFFER, "buffers of 0 bytes");
    size_t need_message = c.out_message.len, need_metadata = c.out_metadata.len;
    EXPECT(need_message + need_metadata > 0, "some output needs room");
    c.out_message.len = 0;
    c.out_metadata.len = 0;
    EXPECT(weft_call_output(client, &c) == WEFT_E_BUFFER, "0 bytes are still too few");
    EXPECT(c.out_message.len == need_message && c.out_metadata.len == need_metadata,
           "each len must hold the size needed again: %zu and %zu, not %zu and %zu",
           c.out_message.len, c.out_metadata.len, need_message, need_metadata);
    weft_rpc_abandon(client, c.rpc);
    /* The same WeftCall used for another call before collecting: the outputs it kept belong
       to the earlier call and are forgotten, not handed over for this one. */
    reset(&c, "echo.Echo/Say", NULL, 0, req, two_strings(req, "carol", "small 3"));
    EXPECT(weft_request(client, WEFT_SIDE_CLIENT, &c) == WEFT_OK, "request with room for its outputs");
    EXPECT(weft_call_output(client, &c) == WEFT_E_ARGUMENT,
           "an earlier call's kept outputs must not be handed over after a later call");
    weft_rpc_abandon(client, c.rpc);

    reset(&c, "/echo.Echo/SayStream", NULL, 0, req, 0);
    EXPECT(weft_request(client, WEFT_SIDE_CLIENT, &c) == WEFT_E_NO_EDGE, "no edge covers SayStream");
    reset(&c, "/echo.Echo/Say", NULL, 0, req, 0);
    c.rpc = 987654;
    EXPECT(weft_response(client, WEFT_SIDE_CLIENT, &c) == WEFT_E_ARGUMENT, "unknown rpc handle");
    EXPECT(weft_request(client, 7, &c) == WEFT_E_ARGUMENT, "bad side");
    EXPECT(weft_request(NULL, WEFT_SIDE_CLIENT, &c) == WEFT_E_ARGUMENT, "NULL runtime");

    EXPECT(weft_reload_yaml(client, "edges: [oops", ".") == WEFT_E_CONFIG, "broken YAML must not install");
    EXPECT(strlen(weft_last_error()) > 0, "the diagnostic is reported");
    EXPECT(weft_version(client) == 1, "the old version keeps running");

    /* The rate limiter (capacity 5, 1 token/s) runs out within a few more requests. */
    int exhausted = 0;
    char body[32];
    for (int i = 0; i < 10 && !exhausted; i++) {
        snprintf(body, sizeof body, "fresh-%d", i);
        o = rpc(client, server, "dave", body);
        exhausted = o.verdict == WEFT_VERDICT_REJECT && o.code == 8;
    }
    EXPECT(exhausted, "ratelimit never answered RESOURCE_EXHAUSTED");

    /* logging sent alice's request on the `log` channel, rendered as JSON. */
    static uint8_t lines[1 << 16];
    WeftBuf out = { lines, 8, 0 };
    uint64_t dropped = 99;
    rc = weft_records(client, &out, &dropped);
    EXPECT(rc == WEFT_E_BUFFER && out.len > 8, "an 8-byte buffer: rc %d, len %zu", rc, out.len);
    out.cap = sizeof lines - 1;
    rc = weft_records(client, &out, &dropped);
    EXPECT(rc == WEFT_OK && dropped == 0, "records: rc %d, dropped %llu", rc, (unsigned long long)dropped);
    /* The first record: "logging" and "log", each after its u32 LE length, then the RPC id,
       the time, and the value's length and JSON: alice's request. */
    static const uint8_t head[] = { 7, 0, 0, 0, 'l', 'o', 'g', 'g', 'i', 'n', 'g', 3, 0, 0, 0, 'l', 'o', 'g' };
    EXPECT(out.len > sizeof head + 20 && memcmp(lines, head, sizeof head) == 0, "a log record first");
    uint32_t value_len;
    memcpy(&value_len, lines + sizeof head + 16, 4);
    EXPECT(sizeof head + 20 + value_len <= out.len, "the value fits the record");
    EXPECT(memmem(lines + sizeof head + 20, value_len, "\"user\":\"alice\"", 14) != NULL, "alice's request in the log");
    EXPECT(weft_records(server, &out, NULL) == WEFT_E_ARGUMENT, "the server keeps no records");

    weft_close(client);
    weft_close(server);
    weft_close(NULL);
    if (failures) { fprintf(stderr, "%d failure(s)\n", failures); return 1; }
    printf("ok\n");
    return 0;
}
