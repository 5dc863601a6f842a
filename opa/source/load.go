package source

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/opa-scheduler-extender/opa-scheduler-extender/opa"
)

// A changed file is parsed whole before anything in it is applied: a file
// broken anywhere, even after thousands of good objects, changes nothing
// in the engine, and its last good objects stay in force until it parses
// again. The survey parses every document and item and keeps, per object,
// its key and a digest; the objects whose digest changed are then applied,
// in chunks.
//
// A file of up to wholeFileBytes (nearly every file: a file of 10
// kubelet-sized Nodes is 100 KB) is read once, whole, into a reused
// buffer, and parsed once: the survey keeps the parsed objects that
// changed, and applying them reads nothing again. A bigger file (a 57 MB
// `kubectl get nodes -o yaml` of 5000 Nodes) is never held whole, nor all
// its objects: it is read in two passes, each a stream; the second reads
// it again and applies the changed objects as they come, checking that
// each is still the one the first pass validated.

// wholeFileBytes bounds the files read whole and parsed once. By the end
// of such a file's survey both its bytes and its changed objects, parsed
// (about 2.5 times their bytes for kubelet-sized Nodes as kubectl writes
// them), are held. At 4 MiB, a file of 400 kubelet-sized Nodes, that is at
// most about 14 MiB, against the 6 MiB of the chunk of inventoryChunk such
// Nodes a streamed file's second pass holds; files of 250 Nodes (2.5 MB)
// are read whole. A bigger file is streamed twice.
var wholeFileBytes int64 = 4 << 20

// keptBufferBytes: the buffer a whole file is read into is kept for the
// next file up to this size; a bigger one (a file of hundreds of Nodes)
// goes back to the collector.
const keptBufferBytes = 1 << 20

// position is where an object is in its file: its document, and its item
// in that document (0: the document itself).
type position struct{ doc, item int }

// survey is what the first pass over a file finds (the only one, for
// a file read whole).
type survey struct {
	sum     [sha256.Size]byte // of the file's bytes
	read    int64             // bytes read
	objects map[objectKey]digest
	// at holds every object by position, then (changedSince) only the
	// ones to apply.
	at map[position]found
	// keep: the survey keeps each object parsed (found.obj) when its
	// digest differs from old's (what the file held), and applying it
	// reads nothing again (a file read whole).
	keep bool
	old  map[objectKey]digest
	// whole: documents that are objects whose items were cut out of them
	// (a kind that is not a list): the survey that keeps objects, or
	// else the second pass, puts them back.
	whole map[int]bool
	// inline: lists whose items stayed in the document ("items: [...]").
	inline map[int]bool
	// where is the position of each object: of the last, when a key is
	// found twice (as the engine would have it, the last wins).
	where map[objectKey]position
	// refused: items that are not objects, and why.
	refused []string
}

type found struct {
	key objectKey
	dg  digest
	obj map[string]any // the object parsed, when the survey keeps it
}

// itemInfo is what the first pass keeps of an item until its document's
// end says what the document is.
type itemInfo struct {
	sum                               [sha256.Size]byte
	apiVersion, kind, namespace, name string
	object                            bool
	v                                 any // the item parsed, when the survey keeps it
}

var (
	// errUnreadable: the file could not be read (removed while read);
	// the next scan sees it.
	errUnreadable = errors.New("unreadable")
	// errSame: the file's bytes are the ones it was last read with
	// (touched, not changed).
	errSame = errors.New("unchanged")
	// errTooBig: the file is over wholeFileBytes; it is streamed.
	errTooBig = errors.New("too big to read whole")
)

func newSurvey() *survey {
	return &survey{objects: map[objectKey]digest{}, at: map[position]found{}, where: map[objectKey]position{},
		whole: map[int]bool{}, inline: map[int]bool{}}
}

