package main

// Consumer services: several compose services run hookline-consumer, each one consumer service (its
// --print-config prints service.name resolved). Two of them must never share a consumer group (they would split
// the partitions between them, each seeing part of the stream), a service name (dedupe keys and dead letters
// would mix) or a retry topic (each would take the other's retries); each one's retry topic,
// <kafka.retry_topic>.<service.name>, is created at startup like the other topics.

import (
	"fmt"
	"sort"
	"strings"
)

// consumerService is what one compose service's config says about the consumer service it runs.
type consumerService struct {
	compose, name, group, retryTopic string
}

// consumerServiceOf reads a consumer's effective config; ok is false for another binary or an unreadable config.
func consumerServiceOf(sc *serviceConfig) (consumerService, bool) {
	if sc.binary != "hookline-consumer" || sc.data == nil {
		return consumerService{}, false
	}
	kafka, _ := sc.data["kafka"].(map[string]any)
	svc, _ := sc.data["service"].(map[string]any)
	name, _ := svc["name"].(string)
	group, _ := kafka["group_id"].(string)
	base, _ := kafka["retry_topic"].(string)
	return consumerService{compose: sc.svc.Name, name: name, group: group, retryTopic: base + "." + name}, true
}

func checkConsumerServices(r *reporter, cfgs []*serviceConfig, script string) {
	var services []consumerService
	groups := map[string][]string{} // consumer group -> who joins it
	for _, sc := range cfgs {
		if cs, ok := consumerServiceOf(sc); ok {
			services = append(services, cs)
			groups[cs.group] = append(groups[cs.group], fmt.Sprintf("%s (consumer service %s)", cs.compose, cs.name))
		}
		// The reconciler's indexer reads the inbound topic in a consumer group of its own.
		if sc.binary == "hookline-reconciler" && sc.data != nil {
			if g, _ := sc.data["index_group_id"].(string); g != "" {
				groups[g] = append(groups[g], sc.svc.Name+" (reconciler index_group_id)")
			}
		}
	}
	if len(services) == 0 {
		return
	}
	before := r.fails
	for _, s := range services {
		if s.name == "" {
			r.fail("service %s: hookline-consumer --print-config prints no service.name", s.compose)
		}
	}
	for _, g := range sortedKeys(groups) {
		if len(groups[g]) > 1 {
			r.fail("consumer group id %q is shared by %s: each consumer service needs a group of its own", g, strings.Join(groups[g], ", "))
		}
	}
	shared := func(what string, key func(consumerService) string) {
		by := map[string][]string{}
		for _, s := range services {
			by[key(s)] = append(by[key(s)], s.compose)
		}
		for _, v := range sortedKeys(by) {
			if len(by[v]) > 1 {
				r.fail("%s %q is shared by compose services %s: two consumer services must not share it", what, v, strings.Join(by[v], ", "))
			}
		}
	}
	shared("consumer service name (service.name)", func(s consumerService) string { return s.name })
	shared("retry topic (kafka.retry_topic + \".\" + service.name)", func(s consumerService) string { return s.retryTopic })
	var facts []string
	for _, s := range services {
		if !createdByScript(script, s.retryTopic) {
			r.fail("service %s: the retry topic of consumer service %s, %s, is not created (no kafka-topics --create --topic %s in any command)",
				s.compose, s.name, s.retryTopic, s.retryTopic)
		}
		facts = append(facts, fmt.Sprintf("%s = service %s, group %s, retry topic %s", s.compose, s.name, s.group, s.retryTopic))
	}
	sort.Strings(facts)
	if r.fails == before {
		r.ok("consumer services: no two share a group, a name or a retry topic, and each retry topic is created: %s", strings.Join(facts, "; "))
	}
}
