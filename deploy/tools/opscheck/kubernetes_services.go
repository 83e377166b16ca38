package main

// Consumer services: several Deployments run hookline-consumer, each one consumer service (its --print-config
// prints service.name resolved). Two of them must never share a consumer group (they would split the partitions
// between them, each seeing part of the stream), a service name (dedupe keys and dead letters would mix) or a
// retry topic (each would take the other's retries). That the topic Job creates each retry topic is checked with
// the other topics (checkTopicJob).

import (
	"fmt"
	"sort"
	"strings"
)

// consumerService is what one container's config says about the consumer service it runs.
type consumerService struct {
	where, name, group, retryTopic string
}

// consumerServiceOf reads a consumer's effective config; ok is false for another binary.
func consumerServiceOf(hc *hooklineContainer) (consumerService, bool) {
	if hc.binary != "hookline-consumer" || hc.config == nil {
		return consumerService{}, false
	}
	kafka, _ := hc.config["kafka"].(map[string]any)
	svc, _ := hc.config["service"].(map[string]any)
	name, _ := svc["name"].(string)
	group, _ := kafka["group_id"].(string)
	base, _ := kafka["retry_topic"].(string)
	return consumerService{where: hc.w.Kind + "/" + hc.w.Metadata.Name, name: name, group: group, retryTopic: base + "." + name}, true
}

func checkConsumerServices(r *reporter, hook []*hooklineContainer) {
	var services []consumerService
	groups := map[string][]string{} // consumer group -> who joins it
	for _, hc := range hook {
		if cs, ok := consumerServiceOf(hc); ok {
			services = append(services, cs)
			groups[cs.group] = append(groups[cs.group], fmt.Sprintf("%s (consumer service %s)", cs.where, cs.name))
		}
		// The reconciler's indexer reads the inbound topic in a consumer group of its own.
		if hc.binary == "hookline-reconciler" {
			if g, _ := hc.config["index_group_id"].(string); g != "" {
				groups[g] = append(groups[g], hc.w.Kind+"/"+hc.w.Metadata.Name+" (reconciler index_group_id)")
			}
		}
	}
	if len(services) == 0 {
		return
	}
	before := r.fails
	for _, s := range services {
		if s.name == "" {
			r.fail("%s: hookline-consumer --print-config prints no service.name", s.where)
		}
	}
	for _, g := range sortedKeys(groups) {
		if len(groups[g]) > 1 {
			r.fail("kubernetes: consumer group id %q is shared by %s: each consumer service needs a group of its own", g, strings.Join(groups[g], ", "))
		}
	}
	shared := func(what string, key func(consumerService) string) {
		by := map[string][]string{}
		for _, s := range services {
			by[key(s)] = append(by[key(s)], s.where)
		}
		for _, v := range sortedKeys(by) {
			if len(by[v]) > 1 {
				r.fail("kubernetes: %s %q is shared by %s: two consumer services must not share it", what, v, strings.Join(by[v], ", "))
			}
		}
	}
	shared("consumer service name (service.name)", func(s consumerService) string { return s.name })
	shared("retry topic (kafka.retry_topic + \".\" + service.name)", func(s consumerService) string { return s.retryTopic })
	if r.fails == before {
		var facts []string
		for _, s := range services {
			facts = append(facts, fmt.Sprintf("%s = service %s, group %s, retry topic %s", s.where, s.name, s.group, s.retryTopic))
		}
		sort.Strings(facts)
		r.ok("kubernetes: consumer services share no group, name or retry topic: %s", strings.Join(facts, "; "))
	}
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
