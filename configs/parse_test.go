package configs

import (
	"errors"
	"strings"
	"testing"
)

// want is one expected problem; msg is a substring of Problem.Msg.
type want struct {
	path string
	line int
	msg  string
}

// problemCase is a document and every problem it must produce.
type problemCase struct {
	name string
	src  string
	want []want // nil: the document is valid
}

func runProblemCases(t *testing.T, cases []problemCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse("p.yaml", []byte(tc.src))
			if tc.want == nil {
				if err != nil {
					t.Fatalf("got error %v, want nil", err)
				}
				if p == nil {
					t.Fatalf("got nil policy, want one")
				}
				return
			}
			if p != nil {
				t.Errorf("got a policy, want nil")
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("got error %v, want a *ValidationError", err)
			}
			if ve.Name != "p.yaml" {
				t.Errorf("Name: got %q, want %q", ve.Name, "p.yaml")
			}
			if len(ve.Problems) != len(tc.want) {
				t.Fatalf("got %d problems, want %d:\n%v", len(ve.Problems), len(tc.want), err)
			}
			for i, w := range tc.want {
				g := ve.Problems[i]
				if g.Path != w.path || g.Line != w.line || !strings.Contains(g.Msg, w.msg) {
					t.Errorf("problem %d: got %d %q %q, want %d %q containing %q", i, g.Line, g.Path, g.Msg, w.line, w.path, w.msg)
				}
			}
		})
	}
}

// base is a valid policy, 7 lines long: family f with buckets small and big.
const base = `default_policy_family: f
uncached_isl_buckets:
  - {min_tokens: 0, bucket: small}
  - {min_tokens: 100, bucket: big}
policy_classes:
  - {name: fs, policy_family: f, cache_bucket: small, quantum: 1}
  - {name: fb, policy_family: f, cache_bucket: big, quantum: 1}
`

// withClass appends one class, on line 8, to base.
func withClass(fields string) string {
	return base + "  - {" + fields + "}\n"
}

func TestBaseIsValid(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"base", base, nil},
		{"explicit class", withClass("name: x, quantum: 1"), nil},
	})
}

func TestDocumentRules(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"empty", "", []want{{"", 0, "empty document"}}},
		{"only comments", "# nothing\n", []want{{"", 0, "empty document"}}},
		{"null document", "---\n", []want{{"", 2, "empty document"}}},
		{"explicit null", "~\n", []want{{"", 1, "empty document"}}},
		{"second document", base + "---\n" + base, []want{{"", 8, "second YAML document"}}},
		{"second empty document", base + "---\n", []want{{"", 8, "second YAML document"}}},
		{"syntax", "a: [1\n", []want{{"", 1, "YAML syntax"}}},
		{"syntax in second document", base + "---\na: b: c\n", []want{{"", 9, "YAML syntax: mapping values are not allowed"}}},
		{"syntax on a later line", base + "x: b: c\n", []want{{"", 8, "YAML syntax"}}},
		{"syntax without a line", "a: b: c\n", []want{{"", 0, "YAML: mapping values are not allowed"}}},
		{"tab indentation", "a:\n\tb: 1\n", []want{{"", 2, "YAML syntax"}}},
		{"root is a list", "- 1\n", []want{{"", 1, "must be a mapping, got a list"}}},
		{"root is a scalar", "hello\n", []want{{"", 1, `must be a mapping, got a string ("hello")`}}},
	})
}

