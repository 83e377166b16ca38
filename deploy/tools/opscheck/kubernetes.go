package main

// Cross-checks of the rendered Kubernetes manifests (see the top of main.go).

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"
)

type meta struct {
	Name   string            `yaml:"name"`
	Labels map[string]string `yaml:"labels"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      *struct {
		PreStop *struct {
			Exec *struct {
				Command []string `yaml:"command"`
			} `yaml:"exec"`
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	SecurityContext *struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
	} `yaml:"securityContext"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		SubPath   string `yaml:"subPath"`
	} `yaml:"volumeMounts"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               *struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
	} `yaml:"securityContext"`
	InitContainers []container `yaml:"initContainers"`
	Containers     []container `yaml:"containers"`
	Volumes        []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
	} `yaml:"volumes"`
}

type workload struct {
	Kind     string
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata meta    `yaml:"metadata"`
			Spec     podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type service struct {
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type hpa struct {
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		ScaleTargetRef struct {
			Kind string `yaml:"kind"`
			Name string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicas *int `yaml:"minReplicas"`
		MaxReplicas int  `yaml:"maxReplicas"`
		Metrics     []struct {
			Resource *struct {
				Name string `yaml:"name"`
			} `yaml:"resource"`
		} `yaml:"metrics"`
	} `yaml:"spec"`
}

type pdb struct {
	Metadata meta `yaml:"metadata"`
	Spec     struct {
		MinAvailable   any `yaml:"minAvailable"`
		MaxUnavailable any `yaml:"maxUnavailable"`
		Selector       struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	} `yaml:"spec"`
}

type dataObject struct {
	Metadata   meta              `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
}

type manifests struct {
	workloads  []*workload
	services   []*service
	hpas       []*hpa
	pdbs       []*pdb
	configMaps map[string]*dataObject
	secrets    map[string]*dataObject
	kinds      []string
}

func decodeAll(file string, m *manifests) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var node yaml.Node
		if err := dec.Decode(&node); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		var head struct {
			Kind     string `yaml:"kind"`
			Metadata meta   `yaml:"metadata"`
		}
		if err := node.Decode(&head); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if head.Kind == "" {
			continue
		}
		m.kinds = append(m.kinds, head.Kind+"/"+head.Metadata.Name)
		var target any
		switch head.Kind {
		case "Deployment", "StatefulSet", "DaemonSet", "Job":
			w := &workload{Kind: head.Kind}
			m.workloads, target = append(m.workloads, w), w
		case "Service":
			s := &service{}
			m.services, target = append(m.services, s), s
		case "HorizontalPodAutoscaler":
			h := &hpa{}
			m.hpas, target = append(m.hpas, h), h
		case "PodDisruptionBudget":
			p := &pdb{}
			m.pdbs, target = append(m.pdbs, p), p
		case "ConfigMap", "Secret":
			d := &dataObject{}
			if head.Kind == "ConfigMap" {
				m.configMaps[head.Metadata.Name] = d
			} else {
				m.secrets[head.Metadata.Name] = d
			}
			target = d
		default:
			continue
		}
		if err := node.Decode(target); err != nil {
			return fmt.Errorf("%s: %s/%s: %w", file, head.Kind, head.Metadata.Name, err)
		}
	}
}

func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

var hooklineBinaries = map[string]bool{"hookline-gateway": true, "hookline-consumer": true, "hookline-replayer": true, "hookline-reconciler": true}

// hooklineContainer is a container running one of our binaries, with what its config says.
type hooklineContainer struct {
	w         *workload
	c         *container
	binary    string
	config    map[string]any
	adminPort int
}

