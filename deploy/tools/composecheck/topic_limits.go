package main

// Copies fit: a retry or dead-letter copy of a record is the record plus headers (the retry or failure headers,
// the error text up to 2 KiB), so every consumer service's retry topic and the DLQ topic must take
// max.message.bytes of at least the inbound topic's plus copyHeadroomBytes. A copy the broker still refuses is
// dead-lettered by reference (the body stays in the inbound topic, re-drivable only within its retention): a
// fallback, not the design.

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

var maxMessageBytesFlag = regexp.MustCompile(`--config[= ]+['"]?max\.message\.bytes=([0-9]+)['"]?(\s|$)`)

// createdMaxMessageBytes: the max.message.bytes the line creating topic t sets, or the broker's default (set
// false) when it sets none.
func createdMaxMessageBytes(script, t string) (n int, set bool) {
	create := regexp.MustCompile(`--topic[= ]+['"]?` + regexp.QuoteMeta(t) + `['"]?(\s|$)`)
	for _, line := range strings.Split(script, "\n") {
		if !create.MatchString(line) || strings.Contains(line, "--describe") {
			continue
		}
		if m := maxMessageBytesFlag.FindStringSubmatch(line); m != nil {
			if v, err := strconv.Atoi(m[1]); err == nil {
				return v, true
			}
		}
	}
	return brokerDefaultMaxMessageBytes, false
}

// checkCopyLimits: each of the copy topics (retry topics, the DLQ topic) is created able to hold a copy of any
// record the inbound topic takes.
func checkCopyLimits(r *reporter, script, inbound string, copies []string) {
	if inbound == "" || len(copies) == 0 {
		return
	}
	limit, set := createdMaxMessageBytes(script, inbound)
	source := "explicit"
	if !set {
		source = "the broker's default"
	}
	need := limit + copyHeadroomBytes
	before := r.fails
	var facts []string
	for _, t := range copies {
		n, _ := createdMaxMessageBytes(script, t)
		if n < need {
			r.fail("topic %s is created with max.message.bytes %d, less than the inbound topic %s's %d (%s) + %d of headroom for the copy's headers: the broker would refuse a retry or dead-letter copy of its largest records (add --config max.message.bytes=%d)",
				t, n, inbound, limit, source, copyHeadroomBytes, need)
		}
		facts = append(facts, fmt.Sprintf("%s %d", t, n))
	}
	sort.Strings(facts)
	if r.fails == before {
		r.ok("retry and dead-letter topics hold a copy of any inbound record: %s max.message.bytes %d (%s) + %d <= %s",
			inbound, limit, source, copyHeadroomBytes, strings.Join(facts, ", "))
	}
}
