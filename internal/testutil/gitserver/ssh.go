package gitserver

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHServer serves git-upload-pack over ssh on 127.0.0.1 for the
// repositories of a Server (or any directory), accepting one client key.
type SSHServer struct {
	// Addr is host:port.
	Addr string
	// HostKey is the server's public host key.
	HostKey ssh.PublicKey
	// ClientKeyPEM is the private key the server accepts, in OpenSSH PEM.
	ClientKeyPEM []byte

	root   string
	config *ssh.ServerConfig
	ln     net.Listener
	wg     sync.WaitGroup
}

// StartSSH serves the repositories under root over ssh for the length of
// the test. A repository NAME.git is at ssh://git@Addr/NAME.git.
func StartSSH(t testing.TB, root string) *SSHServer {
	t.Helper()
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	hostSigner, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	clientPub, clientPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(clientPriv, "")
	if err != nil {
		t.Fatal(err)
	}
	allowed, err := ssh.NewPublicKey(clientPub)
	if err != nil {
		t.Fatal(err)
	}
	s := &SSHServer{HostKey: hostSigner.PublicKey(), ClientKeyPEM: pem.EncodeToMemory(block), root: root}
	s.config = &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if string(key.Marshal()) == string(allowed.Marshal()) {
				return nil, nil
			}
			return nil, errors.New("key not allowed")
		},
	}
	s.config.AddHostKey(hostSigner)
	s.ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = s.ln.Addr().String()
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() {
		_ = s.ln.Close()
		s.wg.Wait()
	})
	return s
}

// URL is the ssh URL of the repository NAME.git.
func (s *SSHServer) URL(name string) string { return "ssh://git@" + s.Addr + "/" + name + ".git" }

// KnownHostsLine is the known_hosts line for this server's host key.
func (s *SSHServer) KnownHostsLine() string {
	return knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, s.HostKey)
}

func (s *SSHServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(c)
		}()
	}
}

func (s *SSHServer) serveConn(c net.Conn) {
	defer c.Close()
	_, chans, reqs, err := ssh.NewServerConn(c, s.config)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			return
		}
		go s.serveSession(ch, chReqs)
	}
}

func (s *SSHServer) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" || len(req.Payload) < 4 {
			if req.WantReply {
				_ = req.Reply(req.Type == "env", nil)
			}
			continue
		}
		n := binary.BigEndian.Uint32(req.Payload)
		line := string(req.Payload[4 : 4+min(int(n), len(req.Payload)-4)])
		service, arg, _ := strings.Cut(line, " ")
		arg = strings.Trim(arg, "'\"")
		if service != "git-upload-pack" || strings.Contains(arg, "..") {
			_ = req.Reply(false, nil)
			return
		}
		_ = req.Reply(true, nil)
		cmd := exec.Command("git", "upload-pack", filepath.Join(s.root, filepath.FromSlash(arg)))
		cmd.Env = Env()
		cmd.Stdin, cmd.Stdout, cmd.Stderr = ch, ch, io.Discard
		status := uint32(0)
		if err := cmd.Run(); err != nil {
			status = 1
		}
		_, _ = ch.SendRequest("exit-status", false, binary.BigEndian.AppendUint32(nil, status))
		return
	}
}
