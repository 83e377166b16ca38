package main

// A deliberately small Dockerfile reader: it joins continuation lines, drops
// comments, splits instructions into stages and reads the flags and arguments
// of FROM, COPY, ADD, USER, CMD and ENTRYPOINT. It does not expand ARG/ENV
// variables and refuses heredocs and a non-default escape character rather
// than guess at them.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

type instruction struct {
	Cmd   string            // upper case: FROM, COPY, ...
	Flags map[string]string // --from=builder -> from: builder
	Args  []string          // JSON form decoded, else split on white space
	JSON  bool
	Line  int
}

type stage struct {
	Name   string // lower case, "" when unnamed
	Base   string
	Index  int
	Line   int
	Instrs []instruction
}

type dockerfile struct {
	Path   string
	Stages []*stage
	Target *stage
	// Installed maps an absolute path in the target stage's filesystem to
	// where it comes from ("stage builder: /out/hookline-gateway", "context: deploy/config/x").
	Installed  map[string]string
	Entrypoint []string
	Cmd        []string
}

var heredocRe = regexp.MustCompile(`<<-?\s*["']?[A-Za-z_][A-Za-z0-9_]*["']?`)

func parseDockerfile(p string) (*dockerfile, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	df := &dockerfile{Path: p}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1024*1024), 1024*1024)
	lineNo, start := 0, 0
	var buf strings.Builder
	inDirectives := true
	flush := func() error {
		text := strings.TrimSpace(buf.String())
		buf.Reset()
		if text == "" {
			return nil
		}
		return df.add(text, start)
	}
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if inDirectives {
			if m := regexp.MustCompile(`^#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$`).FindStringSubmatch(trimmed); m != nil {
				if strings.EqualFold(m[1], "escape") && m[2] != `\` {
					return nil, fmt.Errorf("line %d: escape=%s is not supported by this checker", lineNo, m[2])
				}
				continue
			}
			inDirectives = false
		}
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && buf.Len() > 0) {
			continue // comments and empty lines inside a continuation are dropped, as docker does
		}
		if buf.Len() == 0 {
			start = lineNo
		}
		if strings.HasSuffix(strings.TrimRight(line, " \t"), `\`) {
			l := strings.TrimRight(line, " \t")
			buf.WriteString(l[:len(l)-1])
			buf.WriteString(" ")
			continue
		}
		buf.WriteString(line)
		if err := flush(); err != nil {
			return nil, err
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(df.Stages) == 0 {
		return nil, fmt.Errorf("no FROM instruction")
	}
	return df, nil
}

func (df *dockerfile) add(text string, line int) error {
	cmd, rest, _ := strings.Cut(text, " ")
	cmd = strings.ToUpper(cmd)
	rest = strings.TrimSpace(rest)
	in := instruction{Cmd: cmd, Flags: map[string]string{}, Line: line}
	if (cmd == "RUN" || cmd == "COPY" || cmd == "ADD") && heredocRe.MatchString(rest) {
		return fmt.Errorf("line %d: heredocs (<<EOF) are not supported by this checker", line)
	}
	// Leading --flags (FROM --platform, COPY --from/--chown/--link, RUN --mount).
	for strings.HasPrefix(rest, "--") {
		tok, tail, _ := strings.Cut(rest, " ")
		k, v, _ := strings.Cut(strings.TrimPrefix(tok, "--"), "=")
		if _, dup := in.Flags[k]; !dup { // RUN --mount repeats: keep the first
			in.Flags[k] = v
		}
		rest = strings.TrimSpace(tail)
	}
	if strings.HasPrefix(rest, "[") {
		var a []string
		if err := json.Unmarshal([]byte(rest), &a); err == nil {
			in.Args, in.JSON = a, true
		}
	}
	if !in.JSON {
		in.Args = strings.Fields(rest)
	}
	if cmd == "FROM" {
		if len(in.Args) == 0 {
			return fmt.Errorf("line %d: FROM without an image", line)
		}
		st := &stage{Base: in.Args[0], Index: len(df.Stages), Line: line}
		if len(in.Args) >= 3 && strings.EqualFold(in.Args[1], "AS") {
			st.Name = strings.ToLower(in.Args[2])
		}
		df.Stages = append(df.Stages, st)
		return nil
	}
	if len(df.Stages) == 0 {
		if cmd == "ARG" {
			return nil // ARG before the first FROM
		}
		return fmt.Errorf("line %d: %s before the first FROM", line, cmd)
	}
	cur := df.Stages[len(df.Stages)-1]
	cur.Instrs = append(cur.Instrs, in)
	return nil
}

// stageRef resolves a stage name or index used before position `before`.
func (df *dockerfile) stageRef(ref string, before int) *stage {
	if i, err := strconv.Atoi(ref); err == nil {
		if i >= 0 && i < before {
			return df.Stages[i]
		}
		return nil
	}
	for _, st := range df.Stages[:before] {
		if st.Name != "" && st.Name == strings.ToLower(ref) {
			return st
		}
	}
	return nil
}

func looksLikeImage(ref string) bool { return strings.ContainsAny(ref, ":/@.") }

// chain returns the stage and the earlier stages it is built FROM, oldest first.
func (df *dockerfile) chain(st *stage) []*stage {
	var out []*stage
	for cur := st; cur != nil; {
		out = append([]*stage{cur}, out...)
		cur = df.stageRef(cur.Base, cur.Index)
	}
	return out
}

func checkDockerfile(r *reporter, dfPath, ctxDir, target string, wantBinaries []string, bindir string, rel func(string) string) *dockerfile {
	name := rel(dfPath)
	df, err := parseDockerfile(dfPath)
	if err != nil {
		r.fail("dockerfile %s: %v", name, err)
		return nil
	}
	var stageNames []string
	seen := map[string]bool{}
	bad := false
	for _, st := range df.Stages {
		label := st.Name
		if label == "" {
			label = fmt.Sprintf("#%d", st.Index)
		} else if seen[st.Name] {
			r.fail("dockerfile %s:%d: stage name %q is used twice", name, st.Line, st.Name)
			bad = true
		}
		seen[st.Name] = true
		stageNames = append(stageNames, label+"("+st.Base+")")
		for _, in := range st.Instrs {
			if from, ok := in.Flags["from"]; ok && (in.Cmd == "COPY" || in.Cmd == "ADD") {
				if df.stageRef(from, st.Index) == nil && !looksLikeImage(from) {
					r.fail("dockerfile %s:%d: COPY --from=%s names no earlier stage", name, in.Line, from)
					bad = true
				}
			}
		}
	}
	df.Target = df.Stages[len(df.Stages)-1]
	if target != "" {
		df.Target = df.stageRef(target, len(df.Stages))
		if df.Target == nil {
			r.fail("dockerfile %s: build target %q is not a stage", name, target)
			return nil
		}
	}
	if !bad {
		r.ok("dockerfile %s: %d stages %s, stage references resolve", name, len(df.Stages), strings.Join(stageNames, " -> "))
	}
	tname := df.Target.Name
	if tname == "" {
		tname = fmt.Sprintf("#%d", df.Target.Index)
	}

	// USER of the target stage (inherited through FROM <stage>).
	user := ""
	for _, st := range df.chain(df.Target) {
		for _, in := range st.Instrs {
			switch in.Cmd {
			case "USER":
				if len(in.Args) > 0 {
					user = in.Args[0]
				}
			case "ENTRYPOINT":
				df.Entrypoint, df.Cmd = shellOrExec(in), nil // ENTRYPOINT resets CMD
			case "CMD":
				df.Cmd = shellOrExec(in)
			}
		}
	}
	u, _, _ := strings.Cut(user, ":")
	switch {
	case user == "":
		r.fail("dockerfile %s: final stage %s sets no USER (the base image's user cannot be known without an engine)", name, tname)
	case u == "root" || u == "0":
		r.fail("dockerfile %s: final stage %s runs as root (USER %s)", name, tname, user)
	case strings.Contains(user, "$"):
		r.fail("dockerfile %s: final stage %s: USER %s uses a variable this checker does not expand", name, tname, user)
	default:
		r.ok("dockerfile %s: final stage %s runs as non-root USER %s", name, tname, user)
	}

	// What the target stage copies in (its FROM chain), and whether the
	// context sources of every stage exist and survive .dockerignore.
	ignore, ignoreFile := loadDockerignore(dfPath, ctxDir)
	df.Installed = map[string]string{}
	inChain := map[*stage]bool{}
	for _, st := range df.chain(df.Target) {
		inChain[st] = true
	}
	var ctxSources []string
	failsBefore := r.fails
	for _, st := range df.Stages {
		installed := df.Installed
		if !inChain[st] {
			installed = map[string]string{}
		}
		workdir := "/"
		for _, in := range st.Instrs {
			if in.Cmd == "WORKDIR" && len(in.Args) > 0 {
				workdir = absIn(workdir, in.Args[0])
			}
			if (in.Cmd != "COPY" && in.Cmd != "ADD") || len(in.Args) < 2 {
				continue
			}
			srcs, dest := in.Args[:len(in.Args)-1], absIn(workdir, in.Args[len(in.Args)-1])
			destIsDir := strings.HasSuffix(in.Args[len(in.Args)-1], "/") || len(srcs) > 1
			from, fromStage := in.Flags["from"]
			for _, src := range srcs {
				if strings.Contains(src, "$") || strings.ContainsAny(src, "*?[") {
					r.note("dockerfile %s:%d: source %s has a variable or wildcard, not followed", name, in.Line, src)
					continue
				}
				if fromStage {
					target := dest
					if destIsDir {
						target = path.Join(dest, path.Base(src))
					}
					installed[target] = "stage " + from + ": " + src
					continue
				}
				if strings.Contains(src, "://") {
					continue // ADD <url>
				}
				ctxSources = append(ctxSources, src)
				checkContextSource(r, name, in.Line, ctxDir, src, dest, destIsDir, ignore, ignoreFile, installed)
			}
		}
	}
	if len(ctxSources) > 0 && r.fails == failsBefore {
		r.ok("dockerfile %s: context sources exist and are not excluded by %s: %s", name, ignoreFile, strings.Join(dedupe(ctxSources), ", "))
	}

	var missing, found []string
	for _, b := range wantBinaries {
		p := path.Join(bindir, b)
		if from, ok := df.Installed[p]; ok {
			found = append(found, b+" <- "+from)
		} else {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		r.fail("dockerfile %s: final stage %s does not COPY %s", name, tname, strings.Join(missing, ", "))
	} else if len(found) > 0 {
		r.ok("dockerfile %s: final stage copies into %s: %s", name, bindir, strings.Join(found, ", "))
	}
	return df
}

func shellOrExec(in instruction) []string {
	if in.JSON {
		return in.Args
	}
	return []string{"/bin/sh", "-c", strings.Join(in.Args, " ")}
}

func absIn(workdir, p string) string {
	if path.IsAbs(p) {
		return path.Clean(p)
	}
	return path.Join(workdir, p)
}

// loadDockerignore: BuildKit reads <Dockerfile>.dockerignore first, then the
// context's .dockerignore.
func loadDockerignore(dfPath, ctxDir string) (*patternmatcher.PatternMatcher, string) {
	for _, p := range []string{dfPath + ".dockerignore", filepath.Join(ctxDir, ".dockerignore")} {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		patterns, err := ignorefile.ReadAll(f)
		f.Close()
		if err != nil {
			continue
		}
		pm, err := patternmatcher.New(patterns)
		if err != nil {
			continue
		}
		return pm, filepath.Base(p)
	}
	return nil, ".dockerignore (none)"
}

func checkContextSource(r *reporter, name string, line int, ctxDir, src, dest string, destIsDir bool,
	ignore *patternmatcher.PatternMatcher, ignoreFile string, installed map[string]string) {
	clean := path.Clean(strings.TrimPrefix(src, "/"))
	host := filepath.Join(ctxDir, filepath.FromSlash(clean))
	st, err := os.Stat(host)
	if err != nil {
		r.fail("dockerfile %s:%d: COPY source %s is not in the build context", name, line, src)
		return
	}
	ignored := func(relPath string) bool {
		if ignore == nil || relPath == "." {
			return false
		}
		m, err := ignore.MatchesOrParentMatches(relPath)
		return err == nil && m
	}
	if clean == "." {
		return // the whole context: what .dockerignore leaves is what is sent
	}
	if !st.IsDir() {
		if ignored(clean) {
			r.fail("dockerfile %s:%d: COPY source %s is excluded by %s", name, line, src, ignoreFile)
			return
		}
		target := dest
		if destIsDir {
			target = path.Join(dest, path.Base(clean))
		}
		installed[target] = "context: " + clean
		return
	}
	var kept, dropped int
	_ = filepath.WalkDir(host, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		relCtx, _ := filepath.Rel(ctxDir, p)
		relCtx = filepath.ToSlash(relCtx)
		if ignored(relCtx) {
			dropped++
			return nil
		}
		kept++
		relSrc, _ := filepath.Rel(host, p)
		installed[path.Join(dest, filepath.ToSlash(relSrc))] = "context: " + relCtx
		return nil
	})
	if dropped > 0 || kept == 0 {
		r.fail("dockerfile %s:%d: COPY source %s: %d of %d files are excluded by %s", name, line, src, dropped, kept+dropped, ignoreFile)
	}
}
