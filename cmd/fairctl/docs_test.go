package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Helpers of the tests that keep docs/operations.md true (policy_test.go,
// sim_test.go).

// opsSection returns section heading (the text of its "## " line) of
// docs/operations.md, up to the next section.
func opsSection(t *testing.T, heading string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n## "+heading+"\n")
	if !ok {
		t.Fatalf("docs/operations.md has no section %s", heading)
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	return sec
}

// consoleBlocks returns the contents of the ```console blocks of sec, in order.
func consoleBlocks(sec string) []string {
	var blocks []string
	for _, part := range strings.Split(sec, "```console\n")[1:] {
		block, _, _ := strings.Cut(part, "```")
		blocks = append(blocks, block)
	}
	return blocks
}
