package release

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fleet-agent/fleet-agent/internal/refusal"
)

// SumsFile is the checksum file of a release, in the format
// `sha256sum -c` reads.
const SumsFile = "SHA256SUMS"

// WriteSums writes dir/SHA256SUMS over every regular file under dir
// (the OCI layout's blobs included), by path relative to dir, sorted.
func WriteSums(dir string) error {
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == SumsFile {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s  %s", hex.EncodeToString(h.Sum(nil)), filepath.ToSlash(rel)))
		return nil
	})
	if err != nil {
		return refusal.Wrap(refusal.InvalidState, err, "checksumming %s", dir)
	}
	if len(lines) == 0 {
		return refusal.New(refusal.InvalidState, "%s has no files to checksum: run make release", dir)
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	if err := os.WriteFile(filepath.Join(dir, SumsFile), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return refusal.Wrap(refusal.InvalidState, err, "writing %s", SumsFile)
	}
	return nil
}
