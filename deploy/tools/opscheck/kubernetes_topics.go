package main

// The topic Job: it creates every topic the configs name, and no other.

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var (
	createdTopic = regexp.MustCompile(`--topic[= ]+['"]?([A-Za-z0-9._-]+)['"]?((?:\s+--[a-z-]+(?:[= ]+(?:"[^"]*"|\S+))?)*)`)
	partitionsOf = regexp.MustCompile(`--partitions[= ]+"?\$?\{?([A-Za-z0-9_]+)\}?"?`)
)

// checkTopicJob: the Job creates every topic the configs name (and no other), each consumer service's retry topic
// among them, with enough inbound partitions for the replicas of each consumer service.
func checkTopicJob(r *reporter, m *manifests, hook []*hooklineContainer, kedaScaled map[string]scaledRange) {
	want := map[string][]string{} // topic -> who names it
	inbound, dlq := "", ""
	copies := map[string]bool{} // the retry topics and the DLQ topic: each holds copies of inbound records
	replicas := map[string]int{} // consumer group -> the replicas of the Deployments that join it
	for _, hc := range hook {
		kafka, _ := hc.config["kafka"].(map[string]any)
		for k, v := range kafka {
			// kafka.retry_topic is the base name of the consumer services' retry topics, not a topic.
			if t, ok := v.(string); ok && strings.HasSuffix(k, "_topic") && k != "retry_topic" {
				want[t] = append(want[t], hc.w.Metadata.Name+" kafka."+k)
				if k == "inbound_topic" {
					inbound = t
				}
				if k == "dlq_topic" {
					dlq = t
				}
			}
		}
		// The replayer's tokens and audit topics (identity.tokens_topic, identity.audit_topic).
		identity, _ := hc.config["identity"].(map[string]any)
		for k, v := range identity {
			if t, ok := v.(string); ok && strings.HasSuffix(k, "_topic") {
				want[t] = append(want[t], hc.w.Metadata.Name+" identity."+k)
			}
		}
		for _, s := range tables(hc.config["sources"]) {
			if t, ok := s["topic"].(string); ok {
				want[t] = append(want[t], fmt.Sprintf("%s source %v", hc.w.Metadata.Name, s["name"]))
			}
		}
		if cs, ok := consumerServiceOf(hc); ok {
			want[cs.retryTopic] = append(want[cs.retryTopic], fmt.Sprintf("%s: the retry topic of consumer service %s", hc.w.Metadata.Name, cs.name))
			copies[cs.retryTopic] = true
			if sr, ok := kedaScaled[hc.w.Metadata.Name]; ok {
				replicas[cs.group] += sr.max // the most KEDA may run
			} else if hc.w.Spec.Replicas != nil {
				replicas[cs.group] += *hc.w.Spec.Replicas
			}
		}
	}
	consumers, busiest := 0, ""
	for _, g := range sortedKeys(replicas) {
		if replicas[g] > consumers {
			consumers, busiest = replicas[g], g
		}
	}
	job, created, flags := topicsCreated(m)
	if job == nil {
		r.fail("kubernetes: no Job creates the topics (kafka-topics.sh --create)")
		return
	}
	where := "Job/" + job.Metadata.Name
	before := r.fails
	if dlq != "" {
		if _, ok := created[dlq]; ok && !unlimitedRetention(flags[dlq]) {
			r.fail("%s: creates %s without retention.ms=-1: a dead letter nobody triaged would expire unseen", where, dlq)
		}
	}
	if dlq != "" {
		copies[dlq] = true
	}
	checkCopyLimits(r, job, m, flags, inbound, sortedKeys(copies))
	for t, who := range want {
		if _, ok := created[t]; !ok {
			r.fail("%s: does not create topic %s (named by %s)", where, t, strings.Join(who, ", "))
		}
	}
	for t := range created {
		if _, ok := want[t]; !ok {
			r.fail("%s: creates topic %s, which no config names", where, t)
		}
	}
	if inbound != "" {
		if n := created[inbound]; n == 0 {
			r.fail("%s: cannot read the partition count of %s", where, inbound)
		} else if consumers > n {
			r.fail("%s: %s gets %d partitions, fewer than the %d consumer replicas of group %s (the extra ones would idle, not ready)", where, inbound, n, consumers, busiest)
		}
	}
	if r.fails == before {
		var ts []string
		for t, n := range created {
			ts = append(ts, fmt.Sprintf("%s(%d partitions)", t, n))
		}
		sort.Strings(ts)
		r.ok("%s: creates exactly the topics the configs name: %s; at most %d consumer replicas in a group <= %d inbound partitions",
			where, strings.Join(ts, ", "), consumers, created[inbound])
	}
}

var retentionOf = regexp.MustCompile(`--config[= ]+"?retention\.ms=(-?[0-9]+)"?`)

// unlimitedRetention: the flags of a topic's creation set retention.ms=-1 (a DLQ entry never expires).
func unlimitedRetention(flags string) bool {
	m := retentionOf.FindStringSubmatch(flags)
	return m != nil && m[1] == "-1"
}

// topicsCreated finds the Job that creates the topics (kafka-topics.sh --create) and reads, per topic, the
// partitions it is created with (0 when they cannot be read) and the flags of its creation. job is nil without one.
func topicsCreated(m *manifests) (job *workload, created map[string]int, flags map[string]string) {
	var script string
	var jc *container
	for _, w := range m.workloads {
		if w.Kind != "Job" {
			continue
		}
		for i, c := range w.Spec.Template.Spec.Containers {
			s := strings.Join(append(append([]string{}, c.Command...), c.Args...), " ")
			if strings.Contains(s, "kafka-topics") && strings.Contains(s, "--create") {
				job, script, jc = w, s, &w.Spec.Template.Spec.Containers[i]
			}
		}
	}
	created, flags = map[string]int{}, map[string]string{}
	if job == nil {
		return nil, created, flags
	}
	for _, line := range strings.Split(script, "\n") {
		if !strings.Contains(line, "--topic") || strings.Contains(line, "--describe") {
			continue
		}
		for _, mt := range createdTopic.FindAllStringSubmatch(line, -1) {
			parts := 0
			if pm := partitionsOf.FindStringSubmatch(mt[2]); pm != nil {
				if n, err := strconv.Atoi(pm[1]); err == nil {
					parts = n
				} else if v, ok := env(jc, m, pm[1]); ok {
					parts, _ = strconv.Atoi(v)
				}
			}
			created[mt[1]] = parts
			flags[mt[1]] = mt[2]
		}
	}
	return job, created, flags
}
