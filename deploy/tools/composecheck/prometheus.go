package main

// Cross-checks between a Prometheus service of the compose project, the
// prometheus.yml it is given and the services it scrapes: the rule files
// exist, every scrape target is a compose service listening on that port (its
// admin_addr), a service with replicas is discovered per replica, and every
// hookline admin port is scraped. `promtool check config` (scripts/check-deploy)
// validates the file itself; this checks that it fits the compose project.

import (
	"net"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v4"
)

type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Type  string   `yaml:"type"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
	} `yaml:"scrape_configs"`
}

// hostPathOf maps a path inside a service's container to the bind-mounted file on this machine, or "".
func hostPathOf(s types.ServiceConfig, inContainer string) string {
	inContainer = path.Clean(inContainer)
	best, bestLen := "", -1
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		t := path.Clean(v.Target)
		switch {
		case t == inContainer && len(t) > bestLen:
			best, bestLen = v.Source, len(t)
		case strings.HasPrefix(inContainer, t+"/") && len(t) > bestLen:
			best, bestLen = filepath.Join(v.Source, filepath.FromSlash(strings.TrimPrefix(inContainer, t+"/"))), len(t)
		}
	}
	return best
}

func isPrometheusImage(image string) bool {
	name, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	return name == "prom/prometheus" || strings.HasSuffix(name, "/prometheus/prometheus")
}

func checkPrometheus(r *reporter, p *types.Project, listening map[string]map[string]string, rel func(string) string) {
	for _, name := range sortedNames(p) {
		s := p.Services[name]
		if !isPrometheusImage(s.Image) {
			continue
		}
		cfgPath := "/etc/prometheus/prometheus.yml" // the image's default
		for _, a := range s.Command {
			if v, ok := strings.CutPrefix(a, "--config.file="); ok {
				cfgPath = v
			}
		}
		host := hostPathOf(s, cfgPath)
		if host == "" {
			r.fail("service %s: --config.file %s is not bind-mounted from the project", name, cfgPath)
			continue
		}
		raw, err := os.ReadFile(host)
		if err != nil {
			r.fail("service %s: %s: %v", name, rel(host), err)
			continue
		}
		var cfg promConfig
		if err := yaml.Unmarshal(raw, &cfg); err != nil {
			r.fail("service %s: %s is not valid YAML: %v", name, rel(host), err)
			continue
		}
		before := r.fails
		var facts []string
		for _, rf := range cfg.RuleFiles {
			inContainer := rf
			if !path.IsAbs(rf) {
				inContainer = path.Join(path.Dir(cfgPath), rf)
			}
			if strings.ContainsAny(rf, "*?[") {
				r.note("service %s: rule_files pattern %s is not followed", name, rf)
				continue
			}
			h := hostPathOf(s, inContainer)
			if h == "" {
				r.fail("service %s: rule file %s is not mounted into the container", name, inContainer)
			} else if _, err := os.Stat(h); err != nil {
				r.fail("service %s: rule file %s: %s does not exist", name, inContainer, rel(h))
			} else {
				facts = append(facts, "rules "+rel(h))
			}
		}

		scraped := map[string]bool{} // service/port
		target := func(job, svc, port string, perReplica bool) {
			ports, known := listening[svc]
			if _, exists := p.Services[svc]; !exists {
				r.fail("service %s: job %s scrapes %s:%s, but no compose service is named %q", name, job, svc, port, svc)
				return
			}
			if !known {
				r.note("service %s: job %s scrapes %s:%s, a service whose config is not read here", name, job, svc, port)
				return
			}
			if key := ports[port]; key != "admin_addr" {
				r.fail("service %s: job %s scrapes %s:%s, but %s serves /metrics on its admin port %s", name, job, svc, port, svc, adminPortOf(ports))
				return
			}
			svcConfig := p.Services[svc]
			if n := svcConfig.GetScale(); n > 1 && !perReplica {
				r.fail("service %s: job %s scrapes %s:%s as one static target, which reaches one of its %d replicas at random (use dns_sd_configs type A)", name, job, svc, port, n)
				return
			}
			scraped[svc+"/"+port] = true
			facts = append(facts, job+" -> "+svc+":"+port)
		}
		for _, sc := range cfg.ScrapeConfigs {
			for _, st := range sc.StaticConfigs {
				for _, t := range st.Targets {
					h, port, err := net.SplitHostPort(t)
					if err != nil {
						r.fail("service %s: job %s: target %q is not host:port", name, sc.JobName, t)
						continue
					}
					if h == "localhost" || h == "127.0.0.1" {
						continue // Prometheus itself
					}
					target(sc.JobName, h, port, false)
				}
			}
			for _, d := range sc.DNSSDConfigs {
				if d.Type != "A" && d.Type != "AAAA" {
					r.note("service %s: job %s: dns_sd_configs type %s is not followed", name, sc.JobName, d.Type)
					continue
				}
				for _, n := range d.Names {
					target(sc.JobName, n, strconv.Itoa(d.Port), true)
				}
			}
		}
		for _, svc := range sortedKeys(listening) {
			if port := adminPortOf(listening[svc]); port != "" && !scraped[svc+"/"+port] {
				r.fail("service %s: no scrape job reaches service %s's admin port %s (its /metrics)", name, svc, port)
			}
		}
		if r.fails == before {
			sort.Strings(facts)
			r.ok("service %s: %s fits the project: %s", name, rel(host), strings.Join(facts, ", "))
		}
	}
}

func adminPortOf(ports map[string]string) string {
	for port, key := range ports {
		if key == "admin_addr" {
			return port
		}
	}
	return ""
}
