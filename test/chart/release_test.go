package chart

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"debug/elf"
	"debug/macho"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/crypto/bcrypt"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/registry"
	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// The release images and where each platform's image proves its architecture: the agent
// or operator binary (an ELF for the platform's machine), and for the Debian images a
// package the image's SBOM must list.
var releaseImages = []struct {
	name, repo, binary, sbomPackage string
	debian                          bool
}{
	{"operator", "bnerd-vpn-operator", "bnerd-vpn-operator", "sigs.k8s.io/controller-runtime", false},
	{"gateway", "bnerd-vpn-gateway", "usr/local/bin/vpn-gateway-agent", "strongswan-charon", true},
	{"gateway-wireguard", "bnerd-vpn-gateway-wireguard", "usr/local/bin/vpn-gateway-agent", "wireguard-tools", true},
	{"status-agent", "bnerd-vpn-status-agent", "usr/local/bin/vpn-gateway-agent", "nftables", true},
}

// TestRelease is `make release` end to end, into a real OCI registry (Debian's
// docker-registry, the CNCF distribution server) on loopback, behind TLS from a CA of
// its own and htpasswd authentication, as a provider's registry is: the credentials
// reach both the image pushes and the chart push through a Docker config, the CA
// through SSL_CERT_FILE. Then every artifact is read back the way a user would: each
// image's index has amd64 and arm64 images whose binaries and Debian packages are of
// that architecture, each with its SPDX SBOM as a referrer; the chart pulls with Helm's
// registry client at the version and defaults to the images pushed beside it; the
// kubectl-vpn archives match checksums.txt and the krew manifest, and the binaries are
// of their platform and print the version.
func TestRelease(t *testing.T) {
	testenv.SkipUnit(t, "the whole release")
	testenv.NeedRoot(t, "the release makes the images' Debian roots with debootstrap: needs root")
	const registryBin = "/usr/bin/docker-registry"
	if _, err := os.Stat(registryBin); err != nil {
		testenv.SkipDataplane(t, "needs Debian's docker-registry (hack/node/up.sh --build-only installs it)")
	}
	dir := t.TempDir()
	host, caFile := startRegistry(t, dir, registryBin)
	user, password := "release", hex.EncodeToString(randBytes(t, 16))
	writeHtpasswd(t, filepath.Join(dir, "htpasswd"), user, password)
	dockerConfig := filepath.Join(dir, "docker")
	writeDockerConfig(t, dockerConfig, host, user, password)

	version := devVersion(t)
	prefix := host + "/bnerd"
	dist := filepath.Join(dir, "dist")
	t0 := time.Now()
	cmd := exec.Command("make", "--no-print-directory", "release", "VERSION="+version, "REGISTRY="+prefix)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+caFile, "DOCKER_CONFIG="+dockerConfig,
		"HELM_CONFIG_HOME="+filepath.Join(dir, "helm"), "DIST="+dist)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, tail(out))
	}
	t.Logf("make release VERSION=%s REGISTRY=%s took %s", version, prefix, time.Since(t0).Round(time.Second))
	t.Setenv("SSL_CERT_FILE", caFile)
	t.Setenv("DOCKER_CONFIG", dockerConfig)
	t.Setenv("HELM_CONFIG_HOME", filepath.Join(dir, "helm"))

	tag := "v" + version
	for _, ri := range releaseImages {
		t.Run("image "+ri.name, func(t *testing.T) {
			checkReleasedImage(t, prefix+"/"+ri.repo+":"+tag, ri.binary, ri.sbomPackage, ri.debian)
		})
	}
	t.Run("chart", func(t *testing.T) { checkReleasedChart(t, prefix, version) })
	t.Run("kubectl-vpn", func(t *testing.T) { checkReleasedPlugin(t, filepath.Join(dist, "kubectl-vpn"), version) })

	// Without the credentials the registry refuses: the pushes above used them.
	t.Run("registry requires the credentials", func(t *testing.T) {
		ref, _ := name.ParseReference(prefix + "/bnerd-vpn-operator:" + tag)
		if _, err := remote.Head(ref, remote.WithAuth(authn.Anonymous)); err == nil {
			t.Error("the registry served the operator image without credentials")
		}
	})
}

