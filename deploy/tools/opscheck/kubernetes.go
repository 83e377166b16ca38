package main

// Cross-checks of the rendered Kubernetes manifests (see the top of main.go).

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
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
			Items      []struct {
				Key  string `yaml:"key"`
				Path string `yaml:"path"`
			} `yaml:"items"`
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
	keda       *kedaObjects
	// exampleSecrets are the Secrets of the example manifest the base leaves out (-secret-example).
	exampleSecrets map[string]*dataObject
	kinds          []string
}

func newManifests() *manifests {
	return &manifests{configMaps: map[string]*dataObject{}, secrets: map[string]*dataObject{},
		keda: &kedaObjects{auths: map[string]*triggerAuthentication{}}}
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
		case "ScaledObject", "TriggerAuthentication":
			m.keda.add(head.Kind, head.Metadata.Name, &node)
			continue
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

func checkKubernetes(r *reporter, rendered, secretExample string, requireConsumersScaled bool) {
	m := newManifests()
	if err := decodeAll(rendered, m); err != nil {
		r.fail("%v", err)
		return
	}
	r.ok("kubernetes: %d objects: %s", len(m.kinds), strings.Join(m.kinds, ", "))
	example := map[string]*dataObject{}
	if secretExample != "" {
		ex := newManifests()
		if err := decodeAll(secretExample, ex); err != nil {
			r.fail("%v", err)
		}
		example = ex.secrets
	}
	m.exampleSecrets = example

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
			checkSecrets(r, cwhere, hc, ps, volumes, m, example)
		}
		if r.fails == before {
			r.ok("%s: pod runs as non-root with requests and limits on every container; its ConfigMaps and Secrets exist", where)
		}
	}
	checkServices(r, m)
	kedaScaled := checkKEDA(r, m, hook, requireConsumersScaled)
	checkScaling(r, m, kedaScaled)
	checkConsumerServices(r, hook)
	checkRecordKeys(r, hook)
	checkTopicJob(r, m, hook, kedaScaled)
	if aclDoc != "" {
		checkACLDoc(r, m)
	}
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
