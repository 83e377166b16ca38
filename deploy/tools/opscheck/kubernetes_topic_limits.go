package main

// Copies fit: a retry or dead-letter copy of a record is the record plus headers (the retry or failure headers,
// the error text up to 2 KiB), so the topic Job must create every consumer service's retry topic and the DLQ
// topic with max.message.bytes of at least the inbound topic's plus copyHeadroomBytes. A copy the broker still
// refuses is dead-lettered by reference (the body stays in the inbound topic, re-drivable only within its
// retention): a fallback, not the design.

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

const (
	// Kafka's default message.max.bytes, what a topic created without max.message.bytes takes.
	brokerDefaultMaxMessageBytes = 1048588
	// The consumer's COPY_HEADROOM_BYTES (consumer/src/service.rs), which it adds when it creates a retry topic.
	copyHeadroomBytes = 64 * 1024
)

var maxMessageBytesFlag = regexp.MustCompile(`--config[= ]+"?max\.message\.bytes="?\$?\{?([A-Za-z0-9_]+)\}?"?`)

// maxMessageBytes: the max.message.bytes a topic's creation flags set (a number, or a variable of the Job's
// container), or the broker's default (set false) when they set none. ok is false when it cannot be read.
func maxMessageBytes(flags string, c *container, m *manifests) (n int, set, ok bool) {
	mt := maxMessageBytesFlag.FindStringSubmatch(flags)
	if mt == nil {
		return brokerDefaultMaxMessageBytes, false, true
	}
	v := mt[1]
	if resolved, found := env(c, m, v); found {
		v = resolved
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	return n, true, err == nil
}

// topicsContainer: the container of the topic Job that runs kafka-topics --create.
func topicsContainer(job *workload) *container {
	for i, c := range job.Spec.Template.Spec.Containers {
		s := strings.Join(append(append([]string{}, c.Command...), c.Args...), " ")
		if strings.Contains(s, "kafka-topics") && strings.Contains(s, "--create") {
			return &job.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

// checkCopyLimits: each of the copy topics (retry topics, the DLQ topic) is created able to hold a copy of any
// record the inbound topic takes.
func checkCopyLimits(r *reporter, job *workload, m *manifests, flags map[string]string, inbound string, copies []string) {
	c := topicsContainer(job)
	if inbound == "" || len(copies) == 0 || c == nil {
		return
	}
	where := "Job/" + job.Metadata.Name
	limit, set, ok := maxMessageBytes(flags[inbound], c, m)
	if !ok {
		r.fail("%s: cannot read max.message.bytes of %s", where, inbound)
		return
	}
	source := "explicit"
	if !set {
		source = "the broker's default"
	}
	need := limit + copyHeadroomBytes
	before := r.fails
	var facts []string
	for _, t := range copies {
		f, created := flags[t]
		if !created {
			continue // reported by checkTopicJob
		}
		n, _, ok := maxMessageBytes(f, c, m)
		switch {
		case !ok:
			r.fail("%s: cannot read max.message.bytes of %s", where, t)
		case n < need:
			r.fail("%s: creates %s with max.message.bytes %d, less than the inbound topic %s's %d (%s) + %d of headroom for the copy's headers: the broker would refuse a retry or dead-letter copy of its largest records (add --config max.message.bytes=%d)",
				where, t, n, inbound, limit, source, copyHeadroomBytes, need)
		}
		facts = append(facts, fmt.Sprintf("%s %d", t, n))
	}
	sort.Strings(facts)
	if r.fails == before {
		r.ok("%s: retry and dead-letter topics hold a copy of any inbound record: %s max.message.bytes %d (%s) + %d <= %s",
			where, inbound, limit, source, copyHeadroomBytes, strings.Join(facts, ", "))
	}
}
