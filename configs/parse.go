package configs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"

	"fairdispatch/wire"
)

// YAML keys of the policy file.
const (
	keyDefaultFamily = "default_policy_family"
	keyBuckets       = "uncached_isl_buckets"
	keyClasses       = "policy_classes"

	keyMinTokens = "min_tokens"
	keyBucket    = "bucket"

	keyName         = "name"
	keyFamily       = "policy_family"
	keyCacheBucket  = "cache_bucket"
	keyQueuePolicy  = "queue_policy"
	keyQuantum      = "quantum"
	keyThreshold    = "prefill_busy_threshold"
	keyThresholdFr  = "prefill_busy_threshold_frac"
	keyRatio        = "busy_worker_ratio"
	keyRequestLimit = "request_queue_limit_per_worker"
	keyRawISLLimit  = "raw_isl_token_queue_limit_per_worker"
	keyCachedLimit  = "cached_token_queue_limit_per_worker"

	keyKeyWeights   = "key_weights"
	keyDefKeyWeight = "default_key_weight"
	keyOutputWeight = "output_token_weight"
)

var (
	rootKeys   = []string{keyDefaultFamily, keyBuckets, keyClasses}
	bucketKeys = []string{keyMinTokens, keyBucket}
	classKeys  = []string{keyName, keyFamily, keyCacheBucket, keyQueuePolicy, keyQuantum,
		keyThreshold, keyThresholdFr, keyRatio, keyRequestLimit, keyRawISLLimit, keyCachedLimit,
		keyKeyWeights, keyDefKeyWeight, keyOutputWeight}
)

func init() { classKeys = append(classKeys, extensionKeys...) }

// noPolicy is the message for a document that configures nothing.
const noPolicy = "no policy: give default_policy_family, uncached_isl_buckets and policy_classes, or no --policy-config"

// Load reads the policy file at path and parses it with Parse. A read error
// is returned wrapped; a fault of the document is a *ValidationError.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("configs: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes and validates a policy document. name is used in error
// messages (a file path). Every problem of the document is reported at once,
// in a *ValidationError.
func Parse(name string, data []byte) (*Policy, error) {
	w := &walker{}
	p := w.document(data)
	if len(w.probs) > 0 {
		return nil, &ValidationError{Name: name, Problems: w.sorted()}
	}
	p.Source = bytes.Clone(data)
	return p, nil
}

// document decodes exactly one YAML document and reads the policy from it.
func (w *walker) document(data []byte) *Policy {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			w.add(0, "", "empty document; %s", noPolicy)
		} else {
			w.syntax(err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		w.add(extra.Line, "", "a second YAML document; a policy file holds exactly one")
	case !errors.Is(err, io.EOF):
		w.syntax(err)
	}
	if len(doc.Content) == 0 {
		w.add(doc.Line, "", "empty document; %s", noPolicy)
		return nil
	}
	root := doc.Content[0]
	if r := deref(root); r.Kind == yaml.ScalarNode && r.ShortTag() == "!!null" {
		w.add(root.Line, "", "empty document; %s", noPolicy)
		return nil
	}
	return w.policy(root)
}

// rawClass is one class as read, with the nodes the cross-checks point at.
type rawClass struct {
	Class
	path                 string
	line                 int // the class mapping's line
	nameLine             int
	famLine, bucketLine  int
	nameOK               bool // name present and a valid token
	famOK, bucketOK      bool // present and valid tokens
	hasFamily, hasBucket bool // keys present (valid or not)
}

