package source

import (
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"os"
	"time"
)

// verifier finds content changes that keep a file's modification time,
// size and identity, which the scans' stat cannot see: it hashes the
// folder's files and compares each sum with the one the file was read
// with. It does so a slice per scan, resuming where the last one stopped,
// through a reused buffer: hashing a 50 MB folder at once, every
// VerifyInterval, was a burst of work (and, read whole, of garbage) that
// stalled the calls being served.
type verifier struct {
	// started is when the current round started; queue holds the files
	// the round has still to hash, in order, and offset how far the first
	// is hashed, with base the sum it was read with then.
	started time.Time
	queue   []string
	offset  int64
	base    [sha256.Size]byte
	budget  int64 // bytes per scan, for this round
	h       hash.Hash
	buf     []byte
}

// Bounds of the bytes one scan hashes. Each file opened counts as at
// least verifyFileCost, for the calls that open it.
const (
	minVerifyBytes = 64 << 10
	maxVerifyBytes = 1 << 20
	verifyFileCost = 4 << 10
)

// verifyStep hashes the next slice of the folder, starting a round at most
// once per VerifyInterval, and loads a file whose content differs from
// what was read.
func (sc *scan) verifyStep(paths []string) {
	d := sc.dir
	v := &d.verify
	if len(v.queue) == 0 {
		if v.started.IsZero() {
			v.started = time.Now() // every file was just read
			return
		}
		if time.Since(v.started) < d.verifyInterval {
			return
		}
		v.started = time.Now()
		v.queue = append(v.queue[:0], paths...)
		v.offset = 0
		var total int64
		for _, p := range paths {
			if st := d.files[p]; st != nil {
				total += max(st.size, verifyFileCost)
			}
		}
		v.budget = min(max(total*int64(d.interval)/int64(d.verifyInterval), minVerifyBytes), maxVerifyBytes)
	}
	for left := v.budget; left > 0 && len(v.queue) > 0; {
		p := v.queue[0]
		st := d.files[p]
		n, differs, done := v.hashSome(p, st, d.scans, left)
		left -= max(n, verifyFileCost)
		if !done {
			return
		}
		v.queue, v.offset = v.queue[1:], 0
		if differs {
			d.log.Info("policy file content changed with its time and size unchanged; reading it", "file", p)
			sc.load(p, st, st.info)
		}
	}
}

// hashSome hashes up to limit more bytes of the file at p; done when the
// file is hashed (differs then says whether its sum is not the one it was
// read with) or is to be skipped: gone, or changed in a way the scans'
// stat sees.
func (v *verifier) hashSome(p string, st *fileState, scan uint64, limit int64) (n int64, differs, done bool) {
	if st == nil || st.seen != scan {
		return 0, false, true
	}
	if v.offset == 0 || v.base != st.sum {
		// A new file, or one read again since its hashing started.
		v.h.Reset()
		v.offset, v.base = 0, st.sum
	}
	f, err := os.Open(p)
	if err != nil {
		return 0, false, true
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !os.SameFile(info, st.info) || info.Size() != st.size || !info.ModTime().Equal(st.modTime) {
		return 0, false, true
	}
	if _, err := f.Seek(v.offset, io.SeekStart); err != nil {
		return 0, false, true
	}
	want := min(limit, st.size-v.offset)
	for n < want {
		k, err := f.Read(v.buf[:min(int64(len(v.buf)), want-n)])
		v.h.Write(v.buf[:k])
		n += int64(k)
		if err != nil {
			if errors.Is(err, io.EOF) {
				break // shorter than its size said: the sums differ
			}
			return n, false, true
		}
	}
	v.offset += n
	if v.offset < st.size && n == want {
		return n, false, false
	}
	var sum [sha256.Size]byte
	v.h.Sum(sum[:0])
	return n, sum != st.sum, true
}