// surveyWhole reads the file at p whole, if it has at most wholeFileBytes,
// and surveys it keeping the objects that changed since st. It returns
// errSame when the file's bytes are st's, errTooBig when the file is
// bigger (it grew since it was listed).
func (d *Dir) surveyWhole(p string, st *fileState) (*survey, error) {
	b, err := d.readWhole(p)
	if err != nil {
		return nil, err
	}
	defer d.releaseWhole()
	sv := newSurvey()
	sv.sum, sv.read, sv.keep = sha256.Sum256(b), int64(len(b)), true
	if st != nil {
		if sv.sum == st.sum {
			return sv, errSame
		}
		sv.old = st.objects
	}
	d.br.Reset(bytes.NewReader(b))
	defer d.br.Reset(nil)
	return sv, sv.walk(newPartReader(d.br))
}

// readWhole reads the file at p into the reused buffer: errTooBig past
// wholeFileBytes.
func (d *Dir) readWhole(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUnreadable, err)
	}
	defer f.Close()
	d.whole.Reset()
	if info, err := f.Stat(); err == nil && info.Size() <= wholeFileBytes {
		d.whole.Grow(int(info.Size()) + bytes.MinRead) // one allocation, and none for the EOF
	}
	if _, err := d.whole.ReadFrom(io.LimitReader(onlyReader{f}, wholeFileBytes+1)); err != nil {
		d.releaseWhole()
		return nil, fmt.Errorf("%w: %v", errUnreadable, err)
	}
	if int64(d.whole.Len()) > wholeFileBytes {
		d.releaseWhole()
		return nil, errTooBig
	}
	return d.whole.Bytes(), nil
}

// releaseWhole lets the buffer a file was read into go, if it is big.
func (d *Dir) releaseWhole() {
	if d.whole.Cap() > keptBufferBytes {
		d.whole = bytes.Buffer{}
	}
}

// surveyStream is the first of a file's two streamed passes; it returns
// errSame, before parsing, when the file's bytes are st's.
func (d *Dir) surveyStream(p string, st *fileState) (*survey, error) {
	if st != nil {
		sum, err := d.hashFile(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUnreadable, err)
		}
		if sum == st.sum {
			return &survey{sum: sum}, errSame
		}
	}
	return d.survey(p)
}

// survey reads the file at p a first time, as a stream. A file that does
// not parse is still read to its end, for its sum: it is read again only
// once it changes.
func (d *Dir) survey(p string) (*survey, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUnreadable, err)
	}
	defer f.Close()
	rd := &recordingReader{r: f}
	h := sha256.New()
	d.br.Reset(io.TeeReader(rd, h))
	defer d.br.Reset(nil)
	sv := newSurvey()
	perr := sv.walk(newPartReader(d.br))
	if perr != nil {
		_, _ = io.Copy(io.Discard, d.br)
	}
	if rd.err != nil {
		return nil, fmt.Errorf("%w: %v", errUnreadable, rd.err)
	}
	h.Sum(sv.sum[:0])
	sv.read = rd.n
	return sv, perr
}

func (sv *survey) walk(pr partReader) error {
	var items []itemInfo
	for {
		p, err := pr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if p.item > 0 {
			v, err := parseItem(p)
			if err != nil {
				return fmt.Errorf("document %d, item %d: %w", p.doc, p.item, err)
			}
			it := infoOf(v, p.raw)
			if sv.keep {
				it.v = v
			}
			items = append(items, it)
			continue
		}
		if err := sv.document(p, items); err != nil {
			return err
		}
		clear(items) // the items kept, once taken
		items = items[:0]
	}
}

func infoOf(v any, raw []byte) itemInfo {
	it := itemInfo{sum: sha256.Sum256(raw)}
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		u := unstructured.Unstructured{Object: m}
		it.apiVersion, it.kind, it.namespace, it.name = u.GetAPIVersion(), u.GetKind(), u.GetNamespace(), u.GetName()
		it.object = true
	}
	return it
}