func checkKubernetes(r *reporter, rendered, secretExample string) {
	m := &manifests{configMaps: map[string]*dataObject{}, secrets: map[string]*dataObject{}}
	if err := decodeAll(rendered, m); err != nil {
		r.fail("%v", err)
		return
	}
	r.ok("kubernetes: %d objects: %s", len(m.kinds), strings.Join(m.kinds, ", "))
	example := map[string]*dataObject{}
	if secretExample != "" {
		ex := &manifests{configMaps: map[string]*dataObject{}, secrets: map[string]*dataObject{}}
		if err := decodeAll(secretExample, ex); err != nil {
			r.fail("%v", err)
		}
		example = ex.secrets
	}

	var hook []*hooklineContainer
	for _, w := range m.workloads {
		where := w.Kind + "/" + w.Metadata.Name
		before := r.fails
		ps := &w.Spec.Template.Spec
		podNonRoot := ps.SecurityContext != nil && ps.SecurityContext.RunAsNonRoot != nil && *ps.SecurityContext.RunAsNonRoot
		if w.Kind != "Job" && !selects(w.Spec.Selector.MatchLabels, w.Spec.Template.Metadata.Labels) {
			r.fail("%s: selector %v does not match its pod labels %v", where, w.Spec.Selector.MatchLabels, w.Spec.Template.Metadata.Labels)
		}
		volumes := map[string]string{} // volume -> "configMap:name" | "secret:name"
		for _, v := range ps.Volumes {
			switch {
			case v.ConfigMap != nil:
				volumes[v.Name] = "configMap:" + v.ConfigMap.Name
				if m.configMaps[v.ConfigMap.Name] == nil {
					r.fail("%s: volume %s: ConfigMap %s is not in the manifests", where, v.Name, v.ConfigMap.Name)
				}
			case v.Secret != nil:
				volumes[v.Name] = "secret:" + v.Secret.SecretName
				if m.secrets[v.Secret.SecretName] == nil && example[v.Secret.SecretName] == nil {
					r.fail("%s: volume %s: Secret %s is neither in the manifests nor in the example %s", where, v.Name, v.Secret.SecretName, secretExample)
				}
			}
		}
		for i := range ps.Containers {
			c := &ps.Containers[i]
			cwhere := where + " container " + c.Name
			for _, k := range []string{"cpu", "memory"} {
				if c.Resources.Requests[k] == "" {
					r.fail("%s: no resources.requests.%s", cwhere, k)
				}
				if c.Resources.Limits[k] == "" {
					r.fail("%s: no resources.limits.%s", cwhere, k)
				}
			}
			nonRoot := podNonRoot
			if c.SecurityContext != nil && c.SecurityContext.RunAsNonRoot != nil {
				nonRoot = *c.SecurityContext.RunAsNonRoot
			}
			if !nonRoot {
				r.fail("%s: runAsNonRoot is not set", cwhere)
			}
			if image, tag := splitImage(c.Image); tag == "" || tag == "latest" {
				r.fail("%s: image %q is not pinned to a tag (set it under images: in kustomization.yaml)", cwhere, image)
			}
			for _, ef := range c.EnvFrom {
				if ef.ConfigMapRef != nil && m.configMaps[ef.ConfigMapRef.Name] == nil {
					r.fail("%s: envFrom ConfigMap %s is not in the manifests", cwhere, ef.ConfigMapRef.Name)
				}
			}
			argv := append(append([]string{}, c.Command...), c.Args...)
			if len(argv) == 0 || !hooklineBinaries[argv[0]] {
				continue
			}
			hc := &hooklineContainer{w: w, c: c, binary: argv[0]}
			hc.config = loadContainerConfig(r, cwhere, argv, c, volumes, m)
			if hc.config == nil {
				continue
			}
			hook = append(hook, hc)
			checkProbes(r, cwhere, hc)
			checkGrace(r, cwhere, hc)
			checkSecretsMounted(r, cwhere, hc, volumes, m, example)
		}
		if r.fails == before {
			r.ok("%s: pod runs as non-root with requests and limits on every container; its ConfigMaps and Secrets exist", where)
		}
	}
	checkServices(r, m)
	checkScaling(r, m)
	checkTopicJob(r, m, hook)
	checkGatewayMemory(r, hook)
}