func TestUnknownAndRepeatedKeys(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"top level", base + "extra: 1\n", []want{{"extra", 8, "unknown field"}}},
		{"bucket", strings.Replace(base, "bucket: big}", "bucket: big, size: 3}", 1),
			[]want{{"uncached_isl_buckets[1].size", 4, "unknown field"}}},
		{"class", withClass("name: x, quantum: 1, quantum_x: 2, weight: 3"), []want{
			{"policy_classes[2].quantum_x", 8, "unknown field"},
			{"policy_classes[2].weight", 8, "unknown field"},
		}},
		{"every level at once", strings.Replace(withClass("name: x, quantum: 1, q: 2"), "bucket: big}", "bucket: big, s: 3}", 1) + "z: 1\n",
			[]want{
				{"uncached_isl_buckets[1].s", 4, "unknown field"},
				{"policy_classes[2].q", 8, "unknown field"},
				{"z", 9, "unknown field"},
			}},
		{"repeated top-level key", base + "default_policy_family: g\n",
			[]want{{"default_policy_family", 8, "duplicate key (first at line 1)"}}},
		{"repeated class key", withClass("name: x, quantum: 1, quantum: 2"),
			[]want{{"policy_classes[2].quantum", 8, "duplicate key"}}},
		{"non-string key", base + "1: x\n", []want{{"", 8, "keys must be strings, got an integer (1)"}}},
		{"merge key", base + "  - {<<: {quantum: 1}, name: x}\n", []want{
			{"policy_classes[2].<<", 8, "unknown field"},
			{"policy_classes[2].quantum", 8, "required"},
		}},
		{"aliases are followed", `default_policy_family: &fam f
uncached_isl_buckets:
  - &b {min_tokens: 0, bucket: &bn all}
policy_classes:
  - {name: c, policy_family: *fam, cache_bucket: *bn, quantum: &q 5}
  - {name: d, quantum: *q}
`, nil},
	})
}

func TestAllThreeOrNone(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"none", "{}\n", []want{{"", 1, "no policy: give default_policy_family, uncached_isl_buckets and policy_classes, or no --policy-config"}}},
		{"none, unknown key", "foo: 1\n", []want{
			{"foo", 1, "unknown field"},
			{"", 1, "no policy"},
		}},
		{"only default family", "default_policy_family: f\n", []want{
			{"uncached_isl_buckets", 1, "required"},
			{"policy_classes", 1, "required"},
		}},
		{"no buckets", "default_policy_family: f\npolicy_classes:\n  - {name: x, policy_family: f, cache_bucket: a, quantum: 1}\n", []want{
			{"uncached_isl_buckets", 1, "required"},
		}},
		{"no default family", "uncached_isl_buckets: [{min_tokens: 0, bucket: a}]\npolicy_classes: [{name: x, policy_family: f, cache_bucket: a, quantum: 1}]\n", []want{
			{"default_policy_family", 1, "required"},
		}},
	})
}

