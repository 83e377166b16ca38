package main

// The Kafka ACLs of docs/security.md against the topic Job: a deployment that grants what the document says can
// use every topic the Job creates.

import (
	"os"
	"regexp"
	"sort"
	"strings"
)

// aclDoc is docs/security.md (-acl-doc): its `kafka-acls` commands must name every topic the topic Job creates.
var aclDoc string

var (
	aclTopic    = regexp.MustCompile(`--topic[= ]+['"]?([A-Za-z0-9._-]+)['"]?`)
	aclPrefixed = regexp.MustCompile(`--resource-pattern-type[= ]+prefixed`)
)

// aclTopics reads the `kafka-acls` command lines of doc: the topics they name exactly, and the prefixes of the
// lines with `--resource-pattern-type prefixed`.
func aclTopics(doc string) (exact, prefixes map[string]bool) {
	exact, prefixes = map[string]bool{}, map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "kafka-acls ") {
			continue
		}
		into := exact
		if aclPrefixed.MatchString(line) {
			into = prefixes
		}
		for _, m := range aclTopic.FindAllStringSubmatch(line, -1) {
			into[m[1]] = true
		}
	}
	return exact, prefixes
}

// aclMissing: the topics of created that the document's commands name neither exactly nor by a prefix, sorted.
func aclMissing(doc string, created []string) []string {
	exact, prefixes := aclTopics(doc)
	var missing []string
	for _, t := range created {
		named := exact[t]
		for p := range prefixes {
			named = named || strings.HasPrefix(t, p)
		}
		if !named {
			missing = append(missing, t)
		}
	}
	sort.Strings(missing)
	return missing
}

// checkACLDoc: every topic the topic Job creates is named by the `kafka-acls` commands of aclDoc.
func checkACLDoc(r *reporter, m *manifests) {
	text, err := os.ReadFile(aclDoc)
	if err != nil {
		r.fail("kubernetes: cannot read %s: %v", aclDoc, err)
		return
	}
	job, created, _ := topicsCreated(m)
	if job == nil {
		return
	}
	topics := make([]string, 0, len(created))
	for t := range created {
		topics = append(topics, t)
	}
	if missing := aclMissing(string(text), topics); len(missing) > 0 {
		r.fail("kubernetes: %s: its kafka-acls commands grant nothing on %s, which Job/%s creates: a deployment that follows it cannot use them",
			aclDoc, strings.Join(missing, ", "), job.Metadata.Name)
		return
	}
	r.ok("kubernetes: %s: its kafka-acls commands name every topic Job/%s creates", aclDoc, job.Metadata.Name)
}