func tail(b []byte) string {
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

func randBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// devVersion is the work tree's development version, the one `make node-deps` builds the
// images for (so a warm cache has them).
func devVersion(t *testing.T) string {
	out, err := exec.Command("bash", filepath.Join(repoRoot, "hack", "release.sh"), "--dev-version").Output()
	if err != nil {
		t.Fatalf("hack/release.sh --dev-version: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// startRegistry runs docker-registry on a free loopback port with a serving certificate
// from a CA made here, and returns its host:port and the CA's file.
func startRegistry(t *testing.T, dir, bin string) (host, caFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "release-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "release-test-registry"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, "ca.crt")
	writePEM(t, caFile, "CERTIFICATE", caDER)
	writePEM(t, filepath.Join(dir, "registry.crt"), "CERTIFICATE", srvDER)
	writePEM(t, filepath.Join(dir, "registry.key"), "EC PRIVATE KEY", keyDER)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host = l.Addr().String()
	l.Close()
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: %s}
http:
  addr: %s
  tls: {certificate: %s, key: %s}
auth:
  htpasswd: {realm: release-test, path: %s}
`, filepath.Join(dir, "storage"), host, filepath.Join(dir, "registry.crt"), filepath.Join(dir, "registry.key"), filepath.Join(dir, "htpasswd"))
	cfgFile := filepath.Join(dir, "registry.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfgFile)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		logf.Close()
	})
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("https://" + host + "/v2/")
		if err == nil {
			resp.Body.Close()
			// 401: up, and asking for the credentials.
			if resp.StatusCode == http.StatusUnauthorized {
				return host, caFile
			}
			t.Fatalf("the registry answers /v2/ with %s, want 401 (authentication on)", resp.Status)
		}
		select {
		case <-done:
			log, _ := os.ReadFile(logf.Name())
			t.Fatalf("docker-registry exited:\n%s", log)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("docker-registry did not answer on %s: %v", host, err)
		}
	}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func writeHtpasswd(t *testing.T, path, user, password string) {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(user+":"+string(h)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeDockerConfig writes the credentials as `docker login` does.
func writeDockerConfig(t *testing.T, dir, host, user, password string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"auths": map[string]any{host: map[string]string{
		"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + password)),
	}}}
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func remoteOpts() []remote.Option {
	return []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}
}

// checkReleasedImage reads ref's index: linux/amd64 and linux/arm64, each image of its
// architecture (config, binary, and for Debian images dpkg's database), each with one
// SPDX SBOM referrer that lists sbomPackage (of the image's architecture, for Debian's).
func checkReleasedImage(t *testing.T, ref, binary, sbomPackage string, debian bool) {
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(r, remoteOpts()...)
	if err != nil {
		t.Fatalf("%s: %v", ref, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var archs []string
	for _, desc := range im.Manifests {
		if desc.Platform == nil {
			t.Errorf("%s: a manifest without a platform: %+v", ref, desc)
			continue
		}
		arch := desc.Platform.Architecture
		archs = append(archs, desc.Platform.OS+"/"+arch)
		img, err := idx.Image(desc.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != arch || cf.OS != "linux" {
			t.Errorf("%s %s: config says %s/%s", ref, arch, cf.OS, cf.Architecture)
		}
		files := imageFiles(t, img, binary, "var/lib/dpkg/status")
		bin, ok := files[binary]
		if !ok {
			t.Fatalf("%s %s: no /%s", ref, arch, binary)
		}
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("%s %s: /%s: %v", ref, arch, binary, err)
		}
		if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]; f.Machine != want {
			t.Errorf("%s %s: /%s is built for %s", ref, arch, binary, f.Machine)
		}
		if debian {
			status := string(files["var/lib/dpkg/status"])
			if !strings.Contains(status, "Package: libc6\n") || !strings.Contains(status, "Architecture: "+arch+"\n") {
				t.Errorf("%s %s: dpkg's database has no libc6 of %s", ref, arch, arch)
			}
		}
		checkSBOM(t, r.Context().Digest(desc.Digest.String()), sbomPackage, arch, debian)
	}
	if !slices.Equal(archs, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("%s: platforms %v, want linux/amd64 and linux/arm64", ref, archs)
	}
	if im.Annotations["org.opencontainers.image.version"] == "" {
		t.Errorf("%s: the index has no org.opencontainers.image.version", ref)
	}
}

// imageFiles returns the named files of img (the last layer's version wins).
func imageFiles(t *testing.T, img v1.Image, names ...string) map[string][]byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(names, strings.TrimPrefix(h.Name, "./")) && h.Typeflag == tar.TypeReg {
				data, _ := io.ReadAll(tr)
				out[strings.TrimPrefix(h.Name, "./")] = data
			}
		}
		rc.Close()
	}
	return out
}

// checkSBOM finds the platform image's SBOM through the referrers (the tag schema on
// distribution 2.8) and reads it as SPDX.
func checkSBOM(t *testing.T, subject name.Digest, pkg, arch string, debian bool) {
	t.Helper()
	idx, err := remote.Referrers(subject, remoteOpts()...)
	if err != nil {
		t.Fatalf("referrers of %s: %v", subject, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var sboms []v1.Descriptor
	for _, d := range im.Manifests {
		if d.ArtifactType == "application/spdx+json" {
			sboms = append(sboms, d)
		}
	}
	if len(sboms) != 1 {
		t.Fatalf("%s: %d SPDX referrers, want 1: %+v", subject, len(sboms), im.Manifests)
	}
	art, err := remote.Image(subject.Context().Digest(sboms[0].Digest.String()), remoteOpts()...)
	if err != nil {
		t.Fatal(err)
	}
	layers, err := art.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("SBOM artifact layers: %v %d", err, len(layers))
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name         string `json:"name"`
			ExternalRefs []struct {
				Locator string `json:"referenceLocator"`
			} `json:"externalRefs"`
		} `json:"packages"`
	}
	if err := json.NewDecoder(rc).Decode(&doc); err != nil {
		t.Fatalf("SBOM of %s: %v", subject, err)
	}
	if !strings.HasPrefix(doc.SPDXVersion, "SPDX-2.") {
		t.Errorf("SBOM of %s: spdxVersion %q", subject, doc.SPDXVersion)
	}
	found := false
	for _, p := range doc.Packages {
		if p.Name != pkg {
			continue
		}
		for _, ref := range p.ExternalRefs {
			// A Debian package's purl names its architecture: pkg:deb/debian/x@v?arch=arm64.
			if !debian || strings.Contains(ref.Locator, "arch="+arch) {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("the SBOM of %s (%d packages) lists no %s of %s", subject, len(doc.Packages), pkg, arch)
	}
}

// checkReleasedChart pulls the chart as `helm pull oci://... --version` does and renders
// it with no image value: every image is the one released beside it.
func checkReleasedChart(t *testing.T, prefix, version string) {
	rc, err := registry.NewClient(registry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	res, err := rc.Pull(prefix + "/charts/bnerd-vpn-operator:" + version)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.LoadArchive(bytes.NewReader(res.Chart.Data))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != version || ch.Metadata.AppVersion != "v"+version {
		t.Errorf("pulled chart %s, appVersion %s; want %s, v%s", ch.Metadata.Version, ch.Metadata.AppVersion, version, version)
	}
	manifest, _, err := renderChartWith(t, ch, requiredValues(), renderOpts{})
	if err != nil {
		t.Fatal(err)
	}
	var dep *appsv1.Deployment
	for _, doc := range strings.Split(manifest, "\n---") {
		var d appsv1.Deployment
		if yaml.Unmarshal([]byte(doc), &d) == nil && d.Kind == "Deployment" {
			dep = &d
		}
	}
	if dep == nil {
		t.Fatal("the released chart renders no Deployment")
	}
	c := dep.Spec.Template.Spec.Containers[0]
	images := map[string]string{"operator": c.Image}
	for _, e := range c.Env {
		switch e.Name {
		case "IPSEC_GATEWAY_IMAGE":
			images["gateway"] = e.Value
		case "IPSEC_GATEWAY_WIREGUARD_IMAGE":
			images["gateway-wireguard"] = e.Value
		case "IPSEC_AGENT_IMAGE":
			images["status-agent"] = e.Value
		}
	}
	for _, ri := range releaseImages {
		want := prefix + "/" + ri.repo + ":v" + version
		if images[ri.name] != want {
			t.Errorf("the released chart's %s image is %q, want %s", ri.name, images[ri.name], want)
			continue
		}
		ref, _ := name.ParseReference(want)
		if _, err := remote.Head(ref, remoteOpts()...); err != nil {
			t.Errorf("the chart's %s image %s is not in the registry: %v", ri.name, want, err)
		}
	}
}

// checkReleasedPlugin checks GoReleaser's output: four archives, each in checksums.txt
// and in the krew manifest with its sha256, each holding kubectl-vpn for its platform.
func checkReleasedPlugin(t *testing.T, dir, version string) {
	sums := map[string]string{}
	f, err := os.Open(filepath.Join(dir, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) == 2 {
			sums[fs[1]] = fs[0]
		}
	}
	f.Close()
	var krew struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version   string `json:"version"`
			Platforms []struct {
				Bin      string `json:"bin"`
				URI      string `json:"uri"`
				Sha256   string `json:"sha256"`
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "krew", "vpn.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &krew); err != nil {
		t.Fatal(err)
	}
	if krew.Kind != "Plugin" || krew.Metadata.Name != "vpn" || krew.Spec.Version != "v"+version || len(krew.Spec.Platforms) != 4 {
		t.Errorf("krew manifest: %s %s %s %s, %d platforms", krew.APIVersion, krew.Kind, krew.Metadata.Name, krew.Spec.Version, len(krew.Spec.Platforms))
	}
	for _, p := range krew.Spec.Platforms {
		goos, goarch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		archive := fmt.Sprintf("kubectl-vpn_v%s_%s_%s.tar.gz", version, goos, goarch)
		if !strings.HasSuffix(p.URI, "/v"+version+"/"+archive) || p.Bin != "kubectl-vpn" {
			t.Errorf("krew %s/%s: uri %s bin %s", goos, goarch, p.URI, p.Bin)
		}
		body, err := os.ReadFile(filepath.Join(dir, archive))
		if err != nil {
			t.Errorf("krew names %s: %v", archive, err)
			continue
		}
		sum := sha256.Sum256(body)
		if got := hex.EncodeToString(sum[:]); got != p.Sha256 || got != sums[archive] {
			t.Errorf("%s: sha256 %s, krew %s, checksums.txt %s", archive, got, p.Sha256, sums[archive])
		}
		bin := untarFile(t, body, "kubectl-vpn")
		checkPluginBinary(t, bin, goos, goarch, version)
	}
	if len(sums) != 4 {
		t.Errorf("checksums.txt lists %d files, want the 4 archives: %v", len(sums), sums)
	}
}

func untarFile(t *testing.T, tgz []byte, name string) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("no %s in the archive: %v", name, err)
		}
		if filepath.Base(h.Name) == name {
			data, _ := io.ReadAll(tr)
			return data
		}
	}
}

// checkPluginBinary: an ELF or Mach-O for the platform, and this machine's one runs and
// prints the release's version.
func checkPluginBinary(t *testing.T, bin []byte, goos, goarch, version string) {
	t.Helper()
	switch goos {
	case "linux":
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("linux/%s: %v", goarch, err)
		}
		if want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[goarch]; f.Machine != want {
			t.Errorf("linux/%s: built for %s", goarch, f.Machine)
		}
	case "darwin":
		f, err := macho.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("darwin/%s: %v", goarch, err)
		}
		if want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[goarch]; f.Cpu != want {
			t.Errorf("darwin/%s: built for %s", goarch, f.Cpu)
		}
	}
	if goos != "linux" || goarch != "amd64" {
		return
	}
	path := filepath.Join(t.TempDir(), "kubectl-vpn")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "v"+version) {
		t.Errorf("kubectl-vpn --version: %v: %s (want v%s)", err, out, version)
	}
}
