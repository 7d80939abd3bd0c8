package configs

import (
	"strings"
	"testing"
)

func TestMatrix(t *testing.T) {
	rich := mustParse(t, rich)
	f := 0.5
	synthetic, err := Default("wspt", &f)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		p      *Policy
		want   []string // lines that must appear, after trimming spaces
		absent []string
	}{
		{"rich", rich, []string{
			"default family: std",
			"s  [0, 100)",
			"l  [1000, inf)",
			"family  s      m      l",
			"std *   std-s  std-m  std-l",
			"vip     vip-s  vip-m  vip-l",
			"explicit classes (selected by name only): batch, solo",
			"0  batch  -       -       wspt   7              yes     -               0.5                  0.25               3                4                      5",
			"3  std-l  std     l       fcfs   1099511627776  no      -               -                    -                  -                -                      -",
		}, []string{"synthetic"}},
		{"seed", mustLoad(t, "policy-cached-uncached.yaml"), []string{
			"standard *  cached  uncached",
			"explicit classes (selected by name only): none",
		}, nil},
		{"synthetic", synthetic, []string{
			`synthetic policy (no --policy-config): every request goes to class "default"`,
			"0  default  -       -       wspt   1        yes     -               0.5                  -                  -                -                      -",
		}, []string{"default family", "buckets"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.p.Matrix()
			lines := map[string]bool{}
			for _, l := range strings.Split(got, "\n") {
				lines[strings.TrimSpace(l)] = true
			}
			for _, w := range tc.want {
				if !lines[w] {
					t.Errorf("got\n%s\nwant a line %q", got, w)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(got, a) {
					t.Errorf("got\n%s\nwant no %q", got, a)
				}
			}
		})
	}
}
