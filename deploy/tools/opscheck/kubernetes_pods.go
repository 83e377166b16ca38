package main

// Checks of each hookline container against its own config: probes on the admin port, a grace period that
// outlasts the drain, source secrets mounted, the gateway's memory limit.

import (
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
)

func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

func checkProbes(r *reporter, where string, hc *hooklineContainer) {
	addr, _ := hc.config["admin_addr"].(string)
	hc.adminPort = portOf(addr)
	if hc.adminPort == 0 {
		r.fail("%s: its config has no admin_addr host:port (the default listens on 127.0.0.1 only, out of the kubelet's reach)", where)
		return
	}
	if host, _, _ := net.SplitHostPort(addr); host == "127.0.0.1" || host == "localhost" {
		r.fail("%s: admin_addr %s is loopback: the kubelet's probes and Prometheus cannot reach it", where, addr)
	}
	named := map[string]int{}
	declared := false
	for _, p := range hc.c.Ports {
		named[p.Name] = p.ContainerPort
		declared = declared || p.ContainerPort == hc.adminPort
	}
	if !declared {
		r.fail("%s: the admin port %d (admin_addr) is not a containerPort", where, hc.adminPort)
	}
	for _, pr := range []struct {
		kind, path string
		p          *probe
	}{{"readinessProbe", "/readyz", hc.c.ReadinessProbe}, {"livenessProbe", "/livez", hc.c.LivenessProbe}} {
		if pr.p == nil || pr.p.HTTPGet == nil {
			r.fail("%s: no %s httpGet", where, pr.kind)
			continue
		}
		port := 0
		switch v := pr.p.HTTPGet.Port.(type) {
		case int:
			port = v
		case string:
			port = named[v]
		}
		if port != hc.adminPort || pr.p.HTTPGet.Path != pr.path {
			r.fail("%s: %s GET %s on port %v, want %s on the admin port %d", where, pr.kind, pr.p.HTTPGet.Path, pr.p.HTTPGet.Port, pr.path, hc.adminPort)
		}
	}
}

func preStopSeconds(c *container) int {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0
	}
	ps := c.Lifecycle.PreStop
	if ps.Sleep != nil {
		return ps.Sleep.Seconds
	}
	if ps.Exec != nil && len(ps.Exec.Command) == 2 && path.Base(ps.Exec.Command[0]) == "sleep" {
		n, _ := strconv.Atoi(ps.Exec.Command[1])
		return n
	}
	return 0
}

// checkGrace: SIGTERM starts the drain; the kubelet kills after terminationGracePeriodSeconds, counted from the
// start of preStop.
func checkGrace(r *reporter, where string, hc *hooklineContainer) {
	grace := 30
	if g := hc.w.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	produceS := float64(configInt(r, where, hc.config, "kafka", "produce_timeout_ms")) / 1000
	var need float64
	var why string
	switch hc.binary {
	case "hookline-gateway":
		pre := preStopSeconds(hc.c)
		drain := float64(configInt(r, where, hc.config, "limits", "drain_deadline_ms")) / 1000
		grace := float64(configInt(r, where, hc.config, "limits", "drain_grace_ms")) / 1000
		need = float64(pre) + grace + drain + produceS
		why = fmt.Sprintf("preStop %ds + drain_grace_ms %.0fs + drain_deadline_ms %.0fs + produce_timeout_ms %.0fs", pre, grace, drain, produceS)
		if pre == 0 {
			r.note("%s: no preStop sleep: requests may still be routed to a gateway that stopped accepting", where)
		}
	case "hookline-consumer":
		handler := float64(configInt(r, where, hc.config, "handler", "timeout_ms")) / 1000
		need = handler + produceS
		why = fmt.Sprintf("handler.timeout_ms %.0fs + produce_timeout_ms %.0fs (a dead-letter produce in hand)", handler, produceS)
	default:
		return
	}
	if float64(grace) <= need {
		r.fail("%s: terminationGracePeriodSeconds %d does not outlast the drain: %s = %.0fs", where, grace, why, need)
		return
	}
	r.ok("%s: terminationGracePeriodSeconds %d > %s; probes on admin port %d", where, grace, why, hc.adminPort)
}

// checkGatewayMemory: what the gateway may hold must fit its memory limit. Request bodies (being read or in
// flight) and the heads of requests in progress (held while their body is awaited: over HTTP/2 up to
// max_concurrent_streams of them per connection) are charged together to limits.max_body_buffer_bytes, so the heads
// held count inside it: min(max_connections x max_concurrent_streams, max_requests_in_progress) x max_header_bytes,
// capped by that budget. Beyond it each open connection may be receiving one head of limits.max_header_bytes
// (an HTTP/2 header block is contiguous on its connection), each request in progress costs what is not charged
// (its task, its header map's structure, its stream's state), plus a fixed allowance for the process itself and
// the producer's queue.
func checkGatewayMemory(r *reporter, hook []*hooklineContainer) {
	const base = 128 << 20               // runtime, TLS-free hyper, rdkafka's queue.buffering.max.kbytes is separate (below)
	const perRequestUncharged = 20 << 10 // measured 16 to 20 KiB: docs/benchmarks/h2-stream-flood.md
	for _, hc := range hook {
		if hc.binary != "hookline-gateway" {
			continue
		}
		where := hc.w.Kind + "/" + hc.w.Metadata.Name
		limit, err := parseQuantity(hc.c.Resources.Limits["memory"])
		if err != nil {
			r.fail("%s: memory limit: %v", where, err)
			continue
		}
		budget := configInt(r, where, hc.config, "limits", "max_body_buffer_bytes")
		connections := configInt(r, where, hc.config, "limits", "max_connections")
		headBytes := configInt(r, where, hc.config, "limits", "max_header_bytes")
		streams := configInt(r, where, hc.config, "limits", "max_concurrent_streams")
		inProgress := configInt(r, where, hc.config, "limits", "max_requests_in_progress")
		// Heads held while bodies are awaited: one per stream, at most one per request in progress, charged to
		// the body budget (so within it).
		heldHeads := min(connections*streams, inProgress) * headBytes
		charged := budget
		receiving := connections * headBytes
		requests := inProgress * perRequestUncharged
		producerQueue := int64(256 << 20) // queue.buffering.max.kbytes = 262144 (common/src/kafka.rs)
		need := charged + receiving + requests + producerQueue + base
		if limit < need {
			r.fail("%s: memory limit %s is below max_body_buffer_bytes %d (bodies and the heads held, up to %d MiB of them: min(max_connections %d x max_concurrent_streams %d, max_requests_in_progress %d) x max_header_bytes %d) + max_connections x max_header_bytes (%d MiB) + max_requests_in_progress x %d KiB (%d MiB) + producer queue 256 MiB + 128 MiB = %d MiB", where, hc.c.Resources.Limits["memory"], budget, min(heldHeads, budget)>>20, connections, streams, inProgress, headBytes, receiving>>20, perRequestUncharged>>10, requests>>20, need>>20)
			continue
		}
		r.ok("%s: memory limit %s holds max_body_buffer_bytes %d (bodies and up to %d MiB of held heads) + %d connections' heads being received (%d MiB) + %d requests in progress (%d MiB) + producer queue + base (%d MiB)", where, hc.c.Resources.Limits["memory"], budget, min(heldHeads, budget)>>20, connections, receiving>>20, inProgress, requests>>20, need>>20)
	}
}

func parseQuantity(q string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(q, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * u.mult, err
		}
	}
	v, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cannot read quantity %q", q)
	}
	return v, nil
}
