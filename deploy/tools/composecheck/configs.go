package main

// Cross-checks between the compose services built from a Dockerfile, the
// binary they run and the TOML config file they are given with --config, read
// as the binary itself reads it: its --print-config (every default applied).

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/compose-spec/compose-go/v2/types"
)

var defaultPath = []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}

type serviceConfig struct {
	svc        types.ServiceConfig
	df         *dockerfile
	binary     string         // the hookline binary it runs (its base name)
	configPath string         // inside the container
	hostPath   string         // on this machine
	data       map[string]any // the effective config, as the binary's --print-config prints it
}

// checkServiceCommand: the service runs a binary its Dockerfile installs, and
// its --config file (or HOOKLINE_CONFIG) is mounted or baked into the image.
func checkServiceCommand(r *reporter, p *types.Project, s types.ServiceConfig, df *dockerfile, rel func(string) string) *serviceConfig {
	entry, cmd := df.Entrypoint, df.Cmd
	if s.Entrypoint != nil {
		entry, cmd = s.Entrypoint, nil // compose: a new entrypoint drops the image's CMD
	}
	if s.Command != nil {
		cmd = s.Command
	}
	argv := append(append([]string{}, entry...), cmd...)
	if len(argv) == 0 {
		r.fail("service %s: no command (no entrypoint/command in compose or Dockerfile)", s.Name)
		return nil
	}
	bin, from := argv[0], ""
	if strings.Contains(bin, "/") {
		bin = path.Clean(bin)
		from = df.Installed[bin]
	} else {
		for _, d := range defaultPath {
			if f, ok := df.Installed[path.Join(d, bin)]; ok {
				bin, from = path.Join(d, bin), f
				break
			}
		}
	}
	if from == "" {
		r.fail("service %s: runs %q, which %s does not COPY into its final stage (programs of the base image cannot be checked without an engine)",
			s.Name, argv[0], rel(df.Path))
		return nil
	}

	cfgPath := ""
	for i, a := range argv {
		if a == "--config" && i+1 < len(argv) {
			cfgPath = argv[i+1]
		} else if v, ok := strings.CutPrefix(a, "--config="); ok {
			cfgPath = v
		}
	}
	if cfgPath == "" {
		if v := s.Environment["HOOKLINE_CONFIG"]; v != nil {
			cfgPath = *v
		}
	}
	if cfgPath == "" {
		r.ok("service %s: runs %s (%s), no --config", s.Name, bin, from)
		return nil
	}
	cfgPath = path.Clean(cfgPath)
	host, how := "", ""
	for _, v := range s.Volumes {
		if v.Type != types.VolumeTypeBind {
			continue
		}
		t := path.Clean(v.Target)
		if t == cfgPath {
			host, how = v.Source, "bind mount"
		} else if strings.HasPrefix(cfgPath, t+"/") && host == "" {
			host, how = filepath.Join(v.Source, filepath.FromSlash(strings.TrimPrefix(cfgPath, t+"/"))), "bind mount"
		}
	}
	if host == "" {
		if src, ok := strings.CutPrefix(df.Installed[cfgPath], "context: "); ok {
			host, how = filepath.Join(s.Build.Context, filepath.FromSlash(src)), "baked into the image"
		}
	}
	if host == "" {
		r.fail("service %s: --config %s is neither bind-mounted nor copied into the image", s.Name, cfgPath)
		return nil
	}
	if _, err := os.Stat(host); err != nil {
		r.fail("service %s: --config %s: %s does not exist", s.Name, cfgPath, rel(host))
		return nil
	}
	r.ok("service %s: runs %s (%s) --config %s (%s %s)", s.Name, bin, from, cfgPath, how, rel(host))
	return &serviceConfig{svc: s, df: df, binary: path.Base(bin), configPath: cfgPath, hostPath: host}
}

