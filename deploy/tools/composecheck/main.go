// composecheck validates a Docker Compose project without a Docker engine.
//
// It loads the compose file with compose-go (the library docker compose itself
// uses): YAML parsing, merge keys, ${VAR} interpolation, the compose-spec JSON
// schema and the consistency checks (undefined depends_on, networks, volumes).
// On top of that it runs a few static checks that need no engine:
//
//   - every ${VAR} has a default or is explicitly required (${VAR:?msg});
//   - images without a build are pinned to a tag other than latest;
//   - published ports are bound to a loopback address;
//   - bind mounts from the project exist and are read-only;
//   - each Dockerfile: stages and COPY --from references resolve, the final
//     stage sets a non-root USER, the expected binaries are copied into the
//     bin dir, context COPY sources exist and are not excluded by
//     .dockerignore;
//   - each built service runs a binary the Dockerfile installs, and its
//     --config file is accepted by that binary's --print-config (run from
//     -built, the cargo build of the same sources), whose effective config,
//     defaults included, agrees with the compose file: broker
//     and redis hosts are services, secret env vars are set, published ports
//     are the ones it listens on, Kafka topic names agree across services and
//     some service creates them;
//   - each such service with an admin listener has a healthcheck that runs a
//     program its Dockerfile installs and probes the admin port;
//   - a Prometheus service's prometheus.yml: its rule files are mounted, every
//     scrape target is a service's admin port, a service with replicas is
//     discovered per replica (DNS A records), and no admin port goes unscraped.
//
// What it cannot see: anything only an engine or a registry knows (that an
// image tag exists, what a base image contains, whether the build compiles).
//
// Usage: composecheck -built DIR [-binaries a,b,c] [-bindir /usr/local/bin] [-prefix p] COMPOSE_FILE
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/template"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/distribution/reference"
	"github.com/sirupsen/logrus"
	"go.yaml.in/yaml/v4"
)

type reporter struct {
	prefix string
	fails  int
}

func (r *reporter) ok(format string, a ...any) {
	fmt.Printf("%s: ok %s\n", r.prefix, fmt.Sprintf(format, a...))
}

func (r *reporter) note(format string, a ...any) {
	fmt.Printf("%s: note %s\n", r.prefix, fmt.Sprintf(format, a...))
}

func (r *reporter) fail(format string, a ...any) {
	r.fails++
	fmt.Printf("%s: FAIL %s\n", r.prefix, fmt.Sprintf(format, a...))
}

// warnHook collects what compose-go logs as warnings (unset variables,
// obsolete keys...): a clean compose file produces none.
type warnHook struct{ msgs []string }

func (h *warnHook) Levels() []logrus.Level {
	return []logrus.Level{logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel, logrus.WarnLevel}
}

func (h *warnHook) Fire(e *logrus.Entry) error {
	h.msgs = append(h.msgs, e.Message)
	return nil
}

func main() {
	binaries := flag.String("binaries", "", "comma-separated binaries the Dockerfile(s) must copy into -bindir")
	bindir := flag.String("bindir", "/usr/local/bin", "where the binaries must be installed")
	prefix := flag.String("prefix", "composecheck", "prefix of every output line")
	flag.StringVar(&binDir, "built", "", "the directory of the built hookline binaries: each service's config is read through its binary's --print-config")
	flag.Parse()
	if flag.NArg() != 1 || binDir == "" {
		fmt.Fprintln(os.Stderr, "usage: composecheck -built dir [-binaries a,b] [-bindir dir] [-prefix p] COMPOSE_FILE")
		os.Exit(2)
	}
	r := &reporter{prefix: *prefix}
	composeFile, err := filepath.Abs(flag.Arg(0))
	if err != nil {
		r.fail("%v", err)
		os.Exit(1)
	}
	var want []string
	for _, b := range strings.Split(*binaries, ",") {
		if b = strings.TrimSpace(b); b != "" {
			want = append(want, b)
			hooklineBinaries[b] = true
		}
	}
	run(r, composeFile, want, *bindir)
	if r.fails > 0 {
		fmt.Printf("%s: %d check(s) failed\n", r.prefix, r.fails)
		os.Exit(1)
	}
}