// document takes a document at its end, with the items cut out of it.
func (sv *survey) document(p part, items []itemInfo) error {
	env, err := parseDocument(p)
	if err != nil || env == nil {
		return err
	}
	if kindOf(env) == "Suite" {
		return nil
	}
	if isListKind(env) && p.items > 0 {
		for i, it := range items {
			sv.item(p.doc, i+1, env, it)
		}
		return nil
	}
	if inline, ok := listItems(env, nil); ok {
		sv.inlineList(p.doc, env, inline)
		return nil
	}
	sum := sha256.Sum256(p.raw)
	if p.items > 0 {
		// An object with items that are not objects: its digest covers
		// them too.
		h := sha256.New()
		h.Write(p.raw)
		for _, it := range items {
			h.Write(it.sum[:])
		}
		h.Sum(sum[:0])
		sv.whole[p.doc] = true
	}
	u := &unstructured.Unstructured{Object: env}
	if u.GetName() == "" {
		sv.refused = append(sv.refused, fmt.Sprintf("document %d (%s): metadata.name is required", p.doc, u.GetKind()))
		return nil
	}
	if sv.whole[p.doc] && sv.keep {
		cut := make([]any, len(items))
		for i, it := range items {
			cut[i] = it.v
		}
		env["items"] = cut
	}
	sv.add(position{p.doc, 0}, keyOf(u), sum, env)
	return nil
}

// item takes a list's item (n, from 1), or refuses it.
func (sv *survey) item(doc, n int, env map[string]any, it itemInfo) {
	apiVersion, kind := itemGVK(env, it.apiVersion, it.kind)
	why := ""
	switch {
	case !it.object:
		why = "not an object"
	case apiVersion == "" || kind == "":
		why = "apiVersion and kind are required"
	case it.name == "":
		why = "metadata.name is required"
	}
	if why != "" {
		sv.refused = append(sv.refused, fmt.Sprintf("document %d, item %d%s: %s", doc, n, kindNote(kind), why))
		return
	}
	if kind == "Suite" {
		return
	}
	m, _ := it.v.(map[string]any)
	sv.add(position{doc, n}, objectKey{apiVersion, kind, it.namespace, it.name}, it.sum, m)
}

// kindNote is " (Kind)", for an item whose kind is known.
func kindNote(kind string) string {
	if kind == "" {
		return ""
	}
	return " (" + kind + ")"
}

// inlineList takes the items of a list that stayed in its document.
func (sv *survey) inlineList(doc int, env map[string]any, items []any) {
	for i, v := range items {
		it := itemInfo{}
		if m, ok := v.(map[string]any); ok {
			// The digest of the content, as the document's bytes cannot
			// be told apart per item.
			it = infoOf(m, nil)
			b, err := (&unstructured.Unstructured{Object: m}).MarshalJSON()
			if err != nil {
				it.object = false
			}
			it.sum = sha256.Sum256(b)
			if sv.keep {
				it.v = m
			}
		}
		sv.item(doc, i+1, env, it)
	}
	sv.inline[doc] = true
}

// add takes an object found at a position; obj is kept only when the
// survey keeps objects and the object changed (unchanged, it is not
// applied).
func (sv *survey) add(at position, k objectKey, sum [sha256.Size]byte, obj map[string]any) {
	dg := digest{gvk: schema.FromAPIVersionAndKind(k.apiVersion, k.kind), sum: sum}
	if before, ok := sv.where[k]; ok {
		delete(sv.at, before)
	}
	if prev, ok := sv.old[k]; !sv.keep || ok && prev.unchanged(dg) {
		obj = nil
	}
	sv.objects[k], sv.where[k], sv.at[at] = dg, at, found{key: k, dg: dg, obj: obj}
}

