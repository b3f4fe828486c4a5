// Package secretfile reads and writes the files in a node's home that hold
// secrets (the identity's private keys, the CGP HTTP bearer token): a file
// is read only if it is a regular file that group and others cannot access,
// and written once, atomically, mode 0600, never over an existing one.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// Reasons a file is refused, matched with errors.Is through *Error.
var (
	ErrInsecure   = errors.New("open to group or others")
	ErrNotRegular = errors.New("not a regular file")
	ErrTooLarge   = errors.New("too large")
)

// Error is a file refused as a holder of secrets.
type Error struct {
	Path string
	Mode fs.FileMode // the permission bits, for ErrInsecure
	Max  int         // the size bound, for ErrTooLarge
	Err  error       // ErrInsecure, ErrNotRegular or ErrTooLarge
}

func (e *Error) Error() string {
	switch {
	case errors.Is(e.Err, ErrInsecure):
		return fmt.Sprintf("%s has mode %04o, %v", e.Path, e.Mode, e.Err)
	case errors.Is(e.Err, ErrTooLarge):
		return fmt.Sprintf("%s is over %d bytes, %v", e.Path, e.Max, e.Err)
	}
	return fmt.Sprintf("%s is %v", e.Path, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Read returns the contents of path, at most max bytes. A missing file's
// error wraps fs.ErrNotExist.
func Read(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Stat the open file, not the path, so the check applies to what is read.
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &Error{Path: path, Err: ErrNotRegular}
	}
	// Windows does not map group/other onto these bits.
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, &Error{Path: path, Mode: fi.Mode().Perm(), Err: ErrInsecure}
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > max {
		return nil, &Error{Path: path, Max: max, Err: ErrTooLarge}
	}
	return data, nil
}

// WriteNew writes data to path, mode 0600, atomically and only if path does
// not exist: a crash leaves either no file or the whole file, and two
// processes writing at once cannot overwrite each other (the loser's error
// wraps fs.ErrExist). The directory entry is made durable too.
func WriteNew(path string, data []byte) error {
	if _, err := os.Lstat(path); err == nil {
		return &fs.PathError{Op: "create", Path: path, Err: fs.ErrExist}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*.tmp") // created 0600
	if err != nil {
		return err
	}
	tmpName := tmp.Name()
	defer os.Remove(tmpName) // after a successful link this only drops the temp name
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmpName, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("flush %s: %w", tmpName, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// A hard link publishes the complete file under its final name and, unlike
	// rename, fails if the name is taken, so there is no check-then-replace race.
	if err := os.Link(tmpName, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		// Some filesystems have no hard links; rename is still atomic, and the
		// Lstat above is the (racy) guard against overwriting.
		if err := os.Rename(tmpName, path); err != nil {
			return err
		}
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("flush directory %s: %w", dir, err)
	}
	return nil
}

// syncDir makes a new directory entry durable, not just the file's bytes.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be opened for sync there
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
