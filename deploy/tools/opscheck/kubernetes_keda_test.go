package main

// The KEDA checks on what the repository's own manifests never show: a consumer on TLS or SASL brokers, whose
// trigger must carry credentials from Secret keys that exist, and triggers that take their group or topic from
// the container's environment. scripts/check-deploy --self-test runs these (go test) besides its broken copies.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const kedaTestManifests = `
apiVersion: v1
kind: ConfigMap
metadata: {name: endpoints}
data: {HOOKLINE_KAFKA_BROKERS: "kafka-0:9093,kafka-1:9093", GROUP: billing}
---
apiVersion: v1
kind: Secret
metadata: {name: kafka-credentials}
stringData: {sasl: scram_sha512, username: billing, password: x, tls: enable, ca: pem}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: billing}
spec:
  template:
    spec:
      containers:
        - name: consumer
          envFrom: [{configMapRef: {name: endpoints}}]
---
apiVersion: batch/v1
kind: Job
metadata: {name: topics}
spec:
  template:
    spec:
      containers:
        - name: t
          command: [sh, -c, "kafka-topics.sh --create --topic webhooks.inbound --partitions 6"]
---
apiVersion: keda.sh/v1alpha1
kind: TriggerAuthentication
metadata: {name: kafka}
spec:
  secretTargetRef:
    - {parameter: sasl, name: kafka-credentials, key: sasl}
    - {parameter: username, name: kafka-credentials, key: username}
    - {parameter: password, name: kafka-credentials, key: PASSWORD_KEY}
    - {parameter: tls, name: kafka-credentials, key: tls}
    - {parameter: ca, name: kafka-credentials, key: ca}
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: billing}
spec:
  scaleTargetRef: {name: billing}
  minReplicaCount: 1
  maxReplicaCount: 6
  triggers:
    - type: kafka
      metadata:
        bootstrapServersFromEnv: HOOKLINE_KAFKA_BROKERS
        GROUP_KEY
        topic: webhooks.inbound
        lagThreshold: "100"
        offsetResetPolicy: earliest
        SASL_LINE
      AUTH_REF
`

// runKEDA renders the manifests with the replacements, gives Deployment/billing a consumer with the kafka
// config, and returns checkKEDA's failures.
func runKEDA(t *testing.T, kafka map[string]any, replace ...string) []string {
	t.Helper()
	text := strings.NewReplacer(append(replace,
		"PASSWORD_KEY", "password", "GROUP_KEY", "consumerGroup: billing", "SASL_LINE", "", "AUTH_REF", "authenticationRef: {name: kafka}")...).Replace(kedaTestManifests)
	file := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	m := newManifests()
	if err := decodeAll(file, m); err != nil {
		t.Fatal(err)
	}
	var w *workload
	for _, x := range m.workloads {
		if x.Metadata.Name == "billing" {
			w = x
		}
	}
	base := map[string]any{"brokers": "kafka:9092", "inbound_topic": "webhooks.inbound", "retry_topic": "webhooks.retry", "group_id": "billing"}
	for k, v := range kafka {
		base[k] = v
	}
	hc := &hooklineContainer{w: w, c: &w.Spec.Template.Spec.Containers[0], binary: "hookline-consumer",
		config: map[string]any{"kafka": base, "service": map[string]any{"name": "billing", "starts_at": "earliest"}}}
	r := &reporter{prefix: t.Name()}
	checkKEDA(r, m, []*hooklineContainer{hc}, true)
	return r.failed
}

func TestKEDATriggerOnSecuredBrokers(t *testing.T) {
	sasl := map[string]any{"mechanism": "SCRAM-SHA-512", "username": "billing"}
	secured := map[string]any{"tls": map[string]any{}, "sasl": sasl}
	cases := []struct {
		name    string
		kafka   map[string]any
		replace []string
		want    string // a failure containing this; "" for none
	}{
		{"plaintext, no credentials", nil, []string{"AUTH_REF", ""}, ""},
		{"tls and sasl from the Secret", secured, nil, ""},
		{"group from the environment", nil, []string{"AUTH_REF", "", "GROUP_KEY", "consumerGroupFromEnv: GROUP"}, ""},
		{"sasl mechanism given in the trigger", secured, []string{"SASL_LINE", "sasl: scram_sha512"}, ""},
		{"tls consumer, trigger without credentials", secured, []string{"AUTH_REF", ""}, "the consumer talks TLS to Kafka"},
		{"sasl consumer, trigger without credentials", map[string]any{"sasl": sasl}, []string{"AUTH_REF", ""}, "the trigger has no sasl"},
		{"a Secret key that does not exist", secured, []string{"PASSWORD_KEY", "pasword"}, "reads key pasword, which Secret kafka-credentials does not have"},
		{"another sasl mechanism", secured, []string{"SASL_LINE", "sasl: plaintext"}, `sasl "plaintext", but the consumer's mechanism is SCRAM-SHA-512`},
		{"sasl without a sasl consumer", nil, []string{"AUTH_REF", "", "SASL_LINE", "sasl: plaintext"}, "the consumer does not use SASL"},
		{"tls without a tls consumer", nil, []string{"AUTH_REF", "", "SASL_LINE", "tls: enable"}, "the consumer talks PLAINTEXT"},
		{"no such TriggerAuthentication", secured, []string{"AUTH_REF", "authenticationRef: {name: kafak}"}, "TriggerAuthentication/kafak, which is not in the manifests"},
		{"group from a variable the container lacks", nil, []string{"AUTH_REF", "", "GROUP_KEY", "consumerGroupFromEnv: GROUP_ID"}, "consumerGroupFromEnv GROUP_ID: container consumer"},
		{"wrong group from the environment", nil, []string{"AUTH_REF", "", "GROUP_KEY", "consumerGroupFromEnv: HOOKLINE_KAFKA_BROKERS"}, `consumerGroup "kafka-0:9093,kafka-1:9093" is not the group`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			failed := runKEDA(t, c.kafka, c.replace...)
			if c.want == "" {
				if len(failed) > 0 {
					t.Fatalf("want no failure, got %q", failed)
				}
				return
			}
			for _, f := range failed {
				if strings.Contains(f, c.want) {
					return
				}
			}
			t.Fatalf("want a failure with %q, got %q", c.want, failed)
		})
	}
}