// checkConfigs returns, per service with a config, the ports it listens on (port -> config key).
func checkConfigs(r *reporter, p *types.Project, cfgs []*serviceConfig, rel func(string) string) map[string]map[string]string {
	listening := map[string]map[string]string{}
	hosts := map[string]string{} // DNS names on the compose network -> service
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		hosts[name] = name
		if s.Hostname != "" {
			hosts[s.Hostname] = name
		}
		for _, n := range s.Networks {
			if n != nil {
				for _, a := range n.Aliases {
					hosts[a] = name
				}
			}
		}
	}
	topics := map[string]map[string][]string{} // key -> value -> services

	for _, sc := range cfgs {
		s := sc.svc
		before := r.fails
		data, err := effectiveConfig(sc.binary, sc.hostPath, rel)
		if err != nil {
			r.fail("service %s: %s: %v", s.Name, rel(sc.hostPath), err)
			continue
		}
		sc.data = data
		env := func(k string) (string, bool) {
			if v, ok := s.Environment[k]; ok && v != nil {
				return *v, true
			}
			return "", false
		}
		var facts []string

		kafka, _ := sc.data["kafka"].(map[string]any)
		brokers, _ := kafka["brokers"].(string)
		if v, ok := env("HOOKLINE_KAFKA_BROKERS"); ok {
			brokers = v
		}
		if ra, _ := kafka["record_auth"].(map[string]any); ra != nil {
			// A window in which records without a MAC are processed is for one upgrade, by hand: a shipped config
			// must never carry one (docs/security.md, N10).
			if until, ok := ra["accept_unsigned_until"].(string); ok && until != "" {
				r.fail("service %s: %s: kafka.record_auth.accept_unsigned_until = %q: records without a MAC would be processed; a shipped config must not open that window", s.Name, rel(sc.hostPath), until)
			}
		}
		if kafka != nil || brokers != "" {
			if brokers == "" {
				r.fail("service %s: %s: [kafka] has no brokers", s.Name, rel(sc.hostPath))
			}
			for _, b := range strings.Split(brokers, ",") {
				if b = strings.TrimSpace(b); b == "" {
					continue
				}
				h, _, err := net.SplitHostPort(b)
				if err != nil {
					r.fail("service %s: broker %q is not host:port", s.Name, b)
				} else if svc, ok := hosts[h]; !ok {
					r.fail("service %s: broker %s: no compose service is named %q", s.Name, b, h)
				} else {
					facts = append(facts, "broker "+b+" -> service "+svc)
				}
			}
			for k, v := range kafka {
				// kafka.retry_topic is the base name of the consumer services' retry topics (their own
				// checks below), not a topic, and no other binary uses it.
				if t, ok := v.(string); ok && strings.HasSuffix(k, "_topic") && k != "retry_topic" {
					if topics[k] == nil {
						topics[k] = map[string][]string{}
					}
					topics[k][t] = append(topics[k][t], s.Name)
				}
			}
		}

		redisCfg, _ := sc.data["redis"].(map[string]any)
		redisURL, _ := redisCfg["url"].(string)
		if v, ok := env("HOOKLINE_REDIS_URL"); ok {
			redisURL = v
		}
		if redisCfg != nil || redisURL != "" {
			u, err := url.Parse(redisURL)
			if err != nil || u.Hostname() == "" {
				r.fail("service %s: redis url %q has no host", s.Name, redisURL)
			} else if svc, ok := hosts[u.Hostname()]; !ok {
				r.fail("service %s: redis url %s: no compose service is named %q", s.Name, redisURL, u.Hostname())
			} else {
				facts = append(facts, "redis "+u.Host+" -> service "+svc)
			}
		}

		// [[sources]] [[sources.secrets]]: env = "NAME" must be set in the
		// service's environment; file = "/path" must be mounted.
		sources, _ := sc.data["sources"].([]map[string]any)
		for _, src := range sources {
			secrets, _ := src["secrets"].([]map[string]any)
			for _, sec := range secrets {
				name, _ := sec["env"].(string)
				file, _ := sec["file"].(string)
				switch v, ok := env(name); {
				case name == "" && file != "":
					if mounted(s, file) {
						facts = append(facts, fmt.Sprintf("source %v secret from file %s (mounted)", src["name"], file))
					} else {
						r.fail("service %s: source %v reads its secret from %s, which no volume or secret of the service provides", s.Name, src["name"], file)
					}
				case name == "":
					r.fail("service %s: source %v: a secret with neither env = \"VAR\" nor file = \"/path\"", s.Name, src["name"])
				case !ok || v == "":
					r.fail("service %s: source %v reads its secret from $%s, which the service's environment does not set", s.Name, src["name"], name)
				default:
					facts = append(facts, fmt.Sprintf("source %v secret from $%s (set)", src["name"], name))
				}
			}
		}

		// Published ports must be ports the service listens on.
		listen := map[string]string{}
		for _, k := range []string{"listen_addr", "admin_addr"} {
			a, _ := sc.data[k].(string)
			if v, ok := env("HOOKLINE_" + strings.ToUpper(k)); ok {
				a = v
			}
			if a == "" {
				continue
			}
			if _, port, err := net.SplitHostPort(a); err != nil {
				r.fail("service %s: %s %q is not host:port", s.Name, k, a)
			} else {
				listen[port] = k
			}
		}
		for _, port := range s.Ports {
			t := fmt.Sprint(port.Target)
			if k, ok := listen[t]; ok {
				facts = append(facts, fmt.Sprintf("published %s = %s", t, k))
			} else {
				r.fail("service %s: publishes container port %s, but %s listens on %s", s.Name, t, rel(sc.hostPath), keys(listen))
			}
		}
		listening[s.Name] = listen
		if f := checkHealthcheck(r, sc, listen); f != "" {
			facts = append(facts, f)
		}
		if r.fails == before {
			r.ok("service %s: %s agrees with the compose file: %s", s.Name, rel(sc.hostPath), strings.Join(facts, "; "))
		}
	}

	// Topic names agree across services and some service creates each one.
	var script strings.Builder
	for _, name := range p.ServiceNames() {
		s := p.Services[name]
		script.WriteString(strings.Join(s.Entrypoint, " ") + " " + strings.Join(s.Command, " ") + "\n")
	}
	all := script.String()
	checkConsumerServices(r, cfgs, all)
	var created []string
	for _, k := range sortedKeys(topics) {
		if len(topics[k]) > 1 {
			var parts []string
			for v, svcs := range topics[k] {
				parts = append(parts, fmt.Sprintf("%s in %s", v, strings.Join(svcs, ",")))
			}
			sort.Strings(parts)
			r.fail("kafka.%s differs between services: %s", k, strings.Join(parts, "; "))
			continue
		}
		for t := range topics[k] {
			if createdByScript(all, t) {
				created = append(created, t)
				if k == "dlq_topic" && !dlqRetentionUnlimited(all, t) {
					r.fail("kafka.%s = %q: created without --config retention.ms=-1: a dead letter nobody triaged would expire unseen", k, t)
				}
			} else {
				r.fail("kafka.%s = %q: no service creates it (no kafka-topics --create --topic %s in any command)", k, t, t)
			}
		}
	}
	if len(created) > 0 {
		r.ok("kafka topics named in the configs agree across services and are created at startup: %s", strings.Join(created, ", "))
	}
	copies := map[string]bool{}
	for _, sc := range cfgs {
		if cs, ok := consumerServiceOf(sc); ok {
			copies[cs.retryTopic] = true
		}
	}
	for t := range topics["dlq_topic"] {
		copies[t] = true
	}
	for t := range topics["inbound_topic"] {
		checkCopyLimits(r, all, t, sortedKeys(copies))
	}
	return listening
}