func splitImage(image string) (string, string) {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[:i], name[i+1:]
	}
	if strings.Contains(image, "@") {
		return name, "digest"
	}
	return name, ""
}

// env resolves an environment variable of the container (literal values and envFrom ConfigMaps).
func env(c *container, m *manifests, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			return e.Value, true
		}
	}
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef != nil {
			if cm := m.configMaps[ef.ConfigMapRef.Name]; cm != nil {
				if v, ok := cm.Data[name]; ok {
					return v, true
				}
			}
		}
	}
	return "", false
}

func loadContainerConfig(r *reporter, where string, argv []string, c *container, volumes map[string]string, m *manifests) map[string]any {
	cfgPath := ""
	for i, a := range argv {
		if a == "--config" && i+1 < len(argv) {
			cfgPath = argv[i+1]
		} else if v, ok := strings.CutPrefix(a, "--config="); ok {
			cfgPath = v
		}
	}
	if cfgPath == "" {
		r.fail("%s: runs %s without --config", where, argv[0])
		return nil
	}
	for _, vm := range c.VolumeMounts {
		key := ""
		switch {
		case vm.SubPath != "" && path.Clean(vm.MountPath) == path.Clean(cfgPath):
			key = vm.SubPath
		case vm.SubPath == "" && path.Dir(path.Clean(cfgPath)) == path.Clean(vm.MountPath):
			key = path.Base(cfgPath)
		default:
			continue
		}
		src, isCM := strings.CutPrefix(volumes[vm.Name], "configMap:")
		if !isCM {
			continue
		}
		cm := m.configMaps[src]
		if cm == nil {
			return nil // reported with the volume
		}
		text, ok := cm.Data[key]
		if !ok {
			r.fail("%s: --config %s: ConfigMap %s has no key %s", where, cfgPath, src, key)
			return nil
		}
		cfg, err := effectiveConfig(argv[0], key, text)
		if err != nil {
			r.fail("%s: --config %s (ConfigMap %s): %v", where, cfgPath, src, err)
			return nil
		}
		return cfg
	}
	r.fail("%s: --config %s is not in a mounted ConfigMap", where, cfgPath)
	return nil
}

func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

func checkProbes(r *reporter, where string, hc *hooklineContainer) {
	addr, _ := hc.config["admin_addr"].(string)
	hc.adminPort = portOf(addr)
	if hc.adminPort == 0 {
		r.fail("%s: its config has no admin_addr host:port (the default listens on 127.0.0.1 only, out of the kubelet's reach)", where)
		return
	}
	if host, _, _ := net.SplitHostPort(addr); host == "127.0.0.1" || host == "localhost" {
		r.fail("%s: admin_addr %s is loopback: the kubelet's probes and Prometheus cannot reach it", where, addr)
	}
	named := map[string]int{}
	declared := false
	for _, p := range hc.c.Ports {
		named[p.Name] = p.ContainerPort
		declared = declared || p.ContainerPort == hc.adminPort
	}
	if !declared {
		r.fail("%s: the admin port %d (admin_addr) is not a containerPort", where, hc.adminPort)
	}
	for _, pr := range []struct {
		kind, path string
		p          *probe
	}{{"readinessProbe", "/readyz", hc.c.ReadinessProbe}, {"livenessProbe", "/livez", hc.c.LivenessProbe}} {
		if pr.p == nil || pr.p.HTTPGet == nil {
			r.fail("%s: no %s httpGet", where, pr.kind)
			continue
		}
		port := 0
		switch v := pr.p.HTTPGet.Port.(type) {
		case int:
			port = v
		case string:
			port = named[v]
		}
		if port != hc.adminPort || pr.p.HTTPGet.Path != pr.path {
			r.fail("%s: %s GET %s on port %v, want %s on the admin port %d", where, pr.kind, pr.p.HTTPGet.Path, pr.p.HTTPGet.Port, pr.path, hc.adminPort)
		}
	}
}