func TestBucketRules(t *testing.T) {
	const classes = "policy_classes:\n  - {name: c, policy_family: x, cache_bucket: a, quantum: 1}\n"
	doc := func(buckets string) string {
		return "default_policy_family: x\nuncached_isl_buckets:" + buckets + "\n" + classes
	}
	runProblemCases(t, []problemCase{
		{"empty", doc(" []"), []want{{"uncached_isl_buckets", 2, "must not be empty"}}},
		{"not a list", doc(" 3"), []want{{"uncached_isl_buckets", 2, "must be a list, got an integer (3)"}}},
		{"null", doc(""), []want{{"uncached_isl_buckets", 2, "must be a list, got null"}}},
		{"item not a mapping", doc(" [a]"), []want{{"uncached_isl_buckets[0]", 2, "must be a mapping"}}},
		{"first not zero", doc(" [{min_tokens: 1, bucket: a}]"),
			[]want{{"uncached_isl_buckets[0].min_tokens", 2, "the first bucket must have min_tokens 0, got 1"}}},
		{"equal", doc(" [{min_tokens: 0, bucket: a}, {min_tokens: 0, bucket: b}]"),
			[]want{{"uncached_isl_buckets[1].min_tokens", 2, "must be greater than the previous bucket's min_tokens (0), got 0"}}},
		{"decreasing", doc(" [{min_tokens: 0, bucket: a}, {min_tokens: 10, bucket: b}, {min_tokens: 5, bucket: c}]"),
			[]want{{"uncached_isl_buckets[2].min_tokens", 2, "(10), got 5"}}},
		{"after a bad one", doc(" [{min_tokens: 0, bucket: a}, {min_tokens: x, bucket: b}, {min_tokens: 5, bucket: c}]"),
			[]want{{"uncached_isl_buckets[1].min_tokens", 2, "must be a non-negative integer"}}},
		{"duplicate name", doc("\n  - {min_tokens: 0, bucket: a}\n  - {min_tokens: 5, bucket: a}"),
			[]want{{"uncached_isl_buckets[1].bucket", 4, `duplicate bucket name "a" (first at line 3)`}}},
		{"missing fields", doc(" [{}]"), []want{
			{"uncached_isl_buckets[0].min_tokens", 2, "required"},
			{"uncached_isl_buckets[0].bucket", 2, "required"},
		}},
		{"name not a token", doc(" [{min_tokens: 0, bucket: a.b}]"),
			[]want{{"uncached_isl_buckets[0].bucket", 2, `"a.b" is not a subject token`}}},
		{"name not a string", doc(" [{min_tokens: 0, bucket: 7}]"),
			[]want{{"uncached_isl_buckets[0].bucket", 2, "must be a string, got an integer (7)"}}},
		{"min too large", doc(" [{min_tokens: 0, bucket: a}, {min_tokens: 1099511627777, bucket: b}]"),
			[]want{{"uncached_isl_buckets[1].min_tokens", 2, "must be at most 2^40"}}},
	})
}

func TestClassName(t *testing.T) {
	long := strings.Repeat("n", 128)
	runProblemCases(t, []problemCase{
		{"required", withClass("quantum: 1"), []want{{"policy_classes[2].name", 8, "required"}}},
		{"128 bytes", withClass("quantum: 1, name: " + long), nil},
		{"129 bytes", withClass("quantum: 1, name: " + long + "n"), []want{{"policy_classes[2].name", 8, "not a subject token"}}},
		{"empty", withClass(`quantum: 1, name: ""`), []want{{"policy_classes[2].name", 8, "not a subject token"}}},
		{"dot", withClass("quantum: 1, name: a.b"), []want{{"policy_classes[2].name", 8, "not a subject token"}}},
		{"wildcard", withClass("quantum: 1, name: '*'"), []want{{"policy_classes[2].name", 8, "not a subject token"}}},
		{"non-ASCII", withClass("quantum: 1, name: café"), []want{{"policy_classes[2].name", 8, "not a subject token"}}},
		{"number", withClass("quantum: 1, name: 123"), []want{{"policy_classes[2].name", 8, "must be a string, got an integer"}}},
		{"quoted number", withClass(`quantum: 1, name: "123"`), nil},
		{"bool", withClass("quantum: 1, name: true"), []want{{"policy_classes[2].name", 8, "must be a string, got a boolean"}}},
		{"null", withClass("quantum: 1, name: ~"), []want{{"policy_classes[2].name", 8, "must be a string, got null"}}},
		{"list", withClass("quantum: 1, name: [a]"), []want{{"policy_classes[2].name", 8, "must be a string, got a list"}}},
		{"dash and underscore", withClass("quantum: 1, name: A-z_09"), nil},
	})
}

func TestFamilyAndBucketTogether(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"family only", withClass("name: x, quantum: 1, policy_family: g"),
			[]want{{"policy_classes[2].cache_bucket", 8, "required with policy_family"}}},
		{"bucket only", withClass("name: x, quantum: 1, cache_bucket: small"),
			[]want{{"policy_classes[2].policy_family", 8, "required with cache_bucket"}}},
		{"family not a token", withClass("name: x, quantum: 1, policy_family: 'a b', cache_bucket: small"),
			[]want{{"policy_classes[2].policy_family", 8, "not a subject token"}}},
		{"bucket not a token", withClass("name: x, quantum: 1, policy_family: g, cache_bucket: 'a b'"),
			[]want{{"policy_classes[2].cache_bucket", 8, "not a subject token"}}},
	})
}