// checkHealthcheck: a service built from our Dockerfile that has an admin
// listener has a healthcheck, the program it runs is one the Dockerfile
// installs (the base image's programs cannot be seen without an engine), and
// a port it names is the admin port of the service's config.
func checkHealthcheck(r *reporter, sc *serviceConfig, listen map[string]string) string {
	s := sc.svc
	adminPort := ""
	for port, key := range listen {
		if key == "admin_addr" {
			adminPort = port
		}
	}
	hc := s.HealthCheck
	if hc == nil || hc.Disable || len(hc.Test) == 0 || hc.Test[0] == "NONE" {
		if adminPort != "" {
			r.fail("service %s: no healthcheck, though it serves /readyz on admin port %s", s.Name, adminPort)
		}
		return ""
	}
	argv := hc.Test
	switch argv[0] {
	case "CMD":
		argv = argv[1:]
	case "CMD-SHELL":
		r.note("service %s: CMD-SHELL healthcheck is not followed", s.Name)
		return ""
	}
	if len(argv) == 0 {
		r.fail("service %s: empty healthcheck", s.Name)
		return ""
	}
	bin := argv[0]
	if !strings.Contains(bin, "/") {
		for _, d := range defaultPath {
			if _, ok := sc.df.Installed[path.Join(d, bin)]; ok {
				bin = path.Join(d, bin)
				break
			}
		}
	}
	if _, ok := sc.df.Installed[bin]; !ok {
		r.fail("service %s: healthcheck runs %q, which %s does not COPY into its final stage", s.Name, argv[0], filepath.Base(sc.df.Path))
		return ""
	}
	for _, a := range argv[1:] {
		if _, err := strconv.Atoi(a); err == nil {
			if key, ok := listen[a]; !ok || key != "admin_addr" {
				r.fail("service %s: healthcheck probes port %s, but the admin port (admin_addr) is %s", s.Name, a, adminPort)
				return ""
			}
			return fmt.Sprintf("healthcheck %s on admin port %s", path.Base(bin), a)
		}
	}
	r.fail("service %s: healthcheck %v names no port (want the admin port %s)", s.Name, hc.Test, adminPort)
	return ""
}

