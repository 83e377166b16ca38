package main

// KEDA ScaledObjects (deploy/kubernetes/components/keda). KEDA's CRDs are not in the Kubernetes JSON schemas
// kubernetes-validate knows, so the fields used here are checked here: each object is decoded strictly (a field
// this file does not know is a failure, not ignored), and a kafka trigger must scale its consumer service on what
// that service reads. The target is a Deployment running hookline-consumer that leaves replicas to the
// autoscaler; the trigger's consumerGroup and topic are the consumer's kafka.group_id and kafka.inbound_topic (as
// its binary's --print-config reads its ConfigMap), never its retry topic; its brokers are the consumer's; its
// offsetResetPolicy is the service's starts_at; minReplicaCount is at least 1 and maxReplicaCount at most the
// inbound topic's partitions (as the topic Job creates them); a consumer that talks TLS or SASL to Kafka has a
// trigger that does too, through a TriggerAuthentication whose Secret keys exist.

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
)

type hpaScalingRules struct {
	StabilizationWindowSeconds *int   `yaml:"stabilizationWindowSeconds"`
	SelectPolicy               string `yaml:"selectPolicy"`
	Tolerance                  string `yaml:"tolerance"`
	Policies                   []struct {
		Type          string `yaml:"type"`
		Value         int    `yaml:"value"`
		PeriodSeconds int    `yaml:"periodSeconds"`
	} `yaml:"policies"`
}

type kedaTrigger struct {
	Type              string         `yaml:"type"`
	Name              string         `yaml:"name"`
	MetricType        string         `yaml:"metricType"`
	UseCachedMetrics  *bool          `yaml:"useCachedMetrics"`
	Metadata          map[string]any `yaml:"metadata"`
	AuthenticationRef *struct {
		Name string `yaml:"name"`
		Kind string `yaml:"kind"`
	} `yaml:"authenticationRef"`
}

// kedaMetadata is the metadata of KEDA's objects, decoded strictly like the rest of them.
type kedaMetadata struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type scaledObject struct {
	APIVersion string       `yaml:"apiVersion"`
	Kind       string       `yaml:"kind"`
	Metadata   kedaMetadata `yaml:"metadata"`
	Spec       struct {
		ScaleTargetRef struct {
			APIVersion             string `yaml:"apiVersion"`
			Kind                   string `yaml:"kind"`
			Name                   string `yaml:"name"`
			EnvSourceContainerName string `yaml:"envSourceContainerName"`
		} `yaml:"scaleTargetRef"`
		PollingInterval       *int `yaml:"pollingInterval"`
		CooldownPeriod        *int `yaml:"cooldownPeriod"`
		InitialCooldownPeriod *int `yaml:"initialCooldownPeriod"`
		IdleReplicaCount      *int `yaml:"idleReplicaCount"`
		MinReplicaCount       *int `yaml:"minReplicaCount"`
		MaxReplicaCount       *int `yaml:"maxReplicaCount"`
		Advanced              *struct {
			RestoreToOriginalReplicaCount *bool `yaml:"restoreToOriginalReplicaCount"`
			HorizontalPodAutoscalerConfig *struct {
				Name     string `yaml:"name"`
				Behavior *struct {
					ScaleUp   *hpaScalingRules `yaml:"scaleUp"`
					ScaleDown *hpaScalingRules `yaml:"scaleDown"`
				} `yaml:"behavior"`
			} `yaml:"horizontalPodAutoscalerConfig"`
		} `yaml:"advanced"`
		Fallback *struct {
			FailureThreshold int `yaml:"failureThreshold"`
			Replicas         int `yaml:"replicas"`
		} `yaml:"fallback"`
		Triggers []kedaTrigger `yaml:"triggers"`
	} `yaml:"spec"`
}

type triggerAuthentication struct {
	APIVersion string       `yaml:"apiVersion"`
	Kind       string       `yaml:"kind"`
	Metadata   kedaMetadata `yaml:"metadata"`
	Spec       struct {
		SecretTargetRef []struct {
			Parameter string `yaml:"parameter"`
			Name      string `yaml:"name"`
			Key       string `yaml:"key"`
		} `yaml:"secretTargetRef"`
	} `yaml:"spec"`
}

