package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media types of the SBOM referrer: an OCI 1.1 artifact (empty config, artifactType)
// whose one blob is the SPDX document.
const (
	sbomMediaType  = "application/spdx+json"
	emptyMediaType = "application/vnd.oci.empty.v1+json"
)

// remoteOptions: credentials from the Docker config (docker login, crane auth login, a
// CI's login action) and the system's trust store, which honours SSL_CERT_FILE for a
// registry behind a private CA.
func remoteOptions() []remote.Option {
	return []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithJobs(4)}
}

// push writes the index (with every platform image and layer) to ref and, with sbom, an
// SBOM referrer to each platform image. Blobs the registry has already are not sent
// again.
func (b *builder) push(ref string, bt built, sbom bool) error {
	tag := ref[len(ref)-len(bt.tag):]
	r, err := name.ParseReference(ref)
	if err != nil {
		return err
	}
	if err := remote.WriteIndex(r, bt.index, remoteOptions()...); err != nil {
		return fmt.Errorf("pushing %s: %w", ref, err)
	}
	logf("pushed %s (%s)", ref, bt.digest)
	if !sbom {
		return nil
	}
	for _, pi := range bt.images {
		doc, err := b.sbom(pi, path.Base(r.Context().RepositoryStr()), tag)
		if err != nil {
			return fmt.Errorf("SBOM of %s: %w", pi.platform, err)
		}
		art, err := sbomArtifact(doc, pi.image)
		if err != nil {
			return err
		}
		h, err := art.Digest()
		if err != nil {
			return err
		}
		// By digest, untagged: the registry's referrers API, or the referrers tag
		// (sha256-<subject digest>) go-containerregistry maintains where there is none,
		// is how it is found.
		if err := remote.Write(r.Context().Digest(h.String()), art, remoteOptions()...); err != nil {
			return fmt.Errorf("pushing the SBOM of %s %s: %w", ref, pi.platform, err)
		}
		logf("pushed the SBOM of %s %s (%s, referrer of %s)", ref, pi.platform, h, pi.digest)
	}
	return nil
}

// artifact is an OCI artifact manifest with its blobs, as a v1.Image for remote.Write.
type artifact struct {
	manifest []byte
	config   []byte
	layer    v1.Layer
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return a.config, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, err := a.layer.Digest(); err == nil && d == h {
		return a.layer, nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}

// sbomArtifact is doc as an OCI 1.1 referrer of subject: artifactType and the blob's
// media type application/spdx+json, the empty config, subject the platform image.
func sbomArtifact(doc []byte, subject v1.Image) (v1.Image, error) {
	sub, err := partial.Descriptor(subject)
	if err != nil {
		return nil, err
	}
	config := []byte("{}")
	ch, cs, err := v1.SHA256(bytes.NewReader(config))
	if err != nil {
		return nil, err
	}
	layer := static.NewLayer(doc, sbomMediaType)
	lh, err := layer.Digest()
	if err != nil {
		return nil, err
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  sbomMediaType,
		Config:        v1.Descriptor{MediaType: emptyMediaType, Digest: ch, Size: cs},
		Layers: []v1.Descriptor{{
			MediaType: sbomMediaType, Digest: lh, Size: int64(len(doc)),
			Annotations: map[string]string{"org.opencontainers.image.title": "sbom.spdx.json"},
		}},
		Subject: &v1.Descriptor{MediaType: sub.MediaType, Digest: sub.Digest, Size: sub.Size},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, config: config, layer: layer})
}

// sbom returns the SPDX document of a platform image, made by syft from the image itself
// (an OCI layout of just it) and cached by the image's digest.
func (b *builder) sbom(pi platformImage, name, version string) ([]byte, error) {
	cached := filepath.Join(b.cache, "sbom", pi.digest.Hex+".spdx.json")
	if doc, err := os.ReadFile(cached); err == nil {
		return doc, nil
	}
	doc, err := syftSBOM(b.cache, pi, name, version)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return nil, err
	}
	return doc, os.WriteFile(cached, doc, 0o644)
}
