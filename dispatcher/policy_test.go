package dispatcher

import (
	"testing"
	"time"

	"fairdispatch/configs"
)

func TestActorRefusePolicyIsShownAndKeepsThePolicy(t *testing.T) {
	f := newFixture(t, policy)
	f.a.RefusePolicy(3, time.Time{}, &configs.ValidationError{Name: "b@3", Problems: []configs.Problem{{Line: 2, Path: "x", Msg: "bad"}}})
	f.a.publishView(f.now)
	v := f.a.View().Policy
	if v.Revision != 0 || v.Source != "file" || v.Refused != 1 || v.LastRefused == nil || v.LastRefused.Revision != 3 || v.LastRefused.Error != "b@3:2: x: bad" {
		t.Fatalf("view policy %+v (last %+v), want the file's policy running and revision 3 refused", v, v.LastRefused)
	}
}
