package bus

import (
	"errors"
	"testing"
)

func TestSubjects(t *testing.T) {
	s, err := NewSubjects("")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ got, want string }{
		{s.Req("premium"), "dispatch.req.premium"},
		{s.ReqAll(), "dispatch.req.*"},
		{s.Load("w1"), "dispatch.load.w1"},
		{s.LoadAll(), "dispatch.load.*"},
		{s.Work("w1"), "dispatch.work.w1"},
		{s.DLQ("regular"), "dispatch.dlq.regular"},
		{s.DLQAll(), "dispatch.dlq.*"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
	s, err = NewSubjects("acme.d")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Work("w-1"), "acme.d.work.w-1"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	for _, bad := range []string{"a..b", ".a", "a.", "a.*", "a.>", "a b", "a\tb"} {
		if _, err := NewSubjects(bad); !errors.Is(err, ErrInvalidSubject) {
			t.Errorf("NewSubjects(%q): got %v, want ErrInvalidSubject", bad, err)
		}
	}
}
