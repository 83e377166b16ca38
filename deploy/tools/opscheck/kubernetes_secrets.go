package main

// Credentials in the Kubernetes base: every secret reference a service's effective config holds (a table with an
// `id` and an `env` or a `file`, wherever it sits: a source's secrets, the replayer's token, Kafka's SASL password,
// Redis's password, a route's signing secrets, the record keys) is read from a Kubernetes Secret; each container
// sees only the Secret keys its own config reads (the gateway never holds the replayer's token); and no credential
// is written inline, in a config file, a ConfigMap or a literal env value.

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
)

// redacted is what the binaries print in place of an inline credential (common/src/config.rs, redact::REDACTED).
const redacted = "<redacted>"

type secretRef struct {
	at   string // where in the config, e.g. sources[github].secrets[v1] or kafka.sasl.password
	env  string
	file string
}

// walkConfig calls visit with every value under v and its path (`kafka.sasl.password`,
// `sources[github].secrets[v1]`), depth first, map keys in order; where visit returns false it does not descend.
func walkConfig(v any, at string, visit func(at string, v any) bool) {
	if !visit(at, v) {
		return
	}
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			walkConfig(t[k], joinPath(at, k), visit)
		}
	case []map[string]any:
		for i, e := range t {
			walkConfig(e, at+"["+elementName(e, i)+"]", visit)
		}
	case []any:
		for i, e := range t {
			m, _ := e.(map[string]any)
			walkConfig(e, at+"["+elementName(m, i)+"]", visit)
		}
	}
}

// secretRefs collects every secret reference under v, depth first, in a stable order.
func secretRefs(v any, at string, out *[]secretRef) {
	walkConfig(v, at, func(at string, v any) bool {
		t, ok := v.(map[string]any)
		if !ok {
			return true
		}
		id, hasID := t["id"].(string)
		env, _ := t["env"].(string)
		file, _ := t["file"].(string)
		if hasID && id != "" && (env != "" || file != "") {
			*out = append(*out, secretRef{at: at, env: env, file: file})
			return false
		}
		return true
	})
}