func keys(m map[string]string) string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "no port"
	}
	return strings.Join(out, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// mounted: a file path inside the container is provided by a volume or a
// compose secret of the service.
func mounted(s types.ServiceConfig, file string) bool {
	file = path.Clean(file)
	for _, v := range s.Volumes {
		t := path.Clean(v.Target)
		if file == t || strings.HasPrefix(file, t+"/") {
			return true
		}
	}
	for _, sec := range s.Secrets {
		t := sec.Target
		if t == "" {
			t = sec.Source
		}
		if !path.IsAbs(t) {
			t = path.Join("/run/secrets", t)
		}
		if file == path.Clean(t) {
			return true
		}
	}
	return false
}

// createdByScript: some command of the compose file creates topic t (kafka-topics --create ... --topic t).
func createdByScript(script, t string) bool {
	re := regexp.MustCompile(`--topic[= ]+['"]?` + regexp.QuoteMeta(t) + `['"]?(\s|$)`)
	return strings.Contains(script, "--create") && re.MatchString(script)
}

// dlqRetentionUnlimited: the line that creates topic t sets retention.ms=-1, so no DLQ entry ever expires.
func dlqRetentionUnlimited(script, t string) bool {
	create := regexp.MustCompile(`--topic[= ]+['"]?` + regexp.QuoteMeta(t) + `['"]?(\s|$)`)
	retention := regexp.MustCompile(`--config[= ]+['"]?retention\.ms=-1['"]?(\s|$)`)
	for _, line := range strings.Split(script, "\n") {
		if create.MatchString(line) && retention.MatchString(line) {
			return true
		}
	}
	return false
}

// binDir holds the built hookline binaries (set by -built); hooklineBinaries
// are their names (-binaries).
var (
	binDir           string
	hooklineBinaries = map[string]bool{}
)

// effectiveConfig runs `<binary> --config <file> --print-config` with an empty
// environment (the service's HOOKLINE_* overrides are applied by the checks, from
// the compose environment) and decodes what it prints.
func effectiveConfig(binary, file string, rel func(string) string) (map[string]any, error) {
	if !hooklineBinaries[binary] {
		return nil, fmt.Errorf("%s is not a hookline binary, whose --print-config could read it", binary)
	}
	cmd := exec.Command(filepath.Join(binDir, binary), "--config", file, "--print-config")
	cmd.Env = []string{}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.Join(strings.Fields(strings.ReplaceAll(stderr.String(), file, rel(file))), " ")
		return nil, fmt.Errorf("%s --print-config refuses it (%v): %s", binary, err, msg)
	}
	var cfg map[string]any
	if _, err := toml.Decode(stdout.String(), &cfg); err != nil {
		return nil, fmt.Errorf("%s --print-config printed invalid TOML: %v", binary, err)
	}
	return cfg, nil
}
