package main

// The Dockerfile as BuildKit itself reads it (its parser and typed
// instructions: continuations, comments, the escape directive, heredocs and
// JSON or shell forms are BuildKit's business), reduced to what the checks
// below need: each stage's base and its COPY, ADD, USER, WORKDIR, CMD and
// ENTRYPOINT.

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

type instruction struct {
	Cmd   string            // upper case: COPY, USER, ...
	Flags map[string]string // --from=builder -> from: builder
	Args  []string          // sources then destination; the USER; the command line
	JSON  bool              // CMD/ENTRYPOINT in exec form
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

func parseDockerfile(p string) (*dockerfile, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ast, err := parser.Parse(f)
	if err != nil {
		return nil, err
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		return nil, err
	}
	if len(stages) == 0 {
		return nil, fmt.Errorf("no FROM instruction")
	}
	df := &dockerfile{Path: p}
	for i, bs := range stages {
		st := &stage{Name: strings.ToLower(bs.Name), Base: bs.BaseName, Index: i, Line: firstLine(bs.Location)}
		for _, c := range bs.Commands {
			in := instruction{Cmd: strings.ToUpper(c.Name()), Flags: map[string]string{}, Line: firstLine(c.Location())}
			switch c := c.(type) {
			case *instructions.CopyCommand:
				if c.From != "" {
					in.Flags["from"] = c.From
				}
				in.Args = append(append(in.Args, c.SourcePaths...), c.DestPath)
			case *instructions.AddCommand:
				in.Args = append(append(in.Args, c.SourcePaths...), c.DestPath)
			case *instructions.UserCommand:
				in.Args = []string{c.User}
			case *instructions.WorkdirCommand:
				in.Args = []string{c.Path}
			case *instructions.CmdCommand:
				in.Args, in.JSON = c.CmdLine, !c.PrependShell
			case *instructions.EntrypointCommand:
				in.Args, in.JSON = c.CmdLine, !c.PrependShell
			default:
				continue
			}
			st.Instrs = append(st.Instrs, in)
		}
		df.Stages = append(df.Stages, st)
	}
	return df, nil
}

func firstLine(loc []parser.Range) int {
	if len(loc) == 0 {
		return 0
	}
	return loc[0].Start.Line
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
		stageNames = append(stageNames, shortBase(label, st.Base))
		// A base image named by tag alone is whatever the registry serves that day: pinned by the digest of its
		// index, a rebuild takes the same bytes until someone refreshes the pin (docs/security.md, F17).
		if df.stageRef(st.Base, st.Index) == nil && st.Base != "scratch" && !pinnedByDigest(st.Base) {
			r.fail("dockerfile %s:%d: base image %s is not pinned by digest (write it as image:tag@sha256:<index digest>)", name, st.Line, st.Base)
			bad = true
		}
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

// pinnedByDigest says whether an image reference ends in @sha256:<64 hex digits>.
func pinnedByDigest(ref string) bool {
	_, digest, ok := strings.Cut(ref, "@sha256:")
	if !ok || len(digest) != 64 {
		return false
	}
	for _, c := range digest {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// shortBase labels a stage with its base image, without the digest (too long for a report line).
func shortBase(label, base string) string {
	image, _, _ := strings.Cut(base, "@")
	return label + "(" + image + ")"
}