// kedaObjects holds KEDA's objects of the manifests, each decoded strictly; a decoding error is kept to report.
type kedaObjects struct {
	scaled   []*scaledObject
	auths    map[string]*triggerAuthentication
	problems []string
}

// decodeStrict decodes node into v, failing on any field v does not declare.
func decodeStrict(node *yaml.Node, v any) error {
	raw, err := yaml.Marshal(node)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	return dec.Decode(v)
}

func (k *kedaObjects) add(kind, name string, node *yaml.Node) {
	var err error
	switch kind {
	case "ScaledObject":
		so := &scaledObject{}
		if err = decodeStrict(node, so); err == nil {
			k.scaled = append(k.scaled, so)
		}
	case "TriggerAuthentication":
		ta := &triggerAuthentication{}
		if err = decodeStrict(node, ta); err == nil {
			k.auths[name] = ta
		}
	}
	if err != nil {
		k.problems = append(k.problems, fmt.Sprintf("%s/%s: %s", kind, name, strings.Join(strings.Fields(err.Error()), " ")))
	}
}

// kafkaTriggerKeys: the kafka scaler's metadata keys (KEDA 2.x, pkg/scalers/kafka_scaler.go); any other key is
// a typo KEDA would ignore. bootstrapServers, consumerGroup and topic may each be given as <key>FromEnv instead,
// the name of a variable of the target's container.
var kafkaTriggerKeys = map[string]bool{
	"bootstrapServers": true, "bootstrapServersFromEnv": true, "consumerGroup": true, "consumerGroupFromEnv": true,
	"topic": true, "topicFromEnv": true, "lagThreshold": true, "activationLagThreshold": true,
	"offsetResetPolicy": true, "allowIdleConsumers": true, "scaleToZeroOnInvalidOffset": true,
	"excludePersistentLag": true, "limitToPartitionsWithLag": true, "ensureEvenDistributionOfPartitions": true,
	"version": true, "partitionLimitation": true, "sasl": true, "saslTokenProvider": true, "awsRegion": true,
	"tls": true, "unsafeSsl": true,
}

// kedaSASL maps the consumer's kafka.sasl.mechanism to the value of KEDA's sasl parameter.
var kedaSASL = map[string]string{"PLAIN": "plaintext", "SCRAM-SHA-256": "scram_sha256", "SCRAM-SHA-512": "scram_sha512",
	"OAUTHBEARER": "oauthbearer", "GSSAPI": "gssapi"}

var kafkaTriggerBools = []string{"allowIdleConsumers", "scaleToZeroOnInvalidOffset", "excludePersistentLag",
	"limitToPartitionsWithLag", "ensureEvenDistributionOfPartitions", "unsafeSsl"}

// scaledRange is what a ScaledObject lets its Deployment's replica count be.
type scaledRange struct{ min, max int }