// changedSince keeps in at only the objects that differ from old (what
// the file held), and reports whether any do.
func (sv *survey) changedSince(old map[objectKey]digest) bool {
	for at, f := range sv.at {
		if prev, ok := old[f.key]; ok && prev.unchanged(f.dg) {
			delete(sv.at, at)
		}
	}
	sv.where = nil
	if len(sv.inline) > 0 {
		changed := map[int]bool{}
		for at := range sv.at {
			changed[at.doc] = true
		}
		for doc := range sv.inline {
			if !changed[doc] {
				delete(sv.inline, doc)
			}
		}
	}
	return len(sv.at) > 0
}

func kindOf(m map[string]any) string {
	k, _ := m["kind"].(string)
	return k
}

// recordingReader counts what it reads and keeps the first read error,
// to tell a file that cannot be read from one that does not parse.
type recordingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (r *recordingReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	r.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) && r.err == nil {
		r.err = err
	}
	return n, err
}

// applyKept applies the objects a survey that kept them found changed,
// in the file's order.
func (sc *scan) applyKept(sv *survey) {
	at := slices.SortedFunc(maps.Keys(sv.at), func(a, b position) int {
		if a.doc != b.doc {
			return a.doc - b.doc
		}
		return a.item - b.item
	})
	for _, pos := range at {
		f := sv.at[pos]
		delete(sv.at, pos) // queued: the survey lets it go
		sc.upsert(f.obj, f)
	}
}

// applyChanged reads the file a second time and applies the objects the
// survey found changed, in chunks as they come. It returns the objects
// applied; complete is false when the file changed since the survey (its
// bytes differ): what was applied is then exactly what the survey
// validated, and the rest waits for the next read.
func (sc *scan) applyChanged(p string, sv *survey) (applied map[objectKey]digest, complete bool) {
	applied = map[objectKey]digest{}
	f, err := os.Open(p)
	if err != nil {
		return applied, false
	}
	defer f.Close()
	rd := &recordingReader{r: f}
	h := sha256.New()
	d := sc.dir
	d.br.Reset(io.TeeReader(rd, h))
	defer d.br.Reset(nil)
	ap := &applyPass{sc: sc, sv: sv, applied: applied}
	err = ap.walk(newPartReader(d.br))
	if err == nil {
		_, err = io.Copy(io.Discard, d.br)
	}
	sc.loaded += rd.n
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return applied, err == nil && !ap.stale && sum == sv.sum && len(applied) == len(sv.at)
}

// applyPass is the second pass over a streamed file.
type applyPass struct {
	sc      *scan
	sv      *survey
	applied map[objectKey]digest
	stale   bool // an object's bytes differ from the survey's
	items   []any
	sums    [][sha256.Size]byte
}

func (ap *applyPass) walk(pr partReader) error {
	for {
		p, err := pr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if p.item > 0 {
			if err := ap.item(p); err != nil {
				return err
			}
			continue
		}
		if err := ap.document(p); err != nil {
			return err
		}
		ap.items, ap.sums = ap.items[:0], ap.sums[:0]
	}
}

func (ap *applyPass) item(p part) error {
	if ap.sv.whole[p.doc] {
		if _, changed := ap.sv.at[position{p.doc, 0}]; !changed {
			return nil
		}
		v, err := parseItem(p)
		ap.items, ap.sums = append(ap.items, v), append(ap.sums, sha256.Sum256(p.raw))
		return err
	}
	f, ok := ap.sv.at[position{p.doc, p.item}]
	if !ok {
		return nil
	}
	if sha256.Sum256(p.raw) != f.dg.sum {
		ap.stale = true
		return nil
	}
	v, err := parseItem(p)
	if err != nil {
		return err
	}
	m, _ := v.(map[string]any)
	ap.upsert(m, f)
	return nil
}

