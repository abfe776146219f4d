package gitsync

import (
	"context"
	"net"
	"os"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
)

// authMethod resolves the credentials at the moment of use; nothing
// resolved outlives the call that needs it.
func (r *Repo) authMethod(ctx context.Context) (transport.AuthMethod, error) {
	a := r.cfg.Auth
	resolve := func(field, ref string) (string, error) {
		v, err := r.cfg.Secrets.Resolve(ctx, ref)
		if err != nil {
			// The resolver's error names the reference, not the value.
			return "", fail(&Error{Kind: KindSecret, Message: "git.auth." + field + ": the secret " + ref + " cannot be read; provide it and the next poll uses it", Err: err})
		}
		return v, nil
	}
	switch r.remote.proto {
	case "https", "http":
		switch {
		case a.Token != "":
			tok, err := resolve("token", a.Token)
			if err != nil {
				return nil, err
			}
			user := a.Username
			if user == "" {
				user = "x-access-token"
			}
			return &githttp.BasicAuth{Username: user, Password: tok}, nil
		case a.Password != "":
			pw, err := resolve("password", a.Password)
			if err != nil {
				return nil, err
			}
			return &githttp.BasicAuth{Username: a.Username, Password: pw}, nil
		}
		return nil, nil
	case "ssh":
		key, err := resolve("sshKey", a.SSHKey)
		if err != nil {
			return nil, err
		}
		pass := ""
		if a.SSHKeyPassphrase != "" {
			if pass, err = resolve("sshKeyPassphrase", a.SSHKeyPassphrase); err != nil {
				return nil, err
			}
		}
		ep, err := transport.NewEndpoint(r.remote.url)
		if err != nil {
			return nil, fail(&Error{Kind: KindConfig, Message: "git.url is not a git URL", Err: err})
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		pk, err := gitssh.NewPublicKeys(user, []byte(key), pass)
		if err != nil {
			// The parse error of a key says nothing of the key's bytes.
			return nil, fail(&Error{Kind: KindConfig, Message: "git.auth.sshKey does not hold a usable private key (PEM or OpenSSH, with sshKeyPassphrase if encrypted)", Err: err})
		}
		// The file is read at each use so that an operator's edit counts at
		// once; a host missing from it is refused, never learned.
		if _, err := os.Stat(a.KnownHosts); err != nil {
			return nil, fail(&Error{Kind: KindConfig, Message: "git.auth.knownHosts cannot be read; it must list the host's key", Err: err})
		}
		db, err := gitssh.NewKnownHostsDb(a.KnownHosts)
		if err != nil {
			return nil, fail(&Error{Kind: KindConfig, Message: "git.auth.knownHosts is not a known_hosts file", Err: err})
		}
		pk.HostKeyCallback = db.HostKeyCallback()
		port := ep.Port
		if port == 0 {
			port = 22
		}
		// Offer only the algorithms knownHosts has keys for, so a host with
		// several keys is checked against the one we know.
		pk.HostKeyAlgorithms = db.HostKeyAlgorithms(net.JoinHostPort(ep.Host, strconv.Itoa(port)))
		return pk, nil
	}
	return nil, nil
}
