package fleet

import (
	"fmt"
	"io"
	"os"
)

// ReadFile reads a document from path ("-" is standard input) without ever
// holding more than MaxDocumentBytes+1 bytes: a 100 MB file is refused by its
// size, not read.
func ReadFile(path string) ([]byte, Errors) {
	var r io.Reader
	if path == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, finish(path, []Error{{Message: "cannot read the file: " + describeOSError(err)}})
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			if st.IsDir() {
				return nil, finish(path, []Error{{Message: "this is a directory; give the path of a fleet.json file"}})
			}
			if st.Size() > MaxDocumentBytes {
				return nil, finish(path, []Error{{Message: fmt.Sprintf("the document is %d bytes; at most %d (16 MiB) are allowed", st.Size(), MaxDocumentBytes)}})
			}
		}
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxDocumentBytes+1))
	if err != nil {
		return nil, finish(path, []Error{{Message: "cannot read the file: " + describeOSError(err)}})
	}
	if len(data) > MaxDocumentBytes {
		return nil, finish(path, []Error{{Message: fmt.Sprintf("the document is more than %d bytes (16 MiB); at most that is allowed", MaxDocumentBytes)}})
	}
	return data, nil
}

func describeOSError(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err.Error()
	}
	return err.Error()
}