func TestQueuePolicy(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"fcfs", withClass("name: x, quantum: 1, queue_policy: fcfs"), nil},
		{"wspt", withClass("name: x, quantum: 1, queue_policy: wspt"), nil},
		{"unknown", withClass("name: x, quantum: 1, queue_policy: lifo"),
			[]want{{"policy_classes[2].queue_policy", 8, `must be fcfs, wspt or edf, got "lifo"`}}},
		{"upper case", withClass("name: x, quantum: 1, queue_policy: FCFS"),
			[]want{{"policy_classes[2].queue_policy", 8, "must be fcfs, wspt or edf"}}},
		{"number", withClass("name: x, quantum: 1, queue_policy: 1"),
			[]want{{"policy_classes[2].queue_policy", 8, "must be a string"}}},
	})
	p := mustParse(t, withClass("name: x, quantum: 1"))
	if got := p.Classes[2].Queue; got != FCFS {
		t.Errorf("default queue policy: got %q, want %q", got, FCFS)
	}
}

func TestQuantum(t *testing.T) {
	const path = "policy_classes[2].quantum"
	runProblemCases(t, []problemCase{
		{"required", withClass("name: x"), []want{{path, 8, "required"}}},
		{"zero", withClass("name: x, quantum: 0"), []want{{path, 8, "must be > 0"}}},
		{"max", withClass("name: x, quantum: 1099511627776"), nil},
		{"hex", withClass("name: x, quantum: 0x10"), nil},
		{"over max", withClass("name: x, quantum: 1099511627777"), []want{{path, 8, "must be at most 2^40 (1099511627776), got 1099511627777"}}},
		{"max uint64", withClass("name: x, quantum: 18446744073709551615"), []want{{path, 8, "must be at most 2^40"}}},
		{"beyond uint64", withClass("name: x, quantum: 99999999999999999999"), []want{{path, 8, "must be a non-negative integer, got a float"}}},
		{"negative", withClass("name: x, quantum: -5"), []want{{path, 8, "must be a non-negative integer, got -5"}}},
		{"float", withClass("name: x, quantum: 2.5"), []want{{path, 8, "must be a non-negative integer, got a float (2.5)"}}},
		{"integral float", withClass("name: x, quantum: 2.0"), []want{{path, 8, "got a float (2.0)"}}},
		{"exponent", withClass("name: x, quantum: 1e3"), []want{{path, 8, "got a float (1e3)"}}},
		{"nan", withClass("name: x, quantum: .nan"), []want{{path, 8, "got a float (.nan)"}}},
		{"quoted", withClass(`name: x, quantum: "5"`), []want{{path, 8, `got a string ("5")`}}},
		{"null", withClass("name: x, quantum: null"), []want{{path, 8, "got null"}}},
		{"bool", withClass("name: x, quantum: true"), []want{{path, 8, "got a boolean"}}},
		{"mapping", withClass("name: x, quantum: {a: 1}"), []want{{path, 8, "got a mapping"}}},
		{"timestamp", withClass("name: x, quantum: 2001-12-14"), []want{{path, 8, "got !!timestamp (2001-12-14)"}}},
		{"custom tag", withClass("name: x, quantum: !big 5"), []want{{path, 8, "got !big (5)"}}},
	})
}

