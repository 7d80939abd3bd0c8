package e2e

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"fairdispatch/internal/natstest"
)

// The dispatcher connects with each authentication method of docs/config.md, Flags and environment to a
// server that requires it, and gets ready (streams ensured, consumer made). A
// wrong secret makes it exit non-zero at once with a clear log line, instead
// of retrying forever.

// authGiveUp bounds how long a dispatcher with a wrong secret may take to exit.
// It is far above the few hundred milliseconds that it takes, and far below
// a retry loop's "forever".
const authGiveUp = 20 * time.Second

// authRejected is what a dispatcher refused by the server logs.
var authRejected = []string{"nats rejected the credentials", "Authorization Violation", "dispatcher stopped"}

func TestAuthUserPassword(t *testing.T) {
	n := startNATS(t, func(o *server.Options) { o.Username, o.Password = "dispatcher", "s3cret-pw" })

	t.Run("connects", func(t *testing.T) {
		// The password comes from the environment, as it should in production
		// (a command-line flag shows in the process list).
		t.Setenv("DISPATCHER_NATS_PASSWORD", "s3cret-pw")
		p := startDispatcher(t, n.URL(), "--nats-user", "dispatcher")
		if got := p.metric("fairdispatch_nats_connected"); got != 1 {
			t.Fatalf("got fairdispatch_nats_connected %v, want 1", got)
		}
	})
	t.Run("wrong password", func(t *testing.T) {
		p := launch(t, n.URL(), "--nats-user", "dispatcher", "--nats-password", "wrong")
		secWaitExit(t, p, authGiveUp, authRejected...)
	})
	t.Run("no credentials", func(t *testing.T) {
		p := launch(t, n.URL())
		secWaitExit(t, p, authGiveUp, authRejected...)
	})
}

func TestAuthNkey(t *testing.T) {
	pub, seed := secNkeyUser(t)
	n := startNATS(t, func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} })

	t.Run("connects", func(t *testing.T) {
		startDispatcher(t, n.URL(), "--nats-nkey", seed)
	})
	t.Run("unknown key", func(t *testing.T) {
		_, other := secNkeyUser(t)
		p := launch(t, n.URL(), "--nats-nkey", other)
		secWaitExit(t, p, authGiveUp, authRejected...)
	})
	t.Run("unreadable seed file", func(t *testing.T) {
		p := launch(t, n.URL(), "--nats-nkey", seed+".missing")
		secWaitExit(t, p, authGiveUp, "nkey file", "dispatcher stopped")
	})
}

func TestAuthCredsFile(t *testing.T) {
	op := secNewOperator(t)
	n := startNATS(t, op.configure)

	t.Run("connects", func(t *testing.T) {
		startDispatcher(t, n.URL(), "--nats-creds", op.creds(t, "dispatcher", op.account))
	})
	t.Run("user of an untrusted account", func(t *testing.T) {
		rogue, err := nkeys.CreateAccount()
		if err != nil {
			t.Fatal(err)
		}
		p := launch(t, n.URL(), "--nats-creds", op.creds(t, "rogue", rogue))
		secWaitExit(t, p, authGiveUp, authRejected...)
	})
}

func TestAuthTLSPrivateCA(t *testing.T) {
	pki := natstest.NewPKI(t, "fairdispatch e2e CA")
	n := startNATS(t, func(o *server.Options) { secTLSServer(t, o, pki) })
	tlsFlags := func(p natstest.PKI) []string {
		return []string{"--nats-tls-ca", pki.CA, "--nats-tls-cert", p.ClientCert, "--nats-tls-key", p.ClientKey}
	}

	t.Run("connects", func(t *testing.T) {
		startDispatcher(t, n.URL(), tlsFlags(pki)...)
	})
	t.Run("missing key file", func(t *testing.T) {
		p := launch(t, n.URL(), "--nats-tls-ca", pki.CA, "--nats-tls-cert", pki.ClientCert, "--nats-tls-key", pki.ClientKey+".missing")
		secWaitExit(t, p, authGiveUp, "dispatcher stopped")
	})
	t.Run("client certificate of another CA", func(t *testing.T) {
		p := launch(t, n.URL(), tlsFlags(natstest.NewPKI(t, "rogue CA"))...)
		secWaitExit(t, p, authGiveUp, "dispatcher stopped")
	})
	t.Run("server not trusted", func(t *testing.T) {
		other := natstest.NewPKI(t, "other CA")
		p := launch(t, n.URL(), "--nats-tls-ca", other.CA, "--nats-tls-cert", pki.ClientCert, "--nats-tls-key", pki.ClientKey)
		secWaitExit(t, p, authGiveUp, "dispatcher stopped")
	})
}
