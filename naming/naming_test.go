package naming

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	type want struct{ req, dlq, kv, leader, policy string }
	for _, c := range []struct {
		prefix string
		want   want
	}{
		{"", want{"DISPATCH_REQ", "DISPATCH_DLQ", "DISPATCH_KV", "fairdispatch_leader", "fairdispatch_policy"}},
		{"dispatch", want{"DISPATCH_REQ", "DISPATCH_DLQ", "DISPATCH_KV", "fairdispatch_leader", "fairdispatch_policy"}},
		{"llama", want{"LLAMA_REQ", "LLAMA_DLQ", "LLAMA_KV", "fairdispatch_llama_leader", "fairdispatch_llama_policy"}},
		{"qwen", want{"QWEN_REQ", "QWEN_DLQ", "QWEN_KV", "fairdispatch_qwen_leader", "fairdispatch_qwen_policy"}},
		{"a.b-c", want{"A_B_C_REQ", "A_B_C_DLQ", "A_B_C_KV", "fairdispatch_a_b_c_leader", "fairdispatch_a_b_c_policy"}},
		{"acme.d", want{"ACME_D_REQ", "ACME_D_DLQ", "ACME_D_KV", "fairdispatch_acme_d_leader", "fairdispatch_acme_d_policy"}},
		{"Llama3_70B", want{"LLAMA3_70B_REQ", "LLAMA3_70B_DLQ", "LLAMA3_70B_KV", "fairdispatch_llama3_70b_leader", "fairdispatch_llama3_70b_policy"}},
		// Names depend on Q alone: "DISPATCH" is the default's Q.
		{"DISPATCH", want{"DISPATCH_REQ", "DISPATCH_DLQ", "DISPATCH_KV", "fairdispatch_leader", "fairdispatch_policy"}},
		{"dispatch.eu", want{"DISPATCH_EU_REQ", "DISPATCH_EU_DLQ", "DISPATCH_EU_KV", "fairdispatch_dispatch_eu_leader", "fairdispatch_dispatch_eu_policy"}},
	} {
		n, err := New(c.prefix)
		if err != nil {
			t.Errorf("New(%q): %v", c.prefix, err)
			continue
		}
		got := want{n.ReqStream(), n.DLQStream(), n.KVStream(), n.LeaderBucket(), n.PolicyBucket()}
		if got != c.want {
			t.Errorf("New(%q): got %+v, want %+v", c.prefix, got, c.want)
		}
		if n.Durable() != "dispatcher" {
			t.Errorf("New(%q) durable: got %q, want dispatcher", c.prefix, n.Durable())
		}
	}
}

func TestSubjects(t *testing.T) {
	n, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want string }{
		{n.Prefix(), "dispatch"},
		{n.Req("premium"), "dispatch.req.premium"},
		{n.ReqAll(), "dispatch.req.*"},
		{n.Load("w1"), "dispatch.load.w1"},
		{n.LoadAll(), "dispatch.load.*"},
		{n.Work("w1"), "dispatch.work.w1"},
		{n.DLQ("regular"), "dispatch.dlq.regular"},
		{n.DLQAll(), "dispatch.dlq.*"},
		{n.Done("w1"), "dispatch.done.w1"},
		{n.DoneAll(), "dispatch.done.*"},
		{n.KV("w1"), "dispatch.kv.w1"},
		{n.KVAll(), "dispatch.kv.*"},
		{n.KVSync("w1"), "dispatch.kvsync.w1"},
		{n.KVStream(), "DISPATCH_KV"},
		{n.Cancel(), "dispatch.cancel"},
		{n.CancelWorker("w1"), "dispatch.cancel.w1"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	n, err = New("a.b-c")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := n.Req("x"), "a.b-c.req.x"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestNewRefusesPrefix(t *testing.T) {
	for _, c := range []struct {
		prefix string
		name   string // the name the error must quote, besides the prefix ("" for none)
	}{
		{"a..b", ""}, {".a", ""}, {"a.", ""}, {"a.*", ""}, {"a.>", ""}, {"a b", ""}, {"a\tb", ""},
		{"a/b", "A/B_REQ"},
		{`a\b`, `A\B_REQ`},
		{"a+b", "fairdispatch_a+b_leader"},
		{"a:b", "fairdispatch_a:b_leader"},
		{"llamé", "fairdispatch_llamé_leader"},
		{"\u212a", ""}, {"\u0130", ""}, // lower case ASCII k and i: prefix k's and i's buckets
		{strings.Repeat("x", 233), "fairdispatch_" + strings.Repeat("x", 233) + "_leader"},
		{strings.Repeat("x", 252), strings.Repeat("X", 252) + "_REQ"},
	} {
		_, err := New(c.prefix)
		if !errors.Is(err, ErrInvalidPrefix) {
			t.Errorf("New(%q): got %v, want ErrInvalidPrefix", c.prefix, err)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, strconv.Quote(c.prefix)) || (c.name != "" && !strings.Contains(msg, strconv.Quote(c.name))) {
			t.Errorf("New(%q): error %q does not quote the prefix and %q", c.prefix, msg, c.name)
		}
	}
	// The longest accepted prefix: its buckets' streams are 255 bytes.
	long := strings.Repeat("x", 232)
	n, err := New(long)
	if err != nil {
		t.Fatalf("New(232 bytes): %v", err)
	}
	if got := len("KV_" + n.LeaderBucket()); got != MaxNameLen {
		t.Errorf("KV stream of the leader bucket: %d bytes, want %d", got, MaxNameLen)
	}
}