func run(r *reporter, composeFile string, wantBinaries []string, bindir string) {
	dir := filepath.Dir(composeFile)
	rel := func(p string) string {
		if s, err := filepath.Rel(dir, p); err == nil && !strings.HasPrefix(s, "..") {
			return s
		}
		return p
	}

	raw, err := os.ReadFile(composeFile)
	if err != nil {
		r.fail("read %s: %v", composeFile, err)
		return
	}

	hook := &warnHook{}
	logrus.SetOutput(io.Discard)
	logrus.AddHook(hook)

	opts, err := cli.NewProjectOptions([]string{composeFile},
		cli.WithWorkingDirectory(dir),
		cli.WithOsEnv,
		cli.WithDotEnv,
		cli.WithProfiles([]string{"*"}), // check services behind every profile too
		cli.WithInterpolation(true),
		cli.WithResolvedPaths(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
	)
	if err != nil {
		r.fail("compose options: %v", err)
		return
	}
	// ${VAR:?msg} is how the file refuses to start without a secret the operator
	// must choose (no working default); check the rest of the file as if it
	// were set.
	if required := requiredVariables(raw); len(required) > 0 {
		for _, name := range required {
			if _, set := opts.Environment[name]; !set {
				opts.Environment[name] = "placeholder-for-" + name
			}
		}
		r.ok("compose: required variables, no default (compose refuses to start without them): %s", strings.Join(required, ", "))
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		r.fail("compose %s: %v", filepath.Base(composeFile), err)
		return
	}
	names := project.ServiceNames()
	sort.Strings(names)
	r.ok("compose %s: loaded, interpolated and valid against the compose spec (project %q, %d services: %s; %d volumes)",
		filepath.Base(composeFile), project.Name, len(names), strings.Join(names, ", "), len(project.Volumes))
	if len(hook.msgs) > 0 {
		for _, m := range hook.msgs {
			r.fail("compose loader warning: %s", m)
		}
	} else {
		r.ok("compose: the loader logged no warnings")
	}

	checkVariables(r, raw)
	checkImages(r, project)
	checkPorts(r, project)
	checkBindMounts(r, project, dir, rel)

	// Dockerfiles, then each built service against its Dockerfile and config.
	dfs := map[string]*dockerfile{}
	cfgs := []*serviceConfig{}
	for _, name := range names {
		s := project.Services[name]
		if s.Build == nil {
			continue
		}
		if s.Build.DockerfileInline != "" {
			r.note("service %s: dockerfile_inline is not checked", name)
			continue
		}
		ctxDir := s.Build.Context
		if strings.Contains(ctxDir, "://") {
			r.note("service %s: remote build context %s is not checked", name, ctxDir)
			continue
		}
		if st, err := os.Stat(ctxDir); err != nil || !st.IsDir() {
			r.fail("service %s: build context %s is not a directory", name, rel(ctxDir))
			continue
		}
		dfPath := s.Build.Dockerfile
		if dfPath == "" {
			dfPath = "Dockerfile"
		}
		if !filepath.IsAbs(dfPath) {
			dfPath = filepath.Join(ctxDir, dfPath)
		}
		key := dfPath + "\x00" + ctxDir + "\x00" + s.Build.Target
		df, seen := dfs[key]
		if !seen {
			df = checkDockerfile(r, dfPath, ctxDir, s.Build.Target, wantBinaries, bindir, rel)
			dfs[key] = df
		}
		if df == nil {
			continue
		}
		if sc := checkServiceCommand(r, project, s, df, rel); sc != nil {
			cfgs = append(cfgs, sc)
		}
	}
	if len(dfs) == 0 && len(wantBinaries) > 0 {
		r.fail("no service is built from a Dockerfile, but binaries %s were expected", strings.Join(wantBinaries, ", "))
	}
	listening := checkConfigs(r, project, cfgs, rel)
	var keys []recordKeys
	for _, sc := range cfgs {
		if sc.data != nil {
			keys = append(keys, recordKeysOf("service "+sc.svc.Name, sc.binary, sc.data))
		}
	}
	checkRecordKeyRoles(r, keys)
	checkPrometheus(r, project, listening, rel)
}

// requiredVariables: the names of the ${VAR:?msg} variables in the file, sorted.
func requiredVariables(raw []byte) []string {
	var model map[string]any
	if err := yaml.Unmarshal(raw, &model); err != nil {
		return nil
	}
	var required []string
	for n, v := range template.ExtractVariables(model, template.DefaultPattern) {
		if v.Required {
			required = append(required, n)
		}
	}
	sort.Strings(required)
	return required
}

// checkVariables: every ${VAR} in the file has a default (${VAR:-x}, ${VAR-x})
// or is explicitly required (${VAR:?msg}); a bare ${VAR} silently becomes ""
// on a machine where it is unset.
func checkVariables(r *reporter, raw []byte) {
	var model map[string]any
	if err := yaml.Unmarshal(raw, &model); err != nil {
		r.fail("compose: raw YAML: %v", err)
		return
	}
	vars := template.ExtractVariables(model, template.DefaultPattern)
	var names, bad []string
	for n, v := range vars {
		names = append(names, n)
		if v.DefaultValue == "" && !v.Required && !hasDefault(raw, n) {
			bad = append(bad, n)
		}
	}
	sort.Strings(names)
	sort.Strings(bad)
	if len(bad) > 0 {
		r.fail("compose: variables without a default (they become empty where unset): %s", strings.Join(bad, ", "))
		return
	}
	if len(names) == 0 {
		r.ok("compose: no ${VAR} interpolation")
		return
	}
	r.ok("compose: every ${VAR} has a default or is required: %s", strings.Join(names, ", "))
}

// hasDefault tells ${VAR:-} / ${VAR-} (an explicit empty default) apart from a
// bare ${VAR}, which ExtractVariables reports alike.
func hasDefault(raw []byte, name string) bool {
	s := string(raw)
	for _, op := range []string{":-", "-", ":+", "+", ":?", "?"} {
		if strings.Contains(s, "${"+name+op) {
			return true
		}
	}
	return false
}

func checkImages(r *reporter, p *types.Project) {
	var pinned []string
	for _, name := range sortedNames(p) {
		s := p.Services[name]
		if s.Build != nil || s.Image == "" {
			continue
		}
		ref, err := reference.ParseNormalizedNamed(s.Image)
		if err != nil {
			r.fail("service %s: image %q: %v", name, s.Image, err)
			continue
		}
		_, digested := ref.(reference.Canonical)
		tagged, hasTag := ref.(reference.Tagged)
		switch {
		case digested:
		case !hasTag:
			r.fail("service %s: image %q has no tag (it would float on latest)", name, s.Image)
			continue
		case tagged.Tag() == "latest":
			r.fail("service %s: image %q is not pinned (latest)", name, s.Image)
			continue
		}
		pinned = append(pinned, name+"="+s.Image)
	}
	if len(pinned) > 0 {
		r.ok("images pinned to a tag: %s", strings.Join(dedupe(pinned), ", "))
	}
}

func checkPorts(r *reporter, p *types.Project) {
	var seen []string
	taken := map[string]string{}
	for _, name := range sortedNames(p) {
		s := p.Services[name]
		for _, port := range s.Ports {
			desc := fmt.Sprintf("%s %s:%s->%d", name, port.HostIP, port.Published, port.Target)
			if port.Published != "" && !strings.Contains(port.Published, "-") {
				hostPort := port.HostIP + ":" + port.Published + "/" + port.Protocol
				if other, dup := taken[hostPort]; dup {
					r.fail("services %s and %s both publish %s", other, name, hostPort)
				}
				taken[hostPort] = name
				if s.GetScale() > 1 {
					r.fail("service %s: %d replicas cannot all publish host port %s", name, s.GetScale(), port.Published)
				}
			}
			switch port.HostIP {
			case "127.0.0.1", "::1", "localhost":
				seen = append(seen, desc)
			default:
				on := port.HostIP
				if on == "" || on == "0.0.0.0" || on == "::" {
					on = "all interfaces"
				}
				r.fail("service %s: port %d is published on %s, not on loopback (use \"127.0.0.1:%s:%d\")",
					name, port.Target, on, port.Published, port.Target)
			}
		}
	}
	if len(seen) > 0 {
		r.ok("published ports are bound to loopback: %s", strings.Join(seen, ", "))
	}
}

func checkBindMounts(r *reporter, p *types.Project, dir string, rel func(string) string) {
	var seen []string
	for _, name := range sortedNames(p) {
		for _, v := range p.Services[name].Volumes {
			if v.Type != types.VolumeTypeBind {
				continue
			}
			if _, err := os.Stat(v.Source); err != nil {
				r.fail("service %s: bind mount source %s does not exist", name, rel(v.Source))
				continue
			}
			inProject := strings.HasPrefix(v.Source, dir+string(filepath.Separator))
			if inProject && !v.ReadOnly {
				r.fail("service %s: bind mount %s -> %s is writable (add read_only: true)", name, rel(v.Source), v.Target)
				continue
			}
			seen = append(seen, fmt.Sprintf("%s %s->%s", name, rel(v.Source), v.Target))
		}
	}
	if len(seen) > 0 {
		r.ok("bind mounts exist and are read-only: %s", strings.Join(seen, ", "))
	}
}

func sortedNames(p *types.Project) []string {
	n := p.ServiceNames()
	sort.Strings(n)
	return n
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
