package e2e

// Helpers of the security tests (auth_test.go, permissions_test.go,
// admin_test.go). Their names start with sec so that they cannot collide with
// the helpers of other e2e files.

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"fairdispatch/internal/natstest"
)

// secWriteFile writes data to name in a fresh temp dir and returns the path.
func secWriteFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// secTLSServer configures o to require TLS with pki's server certificate, and
// client certificates signed by pki's CA.
func secTLSServer(t testing.TB, o *server.Options, pki natstest.PKI) {
	t.Helper()
	cfg, err := server.GenTLSConfig(&server.TLSConfigOpts{
		CertFile: pki.ServerCert, KeyFile: pki.ServerKey, CaFile: pki.CA, Verify: true, Timeout: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	o.TLSConfig, o.TLS, o.TLSVerify, o.TLSTimeout = cfg, true, true, 2
}

// secOperator is an operator-mode setup: an operator, a system account and an
// application account with JetStream, in a memory resolver.
type secOperator struct {
	operator *jwt.OperatorClaims
	sysPub   string
	account  nkeys.KeyPair
	resolver *server.MemAccResolver
}

// secNewOperator builds the operator, the system account and one application
// account with unlimited JetStream.
func secNewOperator(t testing.TB) *secOperator {
	t.Helper()
	okp, err := nkeys.CreateOperator()
	if err != nil {
		t.Fatal(err)
	}
	opub, _ := okp.PublicKey()
	oc := jwt.NewOperatorClaims(opub)
	oc.Name = "fairdispatch-e2e"
	s := &secOperator{resolver: &server.MemAccResolver{}}

	newAccount := func(name string, js bool) (nkeys.KeyPair, string) {
		akp, err := nkeys.CreateAccount()
		if err != nil {
			t.Fatal(err)
		}
		apub, _ := akp.PublicKey()
		ac := jwt.NewAccountClaims(apub)
		ac.Name = name
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		ajwt, err := ac.Encode(okp)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.resolver.Store(apub, ajwt); err != nil {
			t.Fatal(err)
		}
		return akp, apub
	}
	_, s.sysPub = newAccount("SYS", false)
	oc.SystemAccount = s.sysPub
	s.account, _ = newAccount("FAIRDISPATCH", true)
	s.operator = oc
	return s
}

// configure sets o up for operator mode with s.
func (s *secOperator) configure(o *server.Options) {
	o.TrustedOperators = []*jwt.OperatorClaims{s.operator}
	o.AccountResolver = s.resolver
	o.SystemAccount = s.sysPub
}

// creds returns a creds file (user JWT and seed) of a new user of the
// application account, signed by signer (the account itself for a valid user).
func (s *secOperator) creds(t testing.TB, name string, signer nkeys.KeyPair) string {
	t.Helper()
	ukp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = name
	ujwt, err := uc.Encode(signer)
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := ukp.Seed()
	b, err := jwt.FormatUserConfig(ujwt, seed)
	if err != nil {
		t.Fatal(err)
	}
	return secWriteFile(t, name+".creds", b)
}

// secNkeyUser returns a new user nkey's public key and the path of a file
// holding its seed.
func secNkeyUser(t testing.TB) (pub, seedFile string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ = kp.PublicKey()
	seed, _ := kp.Seed()
	return pub, secWriteFile(t, "user.nk", seed)
}

// secWaitExit waits for a dispatcher that must fail at start: it must exit
// non-zero within the timeout, and its output must contain every fragment.
func secWaitExit(t testing.TB, p *proc, timeout time.Duration, fragments ...string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("dispatcher still running after %v; it must give up, not hang. Output:\n%s", timeout, tail(p.out.String(), 30))
	}
	if p.err == nil {
		t.Fatalf("dispatcher exited with status 0, want non-zero. Output:\n%s", tail(p.out.String(), 30))
	}
	out := p.out.String()
	for _, f := range fragments {
		if !strings.Contains(out, f) {
			t.Fatalf("dispatcher output lacks %q:\n%s", f, tail(out, 30))
		}
	}
}

// secAsyncErrors collects the asynchronous errors (permission violations) of
// a NATS connection.
type secAsyncErrors struct {
	mu   sync.Mutex
	errs []string
}

func (a *secAsyncErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.errs = append(a.errs, err.Error())
}

// has reports whether an error containing every fragment was seen.
func (a *secAsyncErrors) has(fragments ...string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.errs {
		if containsAll(e, fragments...) {
			return true
		}
	}
	return false
}

// hasOther reports whether an error without the fragment was seen.
func (a *secAsyncErrors) hasOther(fragment string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, e := range a.errs {
		if !strings.Contains(e, fragment) {
			return true
		}
	}
	return false
}

func (a *secAsyncErrors) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.errs, "\n")
}

// secConnect connects as user/password with the given inbox prefix ("" for
// the default), collecting asynchronous errors.
func secConnect(t testing.TB, url, user, password, inbox string) (*nats.Conn, *secAsyncErrors) {
	t.Helper()
	errs := &secAsyncErrors{}
	// The example's passwords are bcrypt hashes of cost 11: checking one takes
	// the server, under the race detector, longer than the client's default
	// two-second connect timeout.
	opts := []nats.Option{nats.UserInfo(user, password), nats.ErrorHandler(errs.handler), nats.Name(user), nats.Timeout(30 * time.Second)}
	if inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(inbox))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// secStreamLastSeq returns the last sequence of a stream of the account, read
// from the server's monitoring (no client permission needed), or 0 when the
// stream does not exist.
func secStreamLastSeq(t testing.TB, srv *server.Server, account, stream string) uint64 {
	t.Helper()
	jsz, err := srv.Jsz(&server.JSzOptions{Account: account, Streams: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range jsz.AccountDetails {
		for _, s := range a.Streams {
			if s.Name == stream {
				return s.State.LastSeq
			}
		}
	}
	return 0
}

// secFreshView waits for a /debug/queues snapshot taken after since.
func secFreshView(t testing.TB, p *proc, since time.Time) queueView {
	t.Helper()
	var v queueView
	waitFor(t, 10*time.Second, "a /debug/queues snapshot after "+since.Format(time.RFC3339Nano), func() bool {
		var ok bool
		v, ok = p.queues()
		return ok && v.At.After(since)
	})
	return v
}

// secTLSConfig is a client TLS configuration trusting pki's CA and
// presenting its client certificate.
func secTLSConfig(t testing.TB, pki natstest.PKI) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	b, err := os.ReadFile(pki.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(b)
	cert, err := tls.LoadX509KeyPair(pki.ClientCert, pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
}