func TestPrefillBusyThreshold(t *testing.T) {
	const path = "policy_classes[2].prefill_busy_threshold"
	runProblemCases(t, []problemCase{
		{"zero", withClass("name: x, quantum: 1, prefill_busy_threshold: 0"), nil},
		{"max", withClass("name: x, quantum: 1, prefill_busy_threshold: 1099511627776"), nil},
		{"over max", withClass("name: x, quantum: 1, prefill_busy_threshold: 1099511627777"), []want{{path, 8, "at most 2^40"}}},
		{"negative", withClass("name: x, quantum: 1, prefill_busy_threshold: -1"), []want{{path, 8, "non-negative integer, got -1"}}},
		{"float", withClass("name: x, quantum: 1, prefill_busy_threshold: 0.5"), []want{{path, 8, "got a float"}}},
	})
}

func TestPrefillBusyThresholdFrac(t *testing.T) {
	const path = "policy_classes[2].prefill_busy_threshold_frac"
	runProblemCases(t, []problemCase{
		{"zero", withClass("name: x, quantum: 1, prefill_busy_threshold_frac: 0"), nil},
		{"fraction", withClass("name: x, quantum: 1, prefill_busy_threshold_frac: 0.75"), nil},
		{"above one", withClass("name: x, quantum: 1, prefill_busy_threshold_frac: 2.5"), nil},
		{"negative", withClass("name: x, quantum: 1, prefill_busy_threshold_frac: -0.5"), []want{{path, 8, "must be >= 0, got -0.5"}}},
		{"nan", withClass("name: x, quantum: 1, prefill_busy_threshold_frac: .nan"), []want{{path, 8, "must be finite"}}},
		{"inf", withClass("name: x, quantum: 1, prefill_busy_threshold_frac: .inf"), []want{{path, 8, "must be finite"}}},
		{"-inf", withClass("name: x, quantum: 1, prefill_busy_threshold_frac: -.Inf"), []want{{path, 8, "must be finite"}}},
		{"string", withClass("name: x, quantum: 1, prefill_busy_threshold_frac: half"), []want{{path, 8, "must be a number, got a string"}}},
	})
}

func TestBusyWorkerRatio(t *testing.T) {
	const path = "policy_classes[2].busy_worker_ratio"
	runProblemCases(t, []problemCase{
		{"one with threshold", withClass("name: x, quantum: 1, prefill_busy_threshold: 5, busy_worker_ratio: 1"), nil},
		{"half with frac", withClass("name: x, quantum: 1, prefill_busy_threshold_frac: 0.5, busy_worker_ratio: 0.5"), nil},
		{"zero", withClass("name: x, quantum: 1, prefill_busy_threshold: 5, busy_worker_ratio: 0"), []want{{path, 8, "must be in (0, 1], got 0"}}},
		{"above one", withClass("name: x, quantum: 1, prefill_busy_threshold: 5, busy_worker_ratio: 1.01"), []want{{path, 8, "must be in (0, 1], got 1.01"}}},
		{"negative", withClass("name: x, quantum: 1, prefill_busy_threshold: 5, busy_worker_ratio: -0.5"), []want{{path, 8, "must be in (0, 1]"}}},
		{"nan", withClass("name: x, quantum: 1, prefill_busy_threshold: 5, busy_worker_ratio: .nan"), []want{{path, 8, "must be finite"}}},
		{"no threshold", withClass("name: x, quantum: 1, busy_worker_ratio: 0.5"), []want{{path, 8, "needs prefill_busy_threshold or prefill_busy_threshold_frac"}}},
		{"bad and no threshold", withClass("name: x, quantum: 1, busy_worker_ratio: 2"), []want{
			{path, 8, "must be in (0, 1]"},
			{path, 8, "needs prefill_busy_threshold"},
		}},
	})
}

