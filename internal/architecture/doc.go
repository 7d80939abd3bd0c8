// Package architecture holds no code: its test keeps docs/architecture.md true.
// The page's table names every package of the module with its side
// (protocol, core, adapter, actor, worker, program, internal, test), and a
// second table says which sides each side may import; the test parses both
// and checks them against every Go file of the module.
package architecture
