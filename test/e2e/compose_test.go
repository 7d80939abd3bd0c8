package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// composeService is the part of a docker-compose.yml service these tests read.
type composeService struct {
	Build       any               `yaml:"build"`
	Image       string            `yaml:"image"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	Restart       string `yaml:"restart"`
	NoHealthcheck string `yaml:"x-no-healthcheck"`
}

func readCompose(t *testing.T) map[string]composeService {
	t.Helper()
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Services
}

// ourImage returns the image name the one building service gives the image
// every fairdispatch service runs.
func ourImage(t *testing.T, svcs map[string]composeService) string {
	t.Helper()
	var built []string
	image := ""
	for name, s := range svcs {
		if s.Build != nil {
			built = append(built, name)
			image = s.Image
		}
	}
	if len(built) != 1 || image == "" {
		t.Fatalf("services with build: %v, want exactly one, with an image name the others reuse", built)
	}
	return image
}

// TestComposeFlagsExist checks that every flag and DISPATCHER_* variable that
// docker-compose.yml passes, in commands and healthchecks, exists in the
// binary it is passed to.
func TestComposeFlagsExist(t *testing.T) {
	t.Parallel() // no timing bound; see doc.go
	svcs := readCompose(t)
	image := ourImage(t, svcs)
	bins := buildPrograms(t, t.TempDir(), "mockworker", "loadgen", "engineworker", "fakeengine", "gateway")
	bins["dispatcher"] = dispatcherBin
	usage := map[string]string{}
	for name, bin := range bins {
		out, _ := exec.Command(bin, "-h").CombinedOutput()
		usage[name] = string(out)
	}
	checked := 0
	checkArgs := func(svc, bin string, args []string) {
		help, ok := usage[bin]
		if !ok {
			t.Errorf("service %s runs %q, which this repo does not build", svc, bin)
			return
		}
		for _, arg := range args {
			name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
			if !strings.HasPrefix(arg, "-") {
				continue // the value of the previous flag
			}
			if !strings.Contains(help, "  -"+name+" ") && !strings.Contains(help, "  -"+name+"\n") {
				t.Errorf("service %s: %s has no flag %q", svc, bin, arg)
			}
			checked++
		}
	}
	for svc, s := range svcs {
		if s.Image != image {
			continue // not ours
		}
		bin := "dispatcher"
		if len(s.Entrypoint) > 0 {
			bin = filepath.Base(s.Entrypoint[0])
		}
		for _, arg := range s.Command {
			if !strings.HasPrefix(arg, "-") {
				t.Errorf("service %s: argument %q is not a --flag=value", svc, arg)
			}
		}
		checkArgs(svc, bin, s.Command)
		if hc := s.Healthcheck; hc != nil && len(hc.Test) > 1 && hc.Test[0] == "CMD" {
			checkArgs(svc+" healthcheck", filepath.Base(hc.Test[1]), hc.Test[2:])
		}
		for env := range s.Environment {
			flag := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(env, "DISPATCHER_"), "_", "-"))
			if bin != "dispatcher" || !strings.Contains(usage["dispatcher"], "  -"+flag+" ") {
				t.Errorf("service %s: environment %s names no flag of %s", svc, env, bin)
			}
			checked++
		}
	}
	if checked < 14 {
		t.Fatalf("checked only %d flags; is docker-compose.yml parsed right?", checked)
	}
}

// TestComposeStackIsSafeToStart: every service has a healthcheck (a CMD that
// exists in its image: no shell in the distroless one) or states why not, and a
// restart policy; the image is built once; the build context leaves out the
// repository, build outputs and data. When docker-compose or the compose plugin
// is installed, `config` must accept the file.
func TestComposeStackIsSafeToStart(t *testing.T) {
	svcs := readCompose(t)
	image := ourImage(t, svcs)
	for name, s := range svcs {
		switch {
		case s.Healthcheck == nil && s.NoHealthcheck == "":
			t.Errorf("service %s: no healthcheck and no x-no-healthcheck reason", name)
		case s.Healthcheck != nil && (len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD"):
			t.Errorf("service %s: healthcheck %v, want [CMD, program, args...] (the distroless image has no shell)", name, s.Healthcheck.Test)
		case s.Healthcheck != nil && s.Image == image && !strings.HasPrefix(s.Healthcheck.Test[1], "/usr/local/bin/"):
			t.Errorf("service %s: healthcheck runs %s, which is not in the image", name, s.Healthcheck.Test[1])
		}
		if s.Restart == "" {
			t.Errorf("service %s: no restart policy", name)
		}
	}
	data, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatalf(".dockerignore: %v", err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(data), "\n") {
		lines[strings.TrimSuffix(strings.TrimSpace(l), "/")] = true
	}
	for _, want := range []string{".git", "bin", "data"} {
		if !lines[want] {
			t.Errorf(".dockerignore does not exclude %s", want)
		}
	}
	for _, cmd := range [][]string{{"docker-compose", "config", "-q"}, {"docker", "compose", "config", "-q"}} {
		if _, err := exec.LookPath(cmd[0]); err != nil {
			continue
		}
		if cmd[0] == "docker" && exec.Command("docker", "compose", "version").Run() != nil {
			continue // docker without the compose plugin
		}
		c := exec.Command(cmd[0], cmd[1:]...)
		c.Dir = "../.."
		if out, err := c.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", strings.Join(cmd, " "), err, out)
		} else {
			t.Logf("%s: valid", strings.Join(cmd, " "))
		}
	}
}