func TestLimits(t *testing.T) {
	var cases []problemCase
	for _, key := range []string{"request_queue_limit_per_worker", "raw_isl_token_queue_limit_per_worker", "cached_token_queue_limit_per_worker"} {
		path := "policy_classes[2]." + key
		cases = append(cases,
			problemCase{key + " zero", withClass("name: x, quantum: 1, " + key + ": 0"), nil},
			problemCase{key + " max", withClass("name: x, quantum: 1, " + key + ": 1099511627776"), nil},
			problemCase{key + " negative", withClass("name: x, quantum: 1, " + key + ": -1"), []want{{path, 8, "non-negative integer, got -1"}}},
			problemCase{key + " float", withClass("name: x, quantum: 1, " + key + ": 1.5"), []want{{path, 8, "got a float"}}},
			problemCase{key + " inf", withClass("name: x, quantum: 1, " + key + ": .inf"), []want{{path, 8, "got a float"}}},
			problemCase{key + " over max", withClass("name: x, quantum: 1, " + key + ": 1099511627777"), []want{{path, 8, "at most 2^40"}}},
		)
	}
	runProblemCases(t, cases)
}

func TestClassList(t *testing.T) {
	head := "default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: a}]\npolicy_classes:"
	runProblemCases(t, []problemCase{
		{"empty", head + " []\n", []want{{"policy_classes", 3, "must not be empty"}}},
		{"not a list", head + " {name: x}\n", []want{{"policy_classes", 3, "must be a list, got a mapping"}}},
		{"item not a mapping", head + "\n  - {name: c, policy_family: f, cache_bucket: a, quantum: 1}\n  - c\n",
			[]want{{"policy_classes[1]", 5, `must be a mapping, got a string ("c")`}}},
	})
}

func TestDuplicateClassName(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"explicit", withClass("name: fs, quantum: 1"),
			[]want{{"policy_classes[2].name", 8, `duplicate class name "fs" (first at line 6)`}}},
	})
}

func TestCacheBucketNamesABucket(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"unknown", withClass("name: x, quantum: 1, policy_family: f, cache_bucket: huge"), []want{
			{"policy_classes[2].cache_bucket", 8, `unknown bucket "huge" (buckets: small, big)`},
		}},
		// A broken bucket list suppresses the check: one mistake, one problem.
		{"buckets broken", strings.Replace(base, "{min_tokens: 100, bucket: big}", "{min_tokens: 100, bucket: 'b g'}", 1), []want{
			{"uncached_isl_buckets[1].bucket", 4, "not a subject token"},
		}},
	})
}

func TestDuplicateFamilyBucket(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"duplicate", withClass("name: x, quantum: 1, policy_family: f, cache_bucket: big"), []want{
			{"policy_classes[2].cache_bucket", 8, `duplicate class for family "f" and bucket "big" (first: policy_classes[1] at line 7)`},
		}},
	})
}

func TestEveryFamilyCoversEveryBucket(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"missing one", withClass("name: x, quantum: 1, policy_family: g, cache_bucket: big"), []want{
			{"policy_classes[2].policy_family", 8, `family "g" has no class for bucket "small"`},
		}},
		{"missing all but one, reported at the family's first class", base + "  - {name: y, quantum: 1, policy_family: g, cache_bucket: small}\n" +
			"  - {name: z, quantum: 1, policy_family: f2, cache_bucket: big}\n", []want{
			{"policy_classes[2].policy_family", 8, `family "g" has no class for bucket "big"`},
			{"policy_classes[3].policy_family", 9, `family "f2" has no class for bucket "small"`},
		}},
		// A class with an unknown bucket does not also count as a missing one.
		{"no cascade", withClass("name: x, quantum: 1, policy_family: g, cache_bucket: nope"), []want{
			{"policy_classes[2].cache_bucket", 8, "unknown bucket"},
		}},
	})
}

func TestExplicitClassIsNotAFamily(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"clash", withClass("name: f, quantum: 1"), []want{
			{"policy_classes[2].name", 8, `explicit class "f" has the name of a policy family`},
		}},
		// A family × bucket class may share its family's name (as in the seeds).
		{"family class named like its family", strings.Replace(base, "name: fs,", "name: f,", 1), nil},
	})
}