// policy reads and validates the root mapping.
func (w *walker) policy(root *yaml.Node) *Policy {
	fields, ok := w.mapping(root, "", rootKeys...)
	if !ok {
		return nil
	}
	var missing []string
	for _, k := range rootKeys {
		if _, ok := fields[k]; !ok {
			missing = append(missing, k)
		}
	}
	switch len(missing) {
	case 0:
	case len(rootKeys):
		w.add(root.Line, "", "%s", noPolicy)
		return nil
	default:
		for _, k := range missing {
			w.add(root.Line, k, "required: give %s together, or none of them (no --policy-config)",
				strings.Join(rootKeys, ", "))
		}
	}

	defFam, defOK := "", false
	var defLine int
	if f, ok := fields[keyDefaultFamily]; ok {
		defLine = f.val.Line
		defFam, defOK = w.token(f.val, keyDefaultFamily)
	}

	var buckets []Bucket
	bucketsOK := false
	if f, ok := fields[keyBuckets]; ok {
		buckets, bucketsOK = w.buckets(f.key, f.val)
	}

	if f, ok := fields[keyClasses]; ok {
		classes, classesOK := w.classes(f.key, f.val)
		if classesOK {
			w.crossCheck(classes, buckets, bucketsOK, defFam, defOK, defLine)
		}
		if len(w.probs) == 0 {
			out := make([]Class, len(classes))
			for i, c := range classes {
				out[i] = c.Class
			}
			return newPolicy(defFam, buckets, out)
		}
	}
	return nil
}

// buckets reads uncached_isl_buckets. ok is false when any bucket has a
// problem, so that cross-checks against bucket names are skipped.
func (w *walker) buckets(key, n *yaml.Node) ([]Bucket, bool) {
	before := len(w.probs)
	items, ok := w.items(key, n, keyBuckets)
	if !ok {
		return nil, false
	}
	out := make([]Bucket, 0, len(items))
	firstLine := map[string]int{}
	prev, prevOK := uint64(0), false
	for i, item := range items {
		path := fmt.Sprintf("%s[%d]", keyBuckets, i)
		fields, ok := w.mapping(item, path, bucketKeys...)
		if !ok {
			prevOK = false
			continue
		}
		var b Bucket
		minOK := false
		if f, ok := fields[keyMinTokens]; ok {
			p := join(path, keyMinTokens)
			if b.MinTokens, minOK = w.uint(f.val, p); minOK {
				switch {
				case i == 0 && b.MinTokens != 0:
					w.add(f.val.Line, p, "the first bucket must have min_tokens 0, got %d", b.MinTokens)
				case i > 0 && prevOK && b.MinTokens <= prev:
					w.add(f.val.Line, p, "must be greater than the previous bucket's min_tokens (%d), got %d", prev, b.MinTokens)
				}
			}
		} else {
			w.add(item.Line, join(path, keyMinTokens), "required")
		}
		prev, prevOK = b.MinTokens, minOK
		if f, ok := fields[keyBucket]; ok {
			p := join(path, keyBucket)
			if name, ok := w.token(f.val, p); ok {
				if first, dup := firstLine[name]; dup {
					w.add(f.val.Line, p, "duplicate bucket name %q (first at line %d)", name, first)
				} else {
					firstLine[name] = f.val.Line
				}
				b.Name = name
			}
		} else {
			w.add(item.Line, join(path, keyBucket), "required")
		}
		out = append(out, b)
	}
	return out, len(w.probs) == before
}

// classes reads policy_classes, checking each class on its own. ok is false
// when the list itself is unusable.
func (w *walker) classes(key, n *yaml.Node) ([]rawClass, bool) {
	items, ok := w.items(key, n, keyClasses)
	if !ok {
		return nil, false
	}
	out := make([]rawClass, 0, len(items))
	for i, item := range items {
		path := fmt.Sprintf("%s[%d]", keyClasses, i)
		if c, ok := w.class(item, path); ok {
			out = append(out, c)
		}
	}
	return out, true
}

