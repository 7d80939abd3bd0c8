package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"fairdispatch/configs"
	"fairdispatch/configs/livepolicy"
)

// fairctl policy: the live policy in the policy bucket (docs/operations.md,
// Live policy; docs/design.md, Live policy).

func init() {
	commands["policy"] = command{
		summary: "the live policy: get | put FILE | diff FILE | history | rollback REV",
		run:     runPolicy,
	}
}

const policyUsage = `usage: fairctl policy <subcommand> [flags] [args]

  get              print the running policy's YAML (--json: revision, time and YAML)
  put FILE         validate FILE as dispatcher --check-config does, print its class
                   matrix, and store it as a new revision (an invalid file is not stored)
  diff FILE        what putting FILE would change, class by class
  history          the kept revisions with their time and size (--json)
  rollback REV     put revision REV's YAML again as a new revision, validated first`

func runPolicy(ctx context.Context, g *globals, args []string) error {
	args = g.subcommandFirst(args)
	if len(args) == 0 {
		return usageError("%s", policyUsage)
	}
	sub, rest := args[0], args[1:]
	fs := g.flagSet("policy " + sub)
	fs.Usage = func() { fmt.Fprintln(g.stderr, policyUsage); fs.PrintDefaults() }
	if err := g.parse(fs, rest); err != nil {
		return err
	}
	want := map[string]int{"get": 0, "put": 1, "diff": 1, "history": 0, "rollback": 1}
	n, ok := want[sub]
	if !ok {
		return usageError("unknown subcommand %q\n%s", sub, policyUsage)
	}
	if fs.NArg() != n {
		return usageError("policy %s takes %d argument(s)\n%s", sub, n, policyUsage)
	}
	// A file is validated before anything is sent.
	var file []byte
	var filePol *configs.Policy
	if sub == "put" || sub == "diff" {
		var err error
		if file, err = os.ReadFile(fs.Arg(0)); err != nil {
			return err
		}
		if filePol, err = configs.Parse(fs.Arg(0), file); err != nil {
			after := "nothing stored"
			if sub == "diff" {
				after = "nothing to compare"
			}
			return invalid(g.stderr, fs.Arg(0), err, after)
		}
	}
	var rev uint64
	if sub == "rollback" {
		var err error
		if rev, err = strconv.ParseUint(fs.Arg(0), 10, 64); err != nil || rev == 0 {
			return usageError("rollback: REV must be a revision number, got %q", fs.Arg(0))
		}
	}

	nc, js, err := g.jetstream(ctx)
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	store, err := livepolicy.Bind(ctx, js, g.names.PolicyBucket())
	if err != nil {
		return err
	}
	w := g.stdout
	switch sub {
	case "get":
		// What runs, as the dispatchers resolve the key: the last good
		// revision while the current one is refused.
		res, err := store.Resolve(ctx)
		if err != nil {
			return err
		}
		cur := res.Running
		switch {
		case res.Refused == nil:
		case res.Running.Revision == 0 && res.Current.Deleted:
			return fmt.Errorf("policy bucket %s: %w", store.Bucket(), livepolicy.ErrNoPolicy)
		case res.Running.Revision == 0:
			cur = res.Current
			fmt.Fprintf(g.stderr, "fairctl policy: revision %d is invalid and refused (%v), and no earlier one is valid: the dispatchers run their --policy-config or the default class\n",
				res.Current.Revision, res.Refused)
		case res.Current.Deleted:
			fmt.Fprintf(g.stderr, "fairctl policy: revision %d deletes the policy, which every dispatcher refuses; revision %d runs:\n",
				res.Current.Revision, cur.Revision)
		default:
			fmt.Fprintf(g.stderr, "fairctl policy: revision %d, the bucket's current, is invalid and refused by every dispatcher (%v); revision %d runs:\n",
				res.Current.Revision, res.Refused, cur.Revision)
		}
		if g.json {
			return writeJSON(w, revisionJSON(cur))
		}
		_, err = w.Write(cur.YAML)
		return err
	case "put":
		fmt.Fprint(w, filePol.Matrix())
		rev, _, err := store.Put(ctx, fs.Arg(0), file)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "stored as revision %d of %s\n", rev, store.Bucket())
		return nil
	case "diff":
		// Against what runs, as get resolves it: the last good revision
		// while the current one is refused.
		res, err := store.Resolve(ctx)
		var old *configs.Policy
		switch {
		case errors.Is(err, livepolicy.ErrNoPolicy):
			fmt.Fprintf(w, "%s holds no policy: everything is added\n", store.Bucket())
		case err != nil:
			return err
		case res.Policy == nil:
			fmt.Fprintf(w, "revision %d is refused (%v) and no earlier one is valid (the dispatchers run their --policy-config or the default class): everything is added\n",
				res.Current.Revision, res.Refused)
		case res.Refused != nil:
			old = res.Policy
			fmt.Fprintf(w, "from revision %d, which runs (revision %d, the bucket's current, is refused: %v), to %s:\n",
				res.Running.Revision, res.Current.Revision, res.Refused, fs.Arg(0))
		default:
			old = res.Policy
			fmt.Fprintf(w, "from revision %d to %s:\n", res.Running.Revision, fs.Arg(0))
		}
		lines := configs.Diff(old, filePol)
		if len(lines) == 0 {
			fmt.Fprintln(w, "no change")
		}
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		return nil
	case "history":
		hist, err := store.History(ctx)
		if err != nil {
			return err
		}
		if g.json {
			out := make([]revisionOut, len(hist))
			for i, r := range hist {
				out[i] = revisionJSON(r)
			}
			return writeJSON(w, out)
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "REVISION\tCREATED\tBYTES\tVALID\tCLASSES")
		for _, r := range hist {
			valid, classes := validity(store, r)
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", r.Revision, r.Created.UTC().Format(time.RFC3339), len(r.YAML), valid, classes)
		}
		return tw.Flush()
	case "rollback":
		old, err := store.At(ctx, rev)
		if err != nil {
			return err
		}
		if old.Deleted {
			return fmt.Errorf("revision %d deletes the policy: nothing to roll back to", rev)
		}
		name := store.Name(rev)
		p, err := configs.Parse(name, old.YAML)
		if err != nil {
			return invalid(g.stderr, name, err, "nothing stored")
		}
		fmt.Fprint(w, p.Matrix())
		n, _, err := store.Put(ctx, name, old.YAML)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "revision %d stored again as revision %d of %s\n", rev, n, store.Bucket())
	}
	return nil
}

