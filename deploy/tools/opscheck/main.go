// opscheck validates hookline's operations artifacts without a cluster or a
// running Prometheus. Two modes:
//
//	opscheck kubernetes [flags] RENDERED.yaml
//
// RENDERED.yaml is `kustomize build deploy/kubernetes` (schemas are checked
// separately, by kubernetes-validate). This checks what a schema cannot: that
// the pieces fit together and fit the services' configs. Every container has
// resource requests and limits and runs as non-root; each hookline container's
// --config file is in a mounted ConfigMap and its binary's --print-config
// accepts it (the effective values, defaults included, come from the binary,
// given with -bin-dir); its probes hit /readyz
// and /livez on the admin port of that config; terminationGracePeriodSeconds
// outlasts the drain (gateway: preStop + drain_grace_ms + drain_deadline_ms + produce_timeout_ms;
// consumer: handler.timeout_ms + produce_timeout_ms); every secret file a
// source reads is in the mounted Secret (and in its example manifest); every
// referenced ConfigMap exists; Services, PodDisruptionBudgets and the
// HorizontalPodAutoscaler select or target something real; the autoscaled
// Deployment leaves replicas to the autoscaler; KEDA ScaledObjects (decoded
// strictly: their CRD is in no schema kubernetes-validate has) target a
// consumer Deployment and scale it on its own group's lag of the inbound topic
// (never the retry topic), from 1 or more to at most the inbound partitions,
// with its brokers, offset policy and TLS/SASL (with -consumers-scaled, every
// consumer Deployment has one); the topic Job creates exactly
// the topics the configs name, with at least as many inbound partitions as
// consumer replicas; images are pinned; the gateway's memory limit holds
// its body budget, its connections' request heads, the producer queue and a base.
//
//	opscheck equivalent [-what text] KUSTOMIZE.yaml HELM.yaml
//
// The Helm chart's rendering has the same objects as kustomize's, field for
// field, but for each tool's bookkeeping (equivalent.go).
//
//	opscheck observability [flags]
//
// Alert rules (deploy/prometheus/alerts.yml): every alert has a severity, a
// summary, a description and a runbook_url into docs/runbook.md (whose anchor
// must exist once the runbook does), fires in at least one unit test of
// alerts.test.yml, and every expression parses with the Prometheus PromQL
// parser and names only metrics and labels the services export (as each
// binary's --print-metrics describes them, given with -metrics), plus the
// ones listed as -pending. Dashboards
// (deploy/grafana/dashboards/*.json): well-formed JSON, unique panel ids,
// non-overlapping panels, every query on the datasource variable, every
// variable defined, and every expression parsed and checked the same way.
// -emit-rules writes the dashboard expressions as a rule file, so that
// `promtool check rules` parses them too.
package main

import (
	"flag"
	"fmt"
	"os"
)

type reporter struct {
	prefix string
	fails  int
	failed []string // every failure's text, for tests
}

func (r *reporter) ok(format string, a ...any) {
	fmt.Printf("%s: ok %s\n", r.prefix, fmt.Sprintf(format, a...))
}

func (r *reporter) note(format string, a ...any) {
	fmt.Printf("%s: note %s\n", r.prefix, fmt.Sprintf(format, a...))
}

func (r *reporter) fail(format string, a ...any) {
	r.fails++
	r.failed = append(r.failed, fmt.Sprintf(format, a...))
	fmt.Printf("%s: FAIL %s\n", r.prefix, r.failed[len(r.failed)-1])
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: opscheck kubernetes -bin-dir dir [-prefix p] [-secret-example file] [-acl-doc file] [-consumers-scaled] RENDERED.yaml")
	fmt.Fprintln(os.Stderr, "       opscheck equivalent [-prefix p] [-what text] KUSTOMIZE.yaml HELM.yaml")
	fmt.Fprintln(os.Stderr, "       opscheck observability [-prefix p] -metrics dir [-root dir] [-pending list] [-emit-rules file]")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	prefix := fs.String("prefix", "opscheck", "prefix of every output line")
	r := &reporter{}
	switch os.Args[1] {
	case "kubernetes":
		secretExample := fs.String("secret-example", "", "the example manifest of the webhook Secret, which the base leaves out")
		fs.StringVar(&binDir, "bin-dir", "", "the directory of the built hookline binaries, whose --print-config gives each config's effective values")
		fs.StringVar(&aclDoc, "acl-doc", "", "docs/security.md, whose kafka-acls commands must name every topic the topic Job creates")
		consumersScaled := fs.Bool("consumers-scaled", false, "every Deployment running hookline-consumer must be scaled by a KEDA ScaledObject (an overlay with components/keda)")
		_ = fs.Parse(os.Args[2:])
		if fs.NArg() != 1 || binDir == "" {
			usage()
		}
		r.prefix = *prefix
		checkKubernetes(r, fs.Arg(0), *secretExample, *consumersScaled)
	case "equivalent":
		what := fs.String("what", "helm", "what is compared, for the output lines")
		_ = fs.Parse(os.Args[2:])
		if fs.NArg() != 2 {
			usage()
		}
		r.prefix = *prefix
		checkEquivalent(r, *what, fs.Arg(0), fs.Arg(1))
	case "observability":
		root := fs.String("root", ".", "the tree holding deploy/prometheus, deploy/grafana and docs/runbook.md")
		metricsDir := fs.String("metrics", "", "a directory of <binary>.json files, each the binary's --print-metrics output")
		pending := fs.String("pending", "", "metrics in flight in other work: name:label,label or name:* (any labels), space-separated")
		emit := fs.String("emit-rules", "", "write the dashboards' expressions to this file as recording rules")
		_ = fs.Parse(os.Args[2:])
		if fs.NArg() != 0 {
			usage()
		}
		r.prefix = *prefix
		if *metricsDir == "" {
			usage()
		}
		checkObservability(r, *root, *metricsDir, *pending, *emit)
	default:
		usage()
	}
	if r.fails > 0 {
		fmt.Printf("%s: %d check(s) failed\n", r.prefix, r.fails)
		os.Exit(1)
	}
}
