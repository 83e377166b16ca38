package main

// Record keys. Keys by role (docs/record-trust.md, "Records only hookline could write"): the internet-facing gateway
// signs with a key of its own, which every reader (consumers, replayer, reconciler) holds to verify the gateway's
// records and lists in kafka.record_auth.inbound_only_keys, so that a stolen gateway key can sign inbound records
// only (the same check runs on the compose files, deploy/tools/composecheck/record_keys.go). And a window in which readers process records without a MAC (kafka.record_auth.accept_unsigned_until)
// is for one upgrade, opened by hand and closed within days; a shipped manifest must never carry one
// (docs/security.md, N10).

import (
	"sort"
	"strings"
)

func checkRecordKeys(r *reporter, hook []*hooklineContainer) {
	var keys []recordKeys
	for _, hc := range hook {
		if hc.config != nil {
			keys = append(keys, recordKeysOf(hc.w.Kind+"/"+hc.w.Metadata.Name, hc.binary, hc.config))
		}
	}
	checkRecordKeyRoles(r, keys)
	checkUnsignedWindows(r, hook)
}

func checkUnsignedWindows(r *reporter, hook []*hooklineContainer) {
	before := r.fails
	for _, hc := range hook {
		kafka, _ := hc.config["kafka"].(map[string]any)
		ra, _ := kafka["record_auth"].(map[string]any)
		if until, ok := ra["accept_unsigned_until"].(string); ok && until != "" {
			r.fail("%s/%s: kafka.record_auth.accept_unsigned_until = %q: records without a MAC would be processed; a shipped config must not open that window",
				hc.w.Kind, hc.w.Metadata.Name, until)
		}
	}
	if r.fails == before {
		r.ok("kubernetes: no config opens an accept_unsigned_until window")
	}
}

// recordKeys is what one service's effective config says about its record keys.
type recordKeys struct {
	where, binary string
	keys          []string
	inboundOnly   map[string]bool
}

func recordKeysOf(where, binary string, config map[string]any) recordKeys {
	kafka, _ := config["kafka"].(map[string]any)
	ra, _ := kafka["record_auth"].(map[string]any)
	rk := recordKeys{where: where, binary: binary, inboundOnly: map[string]bool{}}
	// An array of tables decodes as []map[string]any, an inline array as []any.
	var keys []map[string]any
	switch k := ra["keys"].(type) {
	case []map[string]any:
		keys = k
	case []any:
		for _, v := range k {
			if m, ok := v.(map[string]any); ok {
				keys = append(keys, m)
			}
		}
	}
	for _, m := range keys {
		if id, _ := m["id"].(string); id != "" {
			rk.keys = append(rk.keys, id)
		}
	}
	switch only := ra["inbound_only_keys"].(type) {
	case []string:
		for _, id := range only {
			rk.inboundOnly[id] = true
		}
	case []any:
		for _, id := range only {
			if s, ok := id.(string); ok {
				rk.inboundOnly[s] = true
			}
		}
	}
	return rk
}

// checkRecordKeyRoles fails every reader that does not hold each gateway key as inbound-only, and every gateway
// that holds a key some reader trusts for more. Services without a gateway among them are not checked.
func checkRecordKeyRoles(r *reporter, services []recordKeys) {
	gatewayKeys := map[string][]string{} // key id -> gateways signing with it
	for _, s := range services {
		if s.binary == "hookline-gateway" {
			for _, id := range s.keys {
				gatewayKeys[id] = append(gatewayKeys[id], s.where)
			}
		}
	}
	if len(gatewayKeys) == 0 {
		return
	}
	ids := make([]string, 0, len(gatewayKeys))
	for id := range gatewayKeys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	before := r.fails
	for _, s := range services {
		if s.binary == "hookline-gateway" {
			continue
		}
		held := map[string]bool{}
		for _, id := range s.keys {
			held[id] = true
		}
		for _, id := range ids {
			switch {
			case !held[id]:
				r.fail("%s: kafka.record_auth.keys has no key %q, the gateway's (%s): it could not verify the gateway's records", s.where, id, strings.Join(gatewayKeys[id], ", "))
			case !s.inboundOnly[id]:
				r.fail("%s: the gateway's record key %q is not in kafka.record_auth.inbound_only_keys: a stolen gateway key would sign re-drives, re-processing and retry records this service honours; give the gateway a key of its own and list it there", s.where, id)
			}
		}
	}
	if r.fails == before {
		r.ok("record keys: the gateway's key%s %s inbound-only on every reader", plural(len(ids)), strings.Join(ids, ", "))
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