// invalid prints a policy's problems, one a line as --check-config prints
// them, and returns the error that makes the exit status 1; after is what
// the command did not do ("nothing stored").
func invalid(w io.Writer, name string, err error, after string) error {
	var ve *configs.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	fmt.Fprintln(w, ve.Error())
	return fmt.Errorf("%s is invalid (%d problem(s)); %s", name, len(ve.Problems), after)
}

// validity says whether a revision is a valid policy, and its classes.
func validity(s *livepolicy.Store, r livepolicy.Revision) (valid, classes string) {
	if r.Deleted {
		return "deleted", "-"
	}
	p, err := configs.Parse(s.Name(r.Revision), r.YAML)
	if err != nil {
		return "no", "-"
	}
	names := make([]string, len(p.Classes))
	for i, c := range p.Classes {
		names[i] = c.Name
	}
	return "yes", strings.Join(names, ",")
}

// revisionOut is a revision as --json prints it.
type revisionOut struct {
	Revision uint64    `json:"revision"`
	Created  time.Time `json:"created"`
	Bytes    int       `json:"bytes"`
	Deleted  bool      `json:"deleted"`
	YAML     string    `json:"yaml"`
}

func revisionJSON(r livepolicy.Revision) revisionOut {
	return revisionOut{Revision: r.Revision, Created: r.Created.UTC(), Bytes: len(r.YAML), Deleted: r.Deleted, YAML: string(r.YAML)}
}