// class reads one class and applies its defaults.
func (w *walker) class(n *yaml.Node, path string) (rawClass, bool) {
	fields, ok := w.mapping(n, path, classKeys...)
	if !ok {
		return rawClass{}, false
	}
	c := rawClass{path: path, line: n.Line}
	c.Queue = FCFS

	if f, ok := fields[keyName]; ok {
		c.nameLine = f.val.Line
		c.Name, c.nameOK = w.token(f.val, join(path, keyName))
	} else {
		w.add(n.Line, join(path, keyName), "required")
	}

	fam, hasFam := fields[keyFamily]
	bkt, hasBkt := fields[keyCacheBucket]
	c.hasFamily, c.hasBucket = hasFam, hasBkt
	if hasFam {
		c.famLine = fam.val.Line
		c.Family, c.famOK = w.token(fam.val, join(path, keyFamily))
	}
	if hasBkt {
		c.bucketLine = bkt.val.Line
		c.Bucket, c.bucketOK = w.token(bkt.val, join(path, keyCacheBucket))
	}
	switch {
	case hasFam && !hasBkt:
		w.add(n.Line, join(path, keyCacheBucket), "required with policy_family (give both, or neither for an explicit class)")
	case hasBkt && !hasFam:
		w.add(n.Line, join(path, keyFamily), "required with cache_bucket (give both, or neither for an explicit class)")
	}

	if f, ok := fields[keyQueuePolicy]; ok {
		p := join(path, keyQueuePolicy)
		if s, ok := w.str(f.val, p); ok {
			switch q := QueuePolicy(s); q {
			case FCFS, WSPT, EDF:
				c.Queue = q
			default:
				w.add(f.val.Line, p, "must be fcfs, wspt or edf, got %q", s)
			}
		}
	}

	if f, ok := fields[keyQuantum]; ok {
		p := join(path, keyQuantum)
		if q, ok := w.uint(f.val, p); ok {
			if q == 0 {
				w.add(f.val.Line, p, "must be > 0")
			}
			c.Quantum = q
		}
	} else {
		w.add(n.Line, join(path, keyQuantum), "required")
	}

	if f, ok := fields[keyThreshold]; ok {
		if v, ok := w.uint(f.val, join(path, keyThreshold)); ok {
			c.PrefillBusyThreshold = &v
		}
	}
	if f, ok := fields[keyThresholdFr]; ok {
		p := join(path, keyThresholdFr)
		if v, ok := w.float(f.val, p); ok {
			if v < 0 {
				w.add(f.val.Line, p, "must be >= 0, got %v", v)
			}
			c.PrefillBusyThresholdFrac = &v
		}
	}
	if f, ok := fields[keyRatio]; ok {
		p := join(path, keyRatio)
		if v, ok := w.float(f.val, p); ok {
			if v <= 0 || v > 1 {
				w.add(f.val.Line, p, "must be in (0, 1], got %v", v)
			}
			c.BusyWorkerRatio = &v
		}
		_, t := fields[keyThreshold]
		_, tf := fields[keyThresholdFr]
		if !t && !tf {
			w.add(f.val.Line, p, "needs prefill_busy_threshold or prefill_busy_threshold_frac")
		}
	}
	for _, l := range []struct {
		key string
		dst **uint64
	}{
		{keyRequestLimit, &c.RequestLimit},
		{keyRawISLLimit, &c.RawISLLimit},
		{keyCachedLimit, &c.CachedLimit},
	} {
		if f, ok := fields[l.key]; ok {
			if v, ok := w.uint(f.val, join(path, l.key)); ok {
				*l.dst = &v
			}
		}
	}
	c.DefaultKeyWeight = 1
	if f, ok := fields[keyDefKeyWeight]; ok {
		if v, ok := w.keyWeight(f.val, join(path, keyDefKeyWeight)); ok {
			c.DefaultKeyWeight = v
		}
	}
	if f, ok := fields[keyKeyWeights]; ok {
		c.KeyWeights = w.keyWeights(f.val, join(path, keyKeyWeights))
	}
	if f, ok := fields[keyOutputWeight]; ok {
		p := join(path, keyOutputWeight)
		if v, ok := w.float(f.val, p); ok {
			if v < 0 || v > MaxKeyWeight {
				w.add(f.val.Line, p, "must be in [0, %v], got %v", float64(MaxKeyWeight), v)
			}
			c.OutputTokenWeight = v
		}
	}
	w.extensions(&c, fields, path)
	return c, true
}

// keyWeight reads a fairness-key weight: a number in [MinKeyWeight, MaxKeyWeight].
func (w *walker) keyWeight(n *yaml.Node, path string) (float64, bool) {
	v, ok := w.float(n, path)
	if !ok {
		return 0, false
	}
	if v < MinKeyWeight || v > MaxKeyWeight {
		w.add(n.Line, path, "must be in [%v, %v], got %v", MinKeyWeight, float64(MaxKeyWeight), v)
		return 0, false
	}
	return v, true
}

