package gitsync

import (
	"bufio"
	"crypto/sha1"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"compress/zlib"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// packStorage is the local copy's storage with a cheaper way in for packs.
// go-git's own pack writer (dotgit.PackWriter) runs packfile.Parser, which
// inflates every object at least twice (once to hash it, then again in
// delta resolution even when it has no delta to resolve) through a
// byte-at-a-time reader, and caches delta bases in a 96 MiB LRU: on a first
// sync that was most of the CPU and of the heap. packWriter inflates each
// object once, as it arrives, so that the work overlaps the download; after
// the last byte it inflates again only the bases that have deltas and the
// deltas, one chain at a time. The files it writes (the pack, an index git
// index-pack would write byte for byte) are read by go-git as usual.
type packStorage struct {
	*filesystem.Storage
	dir string // the repository directory, as the storage's file system
}

// PackfileWriter implements storer.PackfileWriter; Repository.Fetch and
// RepackObjects write packs through it.
func (s *packStorage) PackfileWriter() (io.WriteCloser, error) {
	packDir := filepath.Join(s.dir, "objects", "pack")
	if err := os.MkdirAll(packDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(packDir, "tmp_pack_")
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	w := &packWriter{st: s, dir: packDir, f: f, pw: pw, done: make(chan error, 1)}
	go func() {
		err := w.index(pr)
		// The sender must not block on a reader that is gone: it gets the
		// reason the pack was refused, or, after a good pack, that there
		// is nothing more to take.
		if err != nil {
			pr.CloseWithError(err)
		} else {
			pr.CloseWithError(errPackIndexed)
		}
		w.done <- err
	}()
	return w, nil
}

var errPackIndexed = errors.New("pack data after the end of the pack")

type packWriter struct {
	st   *packStorage
	dir  string
	f    *os.File
	pw   *io.PipeWriter
	n    int64
	done chan error

	sum plumbing.Hash
	idx *idxfile.MemoryIndex
}

func (w *packWriter) Write(p []byte) (int, error) {
	n, err := w.pw.Write(p)
	w.n += int64(n)
	return n, err
}

// Close waits for the index, then moves the pack and its index into place
// (index first: a pack without an index would break the storage) and makes
// the storage list them. Nothing is left behind on failure.
func (w *packWriter) Close() error {
	_ = w.pw.Close()
	err := <-w.done
	if w.n == 0 {
		err = nil // nothing sent: nothing to keep (go-git reports it)
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err != nil || w.n == 0 {
		_ = os.Remove(w.f.Name())
		return err
	}
	base := filepath.Join(w.dir, "pack-"+w.sum.String())
	if err := writeIndex(base+".idx", w.idx); err != nil {
		_ = os.Remove(w.f.Name())
		return err
	}
	if _, err := os.Stat(base + ".pack"); err == nil {
		// The same pack again (content addressed): keep the one there.
		_ = os.Remove(w.f.Name())
	} else if err := os.Rename(w.f.Name(), base+".pack"); err != nil {
		_ = os.Remove(w.f.Name())
		return err
	}
	// The storage caches its list of packs and their indexes. Opening and
	// closing a writer of its own, with nothing written, drops the list
	// (and writes nothing); Reindex drops the indexes; both are read again
	// at the next object lookup.
	if gw, err := w.st.ObjectStorage.PackfileWriter(); err == nil {
		_ = gw.Close()
	} else {
		return err
	}
	w.st.ObjectStorage.Reindex()
	return nil
}

// removeTempPacks removes what an interrupted pack write left (a crash or
// a kill mid-fetch); the agent is the copy's only writer, so whatever is
// there at Open is stale.
func removeTempPacks(dir string) {
	for _, pat := range []string{"tmp_pack_*", "tmp_idx_*"} {
		left, _ := filepath.Glob(filepath.Join(dir, "objects", "pack", pat))
		for _, f := range left {
			_ = os.Remove(f)
		}
	}
}

func writeIndex(path string, idx *idxfile.MemoryIndex) error {
	f, err := os.CreateTemp(filepath.Dir(path), "tmp_idx_")
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	_, err = idxfile.NewEncoder(bw).Encode(idx)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// packObject is what the index needs of an object, and what delta
// resolution needs to find its base.
type packObject struct {
	off     int64
	crc     uint32
	typ     plumbing.ObjectType // the type in the pack (a delta type for deltas)
	hash    plumbing.Hash       // zero for a delta until resolved
	baseOff int64               // ofs-delta: offset of the base
	baseRef plumbing.Hash       // ref-delta: hash of the base
}

// teeReader writes all it reads to the pack file and counts it.
type teeReader struct {
	r io.Reader
	f *os.File
	n int64
}

func (t *teeReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		if _, werr := t.f.Write(p[:n]); werr != nil {
			return 0, werr
		}
		t.n += int64(n)
	}
	return n, err
}

func errPack(format string, a ...any) error {
	return fmt.Errorf("%w: %s", packfile.ErrMalformedPackFile, fmt.Sprintf(format, a...))
}

// index reads the pack from r into the file, checks it and builds its index
// in w.idx and w.sum.
func (w *packWriter) index(r io.Reader) error {
	tee := &teeReader{r: r, f: w.f}
	br := bufio.NewReaderSize(tee, 64<<10)
	pos := func() int64 { return tee.n - int64(br.Buffered()) }

	var hdr [12]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		if err == io.EOF {
			return packfile.ErrEmptyPackfile
		}
		return errPack("header: %v", err)
	}
	if string(hdr[:4]) != "PACK" {
		return errPack("bad signature")
	}
	if v := be32(hdr[4:]); v != 2 && v != 3 {
		return errPack("version %d", v)
	}
	count := be32(hdr[8:])

	objs := make([]packObject, 0, min(count, 1<<16))
	byOff := make(map[int64]int32, min(count, 1<<16))
	var zr io.ReadCloser
	buf := make([]byte, 32<<10)
	crcBuf := make([]byte, 32<<10)
	for i := uint32(0); i < count; i++ {
		start := pos()
		typ, size, err := readObjectHeader(br)
		if err != nil {
			return err
		}
		o := packObject{off: start, typ: typ}
		switch typ {
		case plumbing.OFSDeltaObject:
			rel, err := readOfsOffset(br)
			if err != nil {
				return err
			}
			o.baseOff = start - rel
			if _, ok := byOff[o.baseOff]; !ok || rel <= 0 {
				return errPack("object at %d: delta base at %d is not in the pack", start, o.baseOff)
			}
		case plumbing.REFDeltaObject:
			if _, err := io.ReadFull(br, o.baseRef[:]); err != nil {
				return errPack("object at %d: %v", start, err)
			}
		case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
		default:
			return errPack("object at %d: type %d", start, typ)
		}
		if zr == nil {
			zr, err = zlib.NewReader(br)
		} else {
			err = zr.(zlib.Resetter).Reset(br, nil)
		}
		if err != nil {
			return errPack("object at %d: %v", start, err)
		}
		var dst io.Writer = io.Discard
		var h plumbing.Hasher
		if !typ.IsDelta() {
			h = plumbing.NewHasher(typ, size)
			dst = h
		}
		n, err := io.CopyBuffer(dst, zr, buf)
		if err != nil {
			return errPack("object at %d: %v", start, err)
		}
		if n != size {
			return errPack("object at %d: %d bytes, header says %d", start, n, size)
		}
		if !typ.IsDelta() {
			o.hash = h.Sum()
		}
		// The CRC covers the object as stored; those bytes are in the file.
		end := pos()
		crc := uint32(0)
		for p := start; p < end; {
			k := min(int64(len(crcBuf)), end-p)
			if _, err := w.f.ReadAt(crcBuf[:k], p); err != nil {
				return err
			}
			crc = crc32.Update(crc, crc32.IEEETable, crcBuf[:k])
			p += k
		}
		o.crc = crc
		byOff[start] = int32(len(objs))
		objs = append(objs, o)
	}
	end := pos()
	var trailer plumbing.Hash
	if _, err := io.ReadFull(br, trailer[:]); err != nil {
		return errPack("trailer: %v", err)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return errPack("data after the trailer")
	}
	// The checksum covers everything before the trailer.
	sh := sha1.New()
	if _, err := io.CopyBuffer(sh, io.NewSectionReader(w.f, 0, end), buf); err != nil {
		return err
	}
	if !bytesEqual(sh.Sum(nil), trailer[:]) {
		return errPack("checksum mismatch")
	}

	if err := w.resolveDeltas(objs, byOff); err != nil {
		return err
	}

	iw := new(idxfile.Writer)
	if err := iw.OnHeader(count); err != nil {
		return err
	}
	for _, o := range objs {
		iw.Add(o.hash, uint64(o.off), o.crc)
	}
	if err := iw.OnFooter(trailer); err != nil {
		return err
	}
	idx, err := iw.Index()
	if err != nil {
		return err
	}
	w.sum, w.idx = trailer, idx
	return nil
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func readObjectHeader(br io.ByteReader) (plumbing.ObjectType, int64, error) {
	c, err := br.ReadByte()
	if err != nil {
		return 0, 0, errPack("object header: %v", err)
	}
	typ := plumbing.ObjectType((c >> 4) & 7)
	size := int64(c & 15)
	shift := uint(4)
	for c&0x80 != 0 {
		if shift > 56 {
			return 0, 0, errPack("object size overflows")
		}
		if c, err = br.ReadByte(); err != nil {
			return 0, 0, errPack("object header: %v", err)
		}
		size |= int64(c&0x7f) << shift
		shift += 7
	}
	return typ, size, nil
}

func readOfsOffset(br io.ByteReader) (int64, error) {
	c, err := br.ReadByte()
	if err != nil {
		return 0, errPack("delta offset: %v", err)
	}
	off := int64(c & 0x7f)
	for c&0x80 != 0 {
		if off > 1<<48 {
			return 0, errPack("delta offset overflows")
		}
		if c, err = br.ReadByte(); err != nil {
			return 0, errPack("delta offset: %v", err)
		}
		off = (off+1)<<7 | int64(c&0x7f)
	}
	return off, nil
}

// maxDeltaDepth is git's own limit on delta chains.
const maxDeltaDepth = 4095

// resolveDeltas hashes the deltas: from each whole object with deltas on
// it, depth first, so that only one chain of contents is in memory at a
// time and each base is inflated once.
func (w *packWriter) resolveDeltas(objs []packObject, byOff map[int64]int32) error {
	children := map[int64][]int32{}            // by base offset
	refChildren := map[plumbing.Hash][]int32{} // by base hash
	deltas := 0
	for i, o := range objs {
		switch o.typ {
		case plumbing.OFSDeltaObject:
			children[o.baseOff] = append(children[o.baseOff], int32(i))
			deltas++
		case plumbing.REFDeltaObject:
			refChildren[o.baseRef] = append(refChildren[o.baseRef], int32(i))
			deltas++
		}
	}
	if deltas == 0 {
		return nil
	}
	rd := &objReader{f: w.f}
	resolved := 0
	var walk func(base []byte, typ plumbing.ObjectType, o *packObject, depth int) error
	walk = func(base []byte, typ plumbing.ObjectType, o *packObject, depth int) error {
		kids := children[o.off]
		kids = append(kids[:len(kids):len(kids)], refChildren[o.hash]...)
		if len(kids) == 0 {
			return nil
		}
		if depth >= maxDeltaDepth {
			return errPack("delta chain deeper than %d", maxDeltaDepth)
		}
		for _, k := range kids {
			c := &objs[k]
			if !c.hash.IsZero() {
				continue // a ref-delta on an object twice in the pack
			}
			delta, err := rd.read(c.off)
			if err != nil {
				return err
			}
			data, err := packfile.PatchDelta(base, delta)
			if err != nil {
				return errPack("object at %d: %v", c.off, err)
			}
			h := plumbing.NewHasher(typ, int64(len(data)))
			_, _ = h.Write(data)
			c.hash = h.Sum()
			resolved++
			if err := walk(data, typ, c, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	for i := range objs {
		o := &objs[i]
		if o.typ.IsDelta() || (len(children[o.off]) == 0 && len(refChildren[o.hash]) == 0) {
			continue
		}
		base, err := rd.read(o.off)
		if err != nil {
			return err
		}
		if err := walk(base, o.typ, o, 0); err != nil {
			return err
		}
	}
	if resolved != deltas {
		// A thin pack (go-git does not ask for one) or a broken one.
		return fmt.Errorf("%w: %d deltas without their base in the pack", packfile.ErrReferenceDeltaNotFound, deltas-resolved)
	}
	return nil
}

// objReader inflates one object of the pack file at a time.
type objReader struct {
	f  *os.File
	br *bufio.Reader
	zr io.ReadCloser
}

// read returns the inflated data of the object at off (for a delta, the
// delta itself) in a new slice.
func (r *objReader) read(off int64) ([]byte, error) {
	sr := io.NewSectionReader(r.f, off, 1<<62)
	if r.br == nil {
		r.br = bufio.NewReaderSize(sr, 16<<10)
	} else {
		r.br.Reset(sr)
	}
	typ, size, err := readObjectHeader(r.br)
	if err != nil {
		return nil, err
	}
	switch typ {
	case plumbing.OFSDeltaObject:
		if _, err := readOfsOffset(r.br); err != nil {
			return nil, err
		}
	case plumbing.REFDeltaObject:
		if _, err := r.br.Discard(20); err != nil {
			return nil, err
		}
	}
	if r.zr == nil {
		r.zr, err = zlib.NewReader(r.br)
	} else {
		err = r.zr.(zlib.Resetter).Reset(r.br, nil)
	}
	if err != nil {
		return nil, errPack("object at %d: %v", off, err)
	}
	// size was checked against the data when the pack came in.
	data := make([]byte, size)
	if _, err := io.ReadFull(r.zr, data); err != nil {
		return nil, errPack("object at %d: %v", off, err)
	}
	return data, nil
}