func joinPath(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

func elementName(m map[string]any, i int) string {
	for _, k := range []string{"name", "id", "path"} {
		if s, ok := m[k].(string); ok && s != "" {
			return s
		}
	}
	return fmt.Sprint(i)
}

// inlineCredentials: config keys whose value the binary printed redacted, i.e. a credential written inline.
func inlineCredentials(v any, at string, out *[]string) {
	walkConfig(v, at, func(at string, v any) bool {
		if s, ok := v.(string); ok && strings.Contains(s, redacted) {
			*out = append(*out, at)
		}
		return true
	})
}

var (
	urlWithPassword  = regexp.MustCompile(`://[^/@\s]*:[^/@\s]+@`)
	credentialEnvVar = regexp.MustCompile(`(?i)(PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|PRIVATE_KEY|API_KEY)`)
)

// secretKeys: the keys a Secret (in the manifests or the example) holds, or nil if it is in neither.
func secretKeys(name string, m *manifests, example map[string]*dataObject) map[string]bool {
	obj := m.secrets[name]
	if obj == nil {
		obj = example[name]
	}
	if obj == nil {
		return nil
	}
	keys := map[string]bool{}
	for k := range obj.Data {
		keys[k] = true
	}
	for k := range obj.StringData {
		keys[k] = true
	}
	return keys
}

func checkSecrets(r *reporter, where string, hc *hooklineContainer, ps *podSpec, volumes map[string]string, m *manifests, example map[string]*dataObject) {
	before := r.fails
	var refs []secretRef
	secretRefs(hc.config, "", &refs)
	read := map[string]map[string]bool{} // Secret name -> keys this container's config reads
	markRead := func(name, key string) {
		if read[name] == nil {
			read[name] = map[string]bool{}
		}
		read[name][key] = true
	}
	envFromSecret := map[string]bool{} // env var name -> set from a Secret key
	for _, e := range hc.c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			envFromSecret[e.Name] = true
		}
	}
	var facts []string
	for _, ref := range refs {
		if ref.file != "" {
			found := false
			for _, vm := range hc.c.VolumeMounts {
				rel, ok := strings.CutPrefix(path.Clean(ref.file), path.Clean(vm.MountPath)+"/")
				name, isSecret := strings.CutPrefix(volumes[vm.Name], "secret:")
				if !ok || !isSecret {
					continue
				}
				found = true
				key := rel
				for _, v := range ps.Volumes {
					if v.Name == vm.Name && v.Secret != nil && len(v.Secret.Items) > 0 {
						key = ""
						for _, item := range v.Secret.Items {
							if item.Path == rel {
								key = item.Key
							}
						}
					}
				}
				keys := secretKeys(name, m, example)
				if keys == nil {
					break // reported with the volume
				}
				if key == "" || !keys[key] {
					r.fail("%s: %s reads %s, but Secret %s (example) has no key %s", where, ref.at, ref.file, name, rel)
					break
				}
				markRead(name, key)
				facts = append(facts, fmt.Sprintf("%s <- %s/%s", ref.at, name, key))
			}
			if !found {
				r.fail("%s: %s reads its secret from %s, which no mounted Secret provides", where, ref.at, ref.file)
			}
		}
		if ref.env != "" {
			set := false
			for _, e := range hc.c.Env {
				if e.Name == ref.env && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					set = true
					markRead(e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
					facts = append(facts, fmt.Sprintf("%s <- $%s <- %s/%s", ref.at, ref.env, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key))
				}
			}
			if !set {
				r.fail("%s: %s reads its secret from $%s, which is not set from a Secret key (env valueFrom.secretKeyRef)", where, ref.at, ref.env)
			}
		}
	}

	// Least privilege: a container holds only the Secret keys its config reads.
	for _, ef := range hc.c.EnvFrom {
		if ef.SecretRef != nil {
			r.fail("%s: envFrom Secret %s hands the container every key of it; set each variable it reads with valueFrom.secretKeyRef", where, ef.SecretRef.Name)
		}
	}
	for _, e := range hc.c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && !read[e.ValueFrom.SecretKeyRef.Name][e.ValueFrom.SecretKeyRef.Key] {
			r.fail("%s: $%s holds Secret %s key %s, which its config never reads", where, e.Name, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
		}
	}
	for _, vm := range hc.c.VolumeMounts {
		name, isSecret := strings.CutPrefix(volumes[vm.Name], "secret:")
		if !isSecret {
			continue
		}
		exposed := secretKeys(name, m, example)
		for _, v := range ps.Volumes {
			if v.Name == vm.Name && v.Secret != nil && len(v.Secret.Items) > 0 {
				exposed = map[string]bool{}
				for _, item := range v.Secret.Items {
					exposed[item.Key] = true
				}
			}
		}
		var extra []string
		for key := range exposed {
			if !read[name][key] {
				extra = append(extra, key)
			}
		}
		if len(extra) > 0 {
			sort.Strings(extra)
			r.fail("%s: mounts Secret %s, whose keys %s its config never reads: give each service a Secret of its own (or project only the keys it reads with items)", where, name, strings.Join(extra, ", "))
		}
	}

	// Nothing inline.
	var inline []string
	inlineCredentials(hc.config, "", &inline)
	for _, at := range inline {
		r.fail("%s: %s holds a credential written inline in the config; read it from a Secret with a secret reference { id, env | file }", where, at)
	}
	for _, e := range hc.c.Env {
		if e.ValueFrom != nil {
			continue
		}
		if urlWithPassword.MatchString(e.Value) {
			r.fail("%s: $%s is a URL with a password written inline; give the password its own secret reference", where, e.Name)
		} else if credentialEnvVar.MatchString(e.Name) && e.Value != "" {
			r.fail("%s: $%s looks like a credential and is written inline; set it with valueFrom.secretKeyRef", where, e.Name)
		}
	}
	for _, ef := range hc.c.EnvFrom {
		if ef.ConfigMapRef == nil || m.configMaps[ef.ConfigMapRef.Name] == nil {
			continue
		}
		for name, value := range m.configMaps[ef.ConfigMapRef.Name].Data {
			if urlWithPassword.MatchString(value) {
				r.fail("%s: ConfigMap %s sets $%s to a URL with a password; a ConfigMap is not a Secret", where, ef.ConfigMapRef.Name, name)
			}
		}
	}
	if r.fails == before && len(facts) > 0 {
		sort.Strings(facts)
		r.ok("%s: every credential comes from a Secret key it alone needs: %s", where, strings.Join(facts, ", "))
	}
}
