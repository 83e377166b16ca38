package main

// The effective config of a service, as its own binary prints it: the file,
// every default and validation are the binary's, not a copy kept here.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"
)

// binDir holds the built hookline binaries (set by -bin-dir).
var binDir string

// effectiveConfig runs `<binary> --config <file> --print-config` with an empty
// environment (the HOOKLINE_* overrides of the manifests are applied by the
// checks themselves, from the container's env) and decodes what it prints.
// text is the config file's content, name its file name (relative schema paths
// and the like resolve beside it).
func effectiveConfig(binary, name, text string) (map[string]any, error) {
	dir, err := os.MkdirTemp("", "opscheck-config-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, filepath.Base(name))
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(binDir, binary), "--config", file, "--print-config")
	cmd.Env = []string{}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.Join(strings.Fields(strings.ReplaceAll(stderr.String(), file, name)), " ")
		return nil, fmt.Errorf("%s --print-config refuses it (%v): %s", binary, err, msg)
	}
	var cfg map[string]any
	if _, err := toml.Decode(stdout.String(), &cfg); err != nil {
		return nil, fmt.Errorf("%s --print-config printed invalid TOML: %v", binary, err)
	}
	return cfg, nil
}

// configInt is an integer of the effective config; every key has a value there
// (the defaults are applied), so a missing one is a failure, never a guess.
func configInt(r *reporter, where string, cfg map[string]any, keys ...string) int64 {
	var cur any = cfg
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			cur = nil
			break
		}
		cur = m[k]
	}
	if v, ok := cur.(int64); ok {
		return v
	}
	r.fail("%s: the effective config has no integer %s", where, strings.Join(keys, "."))
	return 0
}
