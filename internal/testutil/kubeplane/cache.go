package kubeplane

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CacheEnv overrides the root of the control plane cache, as it does for
// scripts/kube-cache.sh.
const CacheEnv = "FLEET_AGENT_KUBE_CACHE"

// Version is the Kubernetes release the cache holds; the script's recipe
// block must name the same one.
const Version = "v1.37.2"

// Binaries are the programs a complete cache holds in its bin directory.
var Binaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

const script = "scripts/kube-cache.sh"

// Cache is a located control plane cache.
type Cache struct {
	Dir    string // ROOT/v1.37.2-<recipe hash>
	Recipe string // the recipe hash
}

// Bin is the path of one of the cached programs.
func (c Cache) Bin(name string) string { return filepath.Join(c.Dir, "bin", name) }

// FindCache finds the cache directory by the script's rule: the root is
// $FLEET_AGENT_KUBE_CACHE or $HOME/.cache/fleet-agent/kube, the key is the
// version and the first 12 hex digits of the SHA-256 of the script's recipe
// block (the lines from "# recipe: begin" to "# recipe: end"). The script is
// found by walking up from the working directory (go test runs in the
// package's directory) to the module root. It returns an error saying how
// to build the cache when it is missing or incomplete.
func FindCache() (Cache, error) {
	root, err := repoRoot()
	if err != nil {
		return Cache{}, err
	}
	return findCache(filepath.Join(root, script))
}

func findCache(scriptPath string) (Cache, error) {
	src, err := os.ReadFile(scriptPath)
	if err != nil {
		return Cache{}, fmt.Errorf("kubeplane: cannot read the cache recipe: %w", err)
	}
	recipe, err := recipeHash(src)
	if err != nil {
		return Cache{}, err
	}
	base := os.Getenv(CacheEnv)
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return Cache{}, fmt.Errorf("kubeplane: no $HOME to find the cache under, and %s is not set: %w", CacheEnv, err)
		}
		base = filepath.Join(home, ".cache", "fleet-agent", "kube")
	}
	c := Cache{Dir: filepath.Join(base, Version+"-"+recipe), Recipe: recipe}
	if err := c.check(); err != nil {
		return c, fmt.Errorf("kubeplane: the Kubernetes control plane cache %s is not built (%v): run `make kube` "+
			"(about 30 minutes on 2 cores, once per machine; %s=DIR puts it elsewhere)", c.Dir, err, CacheEnv)
	}
	return c, nil
}

// recipeHash hashes the recipe block exactly as the script's
// `sed -n '/^# recipe: begin/,/^# recipe: end/p' | sha256sum` does.
func recipeHash(src []byte) (string, error) {
	var block bytes.Buffer
	in, done := false, false
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() && !done {
		line := sc.Text()
		if !in && strings.HasPrefix(line, "# recipe: begin") {
			in = true
		}
		if in {
			block.WriteString(line)
			block.WriteByte('\n')
			done = strings.HasPrefix(line, "# recipe: end")
		}
	}
	if !done {
		return "", errors.New("kubeplane: " + script + " has no complete recipe block (# recipe: begin ... # recipe: end)")
	}
	if !strings.Contains(block.String(), "K8S_VERSION="+Version+"\n") {
		return "", fmt.Errorf("kubeplane: %s builds another Kubernetes than this package's Version %s: change both", script, Version)
	}
	sum := sha256.Sum256(block.Bytes())
	return hex.EncodeToString(sum[:])[:12], nil
}

// check: the stamp names this recipe and every file it lists has its
// size, as the script's own warm check does (the script's --verify also
// compares checksums). The stamp is written last, inside the directory the
// script renames into place, so its presence says the build finished.
func (c Cache) check() error {
	stamp, err := os.ReadFile(filepath.Join(c.Dir, "stamp"))
	if err != nil {
		return errors.New("no stamp file")
	}
	lines := strings.Split(strings.TrimSpace(string(stamp)), "\n")
	if lines[0] != "recipe "+c.Recipe {
		return fmt.Errorf("stamp says %q, want recipe %s", lines[0], c.Recipe)
	}
	for _, b := range Binaries {
		fi, err := os.Stat(c.Bin(b))
		if err != nil || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s missing", b)
		}
	}
	sized := 0
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "size" {
			continue
		}
		sized++
		fi, err := os.Stat(filepath.Join(c.Dir, f[2]))
		if err != nil || strconv.FormatInt(fi.Size(), 10) != f[1] {
			return fmt.Errorf("%s is not the file the build stamped", f[2])
		}
	}
	if sized < len(Binaries) {
		return errors.New("the stamp lists no sizes: a cache from an older script")
	}
	return nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, script)); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("kubeplane: no %s above the working directory: run the tests inside the fleet-agent module", script)
		}
		dir = parent
	}
}