// checkKEDA checks the ScaledObjects and returns, per scaled Deployment, its replica range. With
// requireConsumersScaled, every Deployment that runs hookline-consumer must be the target of a ScaledObject.
func checkKEDA(r *reporter, m *manifests, hook []*hooklineContainer, requireConsumersScaled bool) map[string]scaledRange {
	out := map[string]scaledRange{}
	for _, p := range m.keda.problems {
		r.fail("%s (a field this check does not know: not KEDA's, or not one hookline uses; or a wrong type)", p)
	}
	_, created, _ := topicsCreated(m)
	scaledBy := map[string][]string{} // Deployment -> the ScaledObjects that target it
	for _, so := range m.keda.scaled {
		where := "ScaledObject/" + so.Metadata.Name
		before := r.fails
		if so.APIVersion != "keda.sh/v1alpha1" {
			r.fail("%s: apiVersion %q, want keda.sh/v1alpha1", where, so.APIVersion)
		}
		ref := so.Spec.ScaleTargetRef
		kind := ref.Kind
		if kind == "" {
			kind = "Deployment"
		}
		if kind != "Deployment" || (ref.APIVersion != "" && ref.APIVersion != "apps/v1") {
			r.fail("%s: scaleTargetRef is %s %s, want a Deployment (apps/v1)", where, ref.APIVersion, kind)
			continue
		}
		var target *workload
		for _, w := range m.workloads {
			if w.Kind == "Deployment" && w.Metadata.Name == ref.Name {
				target = w
			}
		}
		if target == nil {
			r.fail("%s: targets Deployment/%s, which is not in the manifests", where, ref.Name)
			continue
		}
		scaledBy[target.Metadata.Name] = append(scaledBy[target.Metadata.Name], where)
		var hc *hooklineContainer
		for _, h := range hook {
			if h.w == target && h.binary == "hookline-consumer" && (ref.EnvSourceContainerName == "" || h.c.Name == ref.EnvSourceContainerName) {
				hc = h
				break
			}
		}
		if hc == nil {
			r.fail("%s: Deployment/%s runs no hookline-consumer container %q whose config was read: its lag cannot be checked", where, ref.Name, ref.EnvSourceContainerName)
			continue
		}
		cs, _ := consumerServiceOf(hc)
		kafka, _ := hc.config["kafka"].(map[string]any)
		inbound, _ := kafka["inbound_topic"].(string)
		if target.Spec.Replicas != nil {
			r.fail("%s: Deployment/%s sets replicas, which every apply would reset under the autoscaler KEDA creates (remove it in the component)", where, ref.Name)
		}
		minR, maxR := 0, 100 // KEDA's defaults
		if so.Spec.MinReplicaCount != nil {
			minR = *so.Spec.MinReplicaCount
		}
		if so.Spec.MaxReplicaCount == nil {
			r.fail("%s: no maxReplicaCount (KEDA's default is 100): cap it at the partitions of %s", where, inbound)
		} else {
			maxR = *so.Spec.MaxReplicaCount
		}
		if minR < 1 {
			r.fail("%s: minReplicaCount %d: a consumer service scaled to zero reports no lag (the alerts and dashboard go blind) and its next event waits for a pod; set it to 1 or more", where, minR)
		}
		if minR > maxR {
			r.fail("%s: minReplicaCount %d > maxReplicaCount %d", where, minR, maxR)
		}
		if parts, ok := created[inbound]; !ok || parts == 0 {
			r.fail("%s: cannot read the partition count of %s from the topic Job, to cap maxReplicaCount at", where, inbound)
		} else if maxR > parts {
			r.fail("%s: maxReplicaCount %d is above the %d partitions of %s: a replica past them gets no partition and idles, not ready", where, maxR, parts, inbound)
		}
		if len(so.Spec.Triggers) == 0 {
			r.fail("%s: no triggers", where)
		}
		for i, t := range so.Spec.Triggers {
			checkKafkaTrigger(r, fmt.Sprintf("%s trigger %d", where, i), t, hc, cs, m)
		}
		out[target.Metadata.Name] = scaledRange{min: minR, max: maxR}
		if r.fails == before {
			r.ok("%s: scales Deployment/%s (%d..%d replicas, at most the %d partitions of %s) on group %s's lag of %s, and the Deployment leaves replicas to it",
				where, ref.Name, minR, maxR, created[inbound], inbound, cs.group, inbound)
		}
	}
	for _, d := range sortedKeys(scaledBy) {
		if len(scaledBy[d]) > 1 {
			r.fail("kubernetes: Deployment/%s is the target of %s: one ScaledObject per Deployment", d, strings.Join(scaledBy[d], ", "))
		}
	}
	if requireConsumersScaled {
		var missing []string
		for _, hc := range hook {
			if hc.binary == "hookline-consumer" && hc.w.Kind == "Deployment" && len(scaledBy[hc.w.Metadata.Name]) == 0 {
				missing = append(missing, "Deployment/"+hc.w.Metadata.Name)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			r.fail("kubernetes: no ScaledObject scales %s (every consumer service is scaled on lag here)", strings.Join(missing, ", "))
		} else {
			r.ok("kubernetes: every consumer Deployment is scaled by a ScaledObject")
		}
	}
	return out
}

func checkKafkaTrigger(r *reporter, where string, t kedaTrigger, hc *hooklineContainer, cs consumerService, m *manifests) {
	if t.Type != "kafka" {
		r.fail("%s: type %q: only kafka triggers (the consumer group's lag) are checked, and a consumer service scales on nothing else here", where, t.Type)
		return
	}
	md := map[string]string{}
	for _, k := range sortedKeys(t.Metadata) {
		s, ok := t.Metadata[k].(string)
		if !ok {
			r.fail("%s: metadata.%s is %v, not a string (KEDA's metadata is a map of strings: quote it)", where, k, t.Metadata[k])
			continue
		}
		if !kafkaTriggerKeys[k] {
			r.fail("%s: metadata.%s is not a parameter of KEDA's kafka scaler (a typo would be ignored by KEDA)", where, k)
		}
		md[k] = s
	}
	kafka, _ := hc.config["kafka"].(map[string]any)
	inbound, _ := kafka["inbound_topic"].(string)
	// <key>FromEnv takes the value of a variable of the container (as KEDA resolves it), and wins over <key>.
	for _, k := range []string{"bootstrapServers", "consumerGroup", "topic"} {
		name, ok := md[k+"FromEnv"]
		if !ok {
			continue
		}
		if _, both := md[k]; both {
			r.fail("%s: both %s and %sFromEnv", where, k, k)
		}
		v, resolved := env(hc.c, m, name)
		if !resolved {
			r.fail("%s: %sFromEnv %s: container %s of %s sets no such variable (from a literal or a ConfigMap)", where, k, name, hc.c.Name, cs.where)
			return
		}
		md[k] = v
	}
	switch {
	case md["consumerGroup"] == "":
		r.fail("%s: no consumerGroup (without one KEDA's lag is not the service's)", where)
	case md["consumerGroup"] != cs.group:
		r.fail("%s: consumerGroup %q is not the group of the consumer service it scales, %q (kafka.group_id of %s)", where, md["consumerGroup"], cs.group, cs.where)
	}
	switch topic := md["topic"]; {
	case topic == "":
		r.fail("%s: no topic: KEDA would sum the group's lag over every topic it reads, the retry topic included", where)
	case topic == cs.retryTopic:
		r.fail("%s: topic %q is the service's retry topic: its lag counts parked records not yet due, which no replica can work on; scale on the inbound topic %q", where, topic, inbound)
	case topic != inbound:
		r.fail("%s: topic %q is not the inbound topic %q of %s", where, topic, inbound, cs.where)
	}
	if n, err := strconv.Atoi(md["lagThreshold"]); err != nil || n < 1 {
		r.fail("%s: lagThreshold %q: want a positive integer, chosen (KEDA's default, 10, would add a replica per 10 records behind)", where, md["lagThreshold"])
	}
	if v, ok := md["activationLagThreshold"]; ok {
		if n, err := strconv.Atoi(v); err != nil || n < 0 {
			r.fail("%s: activationLagThreshold %q is not a non-negative integer", where, v)
		}
	}
	for _, k := range kafkaTriggerBools {
		if v, ok := md[k]; ok && v != "true" && v != "false" {
			r.fail("%s: %s %q is not \"true\" or \"false\"", where, k, v)
		}
	}
	if md["allowIdleConsumers"] == "true" {
		r.fail("%s: allowIdleConsumers \"true\" lets KEDA scale past the partition count, to replicas that get no partition", where)
	}
	svc, _ := hc.config["service"].(map[string]any)
	startsAt, _ := svc["starts_at"].(string)
	policy := md["offsetResetPolicy"]
	if policy == "" {
		policy = "latest" // KEDA's default
	}
	if startsAt != "" && policy != startsAt {
		r.fail("%s: offsetResetPolicy %s, but the service starts at %s (service.starts_at): KEDA would count a partition the group never committed on differently from how the service reads it", where, policy, startsAt)
	}
	// The brokers: the consumer's own, kafka.brokers unless HOOKLINE_KAFKA_BROKERS overrides it.
	brokers, _ := kafka["brokers"].(string)
	if v, ok := env(hc.c, m, "HOOKLINE_KAFKA_BROKERS"); ok {
		brokers = v
	}
	if got := md["bootstrapServers"]; got == "" {
		r.fail("%s: no bootstrapServers or bootstrapServersFromEnv", where)
	} else if got != brokers {
		r.fail("%s: the brokers are %q, but the consumer reads from %q", where, got, brokers)
	}
	if v := md["offsetResetPolicy"]; v != "" && v != "earliest" && v != "latest" {
		r.fail("%s: offsetResetPolicy %q is not earliest or latest", where, v)
	}
	if v := md["tls"]; v != "" && v != "enable" && v != "disable" {
		r.fail("%s: tls %q is not enable or disable", where, v)
	}
	if md["allowIdleConsumers"] == "true" && md["limitToPartitionsWithLag"] == "true" {
		r.fail("%s: allowIdleConsumers and limitToPartitionsWithLag cannot both be true (KEDA refuses it)", where)
	}
	checkTriggerAuth(r, where, t, md, kafka, m)
}

// checkTriggerAuth: a consumer with [kafka.tls] or [kafka.sasl] talks to brokers that want them; KEDA's trigger
// must too, through a TriggerAuthentication (tls, sasl, username, password, ca, cert, key parameters) whose Secret
// keys exist in the manifests or the example Secrets.
func checkTriggerAuth(r *reporter, where string, t kedaTrigger, md map[string]string, kafka map[string]any, m *manifests) {
	_, wantTLS := kafka["tls"].(map[string]any)
	_, wantSASL := kafka["sasl"].(map[string]any)
	params := map[string]bool{}
	if t.AuthenticationRef != nil {
		kind := t.AuthenticationRef.Kind
		ta := m.keda.auths[t.AuthenticationRef.Name]
		switch {
		case kind != "" && kind != "TriggerAuthentication":
			r.note("%s: authenticationRef is a %s, which is cluster-wide and not in these manifests: its parameters are not checked", where, kind)
			return
		case ta == nil:
			r.fail("%s: authenticationRef names TriggerAuthentication/%s, which is not in the manifests", where, t.AuthenticationRef.Name)
			return
		}
		for _, s := range ta.Spec.SecretTargetRef {
			params[s.Parameter] = true
			secret := m.secrets[s.Name]
			if secret == nil {
				secret = m.exampleSecrets[s.Name]
			}
			if secret == nil {
				r.fail("%s: TriggerAuthentication/%s parameter %s reads Secret %s, which is neither in the manifests nor in the example Secrets", where, ta.Metadata.Name, s.Parameter, s.Name)
				continue
			}
			if _, ok := secret.Data[s.Key]; !ok {
				if _, ok := secret.StringData[s.Key]; !ok {
					r.fail("%s: TriggerAuthentication/%s parameter %s reads key %s, which Secret %s does not have", where, ta.Metadata.Name, s.Parameter, s.Key, s.Name)
				}
			}
		}
	}
	has := func(p string) bool { return params[p] || md[p] != "" }
	if wantTLS && !has("tls") {
		r.fail("%s: the consumer talks TLS to Kafka ([kafka.tls]), the trigger does not: set tls (enable) in an authenticationRef's TriggerAuthentication", where)
	}
	if wantSASL {
		for _, p := range []string{"sasl", "username", "password"} {
			if !has(p) {
				r.fail("%s: the consumer authenticates with SASL ([kafka.sasl]), the trigger has no %s: give it through an authenticationRef's TriggerAuthentication, from the Secret the consumer mounts", where, p)
			}
		}
		sasl, _ := kafka["sasl"].(map[string]any)
		mechanism, _ := sasl["mechanism"].(string)
		if want, known := kedaSASL[strings.ToUpper(mechanism)]; known && md["sasl"] != "" && md["sasl"] != want {
			r.fail("%s: sasl %q, but the consumer's mechanism is %s (KEDA's %q)", where, md["sasl"], mechanism, want)
		}
	} else if v := md["sasl"]; v != "" && v != "none" {
		r.fail("%s: sasl %s, but the consumer does not use SASL (no [kafka.sasl])", where, v)
	}
	if !wantTLS && md["tls"] == "enable" {
		r.fail("%s: tls enable, but the consumer talks PLAINTEXT to Kafka (no [kafka.tls])", where)
	}
}