func preStopSeconds(c *container) int {
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		return 0
	}
	ps := c.Lifecycle.PreStop
	if ps.Sleep != nil {
		return ps.Sleep.Seconds
	}
	if ps.Exec != nil && len(ps.Exec.Command) == 2 && path.Base(ps.Exec.Command[0]) == "sleep" {
		n, _ := strconv.Atoi(ps.Exec.Command[1])
		return n
	}
	return 0
}

// checkGrace: SIGTERM starts the drain; the kubelet kills after terminationGracePeriodSeconds, counted from the
// start of preStop.
func checkGrace(r *reporter, where string, hc *hooklineContainer) {
	grace := 30
	if g := hc.w.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = *g
	}
	produceS := float64(configInt(r, where, hc.config, "kafka", "produce_timeout_ms")) / 1000
	var need float64
	var why string
	switch hc.binary {
	case "hookline-gateway":
		pre := preStopSeconds(hc.c)
		drain := float64(configInt(r, where, hc.config, "limits", "drain_deadline_ms")) / 1000
		grace := float64(configInt(r, where, hc.config, "limits", "drain_grace_ms")) / 1000
		need = float64(pre) + grace + drain + produceS
		why = fmt.Sprintf("preStop %ds + drain_grace_ms %.0fs + drain_deadline_ms %.0fs + produce_timeout_ms %.0fs", pre, grace, drain, produceS)
		if pre == 0 {
			r.note("%s: no preStop sleep: requests may still be routed to a gateway that stopped accepting", where)
		}
	case "hookline-consumer":
		handler := float64(configInt(r, where, hc.config, "handler", "timeout_ms")) / 1000
		need = handler + produceS
		why = fmt.Sprintf("handler.timeout_ms %.0fs + produce_timeout_ms %.0fs (a dead-letter produce in hand)", handler, produceS)
	default:
		return
	}
	if float64(grace) <= need {
		r.fail("%s: terminationGracePeriodSeconds %d does not outlast the drain: %s = %.0fs", where, grace, why, need)
		return
	}
	r.ok("%s: terminationGracePeriodSeconds %d > %s; probes on admin port %d", where, grace, why, hc.adminPort)
}

// checkSecretsMounted: each source secret read from a file is in a mounted Secret (and its example manifest); each
// read from an environment variable is set from a Secret.
func checkSecretsMounted(r *reporter, where string, hc *hooklineContainer, volumes map[string]string, m *manifests, example map[string]*dataObject) {
	var facts []string
	for _, src := range tables(hc.config["sources"]) {
		for _, sec := range tables(src["secrets"]) {
			if file, _ := sec["file"].(string); file != "" {
				found := false
				for _, vm := range hc.c.VolumeMounts {
					rel, ok := strings.CutPrefix(path.Clean(file), path.Clean(vm.MountPath)+"/")
					name, isSecret := strings.CutPrefix(volumes[vm.Name], "secret:")
					if !ok || !isSecret {
						continue
					}
					found = true
					obj := m.secrets[name]
					if obj == nil {
						obj = example[name]
					}
					if obj == nil {
						break
					}
					if _, ok := obj.StringData[rel]; !ok {
						if _, ok := obj.Data[rel]; !ok {
							r.fail("%s: source %v reads %s, but Secret %s (example) has no key %s", where, src["name"], file, name, rel)
							break
						}
					}
					facts = append(facts, fmt.Sprintf("%v <- secret %s/%s", src["name"], name, rel))
				}
				if !found {
					r.fail("%s: source %v reads its secret from %s, which no mounted Secret provides", where, src["name"], file)
				}
			}
			if name, _ := sec["env"].(string); name != "" {
				set := false
				for _, e := range hc.c.Env {
					set = set || (e.Name == name && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil)
				}
				for _, ef := range hc.c.EnvFrom {
					set = set || ef.SecretRef != nil
				}
				if !set {
					r.fail("%s: source %v reads its secret from $%s, which is not set from a Secret", where, src["name"], name)
				}
			}
		}
	}
	if len(facts) > 0 {
		sort.Strings(facts)
		r.ok("%s: every source secret is a key of a mounted Secret: %s", where, strings.Join(facts, ", "))
	}
}

