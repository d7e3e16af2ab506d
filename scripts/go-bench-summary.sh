#!/usr/bin/env bash
# Summarises `go test -bench` output of bindings/go: the median of each benchmark's runs, and
# what the hand-written interceptors and Weft add over no interceptors. For the cold benchmarks
# the ns/op column is call-ns/op: the calls alone, without the evictions between them.
set -euo pipefail
awk '
/^Benchmark(Echo|Interceptor|ServerInterceptor|InterceptorCold|ServerInterceptorCold)\// {
    name = $1; sub(/-[0-9]+$/, "", name)
    for (i = 2; i <= NF; i++) {
        if ($(i+1) == "ns/op") ns[name, ++n[name]] = $i
        # The cold benchmarks time their calls without the cache evictions around them.
        if ($(i+1) == "call-ns/op") ns[name, n[name]] = $i
        if ($(i+1) == "B/op") bytes[name] = $i
        if ($(i+1) == "allocs/op") allocs[name] = $i
        if ($(i+1) == "cpu-ns/op") cpu[name, n[name]] = $i
    }
}
function median(name, arr,   k, j, t, c, v) {
    c = n[name]
    for (k = 1; k <= c; k++) v[k] = (arr == "cpu") ? cpu[name, k] : ns[name, k]
    for (k = 1; k <= c; k++) for (j = k + 1; j <= c; j++) if (v[j] < v[k]) { t = v[k]; v[k] = v[j]; v[j] = t }
    return (c % 2) ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
}
END {
    ng = split("Echo Interceptor InterceptorCold ServerInterceptor ServerInterceptorCold", groups, " ")
    for (g = 1; g <= ng; g++) {
        delete m; delete mc
        base = "Benchmark" groups[g] "/none"
        if (!(base in n)) continue
        b = median(base, "ns"); bc = median(base, "cpu")
        printf "%-28s %10s %10s %10s %12s %14s %14s\n", "benchmark (median)", "ns/op", "B/op", "allocs/op", "added ns/op", "cpu-ns/op", "added cpu-ns"
        nv = split("none weft-no-edge handwritten handwritten-noencode weft-client weft-server weft weft-records", vs, " ")
        for (k = 1; k <= nv; k++) {
            name = "Benchmark" groups[g] "/" vs[k]
            if (!(name in n)) continue
            m[vs[k]] = median(name, "ns"); mc[vs[k]] = median(name, "cpu")
            if (cpu[name, 1] == "") mc[vs[k]] = ""
            # Added CPU only against a `none` that reports CPU too (weft-records alone does in
            # the interceptor groups, where its CPU includes collecting the records).
            if (mc[vs[k]] != "" && cpu[base, 1] != "") printf "%-28s %10.0f %10s %10s %12.0f %14.0f %14.0f\n", name, m[vs[k]], bytes[name], allocs[name], m[vs[k]] - b, mc[vs[k]], mc[vs[k]] - bc
            else if (mc[vs[k]] != "") printf "%-28s %10.0f %10s %10s %12.0f %14.0f\n", name, m[vs[k]], bytes[name], allocs[name], m[vs[k]] - b, mc[vs[k]]
            else printf "%-28s %10.0f %10s %10s %12.0f\n", name, m[vs[k]], bytes[name], allocs[name], m[vs[k]] - b
        }
        if (!("weft" in m) || !("handwritten" in m)) { print ""; continue }
        hw = m["handwritten"] - b; wf = m["weft"] - b
        if (hw != 0) printf "%s latency: Weft adds %.2f us, hand-written %.2f us; ratio %.2f\n", groups[g], wf / 1000, hw / 1000, wf / hw
        hn = ("handwritten-noencode" in m) ? m["handwritten-noencode"] - b : 0
        if (hn != 0) printf "%s latency: against hand-written without log encoding (%.2f us): ratio %.2f\n", groups[g], hn / 1000, wf / hn
        hw = mc["handwritten"] - bc; wf = mc["weft"] - bc
        if (mc["weft"] != "" && hw != 0) printf "%s CPU: Weft adds %.2f us, hand-written %.2f us; ratio %.2f\n", groups[g], wf / 1000, hw / 1000, wf / hw
        hn = ("handwritten-noencode" in mc) ? mc["handwritten-noencode"] - bc : 0
        if (mc["weft"] != "" && hn != 0) printf "%s CPU: against hand-written without log encoding (%.2f us): ratio %.2f\n", groups[g], hn / 1000, wf / hn
        print ""
    }
}' "$1"
