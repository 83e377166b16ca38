package main

// opscheck equivalent KUSTOMIZE.yaml HELM.yaml: the Helm chart renders the same objects as the kustomize base,
// field for field, once each side's own bookkeeping is set aside:
//   - kustomize: the hash suffix of generated ConfigMap names (hookline-endpoints-5f7h2k9m4t), in the ConfigMaps
//     and wherever a name is referenced;
//   - Helm: its two labels (app.kubernetes.io/managed-by, helm.sh/chart) and the checksum/config annotation on
//     pod templates (its way of rolling pods on a config change, where kustomize changes the name).
// Comments and key order do not matter; every other difference, an object on one side only, or a value that
// differs, fails with the object and the path of the first difference.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v4"
)

var kustomizeHash = regexp.MustCompile(`^(.+)-[a-z0-9]{10}$`)

func readObjects(file string) (map[string]map[string]any, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	objects := map[string]map[string]any{}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var object map[string]any
		if err := dec.Decode(&object); errors.Is(err, io.EOF) {
			return objects, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if object == nil {
			continue
		}
		kind, _ := object["kind"].(string)
		metadata, _ := object["metadata"].(map[string]any)
		name, _ := metadata["name"].(string)
		key := kind + "/" + name
		if _, seen := objects[key]; seen {
			return nil, fmt.Errorf("%s: %s twice", file, key)
		}
		objects[key] = object
	}
}

// rename replaces every string equal to a key of names, anywhere in v.
func rename(v any, names map[string]string) any {
	switch t := v.(type) {
	case map[string]any:
		for k, value := range t {
			t[k] = rename(value, names)
		}
	case []any:
		for i, value := range t {
			t[i] = rename(value, names)
		}
	case string:
		if base, ok := names[t]; ok {
			return base
		}
	}
	return v
}

func nested(object map[string]any, path ...string) map[string]any {
	current := object
	for _, key := range path {
		next, ok := current[key].(map[string]any)
		if !ok {
			return nil
		}
		current = next
	}
	return current
}

// normalizeKustomize drops the hash suffix of generated ConfigMaps and rekeys them.
func normalizeKustomize(objects map[string]map[string]any) map[string]map[string]any {
	names := map[string]string{}
	for key := range objects {
		if !strings.HasPrefix(key, "ConfigMap/") {
			continue
		}
		name := strings.TrimPrefix(key, "ConfigMap/")
		if m := kustomizeHash.FindStringSubmatch(name); m != nil {
			names[name] = m[1]
		}
	}
	out := map[string]map[string]any{}
	for key, object := range objects {
		object = rename(object, names).(map[string]any)
		if strings.HasPrefix(key, "ConfigMap/") {
			if base, ok := names[strings.TrimPrefix(key, "ConfigMap/")]; ok {
				key = "ConfigMap/" + base
			}
		}
		out[key] = object
	}
	return out
}

// normalizeHelm drops Helm's labels and the checksum annotation.
func normalizeHelm(objects map[string]map[string]any) {
	for _, object := range objects {
		for _, labels := range []map[string]any{
			nested(object, "metadata", "labels"), nested(object, "spec", "template", "metadata", "labels"),
		} {
			delete(labels, "app.kubernetes.io/managed-by")
			delete(labels, "helm.sh/chart")
		}
		if annotations := nested(object, "spec", "template", "metadata", "annotations"); annotations != nil {
			delete(annotations, "checksum/config")
		}
	}
}

// firstDifference is the path of the first difference between a and b ("" when equal).
func firstDifference(path string, a, b any) string {
	if reflect.DeepEqual(a, b) {
		return ""
	}
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := map[string]bool{}
		for k := range am {
			keys[k] = true
		}
		for k := range bm {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			if d := firstDifference(path+"."+k, am[k], bm[k]); d != "" {
				return d
			}
		}
	}
	al, alok := a.([]any)
	bl, blok := b.([]any)
	if alok && blok && len(al) == len(bl) {
		for i := range al {
			if d := firstDifference(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i]); d != "" {
				return d
			}
		}
	}
	return fmt.Sprintf("%s: kustomize %s, helm %s", path, brief(a), brief(b))
}

func brief(v any) string {
	if v == nil {
		return "(absent)"
	}
	text := fmt.Sprintf("%v", v)
	if len(text) > 120 {
		text = text[:120] + "..."
	}
	return fmt.Sprintf("%q", text)
}

func checkEquivalent(r *reporter, what, kustomizeFile, helmFile string) {
	k, err := readObjects(kustomizeFile)
	if err != nil {
		r.fail("%s: %v", what, err)
		return
	}
	h, err := readObjects(helmFile)
	if err != nil {
		r.fail("%s: %v", what, err)
		return
	}
	k = normalizeKustomize(k)
	normalizeHelm(h)
	keys := map[string]bool{}
	for key := range k {
		keys[key] = true
	}
	for key := range h {
		keys[key] = true
	}
	sorted := make([]string, 0, len(keys))
	for key := range keys {
		sorted = append(sorted, key)
	}
	sort.Strings(sorted)
	before := r.fails
	for _, key := range sorted {
		ko, kin := k[key]
		ho, hin := h[key]
		switch {
		case !hin:
			r.fail("%s: %s is in the kustomize rendering only", what, key)
		case !kin:
			r.fail("%s: %s is in the Helm rendering only", what, key)
		default:
			if d := firstDifference("", ko, ho); d != "" {
				r.fail("%s: %s differs at %s", what, key, d)
			}
		}
	}
	if r.fails == before {
		r.ok("%s: the Helm chart renders the same %d objects as kustomize, field for field", what, len(sorted))
	}
}