func podsSelected(m *manifests, selector map[string]string) []*workload {
	var out []*workload
	for _, w := range m.workloads {
		if w.Kind != "Job" && selects(selector, w.Spec.Template.Metadata.Labels) {
			out = append(out, w)
		}
	}
	return out
}

func checkServices(r *reporter, m *manifests) {
	for _, s := range m.services {
		where := "Service/" + s.Metadata.Name
		ws := podsSelected(m, s.Spec.Selector)
		if len(ws) == 0 {
			r.fail("%s: selector %v matches no Deployment's pods", where, s.Spec.Selector)
			continue
		}
		before := r.fails
		for _, p := range s.Spec.Ports {
			for _, w := range ws {
				ok := false
				for _, c := range w.Spec.Template.Spec.Containers {
					for _, cp := range c.Ports {
						switch t := p.TargetPort.(type) {
						case string:
							ok = ok || cp.Name == t
						case int:
							ok = ok || cp.ContainerPort == t
						case nil:
							ok = ok || cp.ContainerPort == p.Port
						}
					}
				}
				if !ok {
					r.fail("%s: port %s targets %v, which %s/%s does not declare", where, p.Name, p.TargetPort, w.Kind, w.Metadata.Name)
				}
			}
		}
		if r.fails == before {
			r.ok("%s: selects %s/%s and its target ports exist", where, ws[0].Kind, ws[0].Metadata.Name)
		}
	}
}

