package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The layers are tars written here, not by go-containerregistry, which builds images from
// layers but has no writer for a directory tree: every time is the epoch and entries are
// sorted, so a layer's digest depends on its content only and an unchanged tree gives
// the same image (and rolls no pod).

// epoch is every file's modification time.
var epoch = time.Unix(0, 0)

// entry is one file or directory of a layer built from a list.
type entry struct {
	Name   string // absolute path in the image
	Dir    bool
	Mode   int64
	UID    int
	GID    int
	Source string // file to copy (files)
	Data   []byte // literal content (files without Source)
}

// parents returns directory entries for every parent of p ("/a/b/c" -> /a, /a/b).
func parents(p string) []entry {
	var out []entry
	d := path.Dir(p)
	for d != "/" && d != "." {
		out = append([]entry{{Name: d, Dir: true, Mode: 0o755}}, out...)
		d = path.Dir(d)
	}
	return out
}

// layerFile is a finished, gzip-compressed layer in the cache.
type layerFile struct {
	// Path of the .tar.gz.
	Path string `json:"-"`
	// DiffID is the digest of the uncompressed tar, Digest and Size the compressed blob's.
	DiffID string `json:"diffID"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// hashWriter counts and hashes what passes through it.
type hashWriter struct {
	w io.Writer
	h io.Writer
	n int64
}

func (w *hashWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// writeLayer writes a layer through fill into the cache's layers directory, named by its
// diff ID, gzip-compressed (the registry and every runtime take gzip; compress/gzip's
// output is a function of its input, so the compressed digest is reproducible too). fill
// runs twice when the layer is new: once to learn the diff ID (a layer already in the
// cache is reused without compressing it again), once to write it.
func writeLayer(cache string, fill func(*tar.Writer) error) (layerFile, error) {
	dir := filepath.Join(cache, "layers")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return layerFile{}, err
	}
	uncompressed := sha256.New()
	tw := tar.NewWriter(uncompressed)
	if err := fill(tw); err != nil {
		return layerFile{}, err
	}
	if err := tw.Close(); err != nil {
		return layerFile{}, err
	}
	diffID := "sha256:" + hex.EncodeToString(uncompressed.Sum(nil))
	meta := filepath.Join(dir, strings.TrimPrefix(diffID, "sha256:")+".json")
	if l, ok := loadLayerMeta(cache, meta); ok {
		return l, nil
	}
	tmp, err := os.CreateTemp(dir, ".layer-*")
	if err != nil {
		return layerFile{}, err
	}
	defer os.Remove(tmp.Name())
	compressed := sha256.New()
	cw := &hashWriter{w: tmp, h: compressed}
	zw, err := gzip.NewWriterLevel(cw, gzip.DefaultCompression)
	if err != nil {
		tmp.Close()
		return layerFile{}, err
	}
	again := sha256.New()
	tw = tar.NewWriter(io.MultiWriter(zw, again))
	err = fill(tw)
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return layerFile{}, err
	}
	if got := "sha256:" + hex.EncodeToString(again.Sum(nil)); got != diffID {
		return layerFile{}, fmt.Errorf("layer content changed while it was written (%s, then %s)", diffID, got)
	}
	l := layerFile{DiffID: diffID, Digest: "sha256:" + hex.EncodeToString(compressed.Sum(nil)), Size: cw.n}
	l.Path = filepath.Join(dir, strings.TrimPrefix(diffID, "sha256:")+".tar.gz")
	if err := os.Rename(tmp.Name(), l.Path); err != nil {
		return layerFile{}, err
	}
	return l, saveLayerMeta(meta, l)
}

// entriesLayer writes a layer from a list of entries.
func (b *builder) entriesLayer(entries []entry) (layerFile, error) {
	sorted := append([]entry(nil), entries...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	return writeLayer(b.cache, func(tw *tar.Writer) error { return writeEntries(tw, sorted) })
}

func writeEntries(tw *tar.Writer, entries []entry) error {
	seen := map[string]bool{}
	for _, e := range entries {
		name := strings.TrimPrefix(e.Name, "/")
		if seen[name] {
			continue
		}
		seen[name] = true
		if e.Dir {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: e.Mode, Uid: e.UID, Gid: e.GID, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return err
			}
			continue
		}
		data := e.Data
		if e.Source != "" {
			var err error
			if data, err = os.ReadFile(e.Source); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: e.Mode, Uid: e.UID, Gid: e.GID, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return nil
}

// treeLayer writes the tree under root as a layer: owners and modes as on disk, every
// time set to the epoch, hard links kept, device nodes, sockets and FIFOs left out (the
// runtime provides /dev).
func (b *builder) treeLayer(root string) (layerFile, error) {
	return b.treeLayerAt(root, "")
}

// treeLayerAt is treeLayer with the tree placed under prefix (usr/local/go).
func (b *builder) treeLayerAt(root, prefix string) (layerFile, error) {
	return writeLayer(b.cache, func(tw *tar.Writer) error {
		if prefix != "" {
			for _, e := range parents("/" + prefix + "/x") {
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(e.Name, "/") + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
					return err
				}
			}
		}
		return writeTree(tw, root, prefix)
	})
}

func writeTree(tw *tar.Writer, root, prefix string) error {
	links := map[uint64]string{}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, _ := info.Sys().(*syscall.Stat_t)
		hdr := &tar.Header{Name: path.Join(prefix, filepath.ToSlash(rel)), Mode: int64(info.Mode().Perm()), ModTime: epoch, Format: tar.FormatPAX}
		if info.Mode()&os.ModeSetuid != 0 {
			hdr.Mode |= 0o4000
		}
		if info.Mode()&os.ModeSetgid != 0 {
			hdr.Mode |= 0o2000
		}
		if info.Mode()&os.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		if st != nil {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		}
		switch {
		case info.IsDir():
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case info.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case info.Mode().IsRegular():
			if st != nil && st.Nlink > 1 {
				if first, ok := links[st.Ino]; ok {
					hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
					return tw.WriteHeader(hdr)
				}
				links[st.Ino] = hdr.Name
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(tw, f)
			return err
		default:
			return nil
		}
		return tw.WriteHeader(hdr)
	})
}

// saveLayerMeta and loadLayerMeta keep a layer's digests beside it (and beside a cached
// Debian root), so a warm build neither compresses nor hashes it again.
func saveLayerMeta(path string, l layerFile) error {
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

func loadLayerMeta(cache, path string) (layerFile, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return layerFile{}, false
	}
	var l layerFile
	if json.Unmarshal(data, &l) != nil || l.DiffID == "" {
		return layerFile{}, false
	}
	l.Path = filepath.Join(cache, "layers", strings.TrimPrefix(l.DiffID, "sha256:")+".tar.gz")
	if st, err := os.Stat(l.Path); err != nil || st.Size() != l.Size {
		return layerFile{}, false
	}
	return l, true
}

// cachedLayer is a layerFile as go-containerregistry's v1.Layer, with the digests known
// (partial.CompressedToLayer takes DiffID from here instead of decompressing the blob).
type cachedLayer struct{ l layerFile }

func (c cachedLayer) Digest() (v1.Hash, error)            { return v1.NewHash(c.l.Digest) }
func (c cachedLayer) DiffID() (v1.Hash, error)            { return v1.NewHash(c.l.DiffID) }
func (c cachedLayer) Size() (int64, error)                { return c.l.Size, nil }
func (c cachedLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (c cachedLayer) Compressed() (io.ReadCloser, error) {
	f, err := os.Open(c.l.Path)
	if err != nil {
		return nil, fmt.Errorf("cached layer %s: %w", c.l.DiffID, err)
	}
	return f, nil
}

func (l layerFile) v1() (v1.Layer, error) { return partial.CompressedToLayer(cachedLayer{l}) }