// keyWeights reads key_weights: a mapping from fairness key
// (docs/protocol.md, Request headers: 1 to 64 bytes of [A-Za-z0-9_.:@-]) to weight.
func (w *walker) keyWeights(n *yaml.Node, path string) map[string]float64 {
	out := map[string]float64{}
	if !w.keyMap(n, path, "weight", func(v *yaml.Node, key, p string) {
		if wt, ok := w.keyWeight(v, p); ok {
			out[key] = wt
		}
	}) {
		return nil
	}
	return out
}

// ValidKey reports whether s is a fairness key: 1 to 64 bytes of [A-Za-z0-9_.:@-]
// (docs/protocol.md, Request headers: Dispatch-Fairness-Key).
func ValidKey(s string) bool { return wire.ValidKey(s) }

// crossCheck checks the rules that span classes, buckets and the default
// family. It skips checks whose inputs already have problems, so that one
// mistake is reported once.
func (w *walker) crossCheck(classes []rawClass, buckets []Bucket, bucketsOK bool, defFam string, defOK bool, defLine int) {
	bucketSet := make(map[string]bool, len(buckets))
	var bucketNames []string
	for _, b := range buckets {
		bucketSet[b.Name] = true
		bucketNames = append(bucketNames, b.Name)
	}

	type famInfo struct {
		first  int            // index in classes of its first class
		cells  map[string]int // bucket -> index in classes
		broken bool           // a class of it has a bad bucket
	}
	fams := map[string]*famInfo{}
	var famOrder []string
	names := map[string]int{} // class name -> line
	famBad := false           // some policy_family is not a valid token
	for i, c := range classes {
		if c.nameOK {
			if first, dup := names[c.Name]; dup {
				w.add(c.nameLine, join(c.path, keyName), "duplicate class name %q (first at line %d)", c.Name, first)
			} else {
				names[c.Name] = c.nameLine
			}
		}
		if !c.famOK {
			famBad = famBad || c.hasFamily
			continue
		}
		fi, ok := fams[c.Family]
		if !ok {
			fi = &famInfo{first: i, cells: map[string]int{}}
			fams[c.Family] = fi
			famOrder = append(famOrder, c.Family)
		}
		if !c.bucketOK {
			fi.broken = true
			continue
		}
		if bucketsOK && !bucketSet[c.Bucket] {
			w.add(c.bucketLine, join(c.path, keyCacheBucket), "unknown bucket %q (buckets: %s)", c.Bucket, strings.Join(bucketNames, ", "))
			fi.broken = true
			continue
		}
		if j, dup := fi.cells[c.Bucket]; dup {
			w.add(c.bucketLine, join(c.path, keyCacheBucket), "duplicate class for family %q and bucket %q (first: %s at line %d)",
				c.Family, c.Bucket, classes[j].path, classes[j].line)
			continue
		}
		fi.cells[c.Bucket] = i
	}

	for _, c := range classes {
		if c.nameOK && !c.hasFamily && !c.hasBucket {
			if _, clash := fams[c.Name]; clash {
				w.add(c.nameLine, join(c.path, keyName), "explicit class %q has the name of a policy family", c.Name)
			}
		}
	}

	// A family name with a problem might have been any family: skip.
	if bucketsOK && !famBad {
		for _, name := range famOrder {
			fi := fams[name]
			if fi.broken {
				continue
			}
			first := classes[fi.first]
			for _, b := range buckets {
				if _, ok := fi.cells[b.Name]; !ok {
					w.add(first.famLine, join(first.path, keyFamily), "family %q has no class for bucket %q", name, b.Name)
				}
			}
		}
	}

	if defOK && !famBad {
		if _, ok := fams[defFam]; !ok {
			w.add(defLine, keyDefaultFamily, "unknown policy family %q (families: %s)", defFam, strings.Join(famOrder, ", "))
		}
	}
}
