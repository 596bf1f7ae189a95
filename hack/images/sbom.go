package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// syftBinary is the syft the SBOMs are made with (hack/tool.sh syft builds the pinned
// version); set by --syft.
var syftBinary string

// syftSBOM catalogs the platform image with syft (the Debian packages from dpkg's
// database, the Go binaries' modules from their build information) into an SPDX 2.3
// JSON document. The image is handed over as an OCI layout of just it, so syft reads the
// exact bytes that are pushed and needs no registry access.
func syftSBOM(cache string, pi platformImage, name, version string) ([]byte, error) {
	if syftBinary == "" {
		return nil, fmt.Errorf("no syft: give --syft (hack/tool.sh syft builds it)")
	}
	dir, err := os.MkdirTemp(cache, ".sbom-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(filepath.Join(dir, "image"), empty.Index)
	if err != nil {
		return nil, err
	}
	if err := p.AppendImage(pi.image); err != nil {
		return nil, err
	}
	doc := filepath.Join(dir, "sbom.spdx.json")
	cmd := exec.Command(syftBinary, "scan", "oci-dir:"+filepath.Join(dir, "image"),
		"--source-name", name, "--source-version", version,
		"-o", "spdx-json="+doc, "-q")
	// No update check, nothing fetched: syft reads the image and writes the document.
	cmd.Env = append(os.Environ(), "SYFT_CHECK_FOR_APP_UPDATE=false")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("syft: %w\n%s", err, tail(out))
	}
	return os.ReadFile(doc)
}
