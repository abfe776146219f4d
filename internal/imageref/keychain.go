package imageref

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/configfile"
	"github.com/docker/docker-credential-helpers/client"
	"github.com/docker/docker-credential-helpers/credentials"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"github.com/fleet-agent/fleet-agent/internal/textline"
)

// dockerChain is the Docker credential chain as docker, crane and the
// library's default keychain read it (the same files in the same order,
// credHelpers before credsStore before auths), with the credential helper
// run under the resolution's deadline. The library's default runs the
// helper with no deadline while holding a lock shared by every resolution
// in the process: one helper that hangs (a cloud CLI waiting on a network
// that is down) stopped every later resolution until a restart. Here a
// helper past the deadline is killed with its process group, each
// resolution reads the files afresh, and nothing is shared.
type dockerChain struct {
	// running names the helper running now, when one is: the resolution
	// that gives up at its deadline says which helper it waited for.
	running *atomic.Pointer[string]
}

// helperGrace is how long a killed helper's pipes may stay open (held by a
// grandchild that left the group) before the wait gives up on them.
const helperGrace = time.Second

// helperOutputCap bounds what a helper may answer: a credential is a few
// kilobytes at most.
const helperOutputCap = 64 << 10

func (d dockerChain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	return d.ResolveContext(context.Background(), r)
}

func (d dockerChain) ResolveContext(ctx context.Context, r authn.Resource) (authn.Authenticator, error) {
	cf, err := loadDockerConfig()
	if err != nil || cf == nil {
		return authn.Anonymous, err
	}
	for _, key := range []string{r.String(), r.RegistryStr()} {
		if key == name.DefaultRegistry {
			key = authn.DefaultAuthKey
		}
		ac, err := d.credentialFor(ctx, cf, key)
		if err != nil {
			return nil, err
		}
		if ac != (authn.AuthConfig{}) {
			return authn.FromConfig(ac), nil
		}
	}
	return authn.Anonymous, nil
}

// loadDockerConfig finds the config as the library's default keychain
// does: ~/.docker/config.json or $DOCKER_CONFIG/config.json, else
// $REGISTRY_AUTH_FILE, else Podman's auth.json; nil when there is none.
func loadDockerConfig() (*configfile.ConfigFile, error) {
	home, _ := os.UserHomeDir()
	found := home != "" && isFile(filepath.Join(home, ".docker", "config.json"))
	if dir := os.Getenv("DOCKER_CONFIG"); !found && dir != "" {
		found = isFile(filepath.Join(dir, "config.json"))
	}
	if found {
		return config.Load(os.Getenv("DOCKER_CONFIG"))
	}
	podman := filepath.Join(os.Getenv("XDG_RUNTIME_DIR"), "containers", "auth.json")
	if os.Getenv("XDG_RUNTIME_DIR") == "" || !isFile(podman) {
		dir := os.Getenv("XDG_CONFIG_HOME")
		if dir == "" && home != "" {
			dir = filepath.Join(home, ".config")
		}
		podman = ""
		if dir != "" {
			podman = filepath.Join(dir, "containers", "auth.json")
		}
	}
	for _, p := range []string{os.Getenv("REGISTRY_AUTH_FILE"), podman} {
		if p == "" || !isFile(filepath.Clean(p)) {
			continue
		}
		f, err := os.Open(filepath.Clean(p))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return config.LoadFromReader(f)
	}
	return nil, nil
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// credentialFor is key's credential: from the helper the config names for
// it (credHelpers, else credsStore), else from the file's auths. A helper
// that has none gives the zero config, as docker treats it.
func (d dockerChain) credentialFor(ctx context.Context, cf *configfile.ConfigFile, key string) (authn.AuthConfig, error) {
	helper := cf.CredentialHelpers[key]
	if helper == "" {
		helper = cf.CredentialsStore
	}
	if helper == "" {
		ac, err := cf.GetAuthConfig(key)
		if err != nil {
			return authn.AuthConfig{}, err
		}
		return authn.AuthConfig{Username: ac.Username, Password: ac.Password, Auth: ac.Auth,
			IdentityToken: ac.IdentityToken, RegistryToken: ac.RegistryToken}, nil
	}
	program := "docker-credential-" + helper
	if d.running != nil {
		d.running.Store(&program)
		defer d.running.Store(nil)
	}
	creds, err := client.Get(helperProgram(ctx, program), key)
	if credentials.IsErrCredentialsNotFound(err) {
		return authn.AuthConfig{}, nil
	}
	if err != nil {
		// The protocol's error quotes what the helper printed; that is
		// not ours to repeat.
		return authn.AuthConfig{}, &helperFailed{helper: program, key: key, hung: ctx.Err() != nil}
	}
	if creds.Username == "<token>" {
		return authn.AuthConfig{Username: creds.Username, IdentityToken: creds.Secret}, nil
	}
	return authn.AuthConfig{Username: creds.Username, Password: creds.Secret}, nil
}

// helperFailed is a credential helper that failed or did not answer in
// time (hung); what it printed is not kept.
type helperFailed struct {
	helper, key string
	hung        bool
	after       time.Duration
}

func (e *helperFailed) Error() string {
	name := textline.Plain(e.helper)
	if len(name) > 80 {
		name = name[:80] + "..."
	}
	if e.hung {
		return fmt.Sprintf("the credential helper %s did not answer within %s and was stopped with its process group", name, e.after)
	}
	return fmt.Sprintf("the credential helper %s failed", name)
}

// helperProgram runs a helper under ctx: in a process group of its own,
// killed whole when ctx ends; its standard error is read and dropped (a
// helper may print a token there, and it is not ours to log).
func helperProgram(ctx context.Context, command string) client.ProgramFunc {
	return func(args ...string) client.Program {
		cmd := exec.CommandContext(ctx, command, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = helperGrace
		return &helperCmd{cmd: cmd}
	}
}

type helperCmd struct{ cmd *exec.Cmd }

func (h *helperCmd) Input(in io.Reader) { h.cmd.Stdin = in }

func (h *helperCmd) Output() ([]byte, error) {
	var out cappedBuffer
	h.cmd.Stdout, h.cmd.Stderr = &out, &cappedBuffer{}
	err := h.cmd.Run()
	return out.Bytes(), err
}

// cappedBuffer keeps the first helperOutputCap bytes written and drops the
// rest (a helper that floods its output cannot grow the agent). The buffer
// is a field, not embedded: an embedded bytes.Buffer's ReadFrom would be
// promoted, and io.Copy (how exec feeds a writer) would read the whole
// output through it past the cap.
type cappedBuffer struct{ buf bytes.Buffer }

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := helperOutputCap - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (b *cappedBuffer) Bytes() []byte { return b.buf.Bytes() }