func checkScaling(r *reporter, m *manifests) {
	scaled := map[string]int{} // Deployment -> the fewest replicas it can have
	for _, h := range m.hpas {
		where := "HorizontalPodAutoscaler/" + h.Metadata.Name
		var target *workload
		for _, w := range m.workloads {
			if w.Kind == h.Spec.ScaleTargetRef.Kind && w.Metadata.Name == h.Spec.ScaleTargetRef.Name {
				target = w
			}
		}
		if target == nil {
			r.fail("%s: targets %s/%s, which is not in the manifests", where, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
			continue
		}
		minR := 1
		if h.Spec.MinReplicas != nil {
			minR = *h.Spec.MinReplicas
		}
		before := r.fails
		if target.Spec.Replicas != nil {
			r.fail("%s: %s sets replicas, which every apply would reset under the autoscaler", where, target.Metadata.Name)
		}
		if minR > h.Spec.MaxReplicas {
			r.fail("%s: minReplicas %d > maxReplicas %d", where, minR, h.Spec.MaxReplicas)
		}
		for _, metric := range h.Spec.Metrics {
			if metric.Resource == nil {
				continue
			}
			for _, c := range target.Spec.Template.Spec.Containers {
				if c.Resources.Requests[metric.Resource.Name] == "" {
					r.fail("%s: scales on %s, but container %s has no %s request to take a utilization of", where, metric.Resource.Name, c.Name, metric.Resource.Name)
				}
			}
		}
		scaled[target.Metadata.Name] = minR
		if r.fails == before {
			r.ok("%s: scales Deployment/%s (%d..%d), which leaves replicas to it", where, target.Metadata.Name, minR, h.Spec.MaxReplicas)
		}
	}
	for _, p := range m.pdbs {
		where := "PodDisruptionBudget/" + p.Metadata.Name
		ws := podsSelected(m, p.Spec.Selector.MatchLabels)
		if len(ws) != 1 {
			r.fail("%s: selects %d Deployments, want exactly one", where, len(ws))
			continue
		}
		w := ws[0]
		replicas, ok := scaled[w.Metadata.Name]
		if !ok {
			replicas = 1
			if w.Spec.Replicas != nil {
				replicas = *w.Spec.Replicas
			}
		}
		if n, isInt := p.Spec.MinAvailable.(int); isInt && n >= replicas {
			r.fail("%s: minAvailable %d with %d replicas blocks every voluntary eviction (node drains hang)", where, n, replicas)
			continue
		}
		if n, isInt := p.Spec.MaxUnavailable.(int); isInt && n < 1 {
			r.fail("%s: maxUnavailable %d blocks every voluntary eviction", where, n)
			continue
		}
		r.ok("%s: covers %s/%s (%d replicas at least) and lets a node drain proceed", where, w.Kind, w.Metadata.Name, replicas)
	}
}

var (
	createdTopic = regexp.MustCompile(`--topic[= ]+['"]?([A-Za-z0-9._-]+)['"]?((?:\s+--[a-z-]+(?:[= ]+(?:"[^"]*"|\S+))?)*)`)
	partitionsOf = regexp.MustCompile(`--partitions[= ]+"?\$?\{?([A-Za-z0-9_]+)\}?"?`)
)

// checkTopicJob: the Job creates every topic the configs name (and no other), with enough inbound partitions for
// the consumer replicas.
func checkTopicJob(r *reporter, m *manifests, hook []*hooklineContainer) {
	want := map[string][]string{} // topic -> who names it
	inbound, dlq := "", ""
	consumers := 0
	for _, hc := range hook {
		kafka, _ := hc.config["kafka"].(map[string]any)
		for k, v := range kafka {
			if t, ok := v.(string); ok && strings.HasSuffix(k, "_topic") {
				want[t] = append(want[t], hc.w.Metadata.Name+" kafka."+k)
				if k == "inbound_topic" {
					inbound = t
				}
				if k == "dlq_topic" {
					dlq = t
				}
			}
		}
		for _, s := range tables(hc.config["sources"]) {
			if t, ok := s["topic"].(string); ok {
				want[t] = append(want[t], fmt.Sprintf("%s source %v", hc.w.Metadata.Name, s["name"]))
			}
		}
		if hc.binary == "hookline-consumer" && hc.w.Spec.Replicas != nil {
			consumers += *hc.w.Spec.Replicas
		}
	}
	var job *workload
	var script string
	var jc *container
	for _, w := range m.workloads {
		if w.Kind != "Job" {
			continue
		}
		for i, c := range w.Spec.Template.Spec.Containers {
			s := strings.Join(append(append([]string{}, c.Command...), c.Args...), " ")
			if strings.Contains(s, "kafka-topics") && strings.Contains(s, "--create") {
				job, script, jc = w, s, &w.Spec.Template.Spec.Containers[i]
			}
		}
	}
	if job == nil {
		r.fail("kubernetes: no Job creates the topics (kafka-topics.sh --create)")
		return
	}
	where := "Job/" + job.Metadata.Name
	before := r.fails
	created := map[string]int{}
	flags := map[string]string{} // topic -> the flags it is created with
	for _, line := range strings.Split(script, "\n") {
		if !strings.Contains(line, "--topic") || strings.Contains(line, "--describe") {
			continue
		}
		for _, mt := range createdTopic.FindAllStringSubmatch(line, -1) {
			parts := 0
			if pm := partitionsOf.FindStringSubmatch(mt[2]); pm != nil {
				if n, err := strconv.Atoi(pm[1]); err == nil {
					parts = n
				} else if v, ok := env(jc, m, pm[1]); ok {
					parts, _ = strconv.Atoi(v)
				}
			}
			created[mt[1]] = parts
			flags[mt[1]] = mt[2]
		}
	}
	if dlq != "" {
		if _, ok := created[dlq]; ok && !unlimitedRetention(flags[dlq]) {
			r.fail("%s: creates %s without retention.ms=-1: a dead letter nobody triaged would expire unseen", where, dlq)
		}
	}
	for t, who := range want {
		if _, ok := created[t]; !ok {
			r.fail("%s: does not create topic %s (named by %s)", where, t, strings.Join(who, ", "))
		}
	}
	for t := range created {
		if _, ok := want[t]; !ok {
			r.fail("%s: creates topic %s, which no config names", where, t)
		}
	}
	if inbound != "" {
		if n := created[inbound]; n == 0 {
			r.fail("%s: cannot read the partition count of %s", where, inbound)
		} else if consumers > n {
			r.fail("%s: %s gets %d partitions, fewer than the %d consumer replicas (the extra ones would idle, not ready)", where, inbound, n, consumers)
		}
	}
	if r.fails == before {
		var ts []string
		for t, n := range created {
			ts = append(ts, fmt.Sprintf("%s(%d partitions)", t, n))
		}
		sort.Strings(ts)
		r.ok("%s: creates exactly the topics the configs name: %s; %d consumer replicas <= %d inbound partitions",
			where, strings.Join(ts, ", "), consumers, created[inbound])
	}
}

var retentionOf = regexp.MustCompile(`--config[= ]+"?retention\.ms=(-?[0-9]+)"?`)

// unlimitedRetention: the flags of a topic's creation set retention.ms=-1 (a DLQ entry never expires).
func unlimitedRetention(flags string) bool {
	m := retentionOf.FindStringSubmatch(flags)
	return m != nil && m[1] == "-1"
}

// checkGatewayMemory: what the gateway may hold must fit its memory limit. Request bodies (being read or in
// flight) are bounded together by limits.max_body_buffer_bytes; each open connection may hold a request head of
// limits.max_header_bytes; plus a fixed allowance for the process itself and the producer's queue.
func checkGatewayMemory(r *reporter, hook []*hooklineContainer) {
	const base = 128 << 20 // runtime, TLS-free hyper, rdkafka's queue.buffering.max.kbytes is separate (below)
	for _, hc := range hook {
		if hc.binary != "hookline-gateway" {
			continue
		}
		where := hc.w.Kind + "/" + hc.w.Metadata.Name
		limit, err := parseQuantity(hc.c.Resources.Limits["memory"])
		if err != nil {
			r.fail("%s: memory limit: %v", where, err)
			continue
		}
		bodies := configInt(r, where, hc.config, "limits", "max_body_buffer_bytes")
		connections := configInt(r, where, hc.config, "limits", "max_connections")
		heads := connections * configInt(r, where, hc.config, "limits", "max_header_bytes")
		producerQueue := int64(256 << 20) // queue.buffering.max.kbytes = 262144 (common/src/kafka.rs)
		need := bodies + heads + producerQueue + base
		if limit < need {
			r.fail("%s: memory limit %s is below max_body_buffer_bytes %d + max_connections %d x max_header_bytes (%d MiB) + producer queue 256 MiB + 128 MiB = %d MiB", where, hc.c.Resources.Limits["memory"], bodies, connections, heads>>20, need>>20)
			continue
		}
		r.ok("%s: memory limit %s holds max_body_buffer_bytes %d + %d connections' heads (%d MiB) + producer queue + base (%d MiB)", where, hc.c.Resources.Limits["memory"], bodies, connections, heads>>20, need>>20)
	}
}

func parseQuantity(q string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(q, u.suffix); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v * u.mult, err
		}
	}
	v, err := strconv.ParseInt(q, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cannot read quantity %q", q)
	}
	return v, nil
}

// tables reads a TOML array of tables, written either as [[x]] sections or inline as x = [{...}, {...}].
func tables(v any) []map[string]any {
	switch t := v.(type) {
	case []map[string]any:
		return t
	case []any:
		var out []map[string]any
		for _, e := range t {
			if m, ok := e.(map[string]any); ok {
				out = append(out, m)
			}
		}
		return out
	}
	return nil
}
