package main

import (
	"reflect"
	"testing"
)

func TestACLDocNamesEveryCreatedTopic(t *testing.T) {
	doc := "```sh\n" +
		"kafka-acls $B --add --allow-principal User:gateway --operation Write --topic webhooks.inbound\n" +
		"kafka-acls $B --add --allow-principal User:consumer --operation Read --resource-pattern-type prefixed --topic webhooks.retry\n" +
		"kafka-acls $B --add --allow-principal User:replayer --operation Read --topic webhooks.dlq --topic webhooks.dlq-status\n" +
		"```\nprose naming --topic webhooks.control is no grant\n"
	created := []string{"webhooks.inbound", "webhooks.retry.billing", "webhooks.dlq", "webhooks.dlq-status", "webhooks.control"}
	if got := aclMissing(doc, created); !reflect.DeepEqual(got, []string{"webhooks.control"}) {
		t.Fatalf("missing = %v, want [webhooks.control]", got)
	}
	doc += "kafka-acls $B --add --allow-principal User:replayer --operation Write --topic webhooks.control\n"
	if got := aclMissing(doc, created); len(got) != 0 {
		t.Fatalf("missing = %v, want none", got)
	}
}