func (ap *applyPass) document(p part) error {
	sv := ap.sv
	if sv.inline[p.doc] {
		env, err := parseDocument(p)
		if err != nil {
			return err
		}
		items, _ := listItems(env, nil)
		for i, v := range items {
			f, ok := sv.at[position{p.doc, i + 1}]
			m, _ := v.(map[string]any)
			if !ok || m == nil {
				continue
			}
			if b, err := (&unstructured.Unstructured{Object: m}).MarshalJSON(); err != nil || sha256.Sum256(b) != f.dg.sum {
				ap.stale = true
				continue
			}
			ap.upsert(m, f)
		}
		return nil
	}
	f, ok := sv.at[position{p.doc, 0}]
	if !ok {
		return nil
	}
	sum := sha256.Sum256(p.raw)
	if sv.whole[p.doc] {
		h := sha256.New()
		h.Write(p.raw)
		for _, s := range ap.sums {
			h.Write(s[:])
		}
		h.Sum(sum[:0])
	}
	if sum != f.dg.sum {
		ap.stale = true
		return nil
	}
	env, err := parseDocument(p)
	if err != nil {
		return err
	}
	if sv.whole[p.doc] {
		env["items"] = append([]any(nil), ap.items...)
	}
	ap.upsert(env, f)
	return nil
}

func (ap *applyPass) upsert(m map[string]any, f found) {
	ap.sc.upsert(m, f)
	ap.applied[f.key] = f.dg
}

// upsert queues an object, its apiVersion and kind as the survey found
// them (a typed list's items may leave them out).
func (sc *scan) upsert(m map[string]any, f found) {
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(f.key.apiVersion)
	u.SetKind(f.key.kind)
	sc.add(opa.Change{Object: u})
}

// load reads a file that may have changed (or is new) and applies what
// changed in it: read whole and parsed once when it is small, else
// streamed twice. A file whose bytes are the ones last read is left as
// it was (touched, not changed). A file that does not parse is reported
// and its last good objects stay in force.
func (sc *scan) load(p string, st *fileState, info os.FileInfo) {
	d := sc.dir
	var sv *survey
	err := errTooBig
	if info.Size() <= wholeFileBytes {
		sv, err = d.surveyWhole(p, st)
	}
	if errors.Is(err, errTooBig) {
		sv, err = d.surveyStream(p, st)
	}
	switch {
	case errors.Is(err, errUnreadable):
		sc.missed = true
		return // removed or unreadable for now: the next scan sees it
	case errors.Is(err, errSame):
		st.info, st.modTime, st.size = info, info.ModTime(), info.Size()
		return
	}
	sc.loaded += sv.read
	sc.dirty = true
	if st == nil {
		st = &fileState{objects: map[objectKey]digest{}, seen: d.scans}
		d.files[p] = st
	}
	st.info, st.modTime, st.size, st.sum = info, info.ModTime(), info.Size(), sv.sum
	if err != nil {
		st.err = fmt.Errorf("%s: %w", p, err)
		d.log.Warn("policy file does not parse; its last good objects stay in force", "file", p, "err", err)
		return
	}
	st.err = nil
	for _, why := range sv.refused {
		d.log.Warn("policy file object refused", "file", p, "why", why)
	}
	st.refused = sv.refused
	sc.applyFile(p, st, sv)
}

// applyFile applies what changed in a file that parsed, as its survey
// found it.
func (sc *scan) applyFile(p string, st *fileState, sv *survey) {
	if !sv.changedSince(st.objects) {
		sc.changed[p] = sv.objects
		return
	}
	if sv.keep {
		// Applied as parsed: what the survey validated, all of it.
		sc.applyKept(sv)
		sc.changed[p] = sv.objects
		return
	}
	applied, complete := sc.applyChanged(p, sv)
	if complete {
		sc.changed[p] = sv.objects
		return
	}
	// The file changed between the passes: the engine holds the objects
	// applied and the file's others as they were; read it again next scan.
	next := maps.Clone(st.objects)
	maps.Copy(next, applied)
	sc.changed[p] = next
	st.sum = [sha256.Size]byte{}
}
