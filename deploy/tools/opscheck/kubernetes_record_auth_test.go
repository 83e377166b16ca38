package main

// The record-key roles read from effective configs as the services print them (keys as an array of tables,
// inbound_only_keys as an inline array): each way a reader can leave the gateway's key trusted for more is refused.

import (
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
)

func printed(t *testing.T, text string) map[string]any {
	t.Helper()
	var config map[string]any
	if _, err := toml.Decode(text, &config); err != nil {
		t.Fatal(err)
	}
	return config
}

func TestTheGatewaysKeyMustBeInboundOnlyOnEveryReader(t *testing.T) {
	gateway := printed(t, "[kafka.record_auth]\ninbound_only_keys = [\"gateway\"]\n[[kafka.record_auth.keys]]\nid = \"gateway\"\nenv = \"G\"\n")
	reader := func(inboundOnly string, ids ...string) map[string]any {
		text := "[kafka.record_auth]\ninbound_only_keys = [" + inboundOnly + "]\n"
		for _, id := range ids {
			text += "[[kafka.record_auth.keys]]\nid = \"" + id + "\"\nenv = \"K\"\n"
		}
		return printed(t, text)
	}
	for _, c := range []struct {
		name   string
		reader map[string]any
		want   string
	}{
		{"by role", reader(`"gateway"`, "k1", "gateway"), ""},
		{"not inbound-only", reader(``, "k1", "gateway"), `"gateway" is not in kafka.record_auth.inbound_only_keys`},
		{"not held", reader(``, "k1"), `has no key "gateway"`},
		{"one key shared", reader(``, "gateway"), `"gateway" is not in kafka.record_auth.inbound_only_keys`},
	} {
		r := &reporter{prefix: "test"}
		checkRecordKeyRoles(r, []recordKeys{
			recordKeysOf("Deployment/gateway", "hookline-gateway", gateway),
			recordKeysOf("Deployment/consumer", "hookline-consumer", c.reader),
		})
		got := strings.Join(r.failed, "\n")
		if c.want == "" && got != "" || c.want != "" && !strings.Contains(got, c.want) {
			t.Errorf("%s: failures %q, want %q", c.name, got, c.want)
		}
	}
}
