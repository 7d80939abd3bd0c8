package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestComposeFlagsExist checks that every flag and DISPATCHER_* variable that
// docker-compose.yml passes exists in the binary it is passed to.
func TestComposeFlagsExist(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Entrypoint  []string          `yaml:"entrypoint"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Image       string            `yaml:"image"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	bins := map[string]string{"dispatcher": dispatcherBin}
	dir := t.TempDir()
	for _, name := range []string{"mockworker", "loadgen"} {
		bins[name] = filepath.Join(dir, name)
		if out, err := exec.Command("go", "build", "-o", bins[name], "fairdispatch/cmd/"+name).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", name, err, out)
		}
	}
	usage := map[string]string{}
	for name, bin := range bins {
		out, _ := exec.Command(bin, "-h").CombinedOutput()
		usage[name] = string(out)
	}
	checked := 0
	for svc, s := range doc.Services {
		if s.Image != "" {
			continue // not ours
		}
		bin := "dispatcher"
		if len(s.Entrypoint) > 0 {
			bin = filepath.Base(s.Entrypoint[0])
		}
		help, ok := usage[bin]
		if !ok {
			t.Errorf("service %s runs %q, which this repo does not build", svc, bin)
			continue
		}
		for _, arg := range s.Command {
			name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
			if !strings.HasPrefix(arg, "-") || !strings.Contains(help, "  -"+name+" ") && !strings.Contains(help, "  -"+name+"\n") {
				t.Errorf("service %s: %s has no flag %q", svc, bin, arg)
			}
			checked++
		}
		for env := range s.Environment {
			flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(env, "DISPATCHER_"), "_", "-"))
			if bin != "dispatcher" || !strings.Contains(help, "  -"+flag+" ") {
				t.Errorf("service %s: environment %s names no flag of %s", svc, env, bin)
			}
			checked++
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d flags; is docker-compose.yml parsed right?", checked)
	}
}
