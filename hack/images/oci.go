package main

import (
	"archive/tar"
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
)

// Media types of the OCI image spec. Layers stay uncompressed: containerd accepts them,
// the diff ID is the digest, and nothing is spent on gzip for an image that never
// crosses a network.
const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar"
)

// epoch is every file's modification time, so a layer's digest depends on content only.
var epoch = time.Unix(0, 0)

// layerFile is a finished layer tar on disk.
type layerFile struct {
	Path   string
	Digest string // sha256:<hex>
	Size   int64
}

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

// hashingFile writes to a file and hashes what it writes.
type hashingFile struct {
	f *os.File
	h io.Writer
	n int64
}

func (w *hashingFile) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// writeTar writes a layer through fill into path (atomically) and returns it.
func writeTar(dst string, fill func(*tar.Writer) error) (layerFile, error) {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return layerFile{}, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".layer-*")
	if err != nil {
		return layerFile{}, err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	hw := &hashingFile{f: tmp, h: h}
	tw := tar.NewWriter(hw)
	if err := fill(tw); err != nil {
		tmp.Close()
		return layerFile{}, err
	}
	if err := tw.Close(); err != nil {
		tmp.Close()
		return layerFile{}, err
	}
	if err := tmp.Close(); err != nil {
		return layerFile{}, err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return layerFile{}, err
	}
	return layerFile{Path: dst, Digest: "sha256:" + hex.EncodeToString(h.Sum(nil)), Size: hw.n}, nil
}

// entriesLayer writes a layer from a list of entries into the cache, named by content.
func (b *builder) entriesLayer(name string, entries []entry) (layerFile, error) {
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	dst := filepath.Join(b.cache, "layers", name+".tar")
	return writeTar(dst, func(tw *tar.Writer) error { return writeEntries(tw, entries) })
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
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: e.Mode, Uid: e.UID, Gid: e.GID, ModTime: epoch}); err != nil {
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
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: e.Mode, Uid: e.UID, Gid: e.GID, Size: int64(len(data)), ModTime: epoch}); err != nil {
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
func treeLayer(root, dst string) (layerFile, error) {
	return writeTar(dst, func(tw *tar.Writer) error {
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
			hdr := &tar.Header{Name: filepath.ToSlash(rel), Mode: int64(info.Mode().Perm()), ModTime: epoch}
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
	})
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// imageConfig is the part of the OCI image configuration these images use.
type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		Env        []string `json:"Env"`
		Entrypoint []string `json:"Entrypoint"`
		User       string   `json:"User,omitempty"`
		WorkingDir string   `json:"WorkingDir"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// writeImage writes the OCI archive of d with layers, tagged by its manifest digest.
func (b *builder) writeImage(d imageDef, layers []layerFile) (string, string, error) {
	var cfg imageConfig
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Config.Entrypoint = d.Entrypoint
	cfg.Config.User = d.User
	cfg.Config.WorkingDir = "/"
	cfg.RootFS.Type = "layers"
	var layerDescs []descriptor
	for _, l := range layers {
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.Digest)
		layerDescs = append(layerDescs, descriptor{MediaType: mediaLayer, Digest: l.Digest, Size: l.Size})
	}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return "", "", err
	}
	manifest := struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}{2, mediaManifest, descriptor{MediaType: mediaConfig, Digest: digestOf(cfgJSON), Size: int64(len(cfgJSON))}, layerDescs}
	manJSON, err := json.Marshal(manifest)
	if err != nil {
		return "", "", err
	}
	manDigest := digestOf(manJSON)
	tag := "dev-" + strings.TrimPrefix(manDigest, "sha256:")[:12]
	ref := d.Repository + ":" + tag
	archive := filepath.Join(b.cache, "archives", d.Name+"-"+tag+".tar")
	if _, err := os.Stat(archive); err == nil {
		return ref, archive, nil
	}
	index := struct {
		SchemaVersion int          `json:"schemaVersion"`
		Manifests     []descriptor `json:"manifests"`
	}{2, []descriptor{{
		MediaType: mediaManifest, Digest: manDigest, Size: int64(len(manJSON)),
		Annotations: map[string]string{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
	}}}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return "", "", err
	}
	_, err = writeTar(archive, func(tw *tar.Writer) error {
		small := func(name string, data []byte) error {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch}); err != nil {
				return err
			}
			_, err := tw.Write(data)
			return err
		}
		if err := small("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
			return err
		}
		if err := small("index.json", indexJSON); err != nil {
			return err
		}
		for _, dir := range []string{"blobs/", "blobs/sha256/"} {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch}); err != nil {
				return err
			}
		}
		blob := func(digest string) string { return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:") }
		if err := small(blob(manDigest), manJSON); err != nil {
			return err
		}
		if err := small(blob(manifest.Config.Digest), cfgJSON); err != nil {
			return err
		}
		written := map[string]bool{}
		for _, l := range layers {
			if written[l.Digest] {
				continue
			}
			written[l.Digest] = true
			f, err := os.Open(l.Path)
			if err != nil {
				return err
			}
			err = func() error {
				defer f.Close()
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: blob(l.Digest), Mode: 0o644, Size: l.Size, ModTime: epoch}); err != nil {
					return err
				}
				n, err := io.Copy(tw, f)
				if err == nil && n != l.Size {
					err = fmt.Errorf("layer %s changed while writing", l.Path)
				}
				return err
			}()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", "", err
	}
	logf("wrote %s (%s)", archive, ref)
	return ref, archive, nil
}