func TestDefaultFamilyIsConfigured(t *testing.T) {
	runProblemCases(t, []problemCase{
		{"unknown", strings.Replace(base, "default_policy_family: f", "default_policy_family: g", 1), []want{
			{"default_policy_family", 1, `unknown policy family "g" (families: f)`},
		}},
		{"only explicit classes", "default_policy_family: f\nuncached_isl_buckets: [{min_tokens: 0, bucket: a}]\npolicy_classes: [{name: x, quantum: 1}]\n", []want{
			{"default_policy_family", 1, `unknown policy family "f" (families: )`},
		}},
		{"not a token", strings.Replace(base, "default_policy_family: f", "default_policy_family: f.g", 1), []want{
			{"default_policy_family", 1, "not a subject token"},
		}},
		// A family name that is not a token suppresses the check.
		{"no cascade", strings.Replace(base, "policy_family: f, cache_bucket: small", "policy_family: 'f f', cache_bucket: small", 1), []want{
			{"policy_classes[0].policy_family", 6, "not a subject token"},
		}},
	})
}

// TestManyProblems checks that every problem of a file is reported at once,
// in line order, with its path and line.
func TestManyProblems(t *testing.T) {
	const src = `default_policy_family: missing
uncached_isl_buckets:
  - min_tokens: 5
    bucket: small
  - min_tokens: 5
    bucket: small
    extra: true
policy_classes:
  - name: a
    policy_family: fam
    cache_bucket: small
    quantum: 0
    queue_policy: lifo
  - name: a
    quantum: 1.5
    busy_worker_ratio: 2
    prefill_busy_threshold_frac: .nan
  - name: bad name
    policy_family: fam
    quantum: -3
    request_queue_limit_per_worker: "10"
unknown_top: 1
`
	want := strings.Join([]string{
		`policy.yaml:1: default_policy_family: unknown policy family "missing" (families: fam)`,
		`policy.yaml:3: uncached_isl_buckets[0].min_tokens: the first bucket must have min_tokens 0, got 5`,
		`policy.yaml:5: uncached_isl_buckets[1].min_tokens: must be greater than the previous bucket's min_tokens (5), got 5`,
		`policy.yaml:6: uncached_isl_buckets[1].bucket: duplicate bucket name "small" (first at line 4)`,
		`policy.yaml:7: uncached_isl_buckets[1].extra: unknown field (known: min_tokens, bucket)`,
		`policy.yaml:12: policy_classes[0].quantum: must be > 0`,
		`policy.yaml:13: policy_classes[0].queue_policy: must be fcfs, wspt or edf, got "lifo"`,
		`policy.yaml:14: policy_classes[1].name: duplicate class name "a" (first at line 9)`,
		`policy.yaml:15: policy_classes[1].quantum: must be a non-negative integer, got a float (1.5)`,
		`policy.yaml:16: policy_classes[1].busy_worker_ratio: must be in (0, 1], got 2`,
		`policy.yaml:17: policy_classes[1].prefill_busy_threshold_frac: must be finite, got .nan`,
		`policy.yaml:18: policy_classes[2].name: "bad name" is not a subject token ([A-Za-z0-9_-]+, at most 128 bytes)`,
		`policy.yaml:18: policy_classes[2].cache_bucket: required with policy_family (give both, or neither for an explicit class)`,
		`policy.yaml:20: policy_classes[2].quantum: must be a non-negative integer, got -3`,
		`policy.yaml:21: policy_classes[2].request_queue_limit_per_worker: must be a non-negative integer, got a string ("10")`,
		`policy.yaml:22: unknown_top: unknown field (known: default_policy_family, uncached_isl_buckets, policy_classes)`,
	}, "\n")
	_, err := Parse("policy.yaml", []byte(src))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("got %v, want a *ValidationError", err)
	}
	if got := err.Error(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got, want := len(ve.Problems), 16; got != want {
		t.Errorf("problems: got %d, want %d", got, want)
	}
}
